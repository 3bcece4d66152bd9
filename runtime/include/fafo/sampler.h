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

// The number in [0, 1) that token `index` of a generation (0: the first generated) is
// drawn with, from the seed alone (splitmix64 of seed and index). The decoding loop
// draws every token this way, whatever the strategy and however many tokens a step
// verifies, so a seed gives the same sampled text with every strategy.
double position_uniform(uint64_t seed, int64_t index);
// The token where the running sum of `probs` (in index order) first exceeds u times
// their total; tokens of probability 0 are never drawn. Throws std::runtime_error when
// no mass is left.
int32_t draw_token(const std::vector<float>& probs, double u);

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& options);
  const SamplerOptions& options() const { return options_; }
  bool greedy() const { return options_.temperature <= 0.0f; }
  int32_t sample(const float* logits, int32_t n_vocab);
  // The distribution sample() draws from (after top-k/top-p/min-p/temperature),
  // as probabilities over the full vocabulary.
  std::vector<float> distribution(const float* logits, int32_t n_vocab) const;

  // The same distribution from a row's best candidates only (fafo/top_k.h order):
  // `count` (id, logit) pairs, at least min(top_k, n_vocab) of them (the whole row when
  // top-k is off). Equal to distribution() of the whole row, bit for bit.
  std::vector<float> distribution_top(const int32_t* ids, const float* logits, int32_t count, int32_t n_vocab) const;
  // Whether distribution_top can work from `k` candidates per row.
  bool top_candidates_suffice(int32_t k, int32_t n_vocab) const;

 private:
  // Top-p, min-p and temperature over the `keep` best candidates (sorted, checked).
  std::vector<float> distribution_of_best(const int32_t* ids, const float* logits, size_t keep, int32_t n_vocab) const;

  SamplerOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace fafo
