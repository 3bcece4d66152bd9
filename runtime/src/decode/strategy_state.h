// The per-generation state of a decoding strategy: what it guesses with and what it
// remembers between steps (Jacobi guesses; the 2D window and the candidate pool of
// Lookahead and FAFO). The decoding loop (generator.cpp) asks it to lay out each step
// and tells it what was accepted.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "decode/lookahead_window.h"
#include "decode/step_layout.h"
#include "fafo/candidate_pool.h"
#include "fafo/decoding.h"

namespace fafo {

class StrategyState {
 public:
  StrategyState(const DecodingOptions& o, const std::vector<int32_t>& prompt);

  bool uses_window() const { return o_.strategy == Strategy::Lookahead || o_.strategy == Strategy::Fafo; }
  const CandidatePool& pool() const { return pool_; }
  const LookaheadWindow* window() const { return window_ ? &*window_ : nullptr; }

  // Lays out the step for `input` after the committed `history` (history ends with input).
  void build(StepLayout& layout, const std::vector<int32_t>& history, StepTrace& trace);

  // After verification: update guesses / window / pool. `emitted` tokens were kept.
  void update(const StepLayout& layout, int32_t input, const std::vector<int32_t>& emitted,
              const std::vector<int32_t>& history, int32_t step, StepTrace& trace);

 private:
  void fill_guesses(const std::vector<int32_t>& source);

  void seed_pool(const std::vector<int32_t>& prompt);

  DecodingOptions o_;
  std::mt19937_64 rng_;
  CandidatePool pool_;
  std::optional<LookaheadWindow> window_;
  std::vector<int32_t> guesses_;
};

}  // namespace fafo
