// StepTrace <-> JSON, the format of `fafo run --trace FILE.jsonl` (one object per
// line) that fafo-studio replays.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "fafo/decoding.h"

namespace fafo {

nlohmann::json step_trace_to_json(const StepTrace& t);
// Throws nlohmann::json::exception / std::invalid_argument on malformed input.
StepTrace step_trace_from_json(const nlohmann::json& j);

}  // namespace fafo
