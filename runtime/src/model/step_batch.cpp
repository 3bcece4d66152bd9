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

int32_t StepBatch::add(int32_t token, int32_t pos, const std::vector<int32_t>& sees, bool wants_logits,
                       PrefixView prefix) {
  const int32_t index = size();
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
