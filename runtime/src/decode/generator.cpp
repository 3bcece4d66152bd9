#include "fafo/generator.h"

#include <chrono>
#include <stdexcept>

namespace fafo {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::Length: return "length";
    case StopReason::EndOfGeneration: return "end_of_generation";
    case StopReason::ContextFull: return "context_full";
    case StopReason::Cancelled: return "cancelled";
  }
  return "unknown";
}

std::vector<float> prefill(Model& model, const std::vector<int32_t>& tokens, int32_t chunk) {
  if (tokens.empty()) throw std::invalid_argument("prefill: no tokens");
  if (chunk <= 0) throw std::invalid_argument("prefill: chunk must be positive");
  std::vector<float> logits;
  for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(chunk)) {
    const size_t end = std::min(tokens.size(), begin + static_cast<size_t>(chunk));
    StepBatch batch = StepBatch::causal(std::vector<int32_t>(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                                                             tokens.begin() + static_cast<std::ptrdiff_t>(end)),
                                        model.n_past());
    logits = model.forward(batch);
    model.commit(batch.size());
  }
  return logits;
}

GenerationResult generate(Model& model, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                          const GenerationOptions& options, const TokenCallback& on_token) {
  using Clock = std::chrono::steady_clock;
  if (prompt.empty()) throw std::invalid_argument("the prompt is empty (no tokens)");
  if (!options.keep_context) model.truncate(0);
  const int64_t room = model.n_ctx() - model.n_past();
  if (static_cast<int64_t>(prompt.size()) >= room)
    throw std::length_error("the prompt has " + std::to_string(prompt.size()) + " tokens but the context holds " +
                            (model.n_past() ? std::to_string(room) + " more" : std::to_string(model.n_ctx())) +
                            " (including at least one generated token); use a shorter prompt or a larger --ctx-size");
  GenerationResult result;
  result.prompt_ids = prompt;
  Sampler sampler(options.sampling);
  const int32_t n_vocab = model.config().n_vocab;

  auto t0 = Clock::now();
  std::vector<float> logits = prefill(model, prompt, options.prefill_chunk);
  auto t1 = Clock::now();
  result.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  if (options.n_predict == 0) return result;
  int32_t token = sampler.sample(logits.data(), n_vocab);
  result.n_steps = 1;  // the prefill step produced the first token
  for (;;) {
    result.ids.push_back(token);
    if (on_token && !on_token(token)) {
      result.stop = StopReason::Cancelled;
      break;
    }
    if (options.stop_at_end_of_generation && tokenizer.is_end_of_generation(token)) {
      result.stop = StopReason::EndOfGeneration;
      break;
    }
    if (options.n_predict >= 0 && static_cast<int32_t>(result.ids.size()) >= options.n_predict) {
      result.stop = StopReason::Length;
      break;
    }
    if (model.n_past() >= model.n_ctx()) {
      result.stop = StopReason::ContextFull;
      break;
    }
    StepBatch step = StepBatch::causal({token}, model.n_past());
    logits = model.forward(step);
    model.commit(1);
    ++result.n_steps;
    token = sampler.sample(logits.data(), n_vocab);
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return result;
}

}  // namespace fafo
