// What `fafo bench` measures on one backend and device, and a run over several
// (`--devices`): the data the tables, the report files (bench_report.h), the chart
// (bench_chart.h) and the studio's Bench view all read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fafo::bench {

// Mean and sample standard deviation of repeated measurements.
struct Measure {
  double mean = 0, sd = 0;
};

// One point of the step-cost curve: a forward pass of T tokens after a 128-token context.
struct StepCost {
  int32_t T = 0;
  Measure ms;  // milliseconds per step
  // On a layer split: the mean milliseconds of each device's part of the step
  // (DeviceResult::split_devices' order; a crossing's read-back in the sender's part, its
  // write in the receiver's). Empty on one device.
  std::vector<double> device_ms = {};
  // A mixture-of-experts model: the expert products one step ran per layer (a token
  // runs n_expert_used; a step's rows run each expert one of them chose). 0: dense.
  double experts_per_layer = 0;
};

// One decoding strategy over the same prompts (greedy).
struct StrategyRow {
  std::string strategy;  // "ar", "jacobi", "lookahead", "fafo"
  int32_t window = 0, ngram = 0, guesses = 0, lookback = 0;
  int64_t tokens = 0, steps = 0;
  int32_t step_tokens = 0;  // the most tokens one of its steps holds (max_step_tokens); 0: auto's vary
  double tau = 0;           // tokens per step
  double tokens_per_s = 0;
  double speedup = 0;       // tokens_per_s over ar's in the same run (0: no ar row)
  int32_t ids_equal_ar = 0;  // prompts whose ids equal ar's
  int32_t prompts = 0;
};

// Everything measured on one backend and device.
struct DeviceResult {
  std::string label;        // short, unique in a run: "cpu", "vulkan:0"; table rows and chart legend
  std::string backend;      // the registry's name: "cpu", "reference", "vulkan"
  std::string device;       // the device's name ("llvmpipe (LLVM 15.0.6, 256 bits)", the CPU's model)
  std::string description;  // the backend's one-line description of itself
  int32_t threads = 0;      // CPU threads (host backends)
  bool warmup = false;      // an unmeasured prompt step and token ran before pp and tg
  std::string kv_type;             // the KV cache's type ("f32", "q8_0")
  double kv_bytes_per_token = 0;   // its bytes for one token, every layer's keys and values but the rings'
  double kv_ring_bytes = 0;        // the sliding-window layers' rings, whatever the context (0: none)
  int32_t depth = 0;               // tokens in the cache before pp and tg (BenchConfig::depth)
  int32_t pp_tokens = 0;    // 0: prompt processing not measured
  Measure pp;               // tokens/s
  int32_t tg_tokens = 0;    // 0: generation not measured
  Measure tg;               // tokens/s
  double weight_bytes_per_token = 0;
  double effective_gb_per_s = 0;  // weight bytes read per second of generation
  std::vector<StepCost> step_cost;
  std::vector<std::string> split_devices;  // a layer split's devices in layer order ("cpu", "vulkan"); empty: one
  std::vector<StrategyRow> strategies;
  nlohmann::json profile;   // --profile's per-kernel tables (null when not asked for)
  std::string error;        // not empty: this device could not be measured, and why
};

// A run of the same tests on one model over one or more devices.
struct BenchReport {
  std::string model;  // the file's name
  std::vector<DeviceResult> devices;
};

}  // namespace fafo::bench
