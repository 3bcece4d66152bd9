// Verification of a step's candidate chains against the model's own predictions, the
// one verifier every strategy uses (FAFO paper algorithm 3).
//
// Greedy: a chain is accepted token by token while each token equals the argmax of
// the logits before it; the longest accepted chain wins and the argmax after its last
// accepted token is emitted too, so a step always emits at least one token.
// Sampling: at each depth the token plain sampling would emit there is drawn from the
// sampler's distribution P with the generation's number for that position
// (position_uniform); the chains whose token at that depth equals it go on, and when
// none does it is emitted and the step ends. The emitted tokens are then exactly plain
// sampling's for the same seed, and a draft token t is accepted with probability P(t)
// (for several distinct drafts, their summed probability), as with the
// speculative-sampling rule for deterministic drafts.
#pragma once

#include <cstdint>
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
// `first_index`: the generated-token index the step's first emitted token will have.
Verdict verify_sampling(const StepLayout& layout, const Sampler& sampler, uint64_t seed, int64_t first_index);

}  // namespace fafo
