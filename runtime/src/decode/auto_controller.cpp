// --strategy auto: the candidates and the controller that picks one per step
// (fafo/auto_strategy.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "decode/step_layout.h"
#include "decode/strategy_state.h"
#include "fafo/auto_strategy.h"

namespace fafo {

namespace {

// Steps before a candidate's guesses mean anything: a 2D window's N - 1 rows fill one a
// step; corpus drafting and Jacobi guess from the first step.
int64_t window_warm_up(const DecodingOptions& o) {
  return o.strategy == Strategy::Lookahead || o.strategy == Strategy::Fafo ? o.ngram - 1 : 0;
}

}  // namespace

std::string AutoCandidate::label() const {
  if (options.strategy == Strategy::Ar) return "ar";
  if (options.strategy == Strategy::Corpus)
    return "corpus N" + std::to_string(options.ngram) + " G" + std::to_string(options.guesses);
  return std::string(strategy_name(options.strategy)) + " W" + std::to_string(options.window) + " N" +
         std::to_string(options.ngram) + " G" + std::to_string(options.guesses);
}

int32_t max_step_tokens(const DecodingOptions& o) {
  if (o.strategy == Strategy::Ar) return 1;
  if (o.strategy == Strategy::Corpus) return 1 + o.guesses * (o.ngram - 1);  // G chains of N - 1 at most
  if (o.strategy == Strategy::Draft) return 1 + o.draft_n;
  const std::vector<int32_t> prompt(static_cast<size_t>(std::max(8, o.ngram + o.lookback)), 1);
  StrategyState state(o, prompt);
  StepLayout layout(static_cast<int32_t>(prompt.size()), 1);
  state.build(layout, prompt);
  // Lookahead verifies as many chains as the pool holds, up to G.
  const int32_t chain_tokens = o.strategy == Strategy::Jacobi ? 0 : o.ngram - 1;
  const int32_t missing = o.strategy == Strategy::Lookahead ? o.guesses - static_cast<int32_t>(layout.chains().size()) : 0;
  return layout.size() + std::max(0, missing) * chain_tokens;
}

std::vector<AutoCandidate> default_auto_candidates(const DecodingOptions& base) {
  std::vector<AutoCandidate> out;
  DecodingOptions plain = base;
  plain.strategy = Strategy::Ar;
  out.push_back({plain, 1});
  // From a step of a few tokens (cheap devices pay for little) to the defaults' 65.
  struct Shape {
    int32_t w, n, g;
  };
  for (const Strategy s : {Strategy::Lookahead, Strategy::Fafo})
    for (const Shape shape : {Shape{1, 3, 1}, Shape{2, 3, 2}, Shape{4, 4, 4}, Shape{8, 5, 8}}) {
      DecodingOptions o = base;
      o.strategy = s;
      o.window = shape.w;
      o.ngram = shape.n;
      o.guesses = shape.g;
      out.push_back({o, max_step_tokens(o)});
    }
  // With a corpus index (which lookahead and fafo above also draw from): its
  // continuations alone, in steps from a few tokens.
  if (base.corpus)
    for (const Shape shape : {Shape{1, 4, 1}, Shape{1, 5, 2}, Shape{1, 6, 4}}) {
      DecodingOptions o = base;
      o.strategy = Strategy::Corpus;
      o.ngram = shape.n;
      o.guesses = shape.g;
      out.push_back({o, max_step_tokens(o)});
    }
  return out;
}

AutoController::AutoController(StepCosts costs, std::vector<AutoCandidate> candidates, AutoOptions options)
    : costs_(std::move(costs)), candidates_(std::move(candidates)), options_(options) {
  if (costs_.empty()) throw std::invalid_argument("auto: no step costs measured");
  if (const std::string why = costs_.invalid_reason(); !why.empty())
    throw std::invalid_argument("auto: the step costs are not a curve: " + why);
  if (candidates_.empty() || candidates_[0].options.strategy != Strategy::Ar)
    throw std::invalid_argument("auto: the first candidate must be plain decoding");
  const size_t n = candidates_.size();
  viable_.assign(n, false);
  steps_.assign(n, 0);
  yield_.assign(n, 0.0);
  warm_up_.assign(n, 0);
  started_.assign(n, false);
  for (size_t c = 1; c < n; ++c) warm_up_[c] = window_warm_up(candidates_[c].options);
  viable_[0] = true;
  yield_[0] = 1.0;
  // A candidate can pay only if its best step (N tokens) beats N plain steps' cost; it is
  // tried only if it would pay at a fraction of that.
  for (size_t c = 1; c < n; ++c)
    viable_[c] = options_.viable_fraction * candidates_[c].max_emitted() * costs_.at(1) >
                 costs_.at(candidates_[c].step_tokens);
}

void AutoController::recall(const AutoMemory& memory) {
  for (size_t m = 0; m < memory.labels.size() && m < memory.steps.size() && m < memory.yields.size(); ++m)
    for (size_t c = 1; c < candidates_.size(); ++c)
      if (candidates_[c].label() == memory.labels[m]) {
        steps_[c] = memory.steps[m];
        yield_[c] = memory.yields[m];
      }
}

AutoMemory AutoController::memory() const {
  AutoMemory m;
  for (size_t c = 1; c < candidates_.size(); ++c) {
    m.labels.push_back(candidates_[c].label());
    m.steps.push_back(steps_[c]);
    m.yields.push_back(yield_[c]);
  }
  return m;
}

double AutoController::relative_speed(int32_t c) const {
  const size_t i = static_cast<size_t>(c);
  if (i == 0) return 1.0;
  if (steps_[i] == 0) return 0.0;
  return yield_[i] * costs_.at(1) / costs_.at(candidates_[i].step_tokens);
}

int32_t AutoController::best_tried() const {
  int32_t best = 0;
  for (size_t c = 1; c < candidates_.size(); ++c)
    if (viable_[c] && steps_[c] >= options_.trial_steps && relative_speed(static_cast<int32_t>(c)) > relative_speed(best))
      best = static_cast<int32_t>(c);
  return best;
}

AutoDecision AutoController::choose() {
  ++step_;
  AutoDecision d;
  if (options_.rotate) {
    d = {static_cast<int32_t>((step_ - 1) % static_cast<int64_t>(candidates_.size())), "rotate"};
    last_ = d;
    return d;
  }
  // Trials: each viable candidate runs trial_steps steps, cheapest step first.
  int32_t trial = -1;
  for (size_t c = 1; c < candidates_.size(); ++c)
    if (viable_[c] && steps_[c] < options_.trial_steps &&
        (trial < 0 || candidates_[c].step_tokens < candidates_[static_cast<size_t>(trial)].step_tokens))
      trial = static_cast<int32_t>(c);
  if (trial >= 0) {
    d = {trial, "trial"};
  } else if (revisiting_ >= 0 && step_ <= revisit_until_) {
    d = {revisiting_, "revisit"};
  } else {
    revisiting_ = -1;
    const int32_t best = best_tried();
    d = {best, best == 0 ? (std::count(viable_.begin() + 1, viable_.end(), true) == 0 ? "nothing pays" : "best")
                         : "best"};
    // Now and then the best of the others runs again: yields change along a text.
    if (options_.revisit_every > 0 && step_ % options_.revisit_every == 0) {
      int32_t other = -1;
      for (size_t c = 1; c < candidates_.size(); ++c)
        if (viable_[c] && static_cast<int32_t>(c) != best &&
            (other < 0 || relative_speed(static_cast<int32_t>(c)) > relative_speed(other)))
          other = static_cast<int32_t>(c);
      if (other >= 0) {
        revisiting_ = other;
        // Its window starts afresh: the warm-up, then the steps that count.
        revisit_until_ = step_ + window_warm_up(candidates_[static_cast<size_t>(other)].options) + options_.revisit_steps - 1;
        d = {other, "revisit"};
      }
    }
  }
  const size_t c = static_cast<size_t>(d.candidate);
  if (c > 0 && started_[c] && d.candidate != last_.candidate) {
    d.restart = true;
    warm_up_[c] = window_warm_up(candidates_[c].options);
  }
  started_[c] = true;
  last_ = d;
  return d;
}

void AutoController::observe(int32_t c, int32_t emitted) {
  if (c < 0 || static_cast<size_t>(c) >= candidates_.size()) throw std::out_of_range("auto: no such candidate");
  const size_t i = static_cast<size_t>(c);
  if (i == 0) return;  // plain decoding always emits one token
  if (warm_up_[i] > 0) {
    --warm_up_[i];
    return;
  }
  ++steps_[i];
  // The plain mean over the trial, then a running average that follows the text.
  const double w = steps_[i] <= options_.trial_steps ? 1.0 / static_cast<double>(steps_[i]) : options_.smoothing;
  yield_[i] += w * (static_cast<double>(emitted) - yield_[i]);
}

std::string AutoController::explain() const {
  const size_t c = static_cast<size_t>(last_.candidate);
  char buf[256];
  if (c == 0) {
    if (std::count(viable_.begin() + 1, viable_.end(), true) == 0) {
      // The cheapest multi-token candidate's bound, to say why nothing pays.
      size_t cheapest = 1;
      for (size_t i = 1; i < candidates_.size(); ++i)
        if (candidates_[i].step_tokens < candidates_[cheapest].step_tokens) cheapest = i;
      if (cheapest < candidates_.size())
        std::snprintf(buf, sizeof buf, "ar: no strategy can pay here (the cheapest, %s, costs t(%d)/t(1) = %.2f for at most %d tokens)",
                      candidates_[cheapest].label().c_str(), candidates_[cheapest].step_tokens,
                      costs_.relative(candidates_[cheapest].step_tokens), candidates_[cheapest].max_emitted());
      else
        std::snprintf(buf, sizeof buf, "ar: no other candidate");
      return buf;
    }
    std::snprintf(buf, sizeof buf, "ar (%s): no tried strategy beats plain decoding", last_.reason.c_str());
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%s (%s): %.2f tokens/step at t(%d)/t(1) = %.2f -> %.2fx plain decoding",
                candidates_[c].label().c_str(), last_.reason.c_str(), yield_[c], candidates_[c].step_tokens,
                costs_.relative(candidates_[c].step_tokens), relative_speed(static_cast<int32_t>(c)));
  return buf;
}

}  // namespace fafo
