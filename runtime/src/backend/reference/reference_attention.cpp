#include "backend/reference/reference_attention.h"

#include <algorithm>
#include <cmath>

#include "backend/reference/reference_math.h"

namespace fafo::reference {

std::vector<int32_t> keys_seen(const StepBatch& batch, const KvCache& kv, int32_t layer, int32_t row, int32_t window) {
  const StepSegment part = batch.segment(batch.segment_of(row));
  const int32_t n_past = part.n_past;
  const int32_t position = batch.positions()[static_cast<size_t>(row)];
  auto inside = [&](int32_t key_position) { return window <= 0 || position - key_position < window; };
  const KvLayout& layout = kv.layout();
  // A ring layer finds a committed entry by its logical index and a batch token by its
  // cache index, each at its ring slot.
  const KvCacheShape& shape = kv.shape();
  const bool ring = shape.ring(layer) > 0;
  std::vector<int32_t> slots;
  if (batch.prefix(row) == PrefixView::Full || layer < kv.dense_layers()) {
    for (int32_t l = 0; l < n_past; ++l)
      if (inside(l)) slots.push_back(ring ? shape.ring_slot(layer, l) : l < layout.size() ? layout.physical_of(l) : l);
  } else {
    const int32_t region = std::min(kv.region_count(), n_past);
    for (int32_t s = 0; s < region; ++s) {
      const int32_t l = s < layout.size() ? layout.logical_of(s) : s;
      if (inside(l)) slots.push_back(ring ? shape.ring_slot(layer, l) : s);
    }
  }
  for (int32_t j = part.first; j <= row; ++j)
    if (batch.sees(row, j) && inside(batch.positions()[static_cast<size_t>(j)]))
      slots.push_back(shape.ring_slot(layer, n_past + j - part.first));
  return slots;
}

void attend_head(const float* q, const HeadRows& keys, const HeadRows& values, const std::vector<int32_t>& slots,
                 float scale, float softcap, float* out, float sink) {
  std::vector<float> score(slots.size());
  float max = sink;  // -inf without one
  for (size_t k = 0; k < slots.size(); ++k) {
    score[k] = dot(q, keys.at(slots[k]), keys.width) * scale;
    if (softcap > 0.0f) score[k] = soft_cap(score[k], softcap);
    max = std::max(max, score[k]);
  }
  double total = sink == -INFINITY ? 0.0 : std::exp(sink - max);
  std::fill(out, out + values.width, 0.0f);
  for (size_t k = 0; k < slots.size(); ++k) {
    const float w = std::exp(score[k] - max);
    total += w;
    const float* v = values.at(slots[k]);
    for (int32_t d = 0; d < values.width; ++d) out[d] += w * v[d];
  }
  const float inverse = total > 0 ? static_cast<float>(1.0 / total) : 0.0f;
  for (int32_t d = 0; d < values.width; ++d) out[d] *= inverse;
}

}  // namespace fafo::reference
