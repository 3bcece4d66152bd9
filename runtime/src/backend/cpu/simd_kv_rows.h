// The `cpu` backend's reading of a packed KV cache (an F16 cache's fp16 words, a Q8_0 or
// Q4_0 cache's blocks) into floats for attention, with vector conversions: the floats of
// host::HostKvCache::Rows::widen (every fp16 value and every block value is a float, so
// any exact conversion gives the same bits).
#pragma once

#include <cstdint>

#include "backend/host/host_kv_cache.h"

namespace fafo::cpu {

// Values [first, first + n) of each of the `count` slots' rows, n floats apart in out.
void widen_kv_rows_simd(const host::HostKvCache::Rows& rows, const int32_t* slots, int32_t count, int32_t first, int32_t n,
                        float* out);

}  // namespace fafo::cpu
