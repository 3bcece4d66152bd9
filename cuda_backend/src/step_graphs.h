// Which steps the CUDA backend runs as graphs, and which graph each replays: the
// bookkeeping of FAFO_CUDA_GRAPHS, apart from the cudaGraph* calls (cuda_device.cuh) and
// their host emulation (host_device.h), so that it is tested without a GPU.
//
// A step is captured (its launches and in-step uploads recorded into a graph instead of
// run) when its shape (the step's size and each part's size) ran before: a decode loop
// is captured from its second step on, a prefill that never repeats runs directly. The
// captured graph's topology (its nodes' kinds in order: the kernel names, "copy",
// "memset") picks a kept executable graph, which is updated with the step's arguments
// (n_past, pointers, grids: cudaGraphExecUpdate) and launched; a topology seen for the
// first time is instantiated and kept. At most `capacity` executable graphs are kept,
// the least recently used dropped first; one whose update fails is replaced.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <list>
#include <string>
#include <utility>
#include <vector>

namespace fafo::cuda {

// What the cache did, for tests and --verbose.
struct GraphStats {
  uint64_t direct = 0;        // steps launched directly (shape not seen before, or graphs off)
  uint64_t captured = 0;      // steps captured
  uint64_t updated = 0;       // captured steps that replayed a kept graph, updated
  uint64_t instantiated = 0;  // captured steps that made a new executable graph
  uint64_t evicted = 0;       // graphs dropped for room
  uint64_t replaced = 0;      // graphs whose update failed, instantiated again
};

template <class Exec>
class StepGraphs {
 public:
  explicit StepGraphs(size_t capacity = 8, size_t shapes_kept = 32) : capacity_(capacity), shapes_kept_(shapes_kept) {}

  // Before a step of `shape` (its size, then each part's size): whether to capture it.
  // Records the shape as seen either way.
  bool capture(const std::vector<int32_t>& shape) {
    auto it = std::find(shapes_.begin(), shapes_.end(), shape);
    const bool seen = it != shapes_.end();
    if (seen) shapes_.erase(it);
    shapes_.push_front(shape);
    if (shapes_.size() > shapes_kept_) shapes_.pop_back();
    ++(seen ? stats_.captured : stats_.direct);
    return seen;
  }

  // After a capture: the kept graph for `topology`, now the most recently used, or null.
  Exec* find(const std::string& topology) {
    auto it = std::find_if(graphs_.begin(), graphs_.end(), [&](const Entry& e) { return e.topology == topology; });
    if (it == graphs_.end()) return nullptr;
    graphs_.splice(graphs_.begin(), graphs_, it);
    ++stats_.updated;
    return &graphs_.front().exec;
  }
  // A graph instantiated for `topology` (after find gave null, or its update failed:
  // `replacing`), kept as the most recently used; the least recently used beyond the
  // capacity is dropped (its destructor frees it).
  Exec& keep(const std::string& topology, Exec exec, bool replacing = false) {
    auto it = std::find_if(graphs_.begin(), graphs_.end(), [&](const Entry& e) { return e.topology == topology; });
    if (it != graphs_.end()) graphs_.erase(it);
    if (replacing) {
      ++stats_.replaced;
      if (stats_.updated > 0) --stats_.updated;  // find counted it
    }
    ++stats_.instantiated;
    graphs_.push_front(Entry{topology, std::move(exec)});
    while (graphs_.size() > capacity_) {
      graphs_.pop_back();
      ++stats_.evicted;
    }
    return graphs_.front().exec;
  }

  size_t size() const { return graphs_.size(); }
  const GraphStats& stats() const { return stats_; }

 private:
  struct Entry {
    std::string topology;
    Exec exec;
  };
  size_t capacity_, shapes_kept_;
  std::list<std::vector<int32_t>> shapes_;  // most recently seen first
  std::list<Entry> graphs_;                 // most recently used first
  GraphStats stats_;
};

}  // namespace fafo::cuda
