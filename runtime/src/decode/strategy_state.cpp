#include "decode/strategy_state.h"

#include <algorithm>
#include <stdexcept>

#include "fafo/corpus_index.h"
#include "fafo/sampler.h"

namespace fafo {

StrategyState::StrategyState(const DecodingOptions& o, const DecodingResources& r, const std::vector<int32_t>& prompt)
    : o_(o), corpus_(r.corpus), prompt_size_(prompt.size()), rng_(o.seed),
      pool_(std::max(1, o.guesses), o.strategy == Strategy::Fafo ? o.lookback : 1) {
  if (o.strategy == Strategy::Draft) {
    if (!r.draft_model) throw std::invalid_argument("strategy draft: no draft model is open (open_decoding_resources)");
    std::unique_ptr<KvPolicy> policy;
    if (!o.draft_kv_policy.empty() && o.draft_kv_policy != "full") {
      KvPolicyOptions kv;
      kv.name = o.draft_kv_policy;
      kv.budget = o.draft_kv_budget;
      kv.recent = std::min(kv.recent, kv.budget);
      kv.sinks = std::min(kv.sinks, kv.budget);
      policy = make_kv_policy(kv);
    }
    drafter_.emplace(*r.draft_model, std::move(policy));
  }
  if (uses_window()) {
    window_.emplace(o.ngram - 1, o.window, o.strategy == Strategy::Fafo ? o.lookback - 1 : 0);
    window_->init_from(prompt, rng_);
  }
  if (o.strategy == Strategy::Jacobi) fill_guesses(prompt);
  if (o.pool_from_prompt && uses_window()) seed_pool(prompt);
}

void StrategyState::build(StepLayout& layout, const std::vector<int32_t>& history) {
  if (o_.strategy == Strategy::Jacobi) {
    layout.add_chain(guesses_);
    return;
  }
  if (drafter_) {
    const int64_t first_index = static_cast<int64_t>(history.size() - prompt_size_);  // the input's successor
    std::vector<int32_t> drafted, alternatives;
    try {
      drafted = drafter_->draft(history, o_.draft_n, first_index, *sampler_, seed_, o_.draft_alternatives, &alternatives);
    } catch (const std::runtime_error&) {
      // A broken draft model (NaN logits, nothing to draw): this step verifies nothing,
      // the target goes on alone.
      drafted.clear();
      alternatives.clear();
    }
    retrieved_.clear();
    if (!drafted.empty()) retrieved_.push_back({std::move(drafted), 0, -1, -1, CandidateSource::Draft});
    for (int32_t t : alternatives) retrieved_.push_back({{t}, 0, -1, -1, CandidateSource::Draft});
    for (const RetrievedCandidate& c : retrieved_) layout.add_chain(c.ngram);
    return;
  }
  if (!uses_window() && o_.strategy != Strategy::Corpus) return;
  const int32_t chain_length = o_.ngram - 1;
  retrieved_.clear();
  if (uses_window()) retrieved_ = pool_.retrieve(history, o_.guesses);
  add_corpus_candidates(history);
  for (const RetrievedCandidate& c : retrieved_) layout.add_chain(c.ngram);
  if (!uses_window()) return;
  if (o_.strategy == Strategy::Fafo) {
    // Pad to G candidates so every step has the same shape.
    const std::vector<int32_t> filler(static_cast<size_t>(chain_length), history.back());
    while (static_cast<int32_t>(layout.chains().size()) < o_.guesses) layout.add_chain(filler, /*padding=*/true);
  }
  layout.add_window(*window_, o_.strategy == Strategy::Fafo ? PrefixView::Compressed : PrefixView::Full);
}

void StrategyState::add_corpus_candidates(const std::vector<int32_t>& history) {
  const size_t wanted = static_cast<size_t>(std::max(o_.guesses, 0));
  if (!corpus_ || retrieved_.size() >= wanted) return;
  const CorpusMatch match = corpus_->longest_suffix(history, o_.corpus_max_suffix);
  if (match.length == 0) return;
  const size_t chain_length = static_cast<size_t>(o_.ngram - 1);
  for (CorpusContinuation& c : corpus_->continuations(match, o_.ngram - 1, static_cast<int32_t>(wanted))) {
    if (retrieved_.size() >= wanted) break;
    if (c.tokens.size() != chain_length) continue;  // the corpus ends first: every chain has N - 1 tokens
    const bool duplicate = std::any_of(retrieved_.begin(), retrieved_.end(),
                                       [&](const RetrievedCandidate& r) { return r.ngram == c.tokens; });
    if (!duplicate) retrieved_.push_back({std::move(c.tokens), match.length, -1, -1, CandidateSource::Corpus});
  }
}

void StrategyState::update(const StepLayout& layout, int32_t input, const std::vector<int32_t>& emitted,
                           const std::vector<int32_t>& history, int32_t step) {
  if (o_.strategy == Strategy::Jacobi) {
    // Jacobi update: the predictions after the accepted prefix become the new guesses.
    const auto& rows = layout.chains().front().rows;
    std::vector<int32_t> next;
    for (size_t i = emitted.size(); i <= rows.size(); ++i) next.push_back(layout.argmax(rows[i - 1]));
    guesses_ = next;
    fill_guesses(history);
    return;
  }
  if (!uses_window()) return;
  new_row_.clear();
  for (int32_t row : layout.window_output_rows()) new_row_.push_back(layout.argmax(row));
  if (window_->warmed_up())
    for (int32_t c = 0; c < window_->columns(); ++c)
      pool_.add(window_->key_context(c, input), window_->ngram(c, new_row_[static_cast<size_t>(c)]), step, c);
  window_->shift(new_row_, input);
  for (size_t extra = 1; extra < emitted.size(); ++extra) window_->shift_recycled(emitted[extra - 1]);
}

void StrategyState::restart(const std::vector<int32_t>& history) {
  if (window_) window_->init_from(history, rng_);
  if (o_.strategy == Strategy::Jacobi) {
    guesses_.clear();
    fill_guesses(history);
  }
}

void StrategyState::fill_guesses(const std::vector<int32_t>& source) {
  std::uniform_int_distribution<size_t> pick(0, source.size() - 1);
  while (static_cast<int32_t>(guesses_.size()) < o_.window) guesses_.push_back(source[pick(rng_)]);
}

void StrategyState::seed_pool(const std::vector<int32_t>& prompt) {
  const size_t n = static_cast<size_t>(o_.ngram - 1);
  for (size_t i = 0; i + n < prompt.size(); ++i) {
    const std::vector<int32_t> context(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(i + 1));
    const std::vector<int32_t> ngram(prompt.begin() + static_cast<std::ptrdiff_t>(i + 1),
                                     prompt.begin() + static_cast<std::ptrdiff_t>(i + 1 + n));
    pool_.add(context, ngram);
  }
}

}  // namespace fafo
