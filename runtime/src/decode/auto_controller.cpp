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
  StrategyState state(o, DecodingResources{}, prompt);
  StepLayout layout(static_cast<int32_t>(prompt.size()), 1);
  state.build(layout, prompt);
  // Lookahead verifies as many chains as the pool holds, up to G.
  const int32_t chain_tokens = o.strategy == Strategy::Jacobi ? 0 : o.ngram - 1;
  const int32_t missing = o.strategy == Strategy::Lookahead ? o.guesses - static_cast<int32_t>(layout.chains().size()) : 0;
  return layout.size() + std::max(0, missing) * chain_tokens;
}

std::vector<AutoCandidate> default_auto_candidates(const DecodingOptions& base, bool with_corpus) {
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
  if (with_corpus)
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
  cost_.assign(n, 0.0);
  timed_.assign(n, 0);
  excluded_.assign(n, false);
  for (size_t c = 1; c < n; ++c) warm_up_[c] = window_warm_up(candidates_[c].options);
  for (size_t c = 0; c < n; ++c) cost_[c] = costs_.at(c == 0 ? 1 : candidates_[c].step_tokens);
  yield_[0] = 1.0;
  update_viability();
}

void AutoController::update_viability() {
  // A candidate can pay only if its best step (N tokens) beats N plain steps' cost; it is
  // tried only if it would pay at a fraction of that.
  viable_[0] = true;
  for (size_t c = 1; c < candidates_.size(); ++c) {
    // A candidate none of whose steps were timed costs what the curve says relative to
    // plain decoding's timed cost: the curve gives the ratio, the timings the scale (a
    // one-token step after a longer context than the curve's costs more, and so would it).
    if (timed_[c] == 0) cost_[c] = cost_[0] * costs_.at(candidates_[c].step_tokens) / costs_.at(1);
    viable_[c] = !excluded_[c] && options_.viable_fraction * candidates_[c].max_emitted() * cost_[0] > cost_[c];
  }
}

void AutoController::exclude(int32_t c) {
  if (c <= 0 || static_cast<size_t>(c) >= candidates_.size()) throw std::out_of_range("auto: no such candidate to exclude");
  excluded_[static_cast<size_t>(c)] = true;
  update_viability();
}

void AutoController::recall(const AutoMemory& memory) {
  for (size_t m = 0; m < memory.labels.size() && m < memory.steps.size() && m < memory.yields.size(); ++m)
    for (size_t c = 1; c < candidates_.size(); ++c)
      if (candidates_[c].label() == memory.labels[m]) {
        steps_[c] = memory.steps[m];
        yield_[c] = memory.yields[m];
        if (m < memory.timed.size() && m < memory.costs.size() && memory.timed[m] > 0 && memory.costs[m] > 0) {
          timed_[c] = memory.timed[m];
          cost_[c] = memory.costs[m];
        }
      }
  if (memory.plain_timed > 0 && memory.plain_cost > 0) {
    timed_[0] = memory.plain_timed;
    cost_[0] = memory.plain_cost;
    any_timed_ = true;
  }
  update_viability();
}

AutoMemory AutoController::memory() const {
  AutoMemory m;
  for (size_t c = 1; c < candidates_.size(); ++c) {
    m.labels.push_back(candidates_[c].label());
    m.steps.push_back(steps_[c]);
    m.yields.push_back(yield_[c]);
    m.costs.push_back(cost_[c]);
    m.timed.push_back(timed_[c]);
  }
  m.plain_cost = cost_[0];
  m.plain_timed = timed_[0];
  return m;
}

double AutoController::plain_step_median() const {
  if (plain_times_.empty()) return 0;
  std::vector<double> v = plain_times_;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double AutoController::relative_speed(int32_t c) const {
  const size_t i = static_cast<size_t>(c);
  if (i == 0) return 1.0;
  if (steps_[i] == 0) return 0.0;
  return yield_[i] * cost_[0] / cost_[i];
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
  const bool revisit_running = revisiting_ >= 0 && step_ <= revisit_until_;
  const bool probe_running = probing_ >= 0 && step_ <= probe_until_;
  const int32_t probe = trial < 0 && !revisit_running && !probe_running ? probe_candidate() : -1;
  if (trial >= 0) {
    d = {trial, "trial"};
  } else if (revisit_running) {
    d = {revisiting_, "revisit"};
  } else if (probe_running) {
    d = {probing_, "probe"};
  } else if (probe >= 0) {
    probing_ = probe;
    probe_until_ = step_ + options_.probe_steps - 1;
    last_probe_ = step_;
    d = {probe, "probe"};
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
      // Every other revisit while another candidate is best is plain decoding's, when steps
      // are timed: its cost, which every candidate is weighed against, is timed again.
      if (best != 0 && any_timed_ && (other < 0 || revisits_ % 2 == 1)) other = 0;
      if (other >= 0) ++revisits_;
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
  if (last_.reason == "probe" && last_.candidate == c) return;  // a probe times a step; its window guessed nothing yet
  if (warm_up_[i] > 0) {
    --warm_up_[i];
    return;
  }
  ++steps_[i];
  // The plain mean over the trial, then a running average that follows the text.
  const double w = steps_[i] <= options_.trial_steps ? 1.0 / static_cast<double>(steps_[i]) : options_.smoothing;
  yield_[i] += w * (static_cast<double>(emitted) - yield_[i]);
}

void AutoController::time_step(int32_t c, int32_t tokens, double seconds, int32_t context) {
  if (c < 0 || static_cast<size_t>(c) >= candidates_.size()) throw std::out_of_range("auto: no such candidate");
  if (!(seconds > 0) || !std::isfinite(seconds) || tokens < 1) return;
  const size_t i = static_cast<size_t>(c);
  // A step smaller than the candidate's (fewer chains in its pool) counts at the
  // candidate's size, scaled along the curve.
  const int32_t full = i == 0 ? 1 : candidates_[i].step_tokens;
  const double sample = tokens == full ? seconds : seconds * costs_.at(full) / costs_.at(tokens);
  // In log: a running average. Timing noise makes steps slower, never faster than their
  // work: a slower step moves the cost up by a clipped small step (one 50x spike: +5 %; a
  // machine that stays slower: all the way in a few dozen steps), a faster one moves it
  // halfway down at once.
  const double x = std::log(sample / cost_[i]);
  cost_[i] *= std::exp(x > 0 ? options_.cost_rate * std::min(x, options_.cost_clip) : options_.cost_fall * x);
  ++timed_[i];
  any_timed_ = true;
  if (i == 0 && (context < 0 || context <= costs_.context + kNearContext)) {
    if (plain_times_.size() < kPlainTimes) {
      plain_times_.push_back(seconds);
    } else {
      plain_times_[plain_next_] = seconds;
      plain_next_ = (plain_next_ + 1) % kPlainTimes;
    }
  }
  update_viability();
}

int32_t AutoController::probe_candidate() const {
  if (!any_timed_) return -1;  // steps are not timed: a probe would learn nothing
  // The ruled-out candidate nearest to paying (its cost over the most it may cost), one
  // at a time, so that all probes together stay under the overhead.
  int32_t pick = -1;
  double nearest = 0;
  for (size_t c = 1; c < candidates_.size(); ++c) {
    if (viable_[c] || excluded_[c]) continue;
    const double over = cost_[c] / (options_.viable_fraction * candidates_[c].max_emitted() * cost_[0]);
    if (pick < 0 || over < nearest) {
      pick = static_cast<int32_t>(c);
      nearest = over;
    }
  }
  if (pick < 0) return -1;
  // Its probe's extra time over plain steps, spread over the interval since the last probe.
  const double extra = options_.probe_steps * std::max(0.0, cost_[static_cast<size_t>(pick)] / cost_[0] - 1);
  const double interval = std::max(static_cast<double>(options_.probe_every), std::ceil(extra / options_.probe_overhead));
  return static_cast<double>(step_ - last_probe_) < interval ? -1 : pick;
}

std::string AutoController::cost_words(size_t c) const {
  const int32_t T = candidates_[c].step_tokens;
  char buf[160];
  if (timed_[c] > 0) {
    std::snprintf(buf, sizeof buf, "%.2f one-token steps (%lld of its steps timed)", cost_[c] / cost_[0],
                  static_cast<long long>(timed_[c]));
  } else if (costs_.measured(T)) {
    const size_t p = static_cast<size_t>(std::find(costs_.sizes.begin(), costs_.sizes.end(), T) - costs_.sizes.begin());
    if (costs_.spread.empty())
      std::snprintf(buf, sizeof buf, "t(%d)/t(1) = %.2f", T, costs_.relative(T));
    else
      std::snprintf(buf, sizeof buf, "t(%d)/t(1) = %.2f +-%.0f%%", T, costs_.relative(T), 100 * (costs_.spread[p] + costs_.spread[0]));
  } else if (T > costs_.sizes.back()) {
    std::snprintf(buf, sizeof buf, "t(%d)/t(1) >= t(%d)/t(1) = %.2f", T, costs_.sizes.back(), costs_.relative(costs_.sizes.back()));
  } else {
    std::snprintf(buf, sizeof buf, "t(%d)/t(1) = %.2f (between measured sizes)", T, costs_.relative(T));
  }
  return buf;
}

std::string AutoController::explain() const {
  const size_t c = static_cast<size_t>(last_.candidate);
  char buf[384];
  if (c == 0) {
    if (std::count(viable_.begin() + 1, viable_.end(), true) == 0) {
      // The cheapest multi-token candidate, to say why nothing pays.
      size_t cheapest = 1;
      for (size_t i = 1; i < candidates_.size(); ++i)
        if (cost_[i] < cost_[cheapest]) cheapest = i;
      if (cheapest < candidates_.size())
        std::snprintf(buf, sizeof buf, "ar: no strategy can pay here (the cheapest, %s, a %d-token step, costs %s for at most %d tokens)",
                      candidates_[cheapest].label().c_str(), candidates_[cheapest].step_tokens, cost_words(cheapest).c_str(),
                      candidates_[cheapest].max_emitted());
      else
        std::snprintf(buf, sizeof buf, "ar: no other candidate");
      return buf;
    }
    if (last_.reason == "revisit" && best_tried() > 0) {
      const size_t best = static_cast<size_t>(best_tried());
      std::snprintf(buf, sizeof buf, "ar (revisit): plain decoding timed again beside the best, %s at %.2fx",
                    candidates_[best].label().c_str(), relative_speed(static_cast<int32_t>(best)));
      return buf;
    }
    std::snprintf(buf, sizeof buf, "ar (%s): no tried strategy beats plain decoding", last_.reason.c_str());
    return buf;
  }
  if (last_.reason == "probe") {
    std::snprintf(buf, sizeof buf, "%s (probe): a few steps of a strategy its costs rule out, timed again; it costs %s",
                  candidates_[c].label().c_str(), cost_words(c).c_str());
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%s (%s): %.2f tokens/step at %s -> %.2fx plain decoding", candidates_[c].label().c_str(),
                last_.reason.c_str(), yield_[c], cost_words(c).c_str(), relative_speed(static_cast<int32_t>(c)));
  return buf;
}

}  // namespace fafo
