// The Bench view's run: what `fafo bench --devices` measures (app/bench), device after
// device on a worker thread of its own, never the UI thread. The UI starts a run, asks
// to cancel it and copies a BenchSnapshot each frame: the status, which device is being
// measured, the log so far and the report of the devices already finished. Plain C++.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench_result.h"
#include "bench_runner.h"
#include "fafo/backend.h"

namespace fafo::studio {

// Idle: never started. Done: every device ran (a device that failed is in the report
// with its error). Cancelled: cancel() cut the run short. Failed: no device could be
// measured (BenchSnapshot::error says why).
enum class BenchStatus { Idle, Running, Done, Cancelled, Failed };
const char* bench_status_name(BenchStatus s);

// What to run: one model, the same tests on every device.
struct BenchPlan {
  std::string model;                        // the GGUF file
  std::vector<bench::BenchTarget> targets;  // measured in this order
  bench::BenchConfig config;
  int32_t n_ctx = 0;                        // as OpenOptions: 0 = the model's context length, at most 4096
  KvCacheType kv_type = KvCacheType::F32;
};

// A copy of the session's state for one frame of the UI.
struct BenchSnapshot {
  BenchStatus status = BenchStatus::Idle;
  size_t device = 0;               // 1-based: the device being measured, or the last one started
  size_t devices = 0;              // in the run
  std::string label;               // the device being measured ("cpu", "vulkan:0")
  std::vector<std::string> log;    // every line printed so far, without newlines (the last may be partial)
  bench::BenchReport report;       // the devices finished so far, measured or failed, in run order
  std::string error;               // Failed: why no device could be measured
};

class BenchSession {
 public:
  BenchSession() = default;
  ~BenchSession();  // cancels a run in progress and waits for its thread
  BenchSession(const BenchSession&) = delete;
  BenchSession& operator=(const BenchSession&) = delete;

  // Starts measuring plan.config on plan.targets in turn, replacing the last run's
  // log and report. Returns "" when the run started, else why not: a run is in
  // progress, no model or no device was given, or prompts come with strategies that do
  // not start with ar. Errors of the run itself (a missing model file, a device that
  // cannot be made) end up in the report and, when every device failed, in `error`.
  std::string start(BenchPlan plan);
  // Asks the run to stop at its next measurement; returns at once. The devices already
  // finished stay in the report.
  void cancel();

  BenchSnapshot snapshot() const;
  BenchStatus status() const;
  // Waits until no run is in progress; false on timeout.
  bool wait(double seconds) const;
  // Writes the report so far as PREFIX.md, .csv, .json and .png (write_bench_report)
  // and returns their paths. Throws std::runtime_error when there is nothing to save
  // yet or a file cannot be written.
  std::vector<std::string> save(const std::string& prefix) const;

 private:
  void run(const BenchPlan& plan);  // the worker thread
  void print(const std::string& text);
  void finish_line();  // ends a partial last log line (mutex_ held)

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  BenchSnapshot state_;
  bool line_open_ = false;  // the last log line has no newline yet
  std::atomic<bool> cancel_{false};
  std::thread thread_;
};

}  // namespace fafo::studio
