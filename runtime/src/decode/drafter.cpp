#include "decode/drafter.h"

#include <algorithm>

#include "fafo/top_k.h"

namespace fafo {

Drafter::Drafter(Sequence& draft, std::unique_ptr<KvPolicy> policy) : model_(draft), sparse_(policy != nullptr) {
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

int32_t Drafter::pick(StepBatch& batch, int64_t index, const Sampler& sampler, uint64_t seed, int32_t n_alternatives,
                      std::vector<int32_t>* alternatives) {
  const int32_t n_vocab = model_.config().n_vocab;
  const bool alt = alternatives && n_alternatives > 0;
  if (alt) alternatives->clear();
  if (sampler.greedy() && !alt) return model_.forward_argmax(batch).back();
  if (sampler.greedy() && n_alternatives < kMaxTopK) {
    const TopK top = model_.forward_top_k(batch, n_alternatives + 1);
    const int32_t* ids = top.row_ids(top.rows() - 1);
    alternatives->assign(ids + 1, ids + top.k);
    return ids[0];
  }
  const std::vector<float> logits = model_.forward(batch);
  const std::vector<float> row(logits.end() - n_vocab, logits.end());
  const int32_t chosen = sampler.greedy() ? argmax(row.data(), n_vocab)
                                          : draw_token(sampler.distribution(row.data(), n_vocab), position_uniform(seed, index));
  if (alt) {
    std::vector<int32_t> order(static_cast<size_t>(n_vocab));
    for (int32_t i = 0; i < n_vocab; ++i) order[static_cast<size_t>(i)] = i;
    const size_t k = std::min<size_t>(order.size(), static_cast<size_t>(n_alternatives) + 1);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                      [&](int32_t a, int32_t b) { return row[static_cast<size_t>(a)] > row[static_cast<size_t>(b)] || (row[static_cast<size_t>(a)] == row[static_cast<size_t>(b)] && a < b); });
    for (size_t i = 0; i < k && static_cast<int32_t>(alternatives->size()) < n_alternatives; ++i)
      if (order[i] != chosen) alternatives->push_back(order[i]);
  }
  return chosen;
}

std::vector<int32_t> Drafter::draft(const std::vector<int32_t>& text, int32_t n, int64_t first_index,
                                    const Sampler& sampler, uint64_t seed, int32_t n_alternatives,
                                    std::vector<int32_t>* alternatives) {
  std::vector<int32_t> out;
  if (alternatives) alternatives->clear();
  if (text.empty() || n <= 0) return out;
  // Keep the cached prefix the text confirms; at least the last token is fed again, for
  // the logits after it.
  // The text only grows between calls (a generation's history), so what was text at the
  // last call is known to match; the check starts there (from 0 if the text changed).
  size_t keep = std::min({seen_text_, cached_.size(), text.size()});
  if (keep > 0 && cached_[keep - 1] != text[keep - 1]) keep = 0;
  while (keep < cached_.size() && keep + 1 < text.size() && cached_[keep] == text[keep]) ++keep;
  if (keep + 1 > text.size()) keep = text.size() - 1;  // the last token is always fed again
  seen_text_ = text.size();
  keep = static_cast<size_t>(model_.reusable(static_cast<int32_t>(keep)));  // 0 where the window rings moved on
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
    if (end == text.size()) next = pick(feed, first_index, sampler, seed, n_alternatives, alternatives);
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
