// Text generation on a Model: prompt prefill (in chunks), then plain autoregressive
// decoding, one token per step. Tokens are reported through a callback as they are
// produced so callers can stream them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fafo/model.h"
#include "fafo/sampler.h"
#include "fafo/tokenizer.h"

namespace fafo {

struct GenerationOptions {
  int32_t n_predict = 128;       // new tokens at most; < 0: until the context is full
  SamplerOptions sampling;
  bool stop_at_end_of_generation = true;
  int32_t prefill_chunk = 512;   // prompt tokens per prefill step
};

enum class StopReason { Length, EndOfGeneration, ContextFull, Cancelled };
const char* stop_reason_name(StopReason r);

struct GenerationResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> ids;      // generated tokens (the end-of-generation token included)
  int32_t n_steps = 0;           // decoding forward passes (the prefill not counted)
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  StopReason stop = StopReason::Length;
  double tokens_per_step() const { return n_steps ? static_cast<double>(ids.size()) / n_steps : 0.0; }
  double tokens_per_second() const { return decode_seconds > 0.0 ? static_cast<double>(ids.size()) / decode_seconds : 0.0; }
};

// Called for each new token; return false to stop generating.
using TokenCallback = std::function<bool(int32_t token)>;

// Generates a continuation of `prompt` (which must be non-empty) on an empty context.
// Throws std::length_error when the prompt does not fit in the context.
GenerationResult generate(Model& model, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                          const GenerationOptions& options, const TokenCallback& on_token = {});

// Feeds `tokens` to the model after its current context (chunked); returns the logits
// after the last one.
std::vector<float> prefill(Model& model, const std::vector<int32_t>& tokens, int32_t chunk);

}  // namespace fafo
