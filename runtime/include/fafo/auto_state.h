// What `--strategy auto` keeps between generations on one sequence: the step-cost curve
// t(T) (measured once for the model's weights, backend and cache type, and kept on disk
// between runs by a StepCostCache) and what its controller learned (AutoMemory), so
// that neither is measured again for every prompt. One per decoding run beside its
// sequence (open_model makes one for each OpenedModel); a generation reads and updates
// the one GenerationOptions::auto_state names. Not shared between threads.
#pragma once

#include <optional>

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
  // What the controller learned in earlier generations (steps and yields).
  AutoMemory& memory() { return memory_; }

 private:
  StepCosts step_costs_;
  std::optional<StepCostCache> step_cost_cache_;
  AutoMemory memory_;
};

}  // namespace fafo
