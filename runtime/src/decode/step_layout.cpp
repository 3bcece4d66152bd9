#include "decode/step_layout.h"

#include <stdexcept>
#include <string>

#include "fafo/sampler.h"

namespace fafo {

StepLayout::StepLayout(int32_t n_past, int32_t input_token) : p0_(n_past) {
  batch_.add(input_token, p0_, {}, true);
}

int32_t StepLayout::add_chain(const std::vector<int32_t>& tokens, bool padding) {
  ChainRows chain;
  chain.tokens = tokens;
  chain.padding = padding;
  std::vector<int32_t> sees = {0};
  for (size_t j = 0; j < tokens.size(); ++j) {
    const int32_t row = batch_.add(tokens[j], p0_ + 1 + static_cast<int32_t>(j), sees, !padding);
    chain.rows.push_back(row);
    sees.push_back(row);
  }
  chains_.push_back(std::move(chain));
  return static_cast<int32_t>(chains_.size()) - 1;
}

void StepLayout::add_window(const LookaheadWindow& w, PrefixView view) {
  const int32_t R = w.rows(), W = w.columns();
  // rows_of[r][c]: batch row of window token (r, c); row 0 column 0 is the input token.
  std::vector<std::vector<int32_t>> rows_of(static_cast<size_t>(R), std::vector<int32_t>(static_cast<size_t>(W), -1));
  rows_of[0][0] = 0;
  for (int32_t r = 0; r < R; ++r) {
    for (int32_t c = (r == 0 ? 1 : 0); c < W; ++c) {
      std::vector<int32_t> sees = {0};
      for (int32_t c2 = 1; c2 <= c && !(r == 0 && c2 == c); ++c2) sees.push_back(rows_of[0][static_cast<size_t>(c2)]);
      for (int32_t r2 = 1; r2 < r; ++r2) sees.push_back(rows_of[static_cast<size_t>(r2)][static_cast<size_t>(c)]);
      const bool output = r == R - 1;
      rows_of[static_cast<size_t>(r)][static_cast<size_t>(c)] = batch_.add(w.token(r, c), p0_ + r + c, sees, output, view);
    }
  }
  window_outputs_ = rows_of[static_cast<size_t>(R - 1)];
}

void StepLayout::index_logit_rows(size_t n_results) {
  const auto& rows = batch_.logit_rows();
  if (n_results != rows.size()) throw std::logic_error("StepLayout: result rows do not match the logit rows");
  logit_index_.assign(static_cast<size_t>(batch_.size()), -1);
  for (size_t k = 0; k < rows.size(); ++k) logit_index_[static_cast<size_t>(rows[k])] = static_cast<int32_t>(k);
  logits_.clear();
  argmax_.clear();
  top_ = TopK{};
}

int32_t StepLayout::result_index(int32_t row) const {
  const int32_t k = logit_index_.at(static_cast<size_t>(row));
  if (k < 0) throw std::logic_error("StepLayout: no logits were requested for batch row " + std::to_string(row));
  return k;
}

void StepLayout::set_logits(std::vector<float> logits, int32_t n_vocab) {
  if (n_vocab <= 0 || logits.size() % static_cast<size_t>(n_vocab) != 0) throw std::logic_error("StepLayout: logits size mismatch");
  index_logit_rows(logits.size() / static_cast<size_t>(n_vocab));
  logits_ = std::move(logits);
  n_vocab_ = n_vocab;
}

void StepLayout::set_argmax(std::vector<int32_t> ids) {
  index_logit_rows(ids.size());
  argmax_ = std::move(ids);
}

void StepLayout::set_top_k(TopK top, int32_t n_vocab) {
  index_logit_rows(static_cast<size_t>(top.rows()));
  top_ = std::move(top);
  n_vocab_ = n_vocab;
}

const float* StepLayout::logits(int32_t row) const {
  const int32_t k = result_index(row);
  if (logits_.empty()) throw std::logic_error("StepLayout: this step kept only the argmax or the best candidates of each row");
  return logits_.data() + static_cast<size_t>(k) * static_cast<size_t>(n_vocab_);
}

int32_t StepLayout::argmax(int32_t row) const {
  const int32_t k = result_index(row);
  if (!argmax_.empty()) return argmax_[static_cast<size_t>(k)];
  if (top_.k > 0) return top_.row_ids(k)[0];
  return fafo::argmax(logits(row), n_vocab_);
}

std::vector<float> StepLayout::distribution(int32_t row, const Sampler& sampler) const {
  const int32_t k = result_index(row);
  if (top_.k > 0) return sampler.distribution_top(top_.row_ids(k), top_.row_values(k), top_.k, n_vocab_);
  return sampler.distribution(logits(row), n_vocab_);
}

}  // namespace fafo
