// The host backend's KV cache (the cpu backend's): per layer, capacity x kv_dim keys and
// values in host memory (a latent cache: capacity x key_dim(layer) and capacity x
// value_dim(layer)): fp32 floats, or for an F16 cache fp16 words (half the memory), each
// value rounded to the nearest even fp16 as it is stored; readers widen them exactly, so
// an F16 cache computes with the very values a device's fp16 cache holds.
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

  // A layer's keys or values by physical slot: fp32 (F32) or fp16 words (F16); the
  // other pointer is null.
  struct Rows {
    const float* f32 = nullptr;
    const uint16_t* f16 = nullptr;
  };
  Rows keys(int32_t layer) const { return rows(keys_, half_keys_, layer); }
  Rows values(int32_t layer) const { return rows(values_, half_values_, layer); }
  // Bytes of host memory one cache of `shape` holds.
  static uint64_t bytes_for(const KvCacheShape& shape);

 private:
  void check_layer(int32_t layer, const char* what) const;
  void check_slot(int32_t slot, const char* what) const;
  bool halves() const { return shape().type == KvCacheType::F16; }
  // Copies n floats into the layer's keys or values at element `at`, as fp16 words in an
  // F16 cache.
  void store_values(bool keys, int32_t layer, size_t at, const float* src, size_t n);
  static Rows rows(const std::vector<std::vector<float>>& f32, const std::vector<std::vector<uint16_t>>& f16, int32_t layer) {
    const size_t l = static_cast<size_t>(layer);
    return l < f32.size() ? Rows{f32[l].data(), nullptr} : Rows{nullptr, f16.at(l).data()};
  }

  const StepRows& step_;
  int32_t segment_ = 0;
  size_t key_floats(int32_t layer) const { return static_cast<size_t>(shape().key_dim(layer)); }
  size_t value_floats(int32_t layer) const { return static_cast<size_t>(shape().value_dim(layer)); }
  std::vector<std::vector<float>> keys_, values_;               // F32: per layer
  std::vector<std::vector<uint16_t>> half_keys_, half_values_;  // F16: per layer
  std::vector<std::vector<float>> captured_;
};

}  // namespace fafo::host
