// SpecPC (seed 004): prompt compression by a draft model's attention. Before the target
// prefills a long prompt, the draft model reads it, predicts one token after it, and
// the queries of the prompt's last `window` rows and of that token score every prompt
// token (softmax attention, rows weighted towards the end, the most any head gave,
// summed over the layers after the first `skip_layers`, max-pooled with `pool_kernel`
// so neighbours come along). The first token, the last `window` and the best-scored
// others up to `budget` are kept, in order, and only they are prefilled: lossy, the
// target never sees the rest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fafo {

class Sequence;

struct PromptCompressOptions {
  std::string method;        // "" (off) or "speckv" (--prompt-compress)
  int32_t budget = 1024;     // prompt tokens kept at most (--prompt-budget)
  int32_t window = 64;       // the prompt's last rows that score (and are always kept)
  int32_t skip_layers = 2;   // first draft layers left out of the score (at most all but one)
  int32_t pool_kernel = 7;   // max-pooling of the scores
  bool enabled() const { return !method.empty(); }
  // Throws std::invalid_argument with the flag's name.
  void validate() const;
  // "prompt-compress speckv budget B" (for the lossy labels).
  std::string describe() const;
};

// The tokens of `prompt` to prefill, in order: all of them when there are at most
// budget; else SpecPC's choice. Uses `draft`'s KV cache (forgotten before and after;
// its KV policy is removed). `chunk`: prompt tokens per draft prefill step. Throws
// std::length_error when the draft model's context cannot hold the prompt and one token.
std::vector<int32_t> compress_prompt(Sequence& draft, const std::vector<int32_t>& prompt, const PromptCompressOptions& options,
                                     int32_t chunk);

}  // namespace fafo
