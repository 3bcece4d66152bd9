// The backend-independent part of KvCache: cache type names and the layout.
#include "fafo/kv_cache.h"

#include <algorithm>
#include <stdexcept>

namespace fafo {

const char* kv_cache_type_name(KvCacheType t) { return t == KvCacheType::F16 ? "f16" : "f32"; }

KvCacheType parse_kv_cache_type(const std::string& name) {
  if (name == "f32") return KvCacheType::F32;
  if (name == "f16") return KvCacheType::F16;
  throw std::invalid_argument("unknown KV cache type '" + name + "' (use f32 or f16)");
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
