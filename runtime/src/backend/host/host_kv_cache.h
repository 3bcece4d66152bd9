// The host backend's KV cache (the cpu backend's): per layer, capacity x kv_dim keys and
// values in host memory (a latent cache: capacity x key_dim(layer) and capacity x
// value_dim(layer); a ring layer, KvCacheShape::ring: its ring's entries): fp32 floats; for an F16 cache fp16 words (half the memory), each
// value rounded to the nearest even fp16 as it is stored; for Q8_0 / Q4_0 each entry's
// row as GGUF blocks (fafo/kv_cache.h). Readers widen or dequantize exactly, so a cache
// computes with the very values a device's cache of the same type holds.
#pragma once

#include <cstdint>
#include <vector>

#include "fafo/backend.h"
#include "fafo/kv_cache.h"

namespace fafo::host {

// What the cache needs from its backend during a step: the step and its buffers.
class StepRows {
 public:
  virtual ~StepRows() = default;
  virtual const StepBatch& step_batch() const = 0;
  virtual const float* data_of(const Activation& a) const = 0;
};

class HostKvCache final : public KvCache {
 public:
  // Throws std::runtime_error when the cache would not fit in this machine's memory.
  HostKvCache(const KvCacheShape& shape, const StepRows& step);

  void store(int32_t layer, const Activation& k, const Activation& v) override;
  void capture_queries(int32_t layer, const Activation& q) override;
  void write(int32_t layer, int32_t first, int32_t count, const float* keys, const float* values) override;
  std::vector<float> read_keys(int32_t layer, const std::vector<int32_t>& slots) override;
  std::vector<float> captured_queries(int32_t layer) override;
  void swap_slots(const SlotPairs& pairs) override;
  void move_slots(const SlotPairs& moves) override;

  // The part of the step begun last this cache is for (StepBatch::segment).
  void set_step_segment(int32_t s) { segment_ = s; }

  // A layer's keys or values by physical slot (a ring layer: ring slot), `row_bytes` a slot: fp32 floats (F32:
  // f32 set), or fp16 words or blocks of `type` (packed set).
  struct Rows {
    const float* f32 = nullptr;
    const uint8_t* packed = nullptr;
    KvCacheType type = KvCacheType::F32;
    size_t row_bytes = 0;
    // Values [first, first + n) of slot `slot`'s row, as floats, into out.
    void widen(int32_t slot, int32_t first, int32_t n, float* out) const;
  };
  Rows keys(int32_t layer) const { return rows(keys_, packed_keys_, layer, shape().key_dim(layer)); }
  Rows values(int32_t layer) const { return rows(values_, packed_values_, layer, shape().value_dim(layer)); }
  // Bytes of host memory one cache of `shape` holds.
  static uint64_t bytes_for(const KvCacheShape& shape);

 private:
  void check_layer(int32_t layer, const char* what) const;
  void check_slot(int32_t slot, const char* what) const;
  bool packed() const { return shape().type != KvCacheType::F32; }
  // Writes `count` entries (rows of the layer's key or value width) of cache indices
  // index.. (at their ring slots in a ring layer).
  void store_rows(bool keys, int32_t layer, size_t index, const float* src, size_t count);
  // Writes `count` entries at slots slot...
  void store_slots(bool keys, int32_t layer, size_t slot, const float* src, size_t count);
  Rows rows(const std::vector<std::vector<float>>& f32, const std::vector<std::vector<uint8_t>>& bytes, int32_t layer,
            int32_t width) const {
    const size_t l = static_cast<size_t>(layer);
    if (l < f32.size()) return Rows{f32[l].data(), nullptr, KvCacheType::F32, kv_row_bytes(KvCacheType::F32, width)};
    return Rows{nullptr, bytes.at(l).data(), shape().type, kv_row_bytes(shape().type, width)};
  }

  const StepRows& step_;
  int32_t segment_ = 0;
  size_t key_floats(int32_t layer) const { return static_cast<size_t>(shape().key_dim(layer)); }
  size_t value_floats(int32_t layer) const { return static_cast<size_t>(shape().value_dim(layer)); }
  std::vector<std::vector<float>> keys_, values_;               // F32: per layer
  std::vector<std::vector<uint8_t>> packed_keys_, packed_values_;  // the other types: per layer
  std::vector<std::vector<float>> captured_;
};

}  // namespace fafo::host
