// Fuzz target: a `fafo run --trace` recording (JSON lines) replayed as fafo-studio reads
// it. Malformed input must be a JSON error or std::invalid_argument, nothing else; a
// trace that parses must survive writing back and reading again.
#include <sstream>

#include <nlohmann/json.hpp>

#include "fafo/step_trace_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  for (std::string line; std::getline(in, line);) {
    try {
      const fafo::StepTrace t = fafo::step_trace_from_json(nlohmann::json::parse(line));
      const nlohmann::json again = fafo::step_trace_to_json(t);
      if (fafo::step_trace_to_json(fafo::step_trace_from_json(again)) != again) __builtin_trap();
    } catch (const nlohmann::json::exception&) {
    } catch (const std::invalid_argument&) {
    }
  }
  return 0;
}
