// Per-kernel device time for the Vulkan backend (`fafo bench --profile`): a timestamp
// query is written at the start of a step's command buffer and after every command,
// so with the barrier between commands (command_sequence.h) the difference between
// two consecutive timestamps is the device time of one command. Summed per kernel
// name over the steps profiled, with the dispatch and barrier counts and the weight
// bytes the kernels read.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <vulkan/vulkan.h>

#include "fafo/backend.h"

namespace fafo::vulkan {

class Context;

class KernelProfiler {
 public:
  // Never throws for a device without timestamps: unsupported() then says why.
  explicit KernelProfiler(const Context& context);
  ~KernelProfiler();
  KernelProfiler(const KernelProfiler&) = delete;
  KernelProfiler& operator=(const KernelProfiler&) = delete;

  // Empty when the device times commands on the backend's queue; otherwise why not.
  const std::string& unsupported() const { return unsupported_; }

  // Recording a step: begin() at the start of its command buffer, after() after each
  // command (`name`: the kernel), add_bytes() for the weight bytes the last command reads.
  void begin(VkCommandBuffer commands);
  void after(VkCommandBuffer commands, const std::string& name);
  void add_bytes(double bytes);
  // Once the step's commands have completed: reads the timestamps and adds them in, and
  // counts a step where `ends_step` (not for a part of one that sync_step ran).
  void collect(uint32_t dispatches, uint32_t barriers, bool ends_step = true);

  KernelProfile take();

 private:
  void make_pool(uint32_t capacity);

  VkDevice device_ = VK_NULL_HANDLE;
  std::string unsupported_;
  double ns_per_tick_ = 0;
  uint64_t valid_mask_ = 0;
  VkQueryPool pool_ = VK_NULL_HANDLE;
  uint32_t capacity_ = 0;  // queries in the pool
  bool overflow_ = false;  // the last step had more commands than the pool has queries
  struct Pending {
    size_t kernel;  // index into profile_.kernels
    double bytes;
  };
  std::vector<Pending> pending_;  // this step's commands, in order
  std::unordered_map<std::string, size_t> index_;
  KernelProfile profile_;
};

}  // namespace fafo::vulkan
