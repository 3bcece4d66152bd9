#include "fafo/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <limits>
#include <stdexcept>
#include <string>

namespace fafo {
namespace {

[[noreturn]] void throw_nan(int32_t index) {
  throw std::runtime_error("the model produced non-finite logits (NaN, first at token " + std::to_string(index) +
                           "): the weights or the computation are broken");
}

[[noreturn]] void throw_all_negative_infinity() {
  throw std::runtime_error("every logit is -inf: the model rules out every token");
}

// NaN anywhere, or -inf everywhere, leaves nothing to choose from: both throw. (NaN would
// also break the ordering the sort below relies on.)
void check_logits(const float* logits, int32_t n) {
  bool any_above_negative_infinity = false;
  for (int32_t i = 0; i < n; ++i) {
    if (std::isnan(logits[i])) throw_nan(i);
    any_above_negative_infinity |= logits[i] > -std::numeric_limits<float>::infinity();
  }
  if (!any_above_negative_infinity) throw_all_negative_infinity();
}

}  // namespace

int32_t argmax(const float* logits, int32_t n) {
  if (n <= 0) throw std::invalid_argument("argmax over an empty vocabulary");
  if (std::isnan(logits[0])) throw_nan(0);
  int32_t best = 0;
  for (int32_t i = 1; i < n; ++i) {
    if (std::isnan(logits[i])) throw_nan(i);
    if (logits[i] > logits[best]) best = i;
  }
  if (logits[best] == -std::numeric_limits<float>::infinity()) throw_all_negative_infinity();
  return best;  // a +inf logit wins (the first one, as for any tie)
}

double position_uniform(uint64_t seed, int64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(index) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;  // the top 53 bits: uniform in [0, 1)
}

int32_t draw_token(const std::vector<float>& probs, double u) {
  double total = 0.0;
  for (float p : probs) total += p;
  if (!(total > 0.0)) throw std::runtime_error("sampling: the distribution has no mass left");
  const double x = u * total;
  double acc = 0.0;
  int32_t last_positive = -1;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0f) continue;
    acc += probs[i];
    last_positive = static_cast<int32_t>(i);
    if (x < acc) return last_positive;
  }
  return last_positive;  // rounding left x at the total: the last token with mass
}

Sampler::Sampler(const SamplerOptions& options) : options_(options), rng_(options.seed) {
  if (options.temperature < 0.0f) throw std::invalid_argument("temperature must be >= 0");
  if (options.top_k < 0) throw std::invalid_argument("top-k must be >= 0");
  if (!(options.top_p > 0.0f && options.top_p <= 1.0f)) throw std::invalid_argument("top-p must be in (0, 1]");
  if (!(options.min_p >= 0.0f && options.min_p < 1.0f)) throw std::invalid_argument("min-p must be in [0, 1)");
}

std::vector<float> Sampler::distribution(const float* logits, int32_t n_vocab) const {
  if (greedy()) {
    std::vector<float> probs(static_cast<size_t>(n_vocab), 0.0f);
    probs[static_cast<size_t>(argmax(logits, n_vocab))] = 1.0f;
    return probs;
  }
  if (n_vocab <= 0) throw std::invalid_argument("sampling from an empty vocabulary");
  check_logits(logits, n_vocab);
  // Candidates sorted by logit, best first (ties: lower id first).
  std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t keep = ids.size();
  if (options_.top_k > 0) keep = std::min(keep, static_cast<size_t>(options_.top_k));
  std::vector<float> best(keep);
  for (size_t k = 0; k < keep; ++k) best[k] = logits[ids[k]];
  return distribution_of_best(ids.data(), best.data(), keep, n_vocab);
}

bool Sampler::top_candidates_suffice(int32_t k, int32_t n_vocab) const {
  if (k >= n_vocab) return true;
  return greedy() ? k >= 1 : options_.top_k > 0 && k >= options_.top_k;
}

std::vector<float> Sampler::distribution_top(const int32_t* ids, const float* logits, int32_t count,
                                             int32_t n_vocab) const {
  if (n_vocab <= 0 || count <= 0) throw std::invalid_argument("sampling from an empty vocabulary");
  if (!top_candidates_suffice(count, n_vocab))
    throw std::invalid_argument("sampling: " + std::to_string(count) + " candidates per row do not cover top-k " +
                                std::to_string(options_.top_k));
  for (int32_t k = 0; k < count; ++k) {
    if (ids[k] < 0 || ids[k] >= n_vocab) throw std::out_of_range("sampling: candidate id out of the vocabulary");
    if (std::isnan(logits[k])) throw_nan(ids[k]);
  }
  if (logits[0] == -std::numeric_limits<float>::infinity()) throw_all_negative_infinity();
  if (greedy()) {
    std::vector<float> probs(static_cast<size_t>(n_vocab), 0.0f);
    probs[static_cast<size_t>(ids[0])] = 1.0f;
    return probs;
  }
  size_t keep = static_cast<size_t>(std::min(count, n_vocab));
  if (options_.top_k > 0) keep = std::min(keep, static_cast<size_t>(options_.top_k));
  return distribution_of_best(ids, logits, keep, n_vocab);
}

std::vector<float> Sampler::distribution_of_best(const int32_t* ids, const float* best, size_t keep,
                                                 int32_t n_vocab) const {
  std::vector<float> probs(static_cast<size_t>(n_vocab), 0.0f);
  // Softmax at temperature 1 over the kept candidates, for the top-p and min-p cuts. The
  // best logit is finite or +inf (checked by the callers); -inf logits get probability
  // 0, and when the best is +inf the +inf logits share all the mass (the limit of a
  // growing logit).
  auto softmax = [&](size_t count, float temperature) {
    std::vector<double> p(count);
    const double max_logit = best[0];
    const bool infinite = std::isinf(max_logit);
    double total = 0.0;
    for (size_t k = 0; k < count; ++k)
      total += p[k] = infinite ? (best[k] == max_logit ? 1.0 : 0.0) : std::exp((best[k] - max_logit) / temperature);
    for (double& v : p) v /= total;
    return p;
  };
  if (options_.top_p < 1.0f) {
    const auto p = softmax(keep, 1.0f);
    double cumulative = 0.0;
    for (size_t k = 0; k < keep; ++k) {
      cumulative += p[k];
      if (cumulative >= options_.top_p) {
        keep = k + 1;
        break;
      }
    }
  }
  if (options_.min_p > 0.0f) {
    const auto p = softmax(keep, 1.0f);
    size_t k = 1;
    while (k < keep && p[k] >= options_.min_p * p[0]) ++k;
    keep = k;
  }
  const auto p = softmax(keep, options_.temperature);
  for (size_t k = 0; k < keep; ++k) probs[static_cast<size_t>(ids[k])] = static_cast<float>(p[k]);
  return probs;
}

int32_t Sampler::sample(const float* logits, int32_t n_vocab) {
  if (greedy()) return argmax(logits, n_vocab);
  const std::vector<float> probs = distribution(logits, n_vocab);
  std::discrete_distribution<int32_t> pick(probs.begin(), probs.end());
  return pick(rng_);
}

}  // namespace fafo
