// A progress sink for tests (fafo/progress.h): it records every report made while it is
// installed, and puts back the sink it replaced when it goes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "fafo/progress.h"

namespace fafo::test {

class ProgressRecorder {
 public:
  struct Report {
    uint64_t task = 0;
    std::string label, detail;
    uint64_t done = 0, total = 0;
    ProgressUnit unit = ProgressUnit::Items;
    bool finished = false;
  };

  ProgressRecorder() {
    before_ = set_progress_sink([this](const ProgressUpdate& u) {
      std::lock_guard lock(mutex_);
      reports_.push_back({u.task, std::string(u.label), std::string(u.detail), u.done, u.total, u.unit, u.finished});
    });
  }
  ~ProgressRecorder() { set_progress_sink(std::move(before_)); }
  ProgressRecorder(const ProgressRecorder&) = delete;
  ProgressRecorder& operator=(const ProgressRecorder&) = delete;

  std::vector<Report> reports() const {
    std::lock_guard lock(mutex_);
    return reports_;
  }
  // Every report of the tasks labelled `label`, in order.
  std::vector<Report> of(const std::string& label) const {
    std::vector<Report> out;
    for (const Report& r : reports())
      if (r.label == label) out.push_back(r);
    return out;
  }
  // The labels of the tasks, in the order they started.
  std::vector<std::string> labels() const {
    std::vector<std::string> out;
    std::vector<uint64_t> seen;
    for (const Report& r : reports()) {
      if (std::find(seen.begin(), seen.end(), r.task) != seen.end()) continue;
      seen.push_back(r.task);
      out.push_back(r.label);
    }
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Report> reports_;
  ProgressSink before_;
};

}  // namespace fafo::test
