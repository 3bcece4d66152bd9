#include "trace_io.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "fafo/step_trace_json.h"

namespace fafo::studio {

std::vector<StepTrace> load_trace_jsonl(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open the trace file");
  std::vector<StepTrace> traces;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      traces.push_back(step_trace_from_json(nlohmann::json::parse(line)));
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ":" + std::to_string(line_no) + ": not a step trace: " + e.what());
    }
  }
  return traces;
}

}  // namespace fafo::studio
