// Lays out one multi-token step as a StepBatch, the one builder every strategy uses:
//   row 0            the input token (the last emitted token) at position p0 = n_past
//   chains           candidate n-grams to verify (or Jacobi guesses): tokens at
//                    p0+1, p0+2, ..., each seeing the input and its chain's earlier tokens
//   window           the 2D window (Lookahead / FAFO fumble rows): token (r, c) at
//                    p0+r+c sees the input, row 0 up to column c, and rows 1..r-1 of
//                    column c; FAFO gives these rows the COMPRESSED prefix view
// After the forward pass it hands out each row's logits (or only their argmax).
#pragma once

#include <cstdint>
#include <vector>

#include "decode/lookahead_window.h"
#include "fafo/sampler.h"
#include "fafo/step_batch.h"
#include "fafo/top_k.h"

namespace fafo {

struct ChainRows {
  std::vector<int32_t> tokens;
  std::vector<int32_t> rows;  // batch row of each token
  bool padding = false;       // keeps the step shape fixed; never verified
};

class StepLayout {
 public:
  StepLayout(int32_t n_past, int32_t input_token);

  int32_t size() const { return batch_.size(); }
  // Adds a chain after the input token; returns its index in chains().
  int32_t add_chain(const std::vector<int32_t>& tokens, bool padding = false);
  // Adds the window; window_output_rows()[c] is the row predicting column c's next guess.
  void add_window(const LookaheadWindow& window, PrefixView view);

  StepBatch& batch() { return batch_; }
  const StepBatch& batch() const { return batch_; }
  const std::vector<ChainRows>& chains() const { return chains_; }
  const std::vector<int32_t>& window_output_rows() const { return window_outputs_; }

  // Takes the forward pass's logits (one row per batch.logit_rows() entry).
  void set_logits(std::vector<float> logits, int32_t n_vocab);
  const float* logits(int32_t row) const;
  // Greedy steps take only each logit row's argmax (Sequence::forward_argmax).
  void set_argmax(std::vector<int32_t> ids);
  // Sampling steps with top-k take only each row's best candidates (Sequence::forward_top_k).
  void set_top_k(TopK top, int32_t n_vocab);
  // The argmax of a row's logits: from set_argmax's ids or the best candidate, else
  // computed from the logits.
  int32_t argmax(int32_t row) const;
  // The sampler's distribution for a row, from its logits or its best candidates.
  std::vector<float> distribution(int32_t row, const Sampler& sampler) const;
  int32_t n_vocab() const { return n_vocab_; }

 private:
  StepBatch batch_;
  int32_t p0_;
  std::vector<ChainRows> chains_;
  std::vector<int32_t> window_outputs_;
  std::vector<int32_t> logit_index_;  // batch row -> index into logits_, or -1
  std::vector<float> logits_;
  std::vector<int32_t> argmax_;
  TopK top_;
  int32_t n_vocab_ = 0;

  void index_logit_rows(size_t n_results);
  int32_t result_index(int32_t row) const;
};

}  // namespace fafo
