#include "util/fp32_loops.h"

#include <cmath>

namespace fafo::scalar {

void add_scaled(float* dst, const float* src, float w, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += w * src[i];
}

float dot(const float* a, const float* b, int64_t n) {
  // Eight independent partial sums: vectorizable and a fixed summation order.
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

void rope_head(float* head, int32_t pos, const RopeParams& p) {
  const int32_t half = p.n_dims / 2;
  for (int32_t i = 0; i < half; ++i) {
    const float theta = p.angle(pos, i);
    const float c = std::cos(theta) * p.attn_factor, s = std::sin(theta) * p.attn_factor;
    // NEOX pairs dimension i with i + n_dims/2; the "normal" layout pairs 2i with 2i+1.
    const int32_t a = p.neox ? i : 2 * i;
    const int32_t b = p.neox ? i + half : 2 * i + 1;
    const float x0 = head[a], x1 = head[b];
    head[a] = x0 * c - x1 * s;
    head[b] = x0 * s + x1 * c;
  }
}

void up_project(const float* w, const float* latent, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r) out[r] = dot(w + r * cols, latent, cols);
}

void recover_key(const float* k_up, const float* latent, int64_t rank, int32_t n_head_kv, int32_t head_dim,
                 int32_t position, const RopeParams& rope, float* out) {
  up_project(k_up, latent, int64_t{n_head_kv} * head_dim, rank, out);
  for (int32_t h = 0; h < n_head_kv; ++h) rope_head(out + int64_t{h} * head_dim, position, rope);
}

}  // namespace fafo::scalar
