// A sequence of compute dispatches recorded into one command buffer, then submitted
// once and waited for with a fence. Each dispatch gets its own descriptor set (from
// the sequence's pool) and is separated from the next by a compute->compute memory
// barrier, so a dispatch sees everything the earlier ones wrote; after the last one
// a compute->host barrier makes the results readable with Buffer::download.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>

#include <vulkan/vulkan.h>

namespace fafo::vulkan {

class Context;
class Buffer;
class ComputePipeline;

class CommandSequence {
 public:
  explicit CommandSequence(const Context& context, uint32_t max_dispatches = 256);
  ~CommandSequence();
  CommandSequence(const CommandSequence&) = delete;
  CommandSequence& operator=(const CommandSequence&) = delete;

  // Records one dispatch: `buffers` bound to bindings 0..n-1, `push` as the push
  // constants (exactly pipeline.push_constant_bytes()), groups_x/y/z workgroups.
  void dispatch(const ComputePipeline& pipeline, std::initializer_list<const Buffer*> buffers, const void* push,
                uint32_t push_bytes, uint32_t groups_x, uint32_t groups_y = 1, uint32_t groups_z = 1);
  template <class PushConstants>
  void dispatch(const ComputePipeline& pipeline, std::initializer_list<const Buffer*> buffers,
                const PushConstants& push, uint32_t groups_x, uint32_t groups_y = 1, uint32_t groups_z = 1) {
    dispatch(pipeline, buffers, &push, sizeof push, groups_x, groups_y, groups_z);
  }

  uint32_t dispatch_count() const { return dispatches_; }

  // Ends recording, submits, and waits; throws VulkanError on failure or when the
  // device does not finish within `timeout` (never hangs). Only once per sequence.
  void submit_and_wait(std::chrono::milliseconds timeout = std::chrono::seconds(120));

 private:
  void destroy() noexcept;

  const Context& context_;
  VkDescriptorPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer commands_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  uint32_t max_dispatches_ = 0;
  uint32_t dispatches_ = 0;
  bool submitted_ = false;
};

}  // namespace fafo::vulkan
