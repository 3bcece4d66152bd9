// `--strategy auto`: choosing, step by step, between plain decoding and multi-token
// strategies from what a step costs on this device and what each strategy yields.
//
// The cost model is the step-cost curve t(T) (seconds for a forward pass of T tokens,
// measured on the model itself); the yield is the tokens a strategy emits per step,
// measured live. A candidate (a strategy with its W, N, G) emits at most N tokens per
// step, so one whose t(T) exceeds N t(1) can never beat plain decoding, and one whose
// t(T) exceeds N t(1) / 2 would need yields that chat text does not give: such
// candidates are never tried, and on a device where nothing pays auto is plain decoding
// from the first step.
// The others are tried for a few steps each, then the one of most expected tokens per
// second runs, and the runners-up are tried again now and then, since what a text
// repeats changes as it goes. Every step is verified as always, so switching at any
// step keeps the output token-identical to plain decoding.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fafo/decoding.h"

namespace fafo {

// t(T): measured points (T ascending, T = 1 first; each the median of several timed
// steps), linear between them. Beyond the last point the curve is not extrapolated:
// at() gives the last point's time there, a lower bound (a larger step never costs
// less), and measured() says which sizes were timed.
struct StepCosts {
  std::vector<int32_t> sizes;
  std::vector<double> seconds;
  // Per point, how far the timed steps scattered: half their interquartile range over
  // the median (0.05: +-5 %); empty when unknown (a curve given by hand).
  std::vector<double> spread;
  // Points make_plausible moved by more than its tolerance (timing noise no median and
  // no re-measuring removed, or kernels whose cost per token grows with T).
  int32_t bounded = 0;
  // The context the steps were timed after (the model's n_past then): a one-token step
  // costs more after a longer context, which follow_plain_steps must not take for a
  // changed machine.
  int32_t context = 0;
  std::string source;  // where it came from, for messages: "measured", or the cache file it was read from
  bool empty() const { return sizes.empty(); }
  // Throws std::logic_error when empty.
  double at(int32_t T) const;
  double relative(int32_t T) const { return at(T) / at(1); }
  bool measured(int32_t T) const;
  // Why these points cannot be a curve (sizes not starting at 1 or not increasing, times
  // not positive and finite, counts that differ), or "" when they can.
  std::string invalid_reason() const;
  // Why these points cannot be a device's costs, or "": a step of T tokens costs at
  // least a step of fewer and at most as much as running it as several smaller steps,
  // so between neighbours t(a) <= t(b) <= (b / a) t(a) (a < b), within `tolerance`
  // (0.1: 10 %) for timing noise.
  std::string implausible_reason(double tolerance = 0.1) const;
  // Moves every point into those bounds exactly: a point above a later one comes down to
  // it (noise only slows steps), then a point above (b/a) t(a) comes down to that;
  // counts in `bounded` the points moved by more than `tolerance`.
  void make_plausible(double tolerance = 0.1);
  // One line for messages: "t(T)/t(1): 2 1.02 +-3%, 4 1.10 +-1% (SOURCE)", only the
  // measured points (and, when make_plausible moved some, how many).
  std::string describe() const;
};

// How measure_step_costs times a curve.
struct StepTimingOptions {
  // Timed steps per size, medians taken: as many as fit in seconds_per_size by the
  // size's untimed first step, between min_rounds and rounds.
  int32_t rounds = 5;
  int32_t min_rounds = 3;
  double seconds_per_size = 0.1;
  int32_t remeasures = 1;  // extra rounds for a point implausible against its neighbour
  double tolerance = 0.1;  // see StepCosts::implausible_reason
};

// A strategy and its parameters as auto may run it, and the most tokens one of its
// steps holds (its T).
struct AutoCandidate {
  DecodingOptions options;  // strategy Ar: plain decoding
  int32_t step_tokens = 1;
  std::string label() const;  // "ar", "fafo W8 N5 G8", "corpus N5 G2"
  // The most tokens one step can emit: N (the input's successor and a chain of N - 1).
  int32_t max_emitted() const { return options.strategy == Strategy::Ar ? 1 : options.ngram; }
};

struct AutoOptions {
  // Steps each viable candidate runs before it is judged, after its window's warm-up (its
  // first N - 1 steps, whose yield is not counted: the window guesses nothing before).
  int32_t trial_steps = 4;
  int32_t revisit_every = 64;    // then every this many steps the best other candidate runs...
  int32_t revisit_steps = 4;     // ...for this many steps
  double smoothing = 0.1;        // weight of a new step in a candidate's running yield
  // A candidate is tried only if it would pay emitting this fraction of its most tokens
  // per step (N): t(T) < fraction N t(1). 1 admits every candidate that could ever pay;
  // yields on chat text are far below N, so trials of the others cost and never repay.
  double viable_fraction = 0.5;
  bool rotate = false;           // tests: every candidate in turn, one step each
  // Probes of candidates the costs rule out (see AutoController::time_step): probe_steps
  // steps of the one nearest to paying, at most probe_overhead of the time in all (0.02:
  // 2 %), and never more often than every probe_every steps.
  int32_t probe_steps = 4;
  double probe_overhead = 0.02;
  int32_t probe_every = 256;
  // A timed step slower than a candidate's running cost moves it up by cost_rate times
  // its log ratio, clipped to cost_clip (one 50x spike: +5 %); a faster one moves it down
  // by cost_fall times its log ratio (timing noise only ever slows a step).
  double cost_rate = 0.1;
  double cost_clip = 0.5;
  double cost_fall = 0.5;
};

// What a controller learned (steps run and running yield per candidate label), kept by
// the model between generations so that trials are not repeated for every prompt.
struct AutoMemory {
  // What the yields were measured under (greedy or the sampler's settings, the KV
  // policy): the decoding loop recalls a memory only under the same.
  std::string context;
  std::vector<std::string> labels;
  std::vector<int64_t> steps;
  std::vector<double> yields;
  // Per label, its running cost per step and how many of its steps were timed
  // (AutoController::time_step), and plain decoding's: a later generation starts from
  // what the machine did lately, not from the curve.
  std::vector<double> costs;
  std::vector<int64_t> timed;
  double plain_cost = 0;
  int64_t plain_timed = 0;
};

// The decision of one step, for logs, --json and StepTrace.
struct AutoDecision {
  int32_t candidate = 0;  // index into the controller's candidates (0: plain decoding)
  std::string reason;     // "trial", "best", "revisit", "nothing pays", "probe", "rotate"
  // The candidate ran before but not in the previous step: its window's guesses are for
  // a place the text has left, so the decoding loop starts it afresh, and its next N - 1
  // steps (for a 2D window; none for corpus drafting) count as warm-up, not as its yield.
  bool restart = false;
};

class AutoController {
 public:
  // candidates[0] must be plain decoding. Throws std::invalid_argument otherwise or when
  // `costs` is empty.
  AutoController(StepCosts costs, std::vector<AutoCandidate> candidates, AutoOptions options = {});

  // Starts from what an earlier controller learned (candidates matched by label).
  void recall(const AutoMemory& memory);
  AutoMemory memory() const;

  // The candidate for the next step.
  AutoDecision choose();
  // After a step that ran candidate c and emitted `emitted` tokens.
  void observe(int32_t c, int32_t emitted);
  // After a step of candidate c that held `tokens` tokens (a full one: c's step size, or
  // fewer when its pool held fewer chains; plain decoding: 1) and took `seconds`. Each
  // candidate's cost per step starts from the curve and follows these timings (a
  // running estimate robust to slow outliers, see AutoOptions::cost_rate), so the choice
  // follows a machine whose costs change. Once steps are timed, a candidate the costs
  // rule out runs a few steps now and then (a "probe", at most AutoOptions::probe_overhead
  // of the time) so that its cost is known again if the machine changed, and plain
  // decoding is among the revisits while another candidate is best.
  // `context`: the model's n_past before the step (-1: unknown); plain_step_median()
  // counts only plain steps within 16 tokens past the curve's own context (or unknown).
  void time_step(int32_t c, int32_t tokens, double seconds, int32_t context = -1);
  // Never runs candidate c (> 0) from now on: the decoding loop excludes FAFO's shapes
  // when it did not give the KV cache a compressed region for their fumble rows.
  void exclude(int32_t c);
  // The median of the last 64 one-token steps of plain decoding this controller timed
  // near the curve's context (see time_step; 0 before any), and how many that is.
  double plain_step_median() const;
  int64_t plain_steps_timed() const { return static_cast<int64_t>(plain_times_.size()); }  // at most 64

  const std::vector<AutoCandidate>& candidates() const { return candidates_; }
  const StepCosts& costs() const { return costs_; }
  bool viable(int32_t c) const { return viable_[static_cast<size_t>(c)]; }
  // Expected tokens per second relative to plain decoding (1 for plain; 0 untried).
  double relative_speed(int32_t c) const;
  // Candidate c's cost per step now, in seconds (the curve's, then followed by timings),
  // and how many of its steps were timed.
  double step_seconds(int32_t c) const { return cost_[static_cast<size_t>(c)]; }
  int64_t timed_steps(int32_t c) const { return timed_[static_cast<size_t>(c)]; }
  // One line: what runs and why, with the numbers.
  std::string explain() const;

 private:
  int32_t best_tried() const;
  void update_viability();
  int32_t probe_candidate() const;
  std::string cost_words(size_t c) const;

  StepCosts costs_;
  std::vector<AutoCandidate> candidates_;
  AutoOptions options_;
  std::vector<bool> viable_;
  std::vector<int64_t> warm_up_;  // per candidate: warm-up steps still to run
  std::vector<bool> started_;     // per candidate: chosen at least once
  std::vector<int64_t> steps_;    // per candidate, counted after the warm-up
  std::vector<double> yield_;     // running tokens per step
  std::vector<double> cost_;      // per candidate: seconds per step (see time_step)
  std::vector<int64_t> timed_;    // per candidate: steps timed
  std::vector<bool> excluded_;     // per candidate: never runs (exclude)
  int64_t last_probe_ = 0;        // the step the last probe started
  static constexpr size_t kPlainTimes = 64;
  // How far past the curve's context a plain step still counts for plain_step_median: a
  // one-token step's attention grows with the context (stories260K's t(1) doubles
  // within ~50 tokens).
  static constexpr int32_t kNearContext = 16;
  std::vector<double> plain_times_;  // the last kPlainTimes plain steps' times, a ring
  size_t plain_next_ = 0;
  int32_t revisits_ = 0;
  bool any_timed_ = false;        // time_step was called
  int32_t probing_ = -1;          // the candidate being probed, and until which step
  int64_t probe_until_ = 0;
  int64_t step_ = 0;
  int32_t revisiting_ = -1;       // the candidate being revisited, and until which step
  int64_t revisit_until_ = 0;
  AutoDecision last_;
};

class Sequence;

// Times a curve over `sizes` (ascending, 1 first) with `time_step(T)`, the seconds of
// one step of T tokens: one untimed step of each size first (pipelines, caches), then
// 3 to 5 steps per size (see StepTimingOptions) alternating with steps of one token (so
// that a load that comes and goes weighs on both), medians and spreads; a point implausible against
// its neighbour (StepCosts::implausible_reason) is timed again, both of them, up to
// options.remeasures times, and what is still out of bounds is moved into them
// (StepCosts::make_plausible). Stops after a size whose step costs more than
// `max_emitted` one-token steps: no candidate emitting at most that many tokens can pay
// there or beyond.
StepCosts time_step_costs(const std::vector<int32_t>& sizes, const std::function<double(int32_t)>& time_step,
                          int32_t max_emitted, const StepTimingOptions& options = {});

// time_step_costs on `model`, after what it holds, without committing anything, over
// T = 1 and `extra_sizes` (the candidates' step sizes, so that their costs are measured,
// not interpolated; without them T = 1, 2, 4 ... 64), as far as the context and the
// device's logit rows allow. Under a second on a CPU for small models.
StepCosts measure_step_costs(Sequence& model, int32_t max_emitted, const std::vector<int32_t>& extra_sizes = {});

// The default grid auto chooses from: plain decoding, Lookahead and FAFO at a few
// (W, N, G) from small to large steps, and `with_corpus` (a corpus index is open:
// DecodingResources::corpus) corpus drafting at a few (N, G). step_tokens comes from
// max_step_tokens.
std::vector<AutoCandidate> default_auto_candidates(const DecodingOptions& base, bool with_corpus = false);
// The most tokens a step of these options holds (the input, G chains of N - 1, the window).
int32_t max_step_tokens(const DecodingOptions& o);

}  // namespace fafo
