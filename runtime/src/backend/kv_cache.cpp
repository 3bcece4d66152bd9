// The backend-independent part of KvCache: cache type names, shapes and the layout.
#include "fafo/kv_cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fafo {

const char* kv_cache_type_name(KvCacheType t) {
  switch (t) {
    case KvCacheType::F16: return "f16";
    case KvCacheType::Q8_0: return "q8_0";
    case KvCacheType::Q4_0: return "q4_0";
    case KvCacheType::F32: break;
  }
  return "f32";
}

KvCacheType parse_kv_cache_type(const std::string& name) {
  for (KvCacheType t : {KvCacheType::F32, KvCacheType::F16, KvCacheType::Q8_0, KvCacheType::Q4_0})
    if (name == kv_cache_type_name(t)) return t;
  throw std::invalid_argument("unknown KV cache type '" + name + "' (use f32, f16, q8_0 or q4_0)");
}

bool kv_cache_type_quantized(KvCacheType t) { return t == KvCacheType::Q8_0 || t == KvCacheType::Q4_0; }

uint64_t kv_row_bytes(KvCacheType t, int32_t width) {
  const uint64_t w = static_cast<uint64_t>(std::max(width, 0));
  switch (t) {
    case KvCacheType::F16: return 2 * w;
    case KvCacheType::Q8_0: return (w + 31) / 32 * 34;
    case KvCacheType::Q4_0: return (w + 31) / 32 * 18;
    case KvCacheType::F32: break;
  }
  return 4 * w;
}

uint64_t KvCacheShape::layer_entry_bytes(int32_t layer) const {
  return kv_row_bytes(type, key_dim(layer)) + kv_row_bytes(type, value_dim(layer));
}

uint64_t KvCacheShape::bytes_per_entry() const {
  uint64_t n = 0;
  for (int32_t l = 0; l < n_layer; ++l)
    if (ring(l) == 0) n += layer_entry_bytes(l);
  return n;
}

uint64_t KvCacheShape::ring_bytes() const {
  uint64_t n = 0;
  for (int32_t l = 0; l < n_layer; ++l) n += static_cast<uint64_t>(ring(l)) * layer_entry_bytes(l);
  return n;
}

int64_t KvCacheShape::floats_per_entry() const {
  int64_t n = 0;
  for (int32_t l = 0; l < n_layer; ++l) n += int64_t{key_dim(l)} + value_dim(l);
  return n;
}

void KvCacheShape::validate() const {
  if (n_layer < 1 || capacity < 1 || kv_dim < 1)
    throw std::invalid_argument("a KV cache needs at least one layer, one entry and one value per entry");
  if (kv_cache_type_quantized(type)) {
    if (!key_dims.empty() || !value_dims.empty())
      throw std::invalid_argument(std::string("a ") + kv_cache_type_name(type) +
                                  " KV cache is not offered for a latent (MLA) cache: use --cache-type f32 or f16");
    if (kv_dim % 32 != 0)
      throw std::invalid_argument(std::string("a ") + kv_cache_type_name(type) + " KV cache stores blocks of 32 values, and " +
                                  "this model's entries have " + std::to_string(kv_dim) +
                                  " keys and values: use --cache-type f32 or f16");
  }
  if (!windows.empty()) {
    if (windows.size() != static_cast<size_t>(n_layer))
      throw std::invalid_argument("a KV cache with sliding-window layers needs one window per layer (0: none)");
    if (ring_step > 0 && (!key_dims.empty() || !value_dims.empty()))
      throw std::invalid_argument("a latent (MLA) KV cache holds no rings for sliding-window layers");
  }
  if (ring_step < 0) throw std::invalid_argument("a KV cache's ring step must be >= 0");
  if (key_dims.empty() && value_dims.empty()) return;
  if (key_dims.size() != static_cast<size_t>(n_layer) || value_dims.size() != static_cast<size_t>(n_layer))
    throw std::invalid_argument("a latent KV cache needs one key width and one value width per layer");
  for (size_t l = 0; l < key_dims.size(); ++l)
    if (key_dims[l] < 1 || value_dims[l] < 1)
      throw std::invalid_argument("a latent KV cache needs positive widths (layer " + std::to_string(l) + ")");
}

void KvCache::reset_layout(int32_t region_size, int32_t dense_layers, int32_t committed) {
  if (committed < 0 || committed > capacity()) throw std::out_of_range("reset_layout: outside the cache");
  // Entries the layout does not know yet (written with write()) are at their logical slots.
  exchange(layout_.restore_order(std::min(committed, layout_.size())));
  KvLayout fresh(std::clamp(region_size, 0, capacity()));
  fresh.append(committed);
  layout_ = fresh;
  dense_layers_ = std::max(0, dense_layers);
}


void KvCache::check_rings(int32_t n_past, int32_t size, int32_t min_position) const {
  const KvCacheShape& s = shape();
  if (!s.has_rings()) return;
  if (size > s.ring_step)
    throw std::length_error("a step of " + std::to_string(size) + " tokens is longer than the " +
                            std::to_string(s.ring_step) + " the sliding-window layers' ring caches are sized for");
  // The rows' windows reach back to min_position - window + 1; after this step's stores a
  // ring of window + ring_step - 1 entries holds indices from end - ring on.
  const int32_t end = std::max(rings_end_, n_past + size);
  if (int64_t{end} - std::min(min_position, n_past) > s.ring_step)
    throw std::length_error("the sliding-window layers' ring caches no longer hold the entries a step at position " +
                            std::to_string(std::min(min_position, n_past)) + " reads (they hold up to entry " +
                            std::to_string(end) + "): feed the context again from its start");
}

int32_t KvCache::reusable(int32_t n) const {
  if (n <= 0 || !shape().has_rings()) return std::max(n, 0);
  return int64_t{rings_end_} - n <= shape().ring_step ? n : 0;
}

void KvCache::truncate(int32_t n) {
  if (reusable(n) < n)
    throw std::invalid_argument("truncate: the sliding-window layers' ring caches were overwritten past entry " +
                                std::to_string(n) + " (they hold up to entry " + std::to_string(rings_end_) +
                                "): keep no context and feed it again");
  exchange(layout_.truncate(n));
  if (n == 0) rings_end_ = 0;
}

}  // namespace fafo
