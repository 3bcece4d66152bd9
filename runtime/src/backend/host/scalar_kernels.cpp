#include "backend/host/scalar_kernels.h"

#include <algorithm>
#include <cmath>

namespace fafo::scalar {

void rms_norm_row(const float* x, const float* gain, float eps, float* out, int64_t n) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * gain[i];
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }

float gelu_tanh(float x) {
  const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + std::tanh(std::clamp(inner, -10.0f, 10.0f)));
}

float swiglu_oai(float gate, float up) {
  const float g = std::min(gate, kSwigluOaiLimit);
  const float u = std::clamp(up, -kSwigluOaiLimit, kSwigluOaiLimit);
  return g / (1.0f + std::exp(-kSwigluOaiAlpha * g)) * (u + 1.0f);
}

float soft_cap(float x, float cap) { return cap * std::tanh(std::clamp(x / cap, -10.0f, 10.0f)); }

int32_t argmax_row(const float* x, int64_t n) {
  int32_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return -1;
    if (x[i] > x[best]) best = static_cast<int32_t>(i);
  }
  return n == 0 || x[best] == -INFINITY ? -2 : best;
}

AttentionPart attend_head_part(const float* q, const KvRows& keys, const KvRows& values, const int32_t* slots,
                               int32_t n_keys, ScoreMap score, float* scratch, float* acc) {
  AttentionPart part;
  for (int32_t j = 0; j < n_keys; ++j) {
    scratch[j] = score(dot(q, keys.row(slots[j]), keys.width));
    part.max = std::max(part.max, scratch[j]);
  }
  std::fill(acc, acc + values.width, 0.0f);
  for (int32_t j = 0; j < n_keys; ++j) {
    const float w = std::exp(scratch[j] - part.max);
    part.sum += w;
    const float* v = values.row(slots[j]);
    for (int32_t d = 0; d < values.width; ++d) acc[d] += w * v[d];
  }
  return part;
}

void combine_parts(const AttentionPart* parts, const float* accs, int32_t n_parts, int32_t width, float* out,
                   float sink) {
  float max = sink;  // -inf without one
  for (int32_t p = 0; p < n_parts; ++p) max = std::max(max, parts[p].max);
  double total = sink == -INFINITY ? 0.0 : std::exp(sink - max);
  std::fill(out, out + width, 0.0f);
  for (int32_t p = 0; p < n_parts; ++p) {
    if (parts[p].sum == 0.0) continue;
    const float rescale = std::exp(parts[p].max - max);
    total += parts[p].sum * rescale;
    for (int32_t d = 0; d < width; ++d) out[d] += accs[static_cast<size_t>(p) * static_cast<size_t>(width) + static_cast<size_t>(d)] * rescale;
  }
  const float inv = total > 0.0 ? static_cast<float>(1.0 / total) : 0.0f;
  for (int32_t d = 0; d < width; ++d) out[d] *= inv;
}

}  // namespace fafo::scalar
