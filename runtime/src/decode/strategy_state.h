// The per-generation state of a decoding strategy: what it guesses with and what it
// remembers between steps (Jacobi guesses; the 2D window and the candidate pool of
// Lookahead and FAFO). The decoding loop (generator.cpp) asks it to lay out each step
// and tells it what was accepted; the trace recorder (trace_recorder.h) reads what it
// retrieved and guessed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "decode/drafter.h"
#include "decode/lookahead_window.h"
#include "decode/step_layout.h"
#include "fafo/candidate_pool.h"
#include "fafo/decoding.h"

namespace fafo {

class StrategyState {
 public:
  // Strategy draft: throws std::invalid_argument when r.draft_model is not set. The
  // corpus index (r.corpus) fills what the pool leaves of the G candidates.
  StrategyState(const DecodingOptions& o, const DecodingResources& r, const std::vector<int32_t>& prompt);
  StrategyState(const StrategyState&) = delete;  // sampler_ may point at greedy_
  StrategyState& operator=(const StrategyState&) = delete;
  // How generation samples (greedy when never set): a drafter drafts the way the target
  // draws, with the seed's number for each position.
  void set_sampling(const Sampler& sampler, uint64_t seed) {
    sampler_ = &sampler;
    seed_ = seed;
  }

  const DecodingOptions& options() const { return o_; }
  bool uses_window() const { return o_.strategy == Strategy::Lookahead || o_.strategy == Strategy::Fafo; }
  const CandidatePool& pool() const { return pool_; }
  const LookaheadWindow* window() const { return window_ ? &*window_ : nullptr; }

  // Lays out the step for `input` after the committed `history` (history ends with input):
  // the chains to verify (Jacobi's guesses; the draft model's prediction; or the pool's
  // candidates then the corpus's and, for FAFO, padding up to G chains), then the 2D
  // window.
  void build(StepLayout& layout, const std::vector<int32_t>& history);
  // The pool's and the corpus's candidates the latest build() laid out, in chain order
  // (they come before any padding chain); empty for ar and jacobi.
  const std::vector<RetrievedCandidate>& retrieved() const { return retrieved_; }

  // Starts the guesses afresh from `history` (the window as at the start; Jacobi's
  // guesses), keeping the pool: for a strategy that did not run for a while.
  void restart(const std::vector<int32_t>& history);

  // After verification: update guesses / window / pool. `emitted` tokens were kept.
  void update(const StepLayout& layout, int32_t input, const std::vector<int32_t>& emitted,
              const std::vector<int32_t>& history, int32_t step);
  // What the latest update() guessed: Jacobi's next guesses, or the tokens the window's
  // last row predicted (its new row); empty for ar.
  const std::vector<int32_t>& new_guesses() const {
    return o_.strategy == Strategy::Jacobi ? guesses_ : new_row_;
  }

 private:
  void fill_guesses(const std::vector<int32_t>& source);
  // Fills the G candidates the pool left free with the corpus's continuations.
  void add_corpus_candidates(const std::vector<int32_t>& history);

  void seed_pool(const std::vector<int32_t>& prompt);

  DecodingOptions o_;
  std::shared_ptr<const CorpusIndex> corpus_;  // null: none
  size_t prompt_size_ = 0;
  Sampler greedy_{SamplerOptions{}};
  const Sampler* sampler_ = &greedy_;
  uint64_t seed_ = 0;
  std::optional<Drafter> drafter_;
  std::mt19937_64 rng_;
  CandidatePool pool_;
  std::optional<LookaheadWindow> window_;
  std::vector<int32_t> guesses_;
  std::vector<RetrievedCandidate> retrieved_;
  std::vector<int32_t> new_row_;
};

}  // namespace fafo
