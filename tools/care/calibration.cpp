#include "calibration.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "covariance.h"
#include "fafo/backend.h"
#include "fafo/sequence.h"
#include "fafo/read_file.h"
#include "fafo/step_batch.h"
#include "fafo/tokenizer.h"

namespace fafo::care {

Calibration calibrate(const std::shared_ptr<const GgufFile>& file, const CalibrationOptions& o,
                      const std::function<void(int32_t, int32_t)>& on_chunk) {
  if (o.chunk_len < 2) throw std::invalid_argument("--calib-len must be at least 2, not " + std::to_string(o.chunk_len));
  if (o.max_chunks < 1) throw std::invalid_argument("--calib-chunks must be at least 1, not " + std::to_string(o.max_chunks));
  const std::string text = read_whole_file(o.text_path, "the calibration text");

  const Tokenizer tokenizer(Vocab::from_gguf(*file));
  const Vocab& vocab = tokenizer.vocab();
  const bool bos = vocab.add_bos && vocab.bos >= 0;
  const std::vector<int32_t> tokens = tokenizer.encode(text, false);
  const size_t per_chunk = static_cast<size_t>(o.chunk_len) - (bos ? 1 : 0);  // text tokens in a chunk
  const int32_t n_chunks = static_cast<int32_t>(std::min<size_t>(static_cast<size_t>(o.max_chunks), tokens.size() / per_chunk));
  if (n_chunks == 0)
    throw std::runtime_error(o.text_path + ": the calibration text has " + std::to_string(tokens.size()) +
                             " tokens, fewer than one chunk of " + std::to_string(per_chunk) +
                             " (give a longer text or a smaller --calib-len)");

  SequenceOptions model_options;
  model_options.n_ctx = o.chunk_len;
  Sequence model(file, make_reference_backend(o.threads), model_options);
  const int32_t n_layer = model.config().n_layer, n_embd = model.config().n_embd;
  std::vector<CovarianceAccumulator> sums(static_cast<size_t>(n_layer), CovarianceAccumulator(n_embd));
  model.set_attention_input_tap([&](int32_t layer, const float* rows, int64_t n_rows, int64_t width) {
    if (layer < 0 || layer >= n_layer)
      throw std::logic_error("the model tapped layer " + std::to_string(layer) + " of " + std::to_string(n_layer));
    sums[static_cast<size_t>(layer)].add(rows, n_rows, width);
  });
  // The model is left without the tap and with an empty context, whatever happens.
  struct Restore {
    Sequence& m;
    ~Restore() {
      m.set_attention_input_tap({});
      m.truncate(0);
    }
  } restore{model};

  for (int32_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk;
    chunk.reserve(static_cast<size_t>(o.chunk_len));
    if (bos) chunk.push_back(vocab.bos);
    const auto first = tokens.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(c) * per_chunk);
    chunk.insert(chunk.end(), first, first + static_cast<std::ptrdiff_t>(per_chunk));
    model.truncate(0);
    // One causal step per chunk, or several committed ones when it is longer than a step.
    for (size_t begin = 0; begin < chunk.size(); begin += Sequence::kMaxStepTokens) {
      const size_t end = std::min(chunk.size(), begin + static_cast<size_t>(Sequence::kMaxStepTokens));
      StepBatch step = StepBatch::causal(std::vector<int32_t>(chunk.begin() + static_cast<std::ptrdiff_t>(begin),
                                                              chunk.begin() + static_cast<std::ptrdiff_t>(end)),
                                         model.n_past());
      model.forward_argmax(step);
      model.commit(step.size());
    }
    if (on_chunk) on_chunk(c + 1, n_chunks);
  }

  Calibration result;
  result.chunks = n_chunks;
  result.tokens = static_cast<int64_t>(n_chunks) * o.chunk_len;
  for (int32_t l = 0; l < n_layer; ++l) {
    const CovarianceAccumulator& sum = sums[static_cast<size_t>(l)];
    if (sum.count() != result.tokens)
      throw std::logic_error("layer " + std::to_string(l) + " saw " + std::to_string(sum.count()) + " attention inputs, not " +
                             std::to_string(result.tokens));
    result.covariance.push_back(sum.covariance());
  }
  return result;
}

}  // namespace fafo::care
