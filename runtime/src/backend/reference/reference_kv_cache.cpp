#include "backend/reference/reference_kv_cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "fafo/tensor_type.h"

namespace fafo::reference {

ReferenceKvCache::ReferenceKvCache(const KvCacheShape& shape, std::function<const StepBatch&()> step,
                                   std::function<const float*(const Activation&)> rows)
    : KvCache(shape), step_(std::move(step)), rows_(std::move(rows)) {
  shape.validate();
  for (int32_t l = 0; l < shape.n_layer; ++l) {  // a ring layer holds its ring's entries
    keys_.emplace_back(static_cast<size_t>(shape.entries(l)) * static_cast<size_t>(shape.key_dim(l)), 0.0f);
    values_.emplace_back(static_cast<size_t>(shape.entries(l)) * static_cast<size_t>(shape.value_dim(l)), 0.0f);
  }
  captured_.resize(static_cast<size_t>(shape.n_layer));
}

void ReferenceKvCache::check_layer(int32_t layer, const char* what) const {
  if (layer < 0 || layer >= shape().n_layer) throw std::out_of_range(std::string(what) + ": layer outside the KV cache");
}

void ReferenceKvCache::check_slot(int32_t slot, const char* what) const {
  if (slot < 0 || slot >= capacity()) throw std::out_of_range(std::string(what) + ": slot outside the cache");
}

void ReferenceKvCache::put(std::vector<float>& dst, size_t at, const float* src, size_t n, size_t width) const {
  if (kv_cache_type_quantized(shape().type)) {
    // Each entry's row as its blocks, and back: the values a quantized cache computes with.
    const TensorType blocks = shape().type == KvCacheType::Q8_0 ? TensorType::Q8_0 : TensorType::Q4_0;
    std::vector<uint8_t> packed(tensor_row_bytes(blocks, static_cast<int64_t>(width)));
    for (size_t r = 0; r < n / width; ++r) {
      quantize_row(blocks, src + r * width, packed.data(), static_cast<int64_t>(width));
      dequantize_row(blocks, packed.data(), dst.data() + at + r * width, static_cast<int64_t>(width));
    }
    return;
  }
  for (size_t i = 0; i < n; ++i)
    dst[at + i] = shape().type == KvCacheType::F16 ? fp16_to_fp32(fp32_to_fp16(src[i])) : src[i];
}

const float* ReferenceKvCache::key(int32_t layer, int32_t slot) const {
  return keys_[static_cast<size_t>(layer)].data() + static_cast<size_t>(slot) * static_cast<size_t>(shape().key_dim(layer));
}

const float* ReferenceKvCache::value(int32_t layer, int32_t slot) const {
  return values_[static_cast<size_t>(layer)].data() +
         static_cast<size_t>(slot) * static_cast<size_t>(shape().value_dim(layer));
}

void ReferenceKvCache::store(int32_t layer, const Activation& k, const Activation& v) {
  check_layer(layer, "store");
  const size_t kd = static_cast<size_t>(shape().key_dim(layer)), vd = static_cast<size_t>(shape().value_dim(layer));
  if (static_cast<size_t>(k.cols) != kd || static_cast<size_t>(v.cols) != vd)
    throw std::invalid_argument("store: rows are not as wide as the cache's layer " + std::to_string(layer));
  const StepSegment part = step_().segment(part_);
  for (int32_t i = 0; i < part.size; ++i) {  // row by row: a ring's slots wrap
    const size_t at = static_cast<size_t>(shape().ring_slot(layer, part.n_past + i));
    const size_t row = static_cast<size_t>(part.first + i);
    put(keys_[static_cast<size_t>(layer)], at * kd, rows_(k) + row * kd, kd, kd);
    put(values_[static_cast<size_t>(layer)], at * vd, rows_(v) + row * vd, vd, vd);
  }
}

void ReferenceKvCache::capture_queries(int32_t layer, const Activation& q) {
  check_layer(layer, "capture_queries");
  std::vector<float>& out = captured_[static_cast<size_t>(layer)];
  out.clear();
  const float* all = rows_(q);
  const StepSegment part = step_().segment(part_);  // captured rows count from its first row
  for (int32_t r : captured_rows())
    if (r >= 0 && r < part.size)
      out.insert(out.end(), all + static_cast<int64_t>(part.first + r) * q.cols, all + static_cast<int64_t>(part.first + r + 1) * q.cols);
}

void ReferenceKvCache::write(int32_t layer, int32_t first, int32_t count, const float* keys, const float* values) {
  if (layer < 0 || layer >= shape().n_layer || first < 0 || count < 0 || first + count > capacity())
    throw std::out_of_range("write_kv: outside the cache");
  const size_t kd = static_cast<size_t>(shape().key_dim(layer)), vd = static_cast<size_t>(shape().value_dim(layer));
  for (int32_t i = 0; i < count; ++i) {
    const size_t at = static_cast<size_t>(shape().ring_slot(layer, first + i));
    put(keys_[static_cast<size_t>(layer)], at * kd, keys + static_cast<size_t>(i) * kd, kd, kd);
    put(values_[static_cast<size_t>(layer)], at * vd, values + static_cast<size_t>(i) * vd, vd, vd);
  }
  note_written(first + count);
}

std::vector<float> ReferenceKvCache::read_keys(int32_t layer, const std::vector<int32_t>& slots) {
  check_layer(layer, "read_keys");
  const int32_t kd = shape().key_dim(layer);
  std::vector<float> out;
  out.reserve(slots.size() * static_cast<size_t>(kd));
  for (int32_t s : slots) {
    check_slot(s, "read_keys");
    const int32_t at = shape().ring_slot(layer, s);
    out.insert(out.end(), key(layer, at), key(layer, at) + kd);
  }
  return out;
}

std::vector<float> ReferenceKvCache::captured_queries(int32_t layer) {
  return layer >= 0 && layer < shape().n_layer ? captured_[static_cast<size_t>(layer)] : std::vector<float>{};
}

void ReferenceKvCache::each_layer(int32_t a, int32_t b, bool rings, const std::function<void(float*, float*, size_t)>& op) {
  for (int32_t l = 0; l < shape().n_layer; ++l) {
    if (shape().ring(l) > 0 && !rings) continue;
    const size_t x = static_cast<size_t>(shape().ring_slot(l, a)), y = static_cast<size_t>(shape().ring_slot(l, b));
    const size_t kd = static_cast<size_t>(shape().key_dim(l)), vd = static_cast<size_t>(shape().value_dim(l));
    float* k = keys_[static_cast<size_t>(l)].data();
    float* v = values_[static_cast<size_t>(l)].data();
    op(k + x * kd, k + y * kd, kd);
    op(v + x * vd, v + y * vd, vd);
  }
}

void ReferenceKvCache::swap_slots(const SlotPairs& pairs) {
  for (const auto& [a, b] : pairs) {
    check_slot(a, "swap_kv");
    check_slot(b, "swap_kv");
    each_layer(a, b, false, [](float* x, float* y, size_t n) { std::swap_ranges(x, x + n, y); });
  }
}

void ReferenceKvCache::move_slots(const SlotPairs& moves) {
  for (const auto& [src, dst] : moves) {
    check_slot(src, "move_kv");
    check_slot(dst, "move_kv");
    each_layer(src, dst, true, [](float* from, float* to, size_t n) { std::copy_n(from, n, to); });
  }
}

}  // namespace fafo::reference
