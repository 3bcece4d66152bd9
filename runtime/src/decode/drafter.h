// Speculative decoding's drafter: a draft model that predicts the next tokens after the
// text, keeping its own KV cache in step with it (strategy draft, fafo/decoding.h).
//
// Each step it feeds what it has not seen of the text (the tokens accepted since, in one
// forward pass), then predicts n tokens one by one. Its KV cache then holds the text and
// its first n - 1 predictions; the next step keeps what the text confirmed and drops
// the rest. Greedy decoding drafts each row's argmax; sampling draws each draft token
// from the draft model's distribution with the number the target will draw that
// position with (position_uniform), so a drafter close to the target proposes the very
// token the target then draws.
#pragma once

#include <cstdint>
#include <vector>

#include "fafo/kv_policy.h"
#include "fafo/sequence.h"
#include "fafo/sampler.h"

namespace fafo {

class Drafter {
 public:
  // Forgets what `draft` holds: its cache follows this generation's text from now on.
  // With `policy`, the draft model's rows attend, after the first text it is fed (the
  // prompt, attended in full), only the region the policy keeps (a sparse drafter).
  explicit Drafter(Sequence& draft, std::unique_ptr<KvPolicy> policy = nullptr);

  // The next n tokens after `text` (prompt and generated tokens so far); the first of
  // them has generation index `first_index`. Fewer when the draft model's context is
  // full. `sampler` greedy: argmax; else drawn with position_uniform(seed, index).
  // With `alternatives`: the n_alternatives first tokens the draft model finds most likely
  // after the one it drafted (a small tree: each is verified as a chain of one token).
  std::vector<int32_t> draft(const std::vector<int32_t>& text, int32_t n, int64_t first_index, const Sampler& sampler,
                             uint64_t seed, int32_t n_alternatives = 0, std::vector<int32_t>* alternatives = nullptr);

 private:
  // The token drawn (greedy: the argmax) from the batch's last logit row; with
  // `alternatives`, also the n_alternatives next most likely other tokens of that row.
  int32_t pick(StepBatch& batch, int64_t index, const Sampler& sampler, uint64_t seed, int32_t n_alternatives = 0,
               std::vector<int32_t>* alternatives = nullptr);
  // A causal batch of `tokens` after the draft model's context; its rows read only the
  // region once the drafter is sparse and past the prompt.
  StepBatch batch(const std::vector<int32_t>& tokens) const;

  Sequence& model_;
  bool sparse_ = false;
  bool prefilled_ = false;       // the first text was fed (with a policy: the prompt's end told)
  std::vector<int32_t> cached_;  // the tokens the draft model's KV cache holds, in order
  size_t seen_text_ = 0;         // the text's length at the last draft()
};

}  // namespace fafo
