#include "backend/vulkan/memory_pool.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "backend/vulkan/vulkan_error.h"

namespace fafo::vulkan {

namespace {

constexpr VkMemoryPropertyFlags kHostMapped = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;

VkDeviceSize round_up(VkDeviceSize value, VkDeviceSize multiple) { return (value + multiple - 1) / multiple * multiple; }

// "268435456 bytes (256.0 MiB)"
std::string size_text(VkDeviceSize bytes) {
  char mib[32];
  std::snprintf(mib, sizeof mib, "%.1f MiB", static_cast<double>(bytes) / double(1u << 20));
  return std::to_string(bytes) + " bytes (" + mib + ")";
}

}  // namespace

struct MemoryPool::Block {
  VkDeviceMemory memory = VK_NULL_HANDLE;
  uint32_t type = 0;
  uint32_t heap = 0;
  bool dedicated = false;
  void* mapped = nullptr;
  RangeAllocator ranges;

  explicit Block(VkDeviceSize bytes) : ranges(bytes) {}
};

MemoryPool::MemoryPool(VkPhysicalDevice physical_device, VkDevice device, std::string device_name, Limits limits)
    : device_(device), device_name_(std::move(device_name)), heap_cap_(limits.heap_bytes) {
  vkGetPhysicalDeviceMemoryProperties(physical_device, &memory_);
  VkPhysicalDeviceMaintenance3Properties maintenance3{};
  maintenance3.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES;
  VkPhysicalDeviceProperties2 properties{};
  properties.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  properties.pNext = &maintenance3;
  vkGetPhysicalDeviceProperties2(physical_device, &properties);
  atom_ = std::max<VkDeviceSize>(1, properties.properties.limits.nonCoherentAtomSize);
  max_allocation_ = maintenance3.maxMemoryAllocationSize > 0 ? maintenance3.maxMemoryAllocationSize : ~VkDeviceSize{0};
  if (limits.max_allocation > 0) max_allocation_ = std::min(max_allocation_, limits.max_allocation);
  block_bytes_ = std::min(std::max<VkDeviceSize>(limits.block_bytes, atom_), max_allocation_);
  heap_used_.assign(memory_.memoryHeapCount, 0);
}

MemoryPool::~MemoryPool() {
  for (const std::unique_ptr<Block>& b : blocks_) {
    if (b->mapped) vkUnmapMemory(device_, b->memory);
    vkFreeMemory(device_, b->memory, nullptr);
  }
}

VkDeviceSize MemoryPool::heap_size(uint32_t type) const {
  const VkDeviceSize size = memory_.memoryHeaps[memory_.memoryTypes[type].heapIndex].size;
  return heap_cap_ > 0 ? std::min(size, heap_cap_) : size;
}

bool MemoryPool::mapped(uint32_t type) const {
  return type < memory_.memoryTypeCount && (memory_.memoryTypes[type].propertyFlags & kHostMapped) == kHostMapped;
}

MemoryPool::Range MemoryPool::allocate(const VkMemoryRequirements& requirements, uint32_t type) {
  if (type >= memory_.memoryTypeCount || !(requirements.memoryTypeBits & (1u << type)) || requirements.size == 0)
    throw std::invalid_argument("MemoryPool: memory type " + std::to_string(type) + " does not suit the request");
  const bool host_visible = memory_.memoryTypes[type].propertyFlags & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT;
  const VkDeviceSize alignment = std::max<VkDeviceSize>(requirements.alignment, host_visible ? atom_ : 1);
  const VkDeviceSize size = host_visible ? round_up(requirements.size, atom_) : requirements.size;
  if (size > max_allocation_)
    throw VulkanError("a Vulkan buffer of " + size_text(size) + " exceeds maxMemoryAllocationSize (" +
                      size_text(max_allocation_) + ") of " + device_name_);
  if (size > heap_size(type))
    throw VulkanError("a Vulkan buffer of " + size_text(size) + " does not fit in the memory heap of " +
                      size_text(heap_size(type)) + " of " + device_name_);

  std::lock_guard<std::mutex> lock(mutex_);
  Block* block = nullptr;
  std::optional<uint64_t> offset;
  if (size > block_bytes_ / 2) {
    block = new_block(type, size, true, size);
    offset = block->ranges.allocate(size, 1);  // 0: the memory itself is aligned for any buffer
  } else {
    for (const std::unique_ptr<Block>& b : blocks_) {
      if (b->type != type || b->dedicated) continue;
      offset = b->ranges.allocate(size, alignment);
      if (offset) {
        block = b.get();
        break;
      }
    }
    if (!block) {
      block = new_block(type, block_bytes_, false, size);
      offset = block->ranges.allocate(size, alignment);
    }
  }
  Range range;
  range.memory = block->memory;
  range.offset = *offset;
  range.size = size;
  range.mapped = block->mapped ? static_cast<char*>(block->mapped) + *offset : nullptr;
  range.block = block;
  ++ranges_;
  return range;
}

MemoryPool::Block* MemoryPool::new_block(uint32_t type, VkDeviceSize bytes, bool dedicated, VkDeviceSize request) {
  const uint32_t heap = memory_.memoryTypes[type].heapIndex;
  VkDeviceSize room = heap_size(type) - std::min(heap_size(type), heap_used_[heap]);
  if (room < bytes) {
    // Empty shared blocks on this heap (kept for reuse) give their bytes back first.
    for (size_t i = blocks_.size(); i-- > 0;) {
      Block* b = blocks_[i].get();
      if (b->heap == heap && b->ranges.empty()) free_block(b);
    }
    room = heap_size(type) - std::min(heap_size(type), heap_used_[heap]);
  }
  if (room < request)
    throw DeviceError(DeviceError::Kind::OutOfMemory, "out of device memory on " + device_name_ + ": a Vulkan buffer of " + size_text(request) +
                          " does not fit in memory heap " + std::to_string(heap) + " of " + size_text(heap_size(type)) +
                          ", of which " + size_text(heap_used_[heap]) + " are allocated");
  // A shared block shrinks to what the heap has left.
  bytes = std::min(bytes, room);

  VkMemoryAllocateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  info.allocationSize = bytes;
  info.memoryTypeIndex = type;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkResult result = vkAllocateMemory(device_, &info, nullptr, &memory);
  if ((result == VK_ERROR_OUT_OF_DEVICE_MEMORY || result == VK_ERROR_OUT_OF_HOST_MEMORY) && bytes > request) {
    // The device cannot give a whole block: one just large enough for this buffer.
    bytes = request;
    info.allocationSize = bytes;
    result = vkAllocateMemory(device_, &info, nullptr, &memory);
  }
  if (result == VK_ERROR_OUT_OF_DEVICE_MEMORY || result == VK_ERROR_OUT_OF_HOST_MEMORY)
    throw VulkanError("out of " + std::string(result == VK_ERROR_OUT_OF_DEVICE_MEMORY ? "device" : "host") +
                      " memory allocating " + size_text(bytes) + " on " + device_name_ + " (" + result_name(result) +
                      ")");
  check(result, "vkAllocateMemory");
  ++device_allocations_;

  auto block = std::make_unique<Block>(bytes);
  block->memory = memory;
  block->type = type;
  block->heap = heap;
  block->dedicated = dedicated;
  if (mapped(type)) {
    const VkResult mapping = vkMapMemory(device_, memory, 0, VK_WHOLE_SIZE, 0, &block->mapped);
    if (mapping < 0) {
      vkFreeMemory(device_, memory, nullptr);
      check(mapping, "vkMapMemory");
    }
  }
  heap_used_[heap] += bytes;
  blocks_.push_back(std::move(block));
  return blocks_.back().get();
}

void MemoryPool::free_block(Block* block) noexcept {
  for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
    if (it->get() != block) continue;
    if (block->mapped) vkUnmapMemory(device_, block->memory);
    vkFreeMemory(device_, block->memory, nullptr);
    heap_used_[block->heap] -= block->ranges.capacity();
    blocks_.erase(it);
    return;
  }
}

void MemoryPool::free(const Range& range) noexcept {
  if (range.block == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Block* block = nullptr;
  for (const std::unique_ptr<Block>& b : blocks_)
    if (b.get() == range.block) block = b.get();
  if (!block) return;
  block->ranges.free(range.offset, range.size);
  --ranges_;
  if (!block->ranges.empty()) return;
  bool another_spare = false;
  for (const std::unique_ptr<Block>& b : blocks_)
    another_spare = another_spare || (b.get() != block && b->type == block->type && !b->dedicated && b->ranges.empty());
  if (block->dedicated || another_spare) free_block(block);
}

MemoryPool::Stats MemoryPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Stats s;
  s.device_allocations = device_allocations_;
  for (const std::unique_ptr<Block>& b : blocks_) {
    ++s.blocks;
    if (b->dedicated) ++s.dedicated_blocks;
    s.block_bytes += b->ranges.capacity();
    s.used_bytes += b->ranges.used();
  }
  s.ranges = ranges_;
  return s;
}

}  // namespace fafo::vulkan
