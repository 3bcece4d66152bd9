#include "backend/vulkan/allocator.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/descriptor_cache.h"
#include "backend/vulkan/devices.h"
#include "fafo/device_error.h"

namespace fafo::vulkan {

std::string gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / double(1ull << 30));
  return text;
}

Allocator::Allocator(const Context& context, uint64_t max_buffer_bytes) : context_(context) {
  const VkPhysicalDeviceMemoryProperties& mem = context_.memory_properties();
  for (uint32_t h = 0; h < mem.memoryHeapCount; ++h)
    if ((mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) && mem.memoryHeaps[h].size > heap_bytes_) {
      heap_bytes_ = mem.memoryHeaps[h].size;
      heap_ = h;
    }
  if (heap_bytes_ == 0 && mem.memoryHeapCount > 0) heap_bytes_ = mem.memoryHeaps[0].size;
  max_range_ = context_.properties().limits.maxStorageBufferRange;
  if (max_buffer_bytes > 0) max_range_ = std::min<uint64_t>(max_range_, max_buffer_bytes & ~uint64_t{3});
}

uint64_t Allocator::free_bytes_now() const {
  const std::vector<uint64_t> budget = heap_budget_free(context_.physical_device());
  return heap_ < budget.size() ? std::min(free_bytes(), budget[heap_]) : free_bytes();
}

void Allocator::set_limit(uint64_t bytes) {
  if (bytes < heap_bytes_) {
    heap_bytes_ = bytes;
    limited_ = true;
  }
}

Buffer Allocator::device(uint64_t bytes, const char* what) {
  bytes = std::max<uint64_t>(bytes, 4);
  if (allocated_ + bytes > heap_bytes_)
    throw DeviceError(DeviceError::Kind::OutOfMemory,
                      "out of device memory on " + context_.device_name() + ": " + what + " needs " + format_bytes(bytes) +
                          " with " + format_bytes(allocated_) + " already allocated of " + format_bytes(heap_bytes_) +
                          (limited_ ? " (--memory-limit)" : "") + "; the model does not fit on this device");
  Buffer b(context_, bytes, Memory::Device);
  allocated_ += bytes;
  CommandSequence seq(context_, 1);
  seq.zero(b);
  seq.submit_and_wait();
  return b;
}

void Allocator::release(Buffer& buffer, DescriptorCache& descriptors) {
  if (buffer.handle() == VK_NULL_HANDLE) return;
  descriptors.forget(buffer.handle());
  allocated_ -= std::min<uint64_t>(allocated_, std::max<uint64_t>(buffer.size(), 4));
  buffer = Buffer();
}

Buffer& ScratchBuffer::ensure(const Context& context, DescriptorCache& descriptors, uint64_t bytes) {
  bytes = std::max<uint64_t>(bytes, 4);
  if (buffer_.handle() != VK_NULL_HANDLE && buffer_.size() >= bytes) return buffer_;
  if (buffer_.handle() != VK_NULL_HANDLE) descriptors.forget(buffer_.handle());
  buffer_ = Buffer(context, bytes, Memory::HostVisible);
  return buffer_;
}

}  // namespace fafo::vulkan
