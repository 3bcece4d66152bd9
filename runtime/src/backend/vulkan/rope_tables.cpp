#include "backend/vulkan/rope_tables.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/vulkan/allocator.h"
#include "backend/vulkan/transfer.h"

namespace fafo::vulkan {

std::vector<float> rope_cos_sin(const RopeParams& p, const std::vector<int32_t>& positions) {
  const size_t half = static_cast<size_t>(std::max(p.n_dims / 2, 0));
  std::vector<float> table(positions.size() * half * 2);
  for (size_t r = 0; r < positions.size(); ++r)
    for (size_t i = 0; i < half; ++i) {
      const float theta = p.angle(positions[r], static_cast<int32_t>(i));
      table[(r * half + i) * 2] = std::cos(theta) * p.attn_factor;
      table[(r * half + i) * 2 + 1] = std::sin(theta) * p.attn_factor;
    }
  return table;
}

const Buffer& PositionRopeTable::get(const RopeParams& p, int32_t capacity) {
  Key key = std::make_tuple(p.n_dims, p.freq_base, p.freq_scale, p.freq_factors, p.attn_factor, capacity);
  if (key_ && *key_ == key) return buffer_;
  std::vector<int32_t> positions(static_cast<size_t>(std::max(capacity, 0)));
  std::iota(positions.begin(), positions.end(), 0);
  const std::vector<float> table = rope_cos_sin(p, positions);
  const uint64_t bytes = std::max<uint64_t>(table.size() * sizeof(float), 4);
  key_.reset();
  if (buffer_.handle() == VK_NULL_HANDLE || buffer_.size() != bytes) {
    release();
    buffer_ = allocator_.device(bytes, "the RoPE table of an MLA model's positions");
  }
  if (!table.empty()) transfer_.upload(buffer_, table.data(), table.size() * sizeof(float));
  key_ = std::move(key);
  return buffer_;
}

void PositionRopeTable::release() {
  key_.reset();
  allocator_.release(buffer_, descriptors_);
}

}  // namespace fafo::vulkan
