// The step-cost curve t(T) of --strategy auto (fafo/auto_strategy.h): interpolation, and
// its measurement on the model itself.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <vector>

#include "fafo/auto_strategy.h"
#include "fafo/model.h"

namespace fafo {

double StepCosts::at(int32_t T) const {
  if (sizes.empty() || sizes.size() != seconds.size()) throw std::logic_error("StepCosts: no measurements");
  if (sizes.size() == 1) return seconds[0] * T / sizes[0];
  if (T <= sizes[0]) return seconds[0];
  size_t i = 1;
  while (i + 1 < sizes.size() && sizes[i] < T) ++i;
  // The segment [i - 1, i] holds T, or is the last one (extrapolated along its slope).
  const double x0 = sizes[i - 1], x1 = sizes[i], y0 = seconds[i - 1], y1 = seconds[i];
  // Never below the last measurement beyond it, whatever the last segment's slope.
  const double t = y0 + (y1 - y0) * (T - x0) / (x1 - x0);
  return T > sizes.back() ? std::max(t, seconds.back()) : t;
}

std::string StepCosts::invalid_reason() const {
  if (sizes.empty()) return "no points";
  if (sizes.size() != seconds.size()) return "sizes and times differ in count";
  if (sizes[0] != 1) return "the first size is not 1";
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (!(seconds[i] > 0) || !std::isfinite(seconds[i])) return "a time is not positive and finite";
    if (i > 0 && sizes[i] <= sizes[i - 1]) return "the sizes do not increase";
  }
  return "";
}

std::string StepCosts::describe() const {
  if (!invalid_reason().empty()) return "no step costs";
  std::string s = "t(T)/t(1):";
  char buf[48];
  for (size_t i = 1; i < sizes.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s %d %.2f", i > 1 ? "," : "", sizes[i], seconds[i] / seconds[0]);
    s += buf;
  }
  if (sizes.size() == 1) s += " one point";
  return s + (source.empty() ? "" : " (" + source + ")");
}

StepCosts measure_step_costs(Model& model, int32_t max_emitted) {
  // Steps of T tokens after what the model holds, never committed (the slots they write
  // are past the context and rewritten by the next real step). Every row wants logits,
  // as in a multi-token step; like greedy decoding, only each row's argmax is read back.
  std::mt19937 rng(7);
  const int32_t vocab = model.config().n_vocab;
  auto run = [&](int32_t T) {
    std::vector<int32_t> tokens(static_cast<size_t>(T));
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    StepBatch b = StepBatch::causal(tokens, model.n_past(), /*logits_for_all=*/true);
    const auto t0 = std::chrono::steady_clock::now();
    model.forward_argmax(b);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  StepCosts costs;
  costs.source = "measured";
  run(1);  // warm-up: pipelines, caches
  for (int32_t T = 1; T <= 64; T *= 2) {
    if (model.n_past() + T > model.n_ctx() || T > model.max_logit_rows()) break;
    // A larger step never counts as cheaper than a smaller one (timing noise).
    const double seconds = std::max(std::min(run(T), run(T)), costs.seconds.empty() ? 0.0 : costs.seconds.back());
    costs.sizes.push_back(T);
    costs.seconds.push_back(seconds);
    // Larger steps cost more still: once a step costs more than the most tokens any
    // candidate emits, none of them can pay, and the rest is extrapolated.
    if (costs.relative(T) > max_emitted) break;
  }
  return costs;
}

}  // namespace fafo
