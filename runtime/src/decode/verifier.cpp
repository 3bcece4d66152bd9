#include "decode/verifier.h"

#include <algorithm>
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

Verdict verify_sampling(const StepLayout& layout, const Sampler& sampler, uint64_t seed, int64_t first_index) {
  const auto& chains = layout.chains();
  Verdict v;
  v.match_lengths.assign(chains.size(), 0);
  v.commit_rows = {0};
  std::vector<size_t> alive;  // chains that agree with everything emitted so far
  for (size_t g = 0; g < chains.size(); ++g)
    if (!chains[g].padding) alive.push_back(g);
  std::vector<float> P = layout.distribution(0, sampler);
  for (size_t depth = 0;; ++depth) {
    const int32_t t = draw_token(P, position_uniform(seed, first_index + static_cast<int64_t>(depth)));
    v.tokens.push_back(t);
    std::vector<size_t> still;
    for (size_t g : alive)
      if (depth < chains[g].tokens.size() && chains[g].tokens[depth] == t) {
        v.match_lengths[g] = static_cast<int32_t>(depth + 1);
        still.push_back(g);
      }
    if (still.empty()) return v;
    // Chains that agree up to here computed the same row (a row depends only on its own
    // tokens and what they attend to): continue from the first.
    const ChainRows& chain = chains[still.front()];
    v.commit_rows.push_back(chain.rows[depth]);
    v.winner = static_cast<int32_t>(still.front());
    P = layout.distribution(chain.rows[depth], sampler);
    alive = std::move(still);
  }
}

}  // namespace fafo
