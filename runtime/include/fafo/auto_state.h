// What `--strategy auto` keeps between generations on one sequence: the step-cost curve
// t(T) (measured for the model's weights, backend and cache type, and kept on disk
// between runs by a StepCostCache) and what its controller learned (AutoMemory), so
// that neither is measured again for every prompt. The curve is measured again when
// the machine no longer matches it: a kept file that is implausible
// (StepCosts::implausible_reason), or one-token steps that took, over a generation,
// more than 2x or less than 1/2 of its t(1) (follow_plain_steps). One per decoding run beside its
// sequence (open_model makes one for each OpenedModel); a generation reads and updates
// the one GenerationOptions::auto_state names. Not shared between threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "fafo/auto_strategy.h"
#include "fafo/step_cost_cache.h"

namespace fafo {

class AutoState {
 public:
  // The curve, once measured (or read from the cache); empty until then.
  const StepCosts& step_costs() const { return step_costs_; }
  // Keeps `costs`; a measured curve (source "measured") is also written to the
  // step-cost cache when one is set, and its source then says where (or why it could
  // not be).
  void set_step_costs(StepCosts costs);
  // The on-disk cache the curve is kept in between runs; a curve it holds becomes
  // step_costs().
  void set_step_cost_cache(std::optional<StepCostCache> cache);
  const std::optional<StepCostCache>& step_cost_cache() const { return step_cost_cache_; }
  // After a generation that timed `steps` one-token steps, `median` seconds the median
  // of the last of them: when at least 32 were timed and the median differs from the
  // curve's t(1) by more than 2x either way, the curve is dropped (and its cache file
  // removed), and the next generation, or run, measures it again (and says why in its
  // source). (2x: t(1) also grows with the context the steps attend to.)
  void follow_plain_steps(double median, int64_t steps);
  // Drops the curve (and its cache file) so that the next generation measures it again,
  // saying `why`.
  void forget_step_costs(const std::string& why);
  // Why the next measurement is made ("" when nothing was kept, or it is the first).
  const std::string& remeasure_reason() const { return remeasure_reason_; }
  // What the controller learned in earlier generations (steps and yields).
  AutoMemory& memory() { return memory_; }

 private:
  StepCosts step_costs_;
  std::optional<StepCostCache> step_cost_cache_;
  AutoMemory memory_;
  std::string remeasure_reason_;
};

}  // namespace fafo
