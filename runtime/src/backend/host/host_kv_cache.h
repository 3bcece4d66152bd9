// The host backend's KV cache (the cpu backend's): per layer, capacity x kv_dim floats of
// keys and values in host memory (a latent cache: capacity x key_dim(layer) and
// capacity x value_dim(layer)). An F16 cache keeps fp32 storage here but rounds every
// stored value to fp16, so it computes with the very values a device's fp16 cache holds.
#pragma once

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

  const float* keys(int32_t layer) const { return keys_[static_cast<size_t>(layer)].data(); }
  const float* values(int32_t layer) const { return values_[static_cast<size_t>(layer)].data(); }

 private:
  void check_layer(int32_t layer, const char* what) const;
  void check_slot(int32_t slot, const char* what) const;
  // Copies n values into the cache, rounded to fp16 for an F16 cache.
  void store_values(float* dst, const float* src, size_t n) const;

  const StepRows& step_;
  int32_t segment_ = 0;
  size_t key_floats(int32_t layer) const { return static_cast<size_t>(shape().key_dim(layer)); }
  size_t value_floats(int32_t layer) const { return static_cast<size_t>(shape().value_dim(layer)); }
  std::vector<std::vector<float>> keys_, values_;
  std::vector<std::vector<float>> captured_;
};

}  // namespace fafo::host
