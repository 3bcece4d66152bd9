#include "backend/host/host_kv_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include <unistd.h>

#include "fafo/tensor_type.h"

namespace fafo::host {

HostKvCache::HostKvCache(const KvCacheShape& shape, const StepRows& step)
    : KvCache(shape), step_(step), row_floats_(static_cast<size_t>(shape.kv_dim)) {
  if (shape.n_layer < 1 || shape.capacity < 1 || shape.kv_dim < 1)
    throw std::invalid_argument("a KV cache needs at least one layer, one entry and one value per entry");
  const size_t per_layer = static_cast<size_t>(shape.capacity) * row_floats_;
  const double need = 2.0 * sizeof(float) * static_cast<double>(per_layer) * shape.n_layer;
  const double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (have > 0 && need > 0.8 * have)
    throw std::runtime_error("the KV cache for a context of " + std::to_string(shape.capacity) + " tokens needs " +
                             std::to_string(need / (1 << 30)) + " GiB, more than this machine's memory (" +
                             std::to_string(have / (1 << 30)) + " GiB); use a smaller --ctx-size");
  keys_.assign(static_cast<size_t>(shape.n_layer), std::vector<float>(per_layer, 0.0f));
  values_.assign(static_cast<size_t>(shape.n_layer), std::vector<float>(per_layer, 0.0f));
}

void HostKvCache::check_layer(int32_t layer, const char* what) const {
  if (layer < 0 || layer >= shape().n_layer) throw std::out_of_range(std::string(what) + ": layer outside the KV cache");
}

void HostKvCache::check_slot(int32_t slot, const char* what) const {
  if (slot < 0 || slot >= capacity()) throw std::out_of_range(std::string(what) + ": slot outside the cache");
}

void HostKvCache::store_values(float* dst, const float* src, size_t n) const {
  if (shape().type == KvCacheType::F32) {
    std::memcpy(dst, src, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(fp32_to_fp16(src[i]));
}

void HostKvCache::store(int32_t layer, const Activation& k, const Activation& v) {
  check_layer(layer, "store");
  if (k.cols != shape().kv_dim || v.cols != shape().kv_dim) throw std::invalid_argument("store: rows are not kv_dim wide");
  const StepBatch& batch = step_.step_batch();
  const size_t at = static_cast<size_t>(batch.n_past()) * row_floats_;
  const size_t n = static_cast<size_t>(batch.size()) * row_floats_;
  store_values(&keys_[static_cast<size_t>(layer)][at], step_.data_of(k), n);
  store_values(&values_[static_cast<size_t>(layer)][at], step_.data_of(v), n);
}

void HostKvCache::capture_queries(int32_t layer, const Activation& q) {
  check_layer(layer, "capture_queries");
  if (captured_.size() < static_cast<size_t>(shape().n_layer)) captured_.resize(static_cast<size_t>(shape().n_layer));
  auto& dst = captured_[static_cast<size_t>(layer)];
  dst.clear();
  const float* src = step_.data_of(q);
  const size_t cols = static_cast<size_t>(q.cols);
  for (int32_t r : captured_rows())
    if (r >= 0 && r < step_.step_batch().size()) dst.insert(dst.end(), src + static_cast<size_t>(r) * cols, src + static_cast<size_t>(r + 1) * cols);
}

void HostKvCache::write(int32_t layer, int32_t first, int32_t count, const float* k, const float* v) {
  if (layer < 0 || layer >= shape().n_layer || first < 0 || count < 0 || first + count > capacity())
    throw std::out_of_range("write_kv: outside the cache");
  const size_t n = static_cast<size_t>(count) * row_floats_, at = static_cast<size_t>(first) * row_floats_;
  store_values(&keys_[static_cast<size_t>(layer)][at], k, n);
  store_values(&values_[static_cast<size_t>(layer)][at], v, n);
}

std::vector<float> HostKvCache::read_keys(int32_t layer, const std::vector<int32_t>& slots) {
  check_layer(layer, "read_keys");
  std::vector<float> out(slots.size() * row_floats_);
  for (size_t k = 0; k < slots.size(); ++k) {
    check_slot(slots[k], "read_keys");
    std::memcpy(&out[k * row_floats_], &keys_[static_cast<size_t>(layer)][static_cast<size_t>(slots[k]) * row_floats_],
                row_floats_ * sizeof(float));
  }
  return out;
}

std::vector<float> HostKvCache::captured_queries(int32_t layer) {
  return layer >= 0 && layer < static_cast<int32_t>(captured_.size()) ? captured_[static_cast<size_t>(layer)] : std::vector<float>{};
}

void HostKvCache::swap_slots(const SlotPairs& pairs) {
  const size_t n = row_floats_;
  for (const auto& [a, b] : pairs) {
    check_slot(a, "swap_kv");
    check_slot(b, "swap_kv");
    for (size_t l = 0; l < keys_.size(); ++l) {
      std::swap_ranges(&keys_[l][static_cast<size_t>(a) * n], &keys_[l][static_cast<size_t>(a) * n] + n, &keys_[l][static_cast<size_t>(b) * n]);
      std::swap_ranges(&values_[l][static_cast<size_t>(a) * n], &values_[l][static_cast<size_t>(a) * n] + n, &values_[l][static_cast<size_t>(b) * n]);
    }
  }
}

void HostKvCache::move_slots(const SlotPairs& moves) {
  const size_t n = row_floats_;
  for (const auto& [src, dst] : moves) {
    check_slot(src, "move_kv");
    check_slot(dst, "move_kv");
    for (size_t l = 0; l < keys_.size(); ++l) {
      std::memmove(&keys_[l][static_cast<size_t>(dst) * n], &keys_[l][static_cast<size_t>(src) * n], n * sizeof(float));
      std::memmove(&values_[l][static_cast<size_t>(dst) * n], &values_[l][static_cast<size_t>(src) * n], n * sizeof(float));
    }
  }
}

}  // namespace fafo::host
