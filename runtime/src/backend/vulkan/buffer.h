// A storage buffer that owns its VkBuffer and VkDeviceMemory (move-only). The memory
// is host-visible and coherent, mapped for the buffer's lifetime, and device-local
// too when the device has such memory (integrated GPUs, lavapipe, ReBAR). A staging
// path into device-only memory for discrete GPUs is later work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include <vulkan/vulkan.h>

namespace fafo::vulkan {

class Context;

class Buffer {
 public:
  Buffer() = default;
  // Throws VulkanError when `bytes` exceeds maxStorageBufferRange or the memory heap.
  Buffer(const Context& context, VkDeviceSize bytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  VkBuffer handle() const { return buffer_; }
  VkDeviceSize size() const { return size_; }

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
  VkDeviceMemory memory_ = VK_NULL_HANDLE;
  void* mapped_ = nullptr;
  VkDeviceSize size_ = 0;
};

}  // namespace fafo::vulkan
