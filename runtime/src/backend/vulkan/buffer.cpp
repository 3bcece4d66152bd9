#include "backend/vulkan/buffer.h"

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "backend/vulkan/context.h"
#include "backend/vulkan/vulkan_error.h"

namespace fafo::vulkan {

Buffer::Buffer(const Context& context, VkDeviceSize bytes, Memory memory) : device_(context.device()), size_(bytes) {
  if (bytes == 0) throw std::invalid_argument("Vulkan buffer of 0 bytes");
  const VkDeviceSize range = context.properties().limits.maxStorageBufferRange;
  if (bytes > range)
    throw VulkanError("a Vulkan buffer of " + std::to_string(bytes) + " bytes exceeds maxStorageBufferRange (" +
                      std::to_string(range) + " bytes) of " + context.device_name());
  try {
    VkBufferCreateInfo info{};
    info.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    info.size = bytes;
    info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    check(vkCreateBuffer(device_, &info, nullptr, &buffer_), "vkCreateBuffer");

    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(device_, buffer_, &req);
    constexpr VkMemoryPropertyFlags host = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    const uint32_t type = memory == Memory::HostVisible
                              ? context.find_memory_type(req.memoryTypeBits, host, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)
                              : context.find_memory_type(req.memoryTypeBits, 0, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    pool_ = &context.memory();
    range_ = pool_->allocate(req, type);
    check(vkBindBufferMemory(device_, buffer_, range_.memory, range_.offset), "vkBindBufferMemory");
    mapped_ = range_.mapped;
  } catch (...) {
    release();
    throw;
  }
}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept
    : device_(std::exchange(other.device_, VK_NULL_HANDLE)),
      buffer_(std::exchange(other.buffer_, VK_NULL_HANDLE)),
      pool_(std::exchange(other.pool_, nullptr)),
      range_(std::exchange(other.range_, MemoryPool::Range{})),
      mapped_(std::exchange(other.mapped_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    device_ = std::exchange(other.device_, VK_NULL_HANDLE);
    buffer_ = std::exchange(other.buffer_, VK_NULL_HANDLE);
    pool_ = std::exchange(other.pool_, nullptr);
    range_ = std::exchange(other.range_, MemoryPool::Range{});
    mapped_ = std::exchange(other.mapped_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void Buffer::release() noexcept {
  if (device_ == VK_NULL_HANDLE) return;
  if (buffer_ != VK_NULL_HANDLE) vkDestroyBuffer(device_, buffer_, nullptr);
  if (pool_) pool_->free(range_);
  mapped_ = nullptr;
  buffer_ = VK_NULL_HANDLE;
  pool_ = nullptr;
  range_ = MemoryPool::Range{};
  device_ = VK_NULL_HANDLE;
  size_ = 0;
}

void Buffer::upload(const void* data, size_t bytes, size_t offset) {
  if (!mapped_) throw std::logic_error("upload into a Vulkan buffer that is empty or not host-visible");
  if (offset + bytes > size_)
    throw std::out_of_range("upload of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                            " into a Vulkan buffer of " + std::to_string(size_) + " bytes");
  std::memcpy(static_cast<char*>(mapped_) + offset, data, bytes);
}

void Buffer::download(void* data, size_t bytes, size_t offset) const {
  if (!mapped_) throw std::logic_error("download from a Vulkan buffer that is empty or not host-visible");
  if (offset + bytes > size_)
    throw std::out_of_range("download of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                            " from a Vulkan buffer of " + std::to_string(size_) + " bytes");
  std::memcpy(data, static_cast<const char*>(mapped_) + offset, bytes);
}

}  // namespace fafo::vulkan
