#include "bench_session.h"

#include <chrono>
#include <exception>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "bench_report.h"
#include "fafo/open_model.h"

namespace fafo::studio {

namespace {

// What the report says of a device that could not be measured (as `fafo bench --devices`).
bench::DeviceResult failed_device(const bench::BenchTarget& t, const std::string& why) {
  bench::DeviceResult r;
  r.backend = t.spec.name;
  r.threads = t.spec.threads;
  r.error = why.empty() ? "unknown error" : why;
  return r;
}

// Why no device could be measured: the one message when they all say the same (a
// missing model file), else each device's.
std::string failure_summary(const bench::BenchReport& report) {
  std::string first, all;
  bool same = true;
  for (const bench::DeviceResult& d : report.devices) {
    if (first.empty()) first = d.error;
    same = same && d.error == first;
    all += (all.empty() ? "" : "; ") + d.label + ": " + d.error;
  }
  return "no device could be measured: " + (same ? first : all);
}

}  // namespace

const char* bench_status_name(BenchStatus s) {
  switch (s) {
    case BenchStatus::Idle: return "idle";
    case BenchStatus::Running: return "running";
    case BenchStatus::Done: return "done";
    case BenchStatus::Cancelled: return "cancelled";
    case BenchStatus::Failed: return "failed";
  }
  return "?";
}

BenchSession::~BenchSession() {
  cancel_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::string BenchSession::start(BenchPlan plan) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_.status == BenchStatus::Running)
    return "a benchmark is already running (device " + std::to_string(state_.device) + " of " +
           std::to_string(state_.devices) + ": " + state_.label + "); cancel it first";
  if (plan.model.empty()) return "choose a model to measure";
  if (plan.targets.empty()) return "choose at least one device";
  const bench::BenchConfig& c = plan.config;
  if (std::string problem = bench::strategies_problem(c.strategies, !c.prompts.empty()); !problem.empty()) return problem;
  // The last run's thread has left its last critical section (it set a final status
  // there), so joining it under the lock cannot wait on us.
  if (thread_.joinable()) thread_.join();
  state_ = BenchSnapshot{};
  state_.status = BenchStatus::Running;
  state_.devices = plan.targets.size();
  state_.report.model = std::filesystem::path(plan.model).filename().string();
  line_open_ = false;
  cancel_.store(false);
  thread_ = std::thread([this, p = std::move(plan)] { run(p); });
  return "";
}

void BenchSession::cancel() { cancel_.store(true); }

BenchSnapshot BenchSession::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

BenchStatus BenchSession::status() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.status;
}

bool BenchSession::wait(double seconds) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, std::chrono::duration<double>(seconds),
                           [this] { return state_.status != BenchStatus::Running; });
}

std::vector<std::string> BenchSession::save(const std::string& prefix) const {
  if (prefix.empty()) throw std::runtime_error("give a prefix for the report files (PREFIX.md, .csv, .json, .png)");
  bench::BenchReport report;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    report = state_.report;
  }
  if (report.devices.empty()) throw std::runtime_error("nothing to save yet: no device has finished");
  return bench::write_bench_report(report, prefix);
}

void BenchSession::print(const std::string& text) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t from = 0;
  for (;;) {
    const size_t newline = text.find('\n', from);
    const std::string piece = text.substr(from, newline == std::string::npos ? std::string::npos : newline - from);
    if (line_open_) state_.log.back() += piece;
    else if (newline != std::string::npos || !piece.empty()) state_.log.push_back(piece);
    line_open_ = newline == std::string::npos && (line_open_ || !piece.empty());
    if (newline == std::string::npos) break;
    from = newline + 1;
  }
}

void BenchSession::finish_line() { line_open_ = false; }

void BenchSession::run(const BenchPlan& plan) {
  bench::BenchObserver observer;
  observer.print = [this](const std::string& text) { print(text); };
  observer.cancelled = [this] { return cancel_.load(); };
  const size_t n = plan.targets.size();
  bool cancelled = false;
  for (size_t i = 0; i < n && !cancelled; ++i) {
    if (cancel_.load()) {
      cancelled = true;
      break;
    }
    const bench::BenchTarget& t = plan.targets[i];
    {
      std::lock_guard<std::mutex> lock(mutex_);
      finish_line();
      state_.device = i + 1;
      state_.label = t.label;
    }
    print(std::string(i ? "\n" : "") + "=== [" + std::to_string(i + 1) + "/" + std::to_string(n) + "] " + t.label +
          ": " + t.device_name + " ===\n");
    OpenOptions open;
    open.path = plan.model;
    open.n_ctx = plan.n_ctx;
    open.kv_type = plan.kv_type;
    bench::DeviceResult r;
    try {
      // One device failing (a missing file, out of memory, a driver error) leaves the others' figures.
      r = bench::run_target_bench(open, t, plan.config, observer);
    } catch (const bench::BenchCancelled&) {
      cancelled = true;  // this device's figures are incomplete: left out
      break;
    } catch (...) {
      r = failed_device(t, "");
      r.label = t.label;
      r.device = t.device_name;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (!r.error.empty()) {
      finish_line();
      state_.log.push_back(t.label + ": error: " + r.error);
    }
    state_.report.devices.push_back(std::move(r));
  }

  std::lock_guard<std::mutex> lock(mutex_);
  finish_line();
  size_t measured = 0;
  for (const bench::DeviceResult& d : state_.report.devices) measured += d.error.empty();
  const std::string finished = std::to_string(state_.report.devices.size()) + " of " + std::to_string(n) + " devices";
  if (cancelled) {
    state_.status = BenchStatus::Cancelled;
    state_.log.push_back("cancelled: " + finished + " finished");
  } else if (measured > 0) {
    state_.status = BenchStatus::Done;
    state_.log.push_back("done: " + std::to_string(measured) + " of " + std::to_string(n) + " devices measured");
  } else {
    state_.status = BenchStatus::Failed;
    state_.error = failure_summary(state_.report);
    state_.log.push_back("failed: " + state_.error);
  }
  changed_.notify_all();
}

}  // namespace fafo::studio
