// Reading a `fafo run --trace FILE.jsonl` recording (one StepTrace JSON object per line).
#pragma once

#include <string>
#include <vector>

#include "fafo/decoding.h"

namespace fafo::studio {

// Throws std::runtime_error naming the file (and line) when it cannot be read or parsed.
std::vector<StepTrace> load_trace_jsonl(const std::string& path);

}  // namespace fafo::studio
