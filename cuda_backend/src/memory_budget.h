// What the CUDA backend has allocated on its device (the GPU, or the host emulating
// it), counted against --memory-limit: the backend's BackendMemory. Every allocation
// goes through DeviceMemory (ops_kv_cache.h), which takes its bytes here first.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "fafo/device_error.h"

namespace fafo::cuda {

class MemoryBudget {
 public:
  explicit MemoryBudget(std::string backend) : backend_(std::move(backend)) {}
  // Before anything is allocated (std::logic_error after); 0: no limit but the device's.
  void set_limit(uint64_t bytes) {
    if (in_use_ > 0) throw std::logic_error("set_memory_limit after memory was allocated");
    limit_ = bytes;
  }
  uint64_t in_use() const { return in_use_; }
  // What may still be allocated: the rest of the limit, at most what the device has free
  // (`device_free`: UINT64_MAX where it does not say).
  uint64_t available(uint64_t device_free) const {
    if (limit_ == 0) return device_free;
    return std::min(device_free, limit_ - std::min(limit_, in_use_));
  }
  // Counts `bytes` more, or throws DeviceError(OutOfMemory) with the sizes when the
  // limit does not hold them.
  void take(uint64_t bytes) {
    if (limit_ > 0 && bytes > limit_ - std::min(limit_, in_use_))
      throw DeviceError(DeviceError::Kind::OutOfMemory,
                        "out of memory on the " + backend_ + " backend: an allocation of " + format_bytes(bytes) +
                            " with " + format_bytes(in_use_) + " in use of the " + format_bytes(limit_) +
                            " --memory-limit allows");
    in_use_ += bytes;
  }
  void give(uint64_t bytes) noexcept { in_use_ -= std::min(in_use_, bytes); }

 private:
  std::string backend_;
  uint64_t limit_ = 0;
  uint64_t in_use_ = 0;
};

}  // namespace fafo::cuda
