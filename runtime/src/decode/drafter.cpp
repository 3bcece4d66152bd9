#include "decode/drafter.h"

#include <algorithm>

namespace fafo {

Drafter::Drafter(Model& draft, std::unique_ptr<KvPolicy> policy) : model_(draft), sparse_(policy != nullptr) {
  model_.truncate(0);
  model_.set_kv_policy(std::move(policy));
}

StepBatch Drafter::batch(const std::vector<int32_t>& tokens) const {
  if (!sparse_ || !prefilled_) return StepBatch::causal(tokens, model_.n_past());
  StepBatch b;
  std::vector<int32_t> sees;
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.add(tokens[i], model_.n_past() + static_cast<int32_t>(i), sees, i + 1 == tokens.size(), PrefixView::Compressed);
    sees.push_back(static_cast<int32_t>(i));
  }
  return b;
}

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
  // What it has not seen, in steps of at most kFeedChunk tokens (a long prompt);
  // only the last one's logits are needed.
  constexpr size_t kFeedChunk = 256;
  int32_t next = -1;
  for (size_t begin = keep; begin < text.size(); begin += kFeedChunk) {
    const size_t end = std::min(text.size(), begin + kFeedChunk);
    StepBatch feed = batch(std::vector<int32_t>(text.begin() + static_cast<std::ptrdiff_t>(begin),
                                                text.begin() + static_cast<std::ptrdiff_t>(end)));
    if (end == text.size()) next = pick(feed, first_index, sampler, seed);
    else model_.forward_argmax(feed);
    model_.commit(feed.size());
  }
  if (!prefilled_) {
    prefilled_ = true;
    model_.end_prefill();  // a sparse drafter's policy scores the prompt now
  }
  cached_.insert(cached_.end(), text.begin() + static_cast<std::ptrdiff_t>(keep), text.end());
  out.push_back(next);
  for (int32_t i = 1; i < n; ++i) {
    StepBatch one = batch({next});
    next = pick(one, first_index + i, sampler, seed);
    model_.commit(1);
    cached_.push_back(out.back());
    out.push_back(next);
  }
  return out;
}

}  // namespace fafo
