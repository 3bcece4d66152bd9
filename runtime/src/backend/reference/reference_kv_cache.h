// The reference backend's KV cache: per layer, capacity entries of keys and values as
// fp32 vectors (a latent cache: each layer's latent widths; a ring layer: its ring's
// entries, KvCacheShape::ring). An F16 cache stores each
// value rounded to fp16 (nearest even) and widened back, the values a device's fp16
// cache holds.
#pragma once

#include <functional>
#include <vector>

#include "fafo/backend.h"
#include "fafo/kv_cache.h"

namespace fafo::reference {

class ReferenceKvCache final : public KvCache {
 public:
  // `step` gives the current step's batch (store() writes this cache's part at its
  // n_past) and `rows` an
  // activation's floats.
  ReferenceKvCache(const KvCacheShape& shape, std::function<const StepBatch&()> step,
                   std::function<const float*(const Activation&)> rows);

  void store(int32_t layer, const Activation& k, const Activation& v) override;
  void capture_queries(int32_t layer, const Activation& q) override;
  void write(int32_t layer, int32_t first, int32_t count, const float* keys, const float* values) override;
  std::vector<float> read_keys(int32_t layer, const std::vector<int32_t>& slots) override;
  std::vector<float> captured_queries(int32_t layer) override;
  void swap_slots(const SlotPairs& pairs) override;
  void move_slots(const SlotPairs& moves) override;

  // The part of the step begun last this cache is for (StepBatch::segment).
  void set_step_part(int32_t part) { part_ = part; }

  // Entry `slot` of a layer (a ring layer: its ring slot): key_dim(layer) / value_dim(layer) floats.
  const float* key(int32_t layer, int32_t slot) const;
  const float* value(int32_t layer, int32_t slot) const;

 private:
  int32_t part_ = 0;
  // Copies n floats (rows of `width`) to dst[at..] as the cache type keeps them: rounded
  // to fp16, or each row quantized to its blocks and dequantized (the reference keeps
  // floats: it is the oracle of the values, not of the memory).
  void put(std::vector<float>& dst, size_t at, const float* src, size_t n, size_t width) const;
  void check_layer(int32_t layer, const char* what) const;
  void check_slot(int32_t slot, const char* what) const;
  // op(entry a, entry b, floats) on the keys and then the values of every layer; with
  // `rings`, the ring layers' too, at the ring slots of a and b.
  void each_layer(int32_t a, int32_t b, bool rings, const std::function<void(float*, float*, size_t)>& op);

  std::function<const StepBatch&()> step_;
  std::function<const float*(const Activation&)> rows_;
  std::vector<std::vector<float>> keys_, values_;  // per layer, slot-major
  std::vector<std::vector<float>> captured_;
};

}  // namespace fafo::reference
