#include "backend/vulkan/range_allocator.h"

#include <iterator>
#include <stdexcept>
#include <string>

namespace fafo::vulkan {

RangeAllocator::RangeAllocator(uint64_t capacity) : capacity_(capacity) {
  if (capacity_ > 0) free_.emplace(0, capacity_);
}

std::optional<uint64_t> RangeAllocator::allocate(uint64_t size, uint64_t alignment) {
  if (size == 0 || alignment == 0) throw std::invalid_argument("RangeAllocator: a range needs a size and an alignment");
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = it->first, length = it->second;
    const uint64_t aligned = (start + alignment - 1) / alignment * alignment;
    const uint64_t padding = aligned - start;
    if (padding >= length || length - padding < size) continue;
    const uint64_t tail = length - padding - size;
    if (padding > 0) {
      it->second = padding;  // the bytes before the aligned start stay free
    } else {
      free_.erase(it);
    }
    if (tail > 0) free_.emplace(aligned + size, tail);
    used_ += size;
    return aligned;
  }
  return std::nullopt;
}

void RangeAllocator::free(uint64_t offset, uint64_t size) {
  if (size == 0 || offset > capacity_ || size > capacity_ - offset || size > used_)
    throw std::logic_error("RangeAllocator: freeing " + std::to_string(size) + " bytes at " + std::to_string(offset) +
                           ", not a placed range of a block of " + std::to_string(capacity_) + " bytes");
  auto next = free_.lower_bound(offset);
  auto prev = next == free_.begin() ? free_.end() : std::prev(next);
  const bool overlaps_next = next != free_.end() && next->first < offset + size;
  const bool overlaps_prev = prev != free_.end() && prev->first + prev->second > offset;
  if (overlaps_next || overlaps_prev)
    throw std::logic_error("RangeAllocator: freeing " + std::to_string(size) + " bytes at " + std::to_string(offset) +
                           ", which are already free");
  used_ -= size;
  uint64_t start = offset, length = size;
  if (prev != free_.end() && prev->first + prev->second == offset) {
    start = prev->first;
    length += prev->second;
    free_.erase(prev);
  }
  if (next != free_.end() && next->first == offset + size) {
    length += next->second;
    free_.erase(next);
  }
  free_.emplace(start, length);
}

}  // namespace fafo::vulkan
