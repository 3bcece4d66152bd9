// The host device: runs the CUDA backend's kernels (ops.h) on the CPU, one index after
// another, and its warp kernels (warp_ops.h) one warp after another, the lanes of a warp
// phase by phase (every lane's shares, the warp's tree, every lane's finish), with
// device memory in host memory. It captures steps as a GPU does (begin_capture): the
// launches, uploads and copies are recorded and run at end_capture, so tests see what
// a graph would compute. It makes the backend's whole step logic
// run and be tested where there is no GPU (CI); it is not meant to be fast.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "block.h"
#include "dot_order.h"
#include "launch_times.h"
#include "memory_budget.h"
#include "step_graphs.h"
#include "warp.h"

namespace fafo::cuda {

class HostDevice {
 public:
  std::string description() const { return "CUDA kernels emulated on the host"; }
  // What is allocated, against --memory-limit; the host says nothing of its free memory.
  MemoryBudget& budget() { return budget_; }
  const MemoryBudget& budget() const { return budget_; }
  uint64_t free_memory() const { return budget_.available(std::numeric_limits<uint64_t>::max()); }
  void* alloc(size_t bytes) {
    void* p = std::calloc(bytes == 0 ? 1 : bytes, 1);
    if (!p) throw std::runtime_error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    if (capturing_) {  // a GPU zeroes it by a node of the graph
      topology_ += "memset;";
      recording_.emplace_back([] {});
    }
    return p;
  }
  // Frees `p` (alloc's `bytes`) and gives its bytes back to the budget: at once, or
  // after the recording has run (it may still use the memory).
  void release(void* p, size_t bytes) noexcept {
    if (capturing_) {
      freed_.emplace_back(p, bytes);
      return;
    }
    std::free(p);
    budget_.give(bytes);
  }
  void upload(void* dst, const void* src, size_t bytes) {
    if (!capturing_) {
      std::memcpy(dst, src, bytes);
      return;
    }
    std::vector<uint8_t> data(static_cast<const uint8_t*>(src), static_cast<const uint8_t*>(src) + bytes);
    record("copy", [dst, data = std::move(data)] { std::memcpy(dst, data.data(), data.size()); });
  }
  void download(void* dst, const void* src, size_t bytes) {
    not_capturing("a download");
    std::memcpy(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) {
    if (capturing_) record("copy", [=] { std::memmove(dst, src, bytes); });
    else std::memmove(dst, src, bytes);
  }
  template <class Op>
  void launch(const Op& op, uint64_t n, const char* name) {
    if (capturing_) {
      record(name, [op, n] {
        for (uint64_t i = 0; i < n; ++i) op(static_cast<uint32_t>(i));
      });
      return;
    }
    timed(name, [&] {
      for (uint64_t i = 0; i < n; ++i) op(static_cast<uint32_t>(i));
    });
  }
  // A warp op over n_warps warps (warp_ops.h): the lanes' shares, tree32 over each
  // sum's 32 shares (the order warp_tree's shuffles add them in), every lane's finish.
  template <class Op>
  void launch_warps(const Op& op, uint64_t n_warps, const char* name) {
    if (capturing_) record(name, [this, op, n_warps] { run_warps(op, n_warps); });
    else timed(name, [&] { run_warps(op, n_warps); });
  }
  template <class Op>
  void run_warps(const Op& op, uint64_t n_warps) {
    float shares[kLanes][Op::kValues];
    for (uint64_t w = 0; w < n_warps; ++w) {
      const uint32_t warp = static_cast<uint32_t>(w);
      for (uint32_t lane = 0; lane < kLanes; ++lane) op.lane_values(warp, lane, shares[lane]);
      float sums[Op::kValues];
      for (uint32_t k = 0; k < Op::kValues; ++k) {
        float s[kLanes];
        for (uint32_t lane = 0; lane < kLanes; ++lane) s[lane] = shares[lane][k];
        sums[k] = tree32(s);
      }
      for (uint32_t lane = 0; lane < kLanes; ++lane) op.finish(warp, lane, sums);
    }
  }
  // A warp function over n_warps warps (warp.h: op.run(warp, index)), one after another.
  template <class Op>
  void launch_warp_fn(const Op& op, uint64_t n_warps, const char* name) {
    const auto run = [op, n_warps] {
      HostWarp warp;
      for (uint64_t w = 0; w < n_warps; ++w) op.run(warp, static_cast<uint32_t>(w));
    };
    if (capturing_) record(name, run);
    else timed(name, run);
  }
  // A block function over n_blocks blocks of `warps` warps (block.h: op.run(block,
  // index)), one after another, each with `shared_bytes` of shared memory filled with
  // 0xff bytes first (NaN floats, all-ones words), as a GPU's holds whatever was there:
  // a kernel that reads what it did not write shows it.
  template <class Op>
  void launch_block_fn(const Op& op, uint64_t n_blocks, uint32_t warps, size_t shared_bytes, const char* name) {
    if (warps == 0 || warps > kMaxBlockWarps) throw std::logic_error(std::string(name) + ": a block of " + std::to_string(warps) + " warps");
    const auto run = [op, n_blocks, warps, shared_bytes] {
      std::vector<uint8_t> shared(shared_bytes);
      HostBlock block{warps, shared.data()};
      for (uint64_t b = 0; b < n_blocks; ++b) {
        std::memset(shared.data(), 0xff, shared.size());
        op.run(block, static_cast<uint32_t>(b));
      }
    };
    if (capturing_) record(name, run);
    else timed(name, run);
  }
  // The warp's mma_s8 (warp.h), emulated.
  bool has_mma() const { return true; }
  void sync() { not_capturing("a wait for the device"); }

  // A step's graph: its recorded launches, uploads and copies in order.
  using Graph = std::vector<std::function<void()>>;
  // From here to end_capture, record instead of run (as stream capture does).
  void begin_capture() {
    if (capturing_) throw std::logic_error("begin_capture: already capturing");
    capturing_ = true;
    recording_.clear();
    topology_.clear();
  }
  // Runs the recording as the graph `graphs` keeps for its topology, that graph then
  // updated to it (a GPU's cudaGraphExecUpdate), or as a new graph kept there.
  void end_capture(StepGraphs<Graph>& graphs) {
    if (!capturing_) throw std::logic_error("end_capture: not capturing");
    capturing_ = false;
    Graph* graph = graphs.find(topology_);
    if (graph) *graph = std::move(recording_);
    else graph = &graphs.keep(topology_, std::move(recording_));
    recording_.clear();
    for (const auto& node : *graph) node();
    free_deferred();
  }
  // Nothing breaks a recording on the host.
  bool capture_broken() const { return false; }
  // Drops a capture whose step failed before its end (nothing of it runs).
  void abort_capture() {
    capturing_ = false;
    recording_.clear();
    free_deferred();
  }
  bool capturing() const { return capturing_; }

  // Profiling: while on, every launch's host time is kept (with the bytes note_bytes
  // gave for it) until take_times().
  void set_timing(bool on) {
    timing_ = on;
    times_ = {};
    bytes_ = 0;
  }
  void note_bytes(double bytes) { bytes_ = bytes; }
  LaunchTimes take_times() {
    LaunchTimes t = std::move(times_);
    times_ = {};
    if (!t.launches.empty()) t.span_seconds = std::chrono::duration<double>(last_end_ - first_start_).count();
    return t;
  }

 private:
  void free_deferred() noexcept {
    for (const auto& [p, bytes] : freed_) {
      std::free(p);
      budget_.give(bytes);
    }
    freed_.clear();
  }
  template <class F>
  void timed(const char* name, F&& f) {
    if (!timing_) {
      f();
      bytes_ = 0;  // noted for this launch
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    f();
    const auto end = std::chrono::steady_clock::now();
    if (times_.launches.empty()) first_start_ = start;
    last_end_ = end;
    times_.launches.push_back({name, std::chrono::duration<double>(end - start).count(), bytes_});
    bytes_ = 0;
  }
  template <class F>
  void record(const char* kind, F&& node) {
    recording_.emplace_back(std::forward<F>(node));
    topology_ += kind;
    topology_ += ';';
  }
  void not_capturing(const char* what) const {
    if (capturing_) throw std::logic_error(std::string(what) + " inside a captured step (its launches have not run)");
  }
  MemoryBudget budget_{"cuda-emulated"};
  bool capturing_ = false;
  Graph recording_;
  std::string topology_;
  std::vector<std::pair<void*, size_t>> freed_;  // freed while capturing, with their bytes
  bool timing_ = false;
  double bytes_ = 0;
  LaunchTimes times_;
  std::chrono::steady_clock::time_point first_start_, last_end_;
};

}  // namespace fafo::cuda
