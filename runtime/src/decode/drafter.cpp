#include "decode/drafter.h"

#include <algorithm>

namespace fafo {

Drafter::Drafter(Model& draft) : model_(draft) { model_.truncate(0); }

int32_t Drafter::pick(StepBatch& batch, int64_t index, const Sampler& sampler, uint64_t seed) {
  if (sampler.greedy()) return model_.forward_argmax(batch).back();
  const std::vector<float> logits = model_.forward(batch);
  const int32_t n_vocab = model_.config().n_vocab;
  const std::vector<float> row(logits.end() - n_vocab, logits.end());
  return draw_token(sampler.distribution(row.data(), n_vocab), position_uniform(seed, index));
}

std::vector<int32_t> Drafter::draft(const std::vector<int32_t>& text, int32_t n, int64_t first_index,
                                    const Sampler& sampler, uint64_t seed) {
  std::vector<int32_t> out;
  if (text.empty() || n <= 0) return out;
  // Keep the cached prefix the text confirms; at least the last token is fed again, for
  // the logits after it.
  size_t keep = 0;
  while (keep < cached_.size() && keep + 1 < text.size() && cached_[keep] == text[keep]) ++keep;
  model_.truncate(static_cast<int32_t>(keep));
  cached_.resize(keep);
  const int32_t room = model_.n_ctx() - static_cast<int32_t>(text.size());
  if (room <= 0) return out;  // the text alone fills the draft model's context
  n = std::min(n, room);
  StepBatch feed = StepBatch::causal(std::vector<int32_t>(text.begin() + static_cast<std::ptrdiff_t>(keep), text.end()),
                                     model_.n_past());
  int32_t next = pick(feed, first_index, sampler, seed);
  model_.commit(feed.size());
  cached_.insert(cached_.end(), text.begin() + static_cast<std::ptrdiff_t>(keep), text.end());
  out.push_back(next);
  for (int32_t i = 1; i < n; ++i) {
    StepBatch one = StepBatch::causal({next}, model_.n_past());
    next = pick(one, first_index + i, sampler, seed);
    model_.commit(1);
    cached_.push_back(out.back());
    out.push_back(next);
  }
  return out;
}

}  // namespace fafo
