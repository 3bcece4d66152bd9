#include "fafo/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "fafo/generator.h"

namespace fafo {

namespace {

// -log softmax(row)[target], in double.
double negative_log_likelihood(const float* row, int32_t n_vocab, int32_t target) {
  const float mx = *std::max_element(row, row + n_vocab);
  double sum = 0.0;
  for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(row[i]) - mx);
  return std::log(sum) + mx - row[target];
}

// KL(p || q) of the softmaxes of two logit rows, in double; and whether their argmaxes agree.
struct Divergence {
  double kl;
  bool same_top;
};
Divergence divergence(const float* base, const float* row, int32_t n_vocab) {
  auto log_normalizer = [n_vocab](const float* r) {
    const float mx = *std::max_element(r, r + n_vocab);
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(r[i]) - mx);
    return std::log(sum) + mx;
  };
  const double zb = log_normalizer(base), zr = log_normalizer(row);
  double kl = 0.0;
  for (int32_t i = 0; i < n_vocab; ++i) {
    const double lp = base[i] - zb, lq = row[i] - zr;
    kl += std::exp(lp) * (lp - lq);
  }
  const bool same = std::max_element(base, base + n_vocab) - base == std::max_element(row, row + n_vocab) - row;
  return {std::max(0.0, kl), same};
}

}  // namespace

PerplexityResult perplexity(Sequence& model, const std::vector<int32_t>& tokens, const PerplexityOptions& o,
                            const std::function<void(const PerplexityChunk&)>& on_chunk) {
  const int32_t n = o.n_ctx > 0 ? o.n_ctx : model.n_ctx();
  if (n < 4 || n % 2 != 0) throw std::invalid_argument("the perplexity chunk length must be even and at least 4, not " + std::to_string(n));
  if (n > model.n_ctx())
    throw std::invalid_argument("the chunk length " + std::to_string(n) + " exceeds the model's context " +
                                std::to_string(model.n_ctx()) + " (open it with a larger --ctx-size)");
  if (o.max_chunks == 0 || o.max_chunks < -1) throw std::invalid_argument("--chunks must be positive (or -1: all)");
  int32_t n_chunks = static_cast<int32_t>(tokens.size() / static_cast<size_t>(n));
  if (n_chunks == 0)
    throw std::invalid_argument("the text has " + std::to_string(tokens.size()) + " tokens, less than one chunk of " +
                                std::to_string(n) + "; give a longer text or a smaller -c");
  if (o.max_chunks > 0) n_chunks = std::min(n_chunks, o.max_chunks);
  if (scoring_uses_draft_model(DecodingOptions{}, o.kv, o.kv_drop, o.prompt_compress.enabled()) && !o.draft)
    throw std::invalid_argument("the speckv modes need a draft model (--draft-model FILE, or self)");
  if (o.kv_drop) o.kv.validate();
  o.prompt_compress.validate();
  if (o.base && o.base->config().n_vocab != model.config().n_vocab)
    throw std::invalid_argument("the KL base model has " + std::to_string(o.base->config().n_vocab) +
                                " tokens in its vocabulary, the model " + std::to_string(model.config().n_vocab));
  if (o.base && n > o.base->n_ctx())
    throw std::invalid_argument("the chunk length " + std::to_string(n) + " exceeds the KL base model's context " +
                                std::to_string(o.base->n_ctx()));

  PerplexityResult result;
  result.n_ctx = n;
  if (o.prompt_compress.enabled()) result.lossy.push_back(o.prompt_compress.describe());
  if (o.kv_drop) result.lossy.push_back(kv_drop_label(o.kv));
  const int32_t n_vocab = model.config().n_vocab, first = n / 2;
  // Under dropping the second half is read a token a step, as decoding reads it (a row
  // reads only the kept entries of earlier steps, but every row of its own step).
  const int32_t piece = o.kv_drop ? 1 : std::min(model.max_logit_rows(), 512);
  // The model is left without a policy and with an empty context, whatever happens.
  struct Restore {
    Sequence& m;
    Sequence* base;
    ~Restore() {
      m.set_kv_policy(nullptr);
      m.truncate(0);
      if (base) base->truncate(0);
    }
  } restore{model, o.base};
  double sum = 0.0, sum2 = 0.0, kl_sum = 0.0, kl_sum2 = 0.0;
  int64_t agree = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int32_t c = 0; c < n_chunks; ++c) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int32_t> chunk(tokens.begin() + static_cast<std::ptrdiff_t>(c) * n,
                               tokens.begin() + static_cast<std::ptrdiff_t>(c + 1) * n);
    if (o.bos >= 0) chunk[0] = o.bos;
    std::vector<int32_t> context(chunk.begin(), chunk.begin() + first);
    if (o.prompt_compress.enabled()) context = compress_prompt(*o.draft, context, o.prompt_compress, 512);
    model.truncate(0);
    prefill_prompt(model, context, o.kv_drop ? &o.kv : nullptr, o.kv_drop, o.draft, 512);
    if (o.base) {
      o.base->truncate(0);
      prefill_prompt(*o.base, std::vector<int32_t>(chunk.begin(), chunk.begin() + first), nullptr, false, nullptr, 512);
    }
    // The second half: row i predicts chunk[first + i + 1].
    for (int32_t begin = first; begin < n; begin += piece) {
      const int32_t end = std::min(n, begin + piece);
      StepBatch step = StepBatch::causal(std::vector<int32_t>(chunk.begin() + begin, chunk.begin() + end), model.n_past(), true);
      const std::vector<float> logits = model.forward(step);
      model.commit(step.size());
      std::vector<float> base_logits;
      if (o.base) {
        StepBatch base_step = StepBatch::causal(std::vector<int32_t>(chunk.begin() + begin, chunk.begin() + end), o.base->n_past(), true);
        base_logits = o.base->forward(base_step);
        o.base->commit(base_step.size());
      }
      for (int32_t i = begin; i < end && i + 1 < n; ++i) {
        const double nll = negative_log_likelihood(&logits[static_cast<size_t>(i - begin) * static_cast<size_t>(n_vocab)],
                                                   n_vocab, chunk[static_cast<size_t>(i + 1)]);
        if (!std::isfinite(nll)) throw std::runtime_error("the model produced non-finite logits (NaN or infinity)");
        sum += nll;
        sum2 += nll * nll;
        ++result.scored;
        if (o.base) {
          const size_t at = static_cast<size_t>(i - begin) * static_cast<size_t>(n_vocab);
          const Divergence d = divergence(&base_logits[at], &logits[at], n_vocab);
          if (!std::isfinite(d.kl)) throw std::runtime_error("the KL divergence is not finite (non-finite logits)");
          kl_sum += d.kl;
          kl_sum2 += d.kl * d.kl;
          agree += d.same_top ? 1 : 0;
        }
      }
    }
    result.running.push_back(std::exp(sum / static_cast<double>(result.scored)));
    if (on_chunk)
      on_chunk({c, n_chunks, result.running.back(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()});
  }
  const double count = static_cast<double>(result.scored), mean = sum / count;
  const double variance = std::max(0.0, sum2 / count - mean * mean);
  result.chunks = n_chunks;
  result.ppl = std::exp(mean);
  result.error = result.scored > 1 ? result.ppl * std::sqrt(variance / (count - 1.0)) : 0.0;
  if (o.base) {
    result.kl = kl_sum / count;
    result.kl_error = result.scored > 1 ? std::sqrt(std::max(0.0, kl_sum2 / count - result.kl * result.kl) / (count - 1.0)) : 0.0;
    result.top1_agreement = static_cast<double>(agree) / count;
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace fafo
