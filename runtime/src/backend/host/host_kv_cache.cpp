#include "backend/host/host_kv_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include "fafo/tensor_type.h"

namespace fafo::host {

uint64_t HostKvCache::bytes_for(const KvCacheShape& shape) {
  const uint64_t element = shape.type == KvCacheType::F16 ? sizeof(uint16_t) : sizeof(float);
  return element * static_cast<uint64_t>(shape.capacity) * static_cast<uint64_t>(shape.floats_per_entry());
}

HostKvCache::HostKvCache(const KvCacheShape& shape, const StepRows& step) : KvCache(shape), step_(step) {
  shape.validate();
  const double need = static_cast<double>(bytes_for(shape));
  const double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (have > 0 && need > 0.8 * have)
    throw std::runtime_error("the KV cache for a context of " + std::to_string(shape.capacity) + " tokens needs " +
                             std::to_string(need / (1 << 30)) + " GiB, more than this machine's memory (" +
                             std::to_string(have / (1 << 30)) + " GiB); use a smaller --ctx-size");
  for (int32_t l = 0; l < shape.n_layer; ++l) {
    const size_t k = static_cast<size_t>(shape.capacity) * key_floats(l), v = static_cast<size_t>(shape.capacity) * value_floats(l);
    if (halves()) {
      half_keys_.emplace_back(k, uint16_t{0});
      half_values_.emplace_back(v, uint16_t{0});
    } else {
      keys_.emplace_back(k, 0.0f);
      values_.emplace_back(v, 0.0f);
    }
  }
}

void HostKvCache::check_layer(int32_t layer, const char* what) const {
  if (layer < 0 || layer >= shape().n_layer) throw std::out_of_range(std::string(what) + ": layer outside the KV cache");
}

void HostKvCache::check_slot(int32_t slot, const char* what) const {
  if (slot < 0 || slot >= capacity()) throw std::out_of_range(std::string(what) + ": slot outside the cache");
}

void HostKvCache::store_values(bool keys, int32_t layer, size_t at, const float* src, size_t n) {
  const size_t l = static_cast<size_t>(layer);
  if (!halves()) {
    std::memcpy((keys ? keys_ : values_)[l].data() + at, src, n * sizeof(float));
    return;
  }
  uint16_t* dst = (keys ? half_keys_ : half_values_)[l].data() + at;
  for (size_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

void HostKvCache::store(int32_t layer, const Activation& k, const Activation& v) {
  check_layer(layer, "store");
  if (k.cols != shape().key_dim(layer) || v.cols != shape().value_dim(layer))
    throw std::invalid_argument("store: rows are not as wide as the cache's layer " + std::to_string(layer));
  const StepSegment seg = step_.step_batch().segment(segment_);
  const size_t rows = static_cast<size_t>(seg.size), at = static_cast<size_t>(seg.n_past), first = static_cast<size_t>(seg.first);
  store_values(true, layer, at * key_floats(layer), step_.data_of(k) + first * key_floats(layer), rows * key_floats(layer));
  store_values(false, layer, at * value_floats(layer), step_.data_of(v) + first * value_floats(layer),
               rows * value_floats(layer));
}

void HostKvCache::capture_queries(int32_t layer, const Activation& q) {
  check_layer(layer, "capture_queries");
  if (captured_.size() < static_cast<size_t>(shape().n_layer)) captured_.resize(static_cast<size_t>(shape().n_layer));
  auto& dst = captured_[static_cast<size_t>(layer)];
  dst.clear();
  const float* src = step_.data_of(q);
  const size_t cols = static_cast<size_t>(q.cols);
  const StepSegment seg = step_.step_batch().segment(segment_);  // captured_rows() count from its first row
  for (int32_t r : captured_rows())
    if (r >= 0 && r < seg.size)
      dst.insert(dst.end(), src + static_cast<size_t>(seg.first + r) * cols, src + static_cast<size_t>(seg.first + r + 1) * cols);
}

void HostKvCache::write(int32_t layer, int32_t first, int32_t count, const float* k, const float* v) {
  if (layer < 0 || layer >= shape().n_layer || first < 0 || count < 0 || first + count > capacity())
    throw std::out_of_range("write_kv: outside the cache");
  const size_t n = static_cast<size_t>(count), at = static_cast<size_t>(first);
  store_values(true, layer, at * key_floats(layer), k, n * key_floats(layer));
  store_values(false, layer, at * value_floats(layer), v, n * value_floats(layer));
}

std::vector<float> HostKvCache::read_keys(int32_t layer, const std::vector<int32_t>& slots) {
  check_layer(layer, "read_keys");
  const size_t n = key_floats(layer);
  std::vector<float> out(slots.size() * n);
  const Rows rows = keys(layer);
  for (size_t k = 0; k < slots.size(); ++k) {
    check_slot(slots[k], "read_keys");
    const size_t at = static_cast<size_t>(slots[k]) * n;
    if (rows.f32) std::memcpy(&out[k * n], rows.f32 + at, n * sizeof(float));
    else
      for (size_t i = 0; i < n; ++i) out[k * n + i] = fp16_to_fp32(rows.f16[at + i]);
  }
  return out;
}

std::vector<float> HostKvCache::captured_queries(int32_t layer) {
  return layer >= 0 && layer < static_cast<int32_t>(captured_.size()) ? captured_[static_cast<size_t>(layer)] : std::vector<float>{};
}

namespace {

// Calls f(data, n) for every layer's keys and values (n: elements a slot holds there).
template <class T, class F>
void each_store(std::vector<std::vector<T>>& keys, std::vector<std::vector<T>>& values, const KvCacheShape& shape, F f) {
  for (size_t l = 0; l < keys.size(); ++l) {
    f(keys[l].data(), static_cast<size_t>(shape.key_dim(static_cast<int32_t>(l))));
    f(values[l].data(), static_cast<size_t>(shape.value_dim(static_cast<int32_t>(l))));
  }
}

}  // namespace

void HostKvCache::swap_slots(const SlotPairs& pairs) {
  for (const auto& [a, b] : pairs) {
    check_slot(a, "swap_kv");
    check_slot(b, "swap_kv");
    const auto swap = [a = static_cast<size_t>(a), b = static_cast<size_t>(b)](auto* data, size_t n) {
      std::swap_ranges(data + a * n, data + (a + 1) * n, data + b * n);
    };
    each_store(keys_, values_, shape(), swap);
    each_store(half_keys_, half_values_, shape(), swap);
  }
}

void HostKvCache::move_slots(const SlotPairs& moves) {
  for (const auto& [src, dst] : moves) {
    check_slot(src, "move_kv");
    check_slot(dst, "move_kv");
    const auto move = [s = static_cast<size_t>(src), d = static_cast<size_t>(dst)](auto* data, size_t n) {
      std::memmove(data + d * n, data + s * n, n * sizeof(*data));
    };
    each_store(keys_, values_, shape(), move);
    each_store(half_keys_, half_values_, shape(), move);
  }
}

}  // namespace fafo::host
