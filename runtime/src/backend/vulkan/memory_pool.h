// The device memory behind every Buffer of a Context: a few large VkDeviceMemory
// blocks per memory type, each buffer bound at an offset inside one, so a model's
// hundreds of buffers take a handful of allocations (drivers allow as few as 4096,
// maxMemoryAllocationCount, and each one has a cost).
//   - A request goes into the first shared block of its memory type with room for it
//     (RangeAllocator: first fit, freed ranges merged); when none has room, a new
//     shared block of Limits::block_bytes (256 MiB) is allocated. A request larger than
//     half a block gets a dedicated block of its own size, freed with it.
//   - Offsets follow the buffer's VkMemoryRequirements alignment; in host-visible
//     memory, ranges also start and end on nonCoherentAtomSize, so no two buffers
//     share an atom.
//   - Blocks of host-visible, host-coherent memory are mapped once, whole, for their
//     lifetime: a buffer's mapping is the block's at its offset.
//   - No allocation exceeds maxMemoryAllocationSize, and the blocks of a memory heap
//     never add up to more than the heap's size: a request that cannot fit throws
//     VulkanError (a std::runtime_error) naming the sizes.
//   - A block whose ranges are all freed is freed too, except one empty shared block
//     per memory type, kept for the next request.
// Thread-safe. Every range must be freed before the pool is destroyed (the Context
// destroys it just before the device).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "backend/vulkan/range_allocator.h"

namespace fafo::vulkan {

struct MemoryPoolLimits {
  VkDeviceSize block_bytes = VkDeviceSize{256} << 20;  // a shared block, capped by the two below
  VkDeviceSize max_allocation = 0;  // 0 = the device's maxMemoryAllocationSize; else the smaller
  VkDeviceSize heap_bytes = 0;      // 0 = each heap's size; else the smaller (tests)
};

class MemoryPool {
 public:
  using Limits = MemoryPoolLimits;

  // One buffer's place: `size` bytes at `offset` of `memory`; `mapped` points at the
  // offset when the block is mapped, else null.
  struct Range {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkDeviceSize offset = 0;
    VkDeviceSize size = 0;
    void* mapped = nullptr;
    const void* block = nullptr;  // which block, for free()
  };

  struct Stats {
    uint64_t device_allocations = 0;  // successful vkAllocateMemory calls so far
    uint32_t blocks = 0;              // blocks held now
    uint32_t dedicated_blocks = 0;    // of which dedicated to one buffer
    VkDeviceSize block_bytes = 0;     // bytes of the blocks held
    VkDeviceSize used_bytes = 0;      // bytes of the ranges placed (alignment rounding included)
    uint32_t ranges = 0;              // ranges placed
  };

  MemoryPool(VkPhysicalDevice physical_device, VkDevice device, std::string device_name, Limits limits = {});
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // A range for `requirements` in memory type `type` (an index the requirements'
  // memoryTypeBits allow). Throws VulkanError when it cannot fit (see above) or the
  // device is out of memory.
  Range allocate(const VkMemoryRequirements& requirements, uint32_t type);
  // Returns a range allocate() gave; an empty Range is ignored.
  void free(const Range& range) noexcept;

  // Whether buffers of memory type `type` are mapped (host-visible and host-coherent).
  bool mapped(uint32_t type) const;
  Stats stats() const;
  // The limits in force: block_bytes and max_allocation after the device's caps.
  VkDeviceSize block_bytes() const { return block_bytes_; }
  VkDeviceSize max_allocation() const { return max_allocation_; }

 private:
  struct Block;
  Block* new_block(uint32_t type, VkDeviceSize bytes, bool dedicated, VkDeviceSize request);
  void free_block(Block* block) noexcept;
  VkDeviceSize heap_size(uint32_t type) const;

  VkDevice device_;
  std::string device_name_;
  VkPhysicalDeviceMemoryProperties memory_{};
  VkDeviceSize atom_ = 1;  // nonCoherentAtomSize
  VkDeviceSize block_bytes_ = 0;
  VkDeviceSize max_allocation_ = 0;
  VkDeviceSize heap_cap_ = 0;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::vector<VkDeviceSize> heap_used_;  // bytes of the blocks held, per heap
  uint64_t device_allocations_ = 0;
  uint32_t ranges_ = 0;
};

}  // namespace fafo::vulkan
