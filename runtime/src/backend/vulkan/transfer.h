// Moving bytes between the host and device buffers. A buffer whose memory is mapped
// (lavapipe, integrated GPUs, ReBAR) is written in place; any other goes through a
// host-visible staging buffer, in chunks of at most kStagingBytes, one submission per
// chunk. Used outside steps only: uploads at load time, KV set-up, reads of results.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <vulkan/vulkan.h>

#include "backend/vulkan/buffer.h"

namespace fafo::vulkan {

class Context;

class Transfer {
 public:
  static constexpr size_t kStagingBytes = size_t{32} << 20;

  explicit Transfer(const Context& context) : context_(context) {}

  void upload(Buffer& dst, const void* data, size_t bytes, size_t offset = 0);
  void download(const Buffer& src, void* data, size_t bytes, size_t offset = 0);
  // Reads `regions` of src (srcOffset, size) into consecutive bytes of `data`.
  void download_regions(const Buffer& src, const std::vector<VkBufferCopy>& regions, void* data);

 private:
  Buffer& staging(size_t bytes);

  const Context& context_;
  Buffer staging_;
};

}  // namespace fafo::vulkan
