// AutoState: the step-cost curve and what auto learned, kept between generations.
#include "fafo/auto_state.h"

#include <string>
#include <utility>

namespace fafo {

void AutoState::set_step_costs(StepCosts costs) {
  if (step_cost_cache_ && costs.source == "measured") {
    const std::string why = step_cost_cache_->store(costs);
    costs.source = why.empty() ? "measured, kept in " + step_cost_cache_->file().string() : "measured (not kept: " + why + ")";
  }
  step_costs_ = std::move(costs);
}

void AutoState::set_step_cost_cache(std::optional<StepCostCache> cache) {
  step_cost_cache_ = std::move(cache);
  if (step_cost_cache_)
    if (std::optional<StepCosts> kept = step_cost_cache_->load()) step_costs_ = std::move(*kept);
}

}  // namespace fafo
