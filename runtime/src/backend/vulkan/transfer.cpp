#include "backend/vulkan/transfer.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/context.h"

namespace fafo::vulkan {

Buffer& Transfer::staging(size_t bytes) {
  if (staging_.size() < bytes) {
    staging_ = Buffer();  // free the old one first
    staging_ = Buffer(context_, std::max<size_t>(bytes, size_t{1} << 20), Memory::HostVisible);
  }
  return staging_;
}

void Transfer::upload(Buffer& dst, const void* data, size_t bytes, size_t offset) {
  if (bytes == 0) return;
  if (offset + bytes > dst.size())
    throw std::out_of_range("upload of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                            " into a Vulkan buffer of " + std::to_string(dst.size()) + " bytes");
  if (dst.mapped()) {
    dst.upload(data, bytes, offset);
    return;
  }
  const auto* src = static_cast<const char*>(data);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min(kStagingBytes, bytes - done);
    Buffer& stage = staging(n);
    stage.upload(src + done, n);
    CommandSequence seq(context_, 1);
    seq.copy(stage, 0, dst, offset + done, n);
    seq.submit_and_wait();
    done += n;
  }
}

void Transfer::download(const Buffer& src, void* data, size_t bytes, size_t offset) {
  download_regions(src, {VkBufferCopy{offset, 0, bytes}}, data);
}

void Transfer::download_regions(const Buffer& src, const std::vector<VkBufferCopy>& regions, void* data) {
  auto* out = static_cast<char*>(data);
  if (src.mapped()) {
    for (const VkBufferCopy& r : regions) {
      src.download(out, r.size, r.srcOffset);
      out += r.size;
    }
    return;
  }
  // Gather the regions into staging, chunk by chunk (a region never straddles chunks
  // unless it is larger than a chunk by itself, in which case it is split).
  std::vector<VkBufferCopy> batch;
  size_t batch_bytes = 0;
  auto flush = [&] {
    if (batch.empty()) return;
    Buffer& stage = staging(batch_bytes);
    CommandSequence seq(context_, 1);
    seq.copy(src, stage, batch);
    seq.submit_and_wait();
    stage.download(out, batch_bytes, 0);
    out += batch_bytes;
    batch.clear();
    batch_bytes = 0;
  };
  for (const VkBufferCopy& r : regions) {
    for (VkDeviceSize done = 0; done < r.size;) {
      const size_t n = std::min<size_t>(kStagingBytes, r.size - done);
      if (batch_bytes + n > kStagingBytes) flush();
      batch.push_back(VkBufferCopy{r.srcOffset + done, batch_bytes, n});
      batch_bytes += n;
      done += n;
    }
  }
  flush();
}

}  // namespace fafo::vulkan
