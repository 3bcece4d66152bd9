// The order in which the CUDA kernels add up products and squares: the order of the
// Vulkan kernels (shaders/matmul.comp, shaders/rms_tree.glsl), so that both backends
// give the same bits. `__host__ __device__` like block_decode.h: CI checks this very
// code against the Vulkan kernels' results on lavapipe (tests/test_cuda_host.cpp).
//
// A row is cut into 16-value chunks and chunk j belongs to lane j % 32. Lane l adds its
// chunks' products in increasing column order with a fused multiply-add into one float
// (a plain float row's partial last chunk comes last, in the lane that chunk's index
// gives); the 32 lane sums are then added by a fixed tree: l + 16, then + 8, + 4, + 2, +1.
//
// The multiply-add is fused on NVIDIA GPUs (CUDA's __fmaf_rn; GLSL's fma() there too),
// but Vulkan lets an implementation round the product first, and lavapipe does in the
// matrix products: MulAdd::Rounded is that order (tests compare lavapipe with it).
#pragma once

#include <cmath>
#include <cstdint>

#include "block_decode.h"

namespace fafo::cuda {

constexpr uint32_t kLanes = 32;

FAFO_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

enum class MulAdd { Fused, Rounded };

template <MulAdd M = MulAdd::Fused>
FAFO_HD float mul_add(float a, float b, float c) {
  if constexpr (M == MulAdd::Fused) return fma_rn(a, b, c);
  else return add_rn(mul_rn(a, b), c);
}

// The fixed tree over 32 lane sums (s is overwritten).
FAFO_HD float tree32(float s[kLanes]) {
  for (uint32_t half = kLanes / 2; half >= 2; half /= 2)
    for (uint32_t l = 0; l < half; ++l) s[l] = add_rn(s[l], s[l + half]);
  return add_rn(s[0], s[1]);
}

// Lane `lane`'s sum of w[c] * x[c] over its chunks of a row of `cols` values.
template <Format F, MulAdd M = MulAdd::Fused>
FAFO_HD float lane_dot(const uint8_t* row, const float* x, uint32_t cols, uint32_t lane) {
  float acc = 0.0f;
  const uint32_t full_chunks = cols / 16;
  for (uint32_t chunk = lane; chunk < full_chunks; chunk += kLanes) {
    float w[16];
    decode_chunk<F>(row, chunk, w);
    for (uint32_t k = 0; k < 16; ++k) acc = mul_add<M>(w[k], x[16 * chunk + k], acc);
  }
  if constexpr (is_plain_float<F>) {
    if (cols % 16 != 0 && lane == full_chunks % kLanes)
      for (uint32_t c = 16 * full_chunks; c < cols; ++c) acc = mul_add<M>(decode_value<F>(row, c), x[c], acc);
  }
  return acc;
}

// A whole product: W[r] . x, in the order above.
template <Format F, MulAdd M = MulAdd::Fused>
FAFO_HD float row_dot(const uint8_t* row, const float* x, uint32_t cols) {
  float s[kLanes];
  for (uint32_t l = 0; l < kLanes; ++l) s[l] = lane_dot<F, M>(row, x, cols, l);
  return tree32(s);
}

// RMSNorm: lane l's sum of squares over its chunks (any n: the last chunk may be
// partial), the tree, then scale = 1 / sqrt(sum / n + eps); a normalized value is
// x * scale * gain.
FAFO_HD float lane_sum_squares(const float* x, uint32_t n, uint32_t lane) {
  float s = 0.0f;
  for (uint32_t c0 = 16 * lane; c0 < n; c0 += 16 * kLanes)
    for (uint32_t c = c0; c < c0 + 16 && c < n; ++c) s = fma_rn(x[c], x[c], s);
  return s;
}

FAFO_HD float rms_scale(float sum, uint32_t n, float eps) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(sum, static_cast<float>(n)), eps)));
#else
  return 1.0f / std::sqrt(sum / static_cast<float>(n) + eps);
#endif
}

FAFO_HD float rms_apply(float value, float scale, float gain) { return mul_rn(mul_rn(value, scale), gain); }

}  // namespace fafo::cuda
