// The Vulkan backend's budget of device memory: every device buffer the backend makes
// (weights, activations, the KV cache, attention scratch) is counted against the
// device's largest device-local heap (or --memory-limit), so a model that does not fit
// fails at load time with the sizes in the message (a fafo::DeviceError), and these buffers start zeroed like the CPU backend's
// memory. Where the bytes live is the MemoryPool's business (memory_pool.h: buffers
// placed in large blocks). ScratchBuffer is the one way a buffer that grows on demand
// is regrown (dropping the descriptor sets that bound the old one).
#pragma once

#include <cstdint>
#include <string>

#include "backend/vulkan/buffer.h"

namespace fafo::vulkan {

class Context;
class DescriptorCache;

std::string gib(uint64_t bytes);

class Allocator {
 public:
  // max_buffer_bytes: 0 = the device's maxStorageBufferRange, else the smaller of the two.
  Allocator(const Context& context, uint64_t max_buffer_bytes);

  uint64_t heap_bytes() const { return heap_bytes_; }
  // Counts against `bytes` instead of the heap when that is smaller (--memory-limit).
  void set_limit(uint64_t bytes);
  uint64_t allocated() const { return allocated_; }
  uint64_t free_bytes() const { return heap_bytes_ > allocated_ ? heap_bytes_ - allocated_ : 0; }
  // free_bytes(), at most what the driver's budget leaves this process in the heap now
  // (VK_EXT_memory_budget: other programs' use counted), where the device says.
  uint64_t free_bytes_now() const;
  // The largest buffer the backend makes.
  uint64_t max_range() const { return max_range_; }

  // A zeroed device-local buffer of `bytes`, counted against the heap; `what` names it
  // in the out-of-memory message.
  Buffer device(uint64_t bytes, const char* what);
  // Returns a device() buffer's bytes to the count and destroys it.
  void release(Buffer& buffer, DescriptorCache& descriptors);

 private:
  const Context& context_;
  uint64_t heap_bytes_ = 0;
  uint32_t heap_ = 0;  // the heap counted against: the largest device-local one
  uint64_t allocated_ = 0;
  uint64_t max_range_ = 0;
  bool limited_ = false;  // heap_bytes_ is --memory-limit's
};

// A host-visible buffer that grows when a step needs more than it holds.
class ScratchBuffer {
 public:
  // The buffer, regrown to at least `bytes` (forgetting the descriptor sets of the old one).
  Buffer& ensure(const Context& context, DescriptorCache& descriptors, uint64_t bytes);
  Buffer& get() { return buffer_; }
  const Buffer& get() const { return buffer_; }

 private:
  Buffer buffer_;
};

}  // namespace fafo::vulkan
