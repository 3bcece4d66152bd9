// AutoState: the step-cost curve and what auto learned, kept between generations.
#include "fafo/auto_state.h"

#include <cstdio>
#include <filesystem>
#include <system_error>
#include <string>
#include <utility>

namespace fafo {

void AutoState::set_step_costs(StepCosts costs) {
  if (costs.source == "measured") {
    std::string where;
    if (step_cost_cache_) {
      const std::string why = step_cost_cache_->store(costs);
      where = why.empty() ? ", kept in " + step_cost_cache_->file().string() : " (not kept: " + why + ")";
    }
    costs.source = (remeasure_reason_.empty() ? "measured" : "measured again: " + remeasure_reason_) + where;
    remeasure_reason_.clear();
  }
  step_costs_ = std::move(costs);
}

void AutoState::set_step_cost_cache(std::optional<StepCostCache> cache) {
  step_cost_cache_ = std::move(cache);
  if (!step_cost_cache_) return;
  std::string why;
  if (std::optional<StepCosts> kept = step_cost_cache_->load(&why)) {
    step_costs_ = std::move(*kept);
    remeasure_reason_.clear();
  } else if (!why.empty()) {
    remeasure_reason_ = why;
  }
}

void AutoState::follow_plain_steps(double median, int64_t steps) {
  if (step_costs_.empty() || steps < 32 || !(median > 0)) return;
  const double ratio = median / step_costs_.at(1);
  if (ratio <= 2 && ratio >= 0.5) return;
  char buf[160];
  std::snprintf(buf, sizeof buf, "one-token steps took %.2fx the kept t(1) over %lld steps", ratio, static_cast<long long>(steps));
  forget_step_costs(buf);
}

void AutoState::forget_step_costs(const std::string& why) {
  remeasure_reason_ = why;
  step_costs_ = StepCosts{};
  if (step_cost_cache_) {
    std::error_code ec;
    std::filesystem::remove(step_cost_cache_->file(), ec);  // gone or not: measured again either way
  }
}

}  // namespace fafo
