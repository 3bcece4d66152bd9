// The Vulkan backend's KV cache: one K and one V buffer per layer in device memory (a
// ring layer's, KvCacheShape::ring, its ring's entries long)
// (f32, f16 packed two per 32-bit word, or GGUF's Q8_0 / Q4_0 blocks one after another:
// shaders/kv_blocks.glsl, kv_dim a multiple of 64 so an entry is whole words), stored into by a step's kv_store (or the
// backend's rope_store) dispatches, exchanged and moved by the kv_permute kernel in a submission of its own,
// read back through staging. Captured queries are copied in the step into one
// host-visible buffer per layer.
//
// A latent cache (KvCacheShape::latent, MLA models) stores key_dim(layer) and
// value_dim(layer) floats per entry instead of kv_dim: an f16 entry is (width + 1) / 2
// words, so odd widths are padded with a zero half. It also holds the two fp32 buffers
// latent_attention recovers one layer's keys and values into (capacity x kv_dim each,
// shared by the layers), counted with the cache.
#pragma once

#include <vector>

#include "backend/vulkan/allocator.h"
#include "backend/vulkan/buffer.h"
#include "backend/vulkan/kernels.h"
#include "fafo/backend.h"
#include "fafo/kv_cache.h"

namespace fafo::vulkan {

class CommandSequence;
class Context;
class DescriptorCache;
class Transfer;

// What the cache needs from its backend while a step is recorded.
class StepTarget {
 public:
  virtual ~StepTarget() = default;
  virtual CommandSequence& recording() = 0;  // throws outside begin_step/finish_step
  virtual const StepBatch& step_batch() const = 0;
  virtual const Buffer& buffer_of(const Activation& a) const = 0;
  // Part `part`'s step_info (StepEncoder): its header holds the part's n_past and first row.
  virtual const Buffer& step_info(int32_t part) const = 0;
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

  // Which part (sequence) of the step begun last this cache is: store and
  // capture_queries take that part's rows (VulkanBackend sets it at each step).
  void set_step_part(int32_t part) { part_ = part; }

  const Buffer& keys(int32_t layer) const;
  const Buffer& values(int32_t layer) const;
  bool f16() const { return shape().type == KvCacheType::F16; }
  Kernels::KvBlocks blocks() const {
    return shape().type == KvCacheType::Q8_0   ? Kernels::KvBlocks::Q8_0
           : shape().type == KvCacheType::Q4_0 ? Kernels::KvBlocks::Q4_0
                                               : Kernels::KvBlocks::None;
  }
  // 32-bit words per entry of a layer's keys and values.
  uint32_t key_words(int32_t layer) const { return words_for(shape().key_dim(layer)); }
  uint32_t value_words(int32_t layer) const { return words_for(shape().value_dim(layer)); }
  // A latent cache's recovery buffers (std::logic_error for a plain cache).
  const Buffer& recovered_keys() const;
  const Buffer& recovered_values() const;

 private:
  struct Capture {
    Buffer buffer;
    uint32_t rows = 0, cols = 0;
  };
  uint32_t words_for(int32_t width) const {
    if (blocks() != Kernels::KvBlocks::None) return static_cast<uint32_t>(Kernels::block_words(blocks(), static_cast<uint64_t>(width)));
    return static_cast<uint32_t>(f16() ? (width + 1) / 2 : width);
  }
  void check_layer(int32_t layer, const char* what) const;
  // write() of `count` entries at slots first.. (no ring arithmetic).
  void write_entries(int32_t layer, int32_t first, int32_t count, const float* k, const float* v);
  void permute(const SlotPairs& pairs, bool swap, const char* what);

  KvCacheServices s_;
  std::vector<Buffer> keys_, values_;
  Buffer recovered_keys_, recovered_values_;  // a latent cache's
  ScratchBuffer pairs_;
  std::vector<Capture> captures_;
  int32_t part_ = 0;
};

}  // namespace fafo::vulkan
