// The cos/sin tables of RoPE angles the host computes for the Vulkan kernels, so that
// every device rotates by the CPU reference's values (RopeParams::angle, then std::cos
// and std::sin): one row of n_dims / 2 (cos, sin) pairs per position.
//   - rope_cos_sin: the rows for a list of positions (StepEncoder: the step's rows);
//   - PositionRopeTable: a device buffer of the rows of every position below a KV
//     cache's capacity (latent_attention rotates the committed keys it recovers by
//     their logical index), made again only when the RoPE configuration or the
//     capacity changes.
#pragma once

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

#include "backend/vulkan/buffer.h"
#include "fafo/backend.h"

namespace fafo::vulkan {

class Allocator;
class DescriptorCache;
class Transfer;

// table[(r * (n_dims / 2) + pair) * 2 + {0, 1}] = cos, sin of p.angle(positions[r], pair).
std::vector<float> rope_cos_sin(const RopeParams& p, const std::vector<int32_t>& positions);

class PositionRopeTable {
 public:
  PositionRopeTable(Allocator& allocator, DescriptorCache& descriptors, Transfer& transfer)
      : allocator_(allocator), descriptors_(descriptors), transfer_(transfer) {}
  ~PositionRopeTable() { release(); }
  PositionRopeTable(const PositionRopeTable&) = delete;
  PositionRopeTable& operator=(const PositionRopeTable&) = delete;

  // The rows of positions 0..capacity-1 for `p` (device memory, counted by the
  // allocator; uploaded with its own submission, so also while a step is recorded).
  const Buffer& get(const RopeParams& p, int32_t capacity);
  // Frees the buffer (a new KV cache, or the backend going away).
  void release();

 private:
  using Key = std::tuple<int32_t, float, float, std::vector<float>, float, int32_t>;
  Allocator& allocator_;
  DescriptorCache& descriptors_;
  Transfer& transfer_;
  Buffer buffer_;
  std::optional<Key> key_;
};

}  // namespace fafo::vulkan
