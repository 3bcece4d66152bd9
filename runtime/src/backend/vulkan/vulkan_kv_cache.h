// The Vulkan backend's KV cache: one K and one V buffer per layer in device memory
// (f32, or f16 packed two per 32-bit word), stored into by a step's kv_store (or the
// backend's rope_store) dispatches, exchanged and moved by the kv_permute kernel in a submission of its own,
// read back through staging. Captured queries are copied in the step into one
// host-visible buffer per layer.
#pragma once

#include <vector>

#include "backend/vulkan/allocator.h"
#include "backend/vulkan/buffer.h"
#include "fafo/backend.h"
#include "fafo/kv_cache.h"

namespace fafo::vulkan {

class CommandSequence;
class Context;
class DescriptorCache;
class Kernels;
class Transfer;

// What the cache needs from its backend while a step is recorded.
class StepTarget {
 public:
  virtual ~StepTarget() = default;
  virtual CommandSequence& recording() = 0;  // throws outside begin_step/finish_step
  virtual const StepBatch& step_batch() const = 0;
  virtual const Buffer& buffer_of(const Activation& a) const = 0;
  virtual const Buffer& step_info() const = 0;  // the step's header holds n_past
};

// The services the cache shares with its backend.
struct KvCacheServices {
  const Context& context;
  Kernels& kernels;
  Transfer& transfer;
  DescriptorCache& descriptors;
  Allocator& allocator;
  StepTarget& step;
};

class VulkanKvCache final : public KvCache {
 public:
  // Throws std::runtime_error when a layer exceeds the buffer range or the cache the
  // heap, with the sizes and a hint (--ctx-size).
  VulkanKvCache(const KvCacheShape& shape, const KvCacheServices& services);
  ~VulkanKvCache() override;

  void store(int32_t layer, const Activation& k, const Activation& v) override;
  void capture_queries(int32_t layer, const Activation& q) override;
  // The same from the first q_cols columns of rows `stride` floats apart (the fused qkv).
  void capture_queries(int32_t layer, const Buffer& rows, uint32_t q_cols, uint32_t stride);
  void write(int32_t layer, int32_t first, int32_t count, const float* keys, const float* values) override;
  std::vector<float> read_keys(int32_t layer, const std::vector<int32_t>& slots) override;
  std::vector<float> captured_queries(int32_t layer) override;
  void swap_slots(const SlotPairs& pairs) override { permute(pairs, true, "swap_kv"); }
  void move_slots(const SlotPairs& moves) override { permute(moves, false, "move_kv"); }

  const Buffer& keys(int32_t layer) const;
  const Buffer& values(int32_t layer) const;
  bool f16() const { return shape().type == KvCacheType::F16; }

 private:
  struct Capture {
    Buffer buffer;
    uint32_t rows = 0, cols = 0;
  };
  size_t value_bytes() const { return f16() ? sizeof(uint16_t) : sizeof(float); }
  void check_layer(int32_t layer, const char* what) const;
  void permute(const SlotPairs& pairs, bool swap, const char* what);

  KvCacheServices s_;
  std::vector<Buffer> keys_, values_;
  ScratchBuffer pairs_;
  std::vector<Capture> captures_;
};

}  // namespace fafo::vulkan
