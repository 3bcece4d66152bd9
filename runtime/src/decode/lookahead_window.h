// The 2D window of Lookahead/FAFO decoding: N-1 rows by W columns of guess tokens
// (Lookahead paper, section 2D window; FAFO's fumble rows). Column c of row r sits
// at position p0 + r + c after the step's input token at p0, and forms a chain with
// the rows above it in its column; row 0's column 0 is the input token itself.
//
// After each step the rows move up by one, the newest guesses (what the last row
// predicted) become the last row, and the token leaving row 0 of a column joins that
// column's history, which FAFO uses as the key context for the column's n-gram.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <vector>

namespace fafo {

class LookaheadWindow {
 public:
  LookaheadWindow(int32_t rows, int32_t columns, int32_t history_length);

  // Fills every row with tokens drawn from `source` (the prompt), as the Lookahead
  // authors do; the rows become meaningful after rows-1 steps.
  void init_from(const std::vector<int32_t>& source, std::mt19937_64& rng);

  int32_t rows() const { return static_cast<int32_t>(grid_.size()); }
  int32_t columns() const { return columns_; }
  int32_t token(int32_t row, int32_t column) const { return grid_[static_cast<size_t>(row)][static_cast<size_t>(column)]; }
  const std::vector<std::vector<int32_t>>& grid() const { return grid_; }
  // True once every row was produced by the model (after rows-1 shifts).
  bool warmed_up() const { return shifts_ >= rows() - 1; }

  // The n-gram column c yields with the new guess: rows 1..N-2 then `guess`.
  std::vector<int32_t> ngram(int32_t column, int32_t guess) const;
  // The context before that n-gram: the column's history, then its row-0 token
  // (`input` for column 0).
  std::vector<int32_t> key_context(int32_t column, int32_t input) const;

  // Moves the rows up; `last_row` becomes the last row. Row 0 tokens (input for
  // column 0) go into the column histories.
  void shift(const std::vector<int32_t>& last_row, int32_t input);
  // Moves the rows up with the old row 0 recycled as the last row (when a step
  // accepts several tokens the window advances once per token).
  void shift_recycled(int32_t input);

 private:
  std::vector<std::vector<int32_t>> grid_;
  std::vector<std::deque<int32_t>> history_;
  int32_t columns_;
  int32_t history_length_;
  int32_t shifts_ = 0;
};

}  // namespace fafo
