#include "fafo/step_batch.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fafo {

StepBatch StepBatch::causal(const std::vector<int32_t>& tokens, int32_t n_past, bool logits_for_all) {
  StepBatch b;
  b.n_past_ = n_past;
  std::vector<int32_t> sees;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t index = static_cast<int32_t>(i);
    const bool wants = logits_for_all || i + 1 == tokens.size();
    b.add(tokens[i], n_past + index, sees, wants);
    sees.push_back(index);
  }
  return b;
}

StepBatch StepBatch::join(const std::vector<const StepBatch*>& parts) {
  if (parts.empty()) throw std::invalid_argument("StepBatch::join: no part");
  int64_t total = 0;
  for (const StepBatch* p : parts) {
    if (p->size() == 0) throw std::invalid_argument("StepBatch::join: an empty part");
    if (p->n_segments() != 1) throw std::invalid_argument("StepBatch::join: a part is itself joined");
    total += p->size();
  }
  if (total > kMaxTokens)
    throw std::length_error("StepBatch::join: " + std::to_string(total) + " tokens, more than " + std::to_string(kMaxTokens));
  StepBatch b;
  for (const StepBatch* p : parts) {
    const int32_t first = b.size();
    for (int32_t i = 0; i < p->size(); ++i) {
      b.tokens_.push_back(p->tokens_[static_cast<size_t>(i)]);
      b.positions_.push_back(p->positions_[static_cast<size_t>(i)]);
      b.prefixes_.push_back(p->prefixes_[static_cast<size_t>(i)]);
      b.mask_.resize(b.mask_.size() + b.words_per_row(), 0);
      uint64_t* row = &b.mask_[static_cast<size_t>(first + i) * b.words_per_row()];
      for (int32_t j = 0; j <= i; ++j)
        if (p->sees(i, j)) row[(first + j) / 64] |= uint64_t{1} << ((first + j) % 64);
      b.row_segment_.push_back(static_cast<int32_t>(b.segments_.size()));
    }
    for (int32_t r : p->logit_rows_) b.logit_rows_.push_back(first + r);
    b.segments_.push_back({first, p->size(), p->n_past_});
  }
  return b;
}

int32_t StepBatch::add(int32_t token, int32_t pos, const std::vector<int32_t>& sees, bool wants_logits,
                       PrefixView prefix) {
  const int32_t index = size();
  if (!segments_.empty()) throw std::logic_error("StepBatch::add: the batch is joined");
  if (index >= kMaxTokens) throw std::length_error("StepBatch: more than " + std::to_string(kMaxTokens) + " tokens");
  tokens_.push_back(token);
  positions_.push_back(pos);
  prefixes_.push_back(prefix);
  mask_.resize(mask_.size() + words_per_row(), 0);
  uint64_t* row = &mask_[static_cast<size_t>(index) * words_per_row()];
  for (int32_t j : sees) {
    if (j < 0 || j >= index) throw std::out_of_range("StepBatch: a token can only see earlier batch tokens");
    row[j / 64] |= uint64_t{1} << (j % 64);
  }
  row[index / 64] |= uint64_t{1} << (index % 64);
  if (wants_logits) logit_rows_.push_back(index);
  return index;
}

}  // namespace fafo
