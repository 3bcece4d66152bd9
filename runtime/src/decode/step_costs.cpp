// The step-cost curve t(T) of --strategy auto (fafo/auto_strategy.h): interpolation,
// plausibility, and its measurement on the model itself.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "fafo/auto_strategy.h"
#include "fafo/sequence.h"
#include "fafo/progress.h"

namespace fafo {

double StepCosts::at(int32_t T) const {
  if (sizes.empty() || sizes.size() != seconds.size()) throw std::logic_error("StepCosts: no measurements");
  if (T <= sizes[0]) return seconds[0];
  if (T >= sizes.back()) return seconds.back();  // beyond: a lower bound, never extrapolated
  size_t i = 1;
  while (sizes[i] < T) ++i;
  const double x0 = sizes[i - 1], x1 = sizes[i], y0 = seconds[i - 1], y1 = seconds[i];
  return y0 + (y1 - y0) * (T - x0) / (x1 - x0);
}

bool StepCosts::measured(int32_t T) const { return std::find(sizes.begin(), sizes.end(), T) != sizes.end(); }

std::string StepCosts::invalid_reason() const {
  if (sizes.empty()) return "no points";
  if (sizes.size() != seconds.size()) return "sizes and times differ in count";
  if (!spread.empty() && spread.size() != sizes.size()) return "sizes and spreads differ in count";
  if (sizes[0] != 1) return "the first size is not 1";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (!(seconds[i] > 0) || !std::isfinite(seconds[i])) return "a time is not positive and finite";
    if (!spread.empty() && !(spread[i] >= 0 && std::isfinite(spread[i]))) return "a spread is not finite and >= 0";
    if (i > 0 && sizes[i] <= sizes[i - 1]) return "the sizes do not increase";
  }
  return "";
}

std::string StepCosts::implausible_reason(double tolerance) const {
  if (std::string why = invalid_reason(); !why.empty()) return why;
  char buf[192];
  constexpr double kRounding = 1e-12;  // make_plausible's bounds, as rounded
  for (size_t i = 1; i < sizes.size(); ++i) {
    const double ratio = seconds[i] / seconds[i - 1], most = static_cast<double>(sizes[i]) / sizes[i - 1];
    if (ratio < (1 - tolerance) * (1 - kRounding)) {
      std::snprintf(buf, sizeof buf, "t(%d) is %.2f t(%d): a larger step cannot cost less", sizes[i], ratio, sizes[i - 1]);
      return buf;
    }
    if (ratio > most * (1 + tolerance) * (1 + kRounding)) {
      std::snprintf(buf, sizeof buf, "t(%d) is %.2f t(%d), more than the %.2g steps of %d tokens it could be run as", sizes[i],
                    ratio, sizes[i - 1], most, sizes[i - 1]);
      return buf;
    }
  }
  return "";
}

void StepCosts::make_plausible(double tolerance) {
  const std::vector<double> measured = seconds;
  // A larger step measured cheaper than a smaller one: the smaller one's time comes down
  // (timing noise only ever slows a step), from the end backwards...
  for (size_t i = sizes.size() - 1; i-- > 0;) seconds[i] = std::min(seconds[i], seconds[i + 1]);
  // ...then no step above what it would cost as smaller steps, from the start.
  for (size_t i = 1; i < sizes.size(); ++i)
    seconds[i] = std::min(seconds[i], seconds[i - 1] * sizes[i] / sizes[i - 1]);
  for (size_t i = 0; i < sizes.size(); ++i)
    if (std::abs(seconds[i] - measured[i]) > tolerance * measured[i]) ++bounded;
}

std::string StepCosts::describe() const {
  if (!invalid_reason().empty()) return "no step costs";
  std::string s = "t(T)/t(1):";
  char buf[64];
  for (size_t i = 1; i < sizes.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s %d %.2f", i > 1 ? "," : "", sizes[i], seconds[i] / seconds[0]);
    s += buf;
    if (!spread.empty()) {
      // The ratio's spread: its two medians' spreads added.
      std::snprintf(buf, sizeof buf, " +-%.0f%%", 100 * (spread[i] + spread[0]));
      s += buf;
    }
  }
  if (sizes.size() == 1) s += " one point";
  if (bounded > 0) {
    std::snprintf(buf, sizeof buf, "; %d point%s moved into t(a) <= t(b) <= (b/a) t(a)", bounded, bounded == 1 ? "" : "s");
    s += buf;
  }
  return s + (source.empty() ? "" : " (" + source + ")");
}

namespace {

// The median and half the interquartile range over the median of some timings.
std::pair<double, double> median_and_spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  const double q1 = v[(n - 1) / 4], q3 = v[n - 1 - (n - 1) / 4];
  return {median, median > 0 ? (q3 - q1) / 2 / median : 0.0};
}

}  // namespace

StepCosts time_step_costs(const std::vector<int32_t>& sizes, const std::function<double(int32_t)>& time_step,
                          int32_t max_emitted, const StepTimingOptions& options) {
  if (sizes.empty() || sizes[0] != 1) throw std::invalid_argument("time_step_costs: the sizes must start at 1");
  std::map<int32_t, std::vector<double>> samples;
  StepCosts costs;
  costs.source = "measured";
  auto settle = [&](size_t i) {
    const auto [median, spread] = median_and_spread(samples[costs.sizes[i]]);
    costs.seconds[i] = median;
    costs.spread[i] = spread;
  };
  // `rounds` steps of T, each after one of 1 token (whose timings join t(1)'s).
  // A timer's zero or garbage is a nanosecond: the curve stays a curve.
  auto timed = [&](int32_t T) {
    const double t = time_step(T);
    return t > 1e-9 && std::isfinite(t) ? t : 1e-9;
  };
  auto time_rounds = [&](int32_t T, int32_t rounds) {
    for (int32_t r = 0; r < rounds; ++r) {
      if (T != 1) samples[1].push_back(timed(1));
      samples[T].push_back(timed(T));
    }
  };
  // Each size: one untimed step (pipelines, caches), whose time sets how many timed
  // rounds fit in options.seconds_per_size, between min_rounds and rounds.
  std::map<int32_t, int32_t> rounds_of;
  auto warm_up = [&](int32_t T) {
    const double t = time_step(T);
    const double fit = t > 0 && std::isfinite(t) ? std::floor(options.seconds_per_size / t) : options.rounds;
    rounds_of[T] = static_cast<int32_t>(std::clamp(fit, static_cast<double>(options.min_rounds), static_cast<double>(options.rounds)));
  };
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int32_t T = sizes[i];
    if (i > 0 && T <= sizes[i - 1]) throw std::invalid_argument("time_step_costs: the sizes must increase");
    warm_up(T);
    time_rounds(T, rounds_of[T]);
    costs.sizes.push_back(T);
    costs.seconds.push_back(0);
    costs.spread.push_back(0);
    settle(0);
    settle(i);
    // Against its neighbour: timed again, both, while implausible.
    for (int32_t again = 0; i > 0 && again < options.remeasures; ++again) {
      StepCosts pair;
      pair.sizes = {costs.sizes[i - 1], T};
      pair.seconds = {costs.seconds[i - 1], costs.seconds[i]};
      if (pair.implausible_reason(options.tolerance).empty()) break;
      if (i - 1 > 0) time_rounds(costs.sizes[i - 1], rounds_of[costs.sizes[i - 1]]);
      time_rounds(T, rounds_of[T]);
      for (size_t k = 0; k <= i; ++k) settle(k);
    }
    // On the curve as it will be kept (bounded), so that a point the bounds pull below
    // the limit does not end the measurement.
    StepCosts bounded = costs;
    bounded.make_plausible(options.tolerance);
    if (bounded.relative(T) > max_emitted) break;
  }
  costs.make_plausible(options.tolerance);
  return costs;
}

StepCosts measure_step_costs(Sequence& model, int32_t max_emitted, const std::vector<int32_t>& extra_sizes) {
  // The candidates' sizes (each step costs time: on lavapipe a 24-token step takes a
  // tenth of a second), else powers of two.
  std::vector<int32_t> sizes = extra_sizes;
  sizes.push_back(1);
  if (extra_sizes.empty())
    for (int32_t T = 2; T <= 64; T *= 2) sizes.push_back(T);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  std::erase_if(sizes, [&](int32_t T) { return T < 1 || model.n_past() + T > model.n_ctx() || T > model.max_logit_rows(); });
  if (sizes.empty() || sizes[0] != 1) return {};  // a full context: no step fits
  // Steps of T tokens after what the model holds, never committed (the slots they write
  // are past the context and rewritten by the next real step). Every row wants logits,
  // as in a multi-token step; like greedy decoding, only each row's argmax is read back.
  std::mt19937 rng(7);
  const int32_t vocab = model.config().n_vocab;
  // Reported as the sizes reached (slow devices take seconds; it runs before any text).
  ProgressTask progress("measuring step costs for --strategy auto", sizes.size());
  std::set<int32_t> reached;
  auto run = [&](int32_t T) {
    if (reached.insert(T).second) progress.set_done(reached.size() - 1);
    progress.tick();
    std::vector<int32_t> tokens(static_cast<size_t>(T));
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    StepBatch b = StepBatch::causal(tokens, model.n_past(), /*logits_for_all=*/true);
    const auto t0 = std::chrono::steady_clock::now();
    model.forward_argmax(b);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  StepCosts costs = time_step_costs(sizes, run, max_emitted);
  costs.context = model.n_past();
  progress.set_done(sizes.size());
  progress.finish();
  return costs;
}

}  // namespace fafo
