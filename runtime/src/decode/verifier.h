// Verification of a step's candidate chains against the model's own predictions, the
// one verifier every strategy uses (FAFO paper algorithm 3).
//
// Greedy: a chain is accepted token by token while each token equals the argmax of
// the logits before it; the longest accepted chain wins and the argmax after its last
// accepted token is emitted too, so a step always emits at least one token.
// Sampling: the speculative-sampling rule for deterministic drafts: a draft token t
// is accepted with probability P(t) under the sampler's distribution P; on rejection
// P(t) is set to 0 and P renormalised, and the next distinct draft is tried; when none
// is accepted a token is drawn from what is left of P. The emitted tokens are then
// distributed exactly as plain sampling's.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "decode/step_layout.h"
#include "fafo/sampler.h"

namespace fafo {

struct Verdict {
  std::vector<int32_t> tokens;       // emitted, in order
  std::vector<int32_t> commit_rows;  // batch rows whose KV holds tokens[0..n-2]'s inputs: the input row, then matched rows
  int32_t winner = -1;               // chain that supplied tokens[0..n-2] (-1: none)
  std::vector<int32_t> match_lengths;  // per chain: leading tokens accepted
};

Verdict verify_greedy(const StepLayout& layout);
Verdict verify_sampling(const StepLayout& layout, const Sampler& sampler, std::mt19937_64& rng);

}  // namespace fafo
