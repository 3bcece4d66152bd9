// Running `fafo bench`'s tests on one backend and device (run_device_bench), and
// resolving `--devices` into the backends and devices to run them on. The CLI prints
// the tables as they are measured; fafo-studio's Bench view runs the same off its UI
// thread and plots the results.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_result.h"
#include "fafo/decoding.h"
#include "fafo/kv_policy.h"
#include "fafo/open_model.h"

namespace fafo::bench {

// What to measure (the same on every device of a run).
struct BenchConfig {
  int repetitions = 3;
  // One unmeasured prompt step and generated token before pp and tg (as llama-bench
  // does): the first run otherwise pays for reading the weights in and the allocations.
  bool warmup = true;
  int32_t pp = 512;  // prompt-processing test length (0 = skip)
  int32_t tg = 128;  // generation test length (0 = skip)
  // Tokens already in the KV cache when pp and tg are measured (llama-bench's -d): pp
  // and tg at a long context. Filled once, unmeasured, before them.
  int32_t depth = 0;
  std::vector<int32_t> curve = {1, 2, 4, 8, 16, 32, 64, 128, 256};  // step sizes of t(T) (empty = skip)
  std::vector<std::string> prompts;  // strategies side by side over these (empty = skip)
  int32_t n_generate = 256;          // new tokens per prompt
  std::vector<std::string> strategies = {"ar", "auto", "jacobi", "lookahead", "fafo"};  // ar first
  DecodingOptions decoding;
  KvPolicyOptions kv;
  double peak_gbps = 0;  // > 0: tg also reports its fraction of this bandwidth
  bool profile = false;  // per-kernel device time of a one-token and a profile_tokens-token step
  int32_t profile_tokens = 64;
};

// Where a run reports as it goes: `print` gets each line of the tables (with its
// newline) as soon as it is measured; `cancelled` is asked between measurements and
// after every generated token.
struct BenchObserver {
  std::function<void(const std::string&)> print;
  std::function<bool()> cancelled;
};

// Thrown by run_device_bench when observer.cancelled() says so.
struct BenchCancelled : std::runtime_error {
  BenchCancelled() : std::runtime_error("benchmark cancelled") {}
};

// Why `strategies` cannot run side by side over prompts (they must start with ar, the
// reference the others are compared with); empty when they can or there are no prompts.
std::string strategies_problem(const std::vector<std::string>& strategies, bool with_prompts);

// Opens open.path on open.backend and measures config on it. Throws what open_model
// throws, std::runtime_error for prompts the strategies cannot run, BenchCancelled.
DeviceResult run_device_bench(const OpenOptions& open, const BenchConfig& config, const BenchObserver& observer = {});

// One backend and device of a `--devices` list.
struct BenchTarget {
  std::string label;  // "cpu", "reference", "vulkan:0"
  BackendSpec spec;   // threads as given
  std::string device_name;
};

// `--devices`: "all" (every device of every backend of this build, in registration
// order; backends without a device are left out), or a comma-separated list of
// BACKEND or BACKEND:DEVICE (an index or part of a name, as --device takes). Throws
// std::runtime_error naming an unknown backend or device, or an empty list, or a
// target named twice.
std::vector<BenchTarget> resolve_bench_targets(const std::string& devices, int threads);

// run_device_bench on one target (open's backend replaced by the target's), labelled
// with it; a failure other than BenchCancelled (a missing file, out of memory, a
// driver error) comes back as the result's error, so the other targets still run.
DeviceResult run_target_bench(OpenOptions open, const BenchTarget& target, const BenchConfig& config,
                              const BenchObserver& observer = {});

// Prompts from a JSONL file: MT-Bench ("turns"[0]), GSM8K ("question"), or
// "prompt"/"text"; at most `limit`. Throws std::runtime_error naming the file and line.
std::vector<std::string> read_bench_prompts(const std::string& path, int32_t limit);

}  // namespace fafo::bench
