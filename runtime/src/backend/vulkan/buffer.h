// A storage buffer (move-only): its own VkBuffer, bound to a range of one of the
// Context's device memory blocks (memory_pool.h), which it returns when destroyed.
//   Memory::HostVisible  host-visible and coherent, mapped for the buffer's lifetime,
//                        and device-local too when the device has such memory
//                        (integrated GPUs, lavapipe, ReBAR).
//   Memory::Device       device-local; mapped only when that memory happens to be
//                        host-visible too, otherwise filled and read through a staging
//                        buffer (backend/vulkan/transfer.h).
// Its bytes are undefined until written (Allocator::device zeroes the backend's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <vulkan/vulkan.h>

#include "backend/vulkan/memory_pool.h"

namespace fafo::vulkan {

class Context;

enum class Memory { HostVisible, Device };

class Buffer {
 public:
  Buffer() = default;
  // Throws VulkanError when `bytes` exceeds maxStorageBufferRange,
  // maxMemoryAllocationSize or what the memory heap has left, or the device is out of
  // memory (the message says which and the sizes).
  Buffer(const Context& context, VkDeviceSize bytes, Memory memory = Memory::HostVisible);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  VkBuffer handle() const { return buffer_; }
  // Where the buffer lives: `size` bytes at `offset` of a memory block (memory_pool.h).
  const MemoryPool::Range& memory_range() const { return range_; }
  VkDeviceSize size() const { return size_; }
  // Whether upload()/download() work directly (the memory is mapped).
  bool mapped() const { return mapped_ != nullptr; }

  // Copies host data in or out (bounds checked). Reading is valid once the work that
  // wrote the buffer has completed (CommandSequence::submit_and_wait).
  void upload(const void* data, size_t bytes, size_t offset = 0);
  void download(void* data, size_t bytes, size_t offset = 0) const;
  void upload(std::span<const float> values) { upload(values.data(), values.size_bytes()); }
  void download(std::span<float> values) const { download(values.data(), values.size_bytes()); }

 private:
  void release() noexcept;

  VkDevice device_ = VK_NULL_HANDLE;
  VkBuffer buffer_ = VK_NULL_HANDLE;
  MemoryPool* pool_ = nullptr;
  MemoryPool::Range range_;
  void* mapped_ = nullptr;
  VkDeviceSize size_ = 0;
};

}  // namespace fafo::vulkan
