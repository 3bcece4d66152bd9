#include "backend/reference/reference_math.h"

#include <algorithm>
#include <cmath>

namespace fafo::reference {

float dot(const float* a, const float* b, int64_t n) {
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += a[i + k] * b[i + k];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7])) + tail;
}

void rms_norm_row(const float* x, const float* gain, float eps, float* out, int64_t n) {
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) squares += static_cast<double>(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(n) + eps));
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * gain[i];
}

void rope_head(float* head, int32_t position, const RopeParams& p) {
  const int32_t pairs = p.n_dims / 2;
  for (int32_t i = 0; i < pairs; ++i) {
    const float theta = p.angle(position, i);
    const float cos_t = std::cos(theta) * p.attn_factor, sin_t = std::sin(theta) * p.attn_factor;
    const int32_t a = p.neox ? i : 2 * i;
    const int32_t b = p.neox ? i + pairs : 2 * i + 1;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * cos_t - x1 * sin_t;
    head[b] = x0 * sin_t + x1 * cos_t;
  }
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
  int64_t best = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return -1;
    if (x[i] > x[best]) best = i;
  }
  if (n == 0 || x[best] == -INFINITY) return -2;
  return static_cast<int32_t>(best);
}

}  // namespace fafo::reference
