// Attention as the StepBatch defines it (fafo/step_batch.h, fafo/backend.h), written
// directly from that definition for the reference backend: for each row, the list of KV
// slots it sees, then one softmax over exactly those keys. No parts, no combine.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "fafo/backend.h"
#include "fafo/kv_cache.h"

namespace fafo::reference {

// The physical KV slots row `row` of `batch` reads in layer `layer` of `kv` (the cache
// of the row's part of the step; n_past and `first` below are that part's), in the
// order it reads them:
//   - its view of the n_past committed entries: a FULL row, or any row in one of the
//     cache's dense layers, sees every committed entry in logical order (logical entry
//     l is at physical slot layout.physical_of(l); entries past the layout's size, written
//     with write() and unknown to it, at slot l); a COMPRESSED row sees the region, the
//     physical slots [0, min(region_count, n_past));
//   - then the batch tokens j <= row of its part its mask row sets, at slots
//     n_past + j - first.
// With window > 0 (a sliding-window layer, AttentionShape::window) only the keys whose
// positions are inside the row's window stay (a committed entry's position is its
// logical index: layout.logical_of(slot) for a region slot; a batch token's, its
// StepBatch position), in the same order. In a ring layer (KvCacheShape::ring) each key
// is at the ring slot of its cache index (a committed entry's logical index, batch
// token j's n_past + j - first) instead.
std::vector<int32_t> keys_seen(const StepBatch& batch, const KvCache& kv, int32_t layer, int32_t row,
                               int32_t window = 0);

// Where one head reads its keys or values: slot s's `width` floats at data + s * stride + offset.
struct HeadRows {
  const float* data = nullptr;
  int64_t stride = 0, offset = 0;
  int32_t width = 0;
  const float* at(int32_t slot) const { return data + slot * stride + offset; }
};

// One head's attention over `slots`: out[d] = sum_k w_k v_k[d] / sum_k w_k with
// w_k = exp(s_k - max_k s_k) and s_k = dot(q, key_k) * scale, soft-capped (softcap *
// tanh(s_k / softcap)) where softcap > 0. The weights are fp32, their sum is taken in
// double, and the weighted values are divided once, through one fp32 reciprocal. A
// finite `sink` (AttentionShape::sinks) is one more logit in the softmax, with no value:
// the max is taken over it too and exp(sink - max) joins the sum.
void attend_head(const float* q, const HeadRows& keys, const HeadRows& values, const std::vector<int32_t>& slots,
                 float scale, float softcap, float* out, float sink = -INFINITY);

}  // namespace fafo::reference
