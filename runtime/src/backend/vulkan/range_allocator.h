// Placement of aligned ranges inside one block of `capacity` bytes (a VkDeviceMemory
// block of MemoryPool, memory_pool.h): first fit over the free ranges in offset order;
// a freed range is merged with the free ranges on either side, so a block whose every
// range is freed is one free range again. Pure bookkeeping, no Vulkan calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>

namespace fafo::vulkan {

class RangeAllocator {
 public:
  explicit RangeAllocator(uint64_t capacity);

  // The offset of a new range of `size` bytes (> 0) starting at a multiple of
  // `alignment` (> 0), the lowest such offset that fits; nullopt when none does.
  std::optional<uint64_t> allocate(uint64_t size, uint64_t alignment);
  // Returns a range that allocate() placed ([offset, offset + size)) to the free
  // ranges; throws std::logic_error when it is not inside the block or overlaps a
  // free range (freed twice).
  void free(uint64_t offset, uint64_t size);

  uint64_t capacity() const { return capacity_; }
  // Bytes in ranges now placed.
  uint64_t used() const { return used_; }
  bool empty() const { return used_ == 0; }
  // How many separate free ranges there are (1 for an empty block).
  size_t free_ranges() const { return free_.size(); }

 private:
  uint64_t capacity_;
  uint64_t used_ = 0;
  std::map<uint64_t, uint64_t> free_;  // offset -> size; never two adjacent
};

}  // namespace fafo::vulkan
