// Reading a `fafo run --trace FILE.jsonl` recording (one StepTrace JSON object per line),
// and which model a replay of it opens.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fafo/decoding.h"

namespace fafo::studio {

// A recorded trace: its steps, and the model file a line names in a "model" field ("":
// none; `fafo run --trace` writes no such field, so its traces name none).
struct TraceFile {
  std::vector<StepTrace> steps;
  std::string model;
};

// Throws std::runtime_error naming the file (and line) when it cannot be read or parsed.
TraceFile load_trace_file(const std::string& path);
std::vector<StepTrace> load_trace_jsonl(const std::string& path);

// The model a replay opens without -m, and why, in words ("named by the trace", "the
// default: the trace names no model; -m picks another", ...). `named`: the trace's
// model field, looked for as given and then beside the trace file; when it is not
// there (or there is none), `default_model`. `path` is empty when there is no model at
// all: the steps then show token ids.
struct ReplayModel {
  std::string path;
  std::string why;
};
ReplayModel replay_model(const std::string& trace_path, const std::string& named, const std::string& default_model);

// Why `steps` cannot have been recorded with a model of `n_vocab` tokens and `n_layer`
// layers (a token id outside the vocabulary, another layer count), or "" when they can.
std::string trace_fit_problem(std::span<const StepTrace> steps, int32_t n_vocab, int32_t n_layer);

}  // namespace fafo::studio
