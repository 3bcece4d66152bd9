// The backend-independent part of KvCache: cache type names, shapes and the layout.
#include "fafo/kv_cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fafo {

const char* kv_cache_type_name(KvCacheType t) { return t == KvCacheType::F16 ? "f16" : "f32"; }

KvCacheType parse_kv_cache_type(const std::string& name) {
  if (name == "f32") return KvCacheType::F32;
  if (name == "f16") return KvCacheType::F16;
  throw std::invalid_argument("unknown KV cache type '" + name + "' (use f32 or f16)");
}

int64_t KvCacheShape::floats_per_entry() const {
  int64_t n = 0;
  for (int32_t l = 0; l < n_layer; ++l) n += int64_t{key_dim(l)} + value_dim(l);
  return n;
}

void KvCacheShape::validate() const {
  if (n_layer < 1 || capacity < 1 || kv_dim < 1)
    throw std::invalid_argument("a KV cache needs at least one layer, one entry and one value per entry");
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

}  // namespace fafo
