#include "decode/lookahead_window.h"

#include <stdexcept>

namespace fafo {

LookaheadWindow::LookaheadWindow(int32_t rows, int32_t columns, int32_t history_length)
    : grid_(static_cast<size_t>(rows), std::vector<int32_t>(static_cast<size_t>(columns), 0)),
      history_(static_cast<size_t>(columns)),
      columns_(columns),
      history_length_(history_length) {
  if (rows < 1 || columns < 1) throw std::invalid_argument("LookaheadWindow: needs at least one row and one column");
}

void LookaheadWindow::init_from(const std::vector<int32_t>& source, std::mt19937_64& rng) {
  if (source.empty()) throw std::invalid_argument("LookaheadWindow: no tokens to initialise from");
  std::uniform_int_distribution<size_t> pick(0, source.size() - 1);
  for (auto& row : grid_)
    for (int32_t& t : row) t = source[pick(rng)];
  for (auto& h : history_) h.clear();
  shifts_ = 0;
}

std::vector<int32_t> LookaheadWindow::ngram(int32_t column, int32_t guess) const {
  std::vector<int32_t> out;
  for (int32_t r = 1; r < rows(); ++r) out.push_back(token(r, column));
  out.push_back(guess);
  return out;
}

std::vector<int32_t> LookaheadWindow::key_context(int32_t column, int32_t input) const {
  const auto& h = history_[static_cast<size_t>(column)];
  std::vector<int32_t> out(h.begin(), h.end());
  out.push_back(column == 0 ? input : token(0, column));
  return out;
}

void LookaheadWindow::shift(const std::vector<int32_t>& last_row, int32_t input) {
  if (static_cast<int32_t>(last_row.size()) != columns_) throw std::invalid_argument("LookaheadWindow: wrong row width");
  for (int32_t c = 0; c < columns_; ++c) {
    auto& h = history_[static_cast<size_t>(c)];
    h.push_back(c == 0 ? input : token(0, c));
    while (static_cast<int32_t>(h.size()) > history_length_) h.pop_front();
  }
  for (size_t r = 0; r + 1 < grid_.size(); ++r) grid_[r] = grid_[r + 1];
  grid_.back() = last_row;
  ++shifts_;
}

void LookaheadWindow::shift_recycled(int32_t input) {
  const std::vector<int32_t> first = grid_.front();
  shift(first, input);
}

}  // namespace fafo
