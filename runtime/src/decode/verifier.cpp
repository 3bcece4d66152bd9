#include "decode/verifier.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace fafo {

Verdict verify_greedy(const StepLayout& layout) {
  const auto& chains = layout.chains();
  Verdict best;
  best.match_lengths.assign(chains.size(), 0);
  const int32_t first = layout.argmax(0);
  best.tokens = {first};
  best.commit_rows = {0};
  for (size_t g = 0; g < chains.size(); ++g) {
    const ChainRows& chain = chains[g];
    if (chain.padding) continue;
    int32_t predicted = first;
    std::vector<int32_t> tokens, rows = {0};
    size_t j = 0;
    for (; j < chain.tokens.size() && chain.tokens[j] == predicted; ++j) {
      tokens.push_back(predicted);
      rows.push_back(chain.rows[j]);
      predicted = layout.argmax(chain.rows[j]);
    }
    best.match_lengths[g] = static_cast<int32_t>(j);
    tokens.push_back(predicted);
    if (tokens.size() > best.tokens.size()) {
      best.tokens = std::move(tokens);
      best.commit_rows = std::move(rows);
      best.winner = static_cast<int32_t>(g);
    }
  }
  return best;
}

namespace {

int32_t draw(const std::vector<float>& probs, std::mt19937_64& rng) {
  double total = 0.0;
  for (float p : probs) total += p;
  if (!(total > 0.0)) throw std::runtime_error("sampling: the distribution has no mass left");
  std::uniform_real_distribution<double> u(0.0, total);
  double x = u(rng), acc = 0.0;
  int32_t last_positive = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0f) continue;
    acc += probs[i];
    last_positive = static_cast<int32_t>(i);
    if (x < acc) return last_positive;
  }
  return last_positive;
}

}  // namespace

Verdict verify_sampling(const StepLayout& layout, const Sampler& sampler, std::mt19937_64& rng) {
  const auto& chains = layout.chains();
  Verdict v;
  v.match_lengths.assign(chains.size(), 0);
  v.commit_rows = {0};
  std::vector<size_t> alive;  // chains that still agree with everything accepted
  for (size_t g = 0; g < chains.size(); ++g)
    if (!chains[g].padding) alive.push_back(g);
  std::vector<float> P = layout.distribution(0, sampler);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (size_t depth = 0;; ++depth) {
    bool accepted = false;
    for (size_t g : alive) {
      const ChainRows& chain = chains[g];
      if (depth >= chain.tokens.size()) continue;
      const int32_t t = chain.tokens[depth];
      const double p = P[static_cast<size_t>(t)];
      if (p <= 0.0) continue;  // rejected before (or impossible): never accepted
      if (unit(rng) < p) {
        v.tokens.push_back(t);
        v.commit_rows.push_back(chain.rows[depth]);
        v.winner = static_cast<int32_t>(g);
        P = layout.distribution(chain.rows[depth], sampler);
        std::vector<size_t> still;
        for (size_t h : alive)
          if (depth < chains[h].tokens.size() && chains[h].tokens[depth] == t) {
            v.match_lengths[h] = static_cast<int32_t>(depth + 1);
            still.push_back(h);
          }
        alive = std::move(still);
        accepted = true;
        break;
      }
      // Rejected: remove t's mass and renormalise what is left.
      P[static_cast<size_t>(t)] = 0.0f;
      const double rest = std::accumulate(P.begin(), P.end(), 0.0);
      if (rest > 0.0)
        for (float& x : P) x = static_cast<float>(x / rest);
    }
    if (!accepted) {
      v.tokens.push_back(draw(P, rng));
      return v;
    }
  }
}

}  // namespace fafo
