#include "trace_io.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "fafo/step_trace_json.h"

namespace fafo::studio {

TraceFile load_trace_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open the trace file");
  TraceFile file;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(line);
      file.steps.push_back(step_trace_from_json(j));
      if (file.model.empty() && j.contains("model") && j.at("model").is_string()) file.model = j.at("model").get<std::string>();
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ":" + std::to_string(line_no) + ": not a step trace: " + e.what());
    }
  }
  return file;
}

std::vector<StepTrace> load_trace_jsonl(const std::string& path) { return load_trace_file(path).steps; }

ReplayModel replay_model(const std::string& trace_path, const std::string& named, const std::string& default_model) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!named.empty()) {
    if (fs::is_regular_file(named, ec)) return {named, "named by the trace"};
    const fs::path beside = fs::path(trace_path).parent_path() / named;
    if (fs::path(named).is_relative() && fs::is_regular_file(beside, ec)) return {beside.string(), "named by the trace"};
  }
  const std::string reason = named.empty() ? "the trace names no model" : "the trace's model " + named + " is not there";
  if (default_model.empty()) return {"", reason + " and there is no default one: token ids only; -m picks one"};
  return {default_model, "the default: " + reason + "; -m picks another"};
}

namespace {

// The first id of `ids` past the vocabulary's last, or -1.
int64_t outside(const std::vector<int32_t>& ids, int32_t n_vocab) {
  for (int32_t id : ids)
    if (id >= n_vocab) return id;
  return -1;
}

}  // namespace

std::string trace_fit_problem(std::span<const StepTrace> steps, int32_t n_vocab, int32_t n_layer) {
  const std::string other = ": it was recorded with another model (-m picks it)";
  for (const StepTrace& t : steps) {
    if (t.kv_layers > 0 && n_layer > 0 && t.kv_layers != n_layer)
      return "the trace's steps have " + std::to_string(t.kv_layers) + " layers and the model " + std::to_string(n_layer) +
             other;
    if (n_vocab <= 0) continue;
    std::vector<const std::vector<int32_t>*> lists = {&t.accepted, &t.new_guesses};
    for (const auto& row : t.window_after) lists.push_back(&row);
    for (const CandidateTrace& c : t.candidates) lists.push_back(&c.tokens);
    for (const std::vector<int32_t>* ids : lists)
      if (const int64_t id = outside(*ids, n_vocab); id >= 0)
        return "the trace holds token id " + std::to_string(id) + ", outside the model's vocabulary of " +
               std::to_string(n_vocab) + other;
  }
  return "";
}

}  // namespace fafo::studio
