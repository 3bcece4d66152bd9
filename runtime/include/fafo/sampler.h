// Choosing the next token from logits: greedy (temperature 0, pure argmax) or
// sampling with top-k, top-p, min-p and temperature, in that order, from a seeded RNG.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace fafo {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy
  int32_t top_k = 40;        // 0: off
  float top_p = 0.95f;       // 1: off
  float min_p = 0.05f;       // 0: off
  uint64_t seed = 0xFAF0;
};

// Index of the largest logit; the lowest index wins ties.
int32_t argmax(const float* logits, int32_t n);

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);
  const SamplerOptions& options() const { return options_; }
  bool greedy() const { return options_.temperature <= 0.0f; }
  int32_t sample(const float* logits, int32_t n_vocab);
  // The distribution sample() draws from (after top-k/top-p/min-p/temperature),
  // as probabilities over the full vocabulary; used by tests.
  std::vector<float> distribution(const float* logits, int32_t n_vocab) const;

 private:
  SamplerOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace fafo
