// The CUDA backend's warp kernels (the default kernel set; `FAFO_CUDA_KERNELS=plain`
// selects ops.h's one-thread-per-output kernels instead): a warp of 32 lanes per piece
// of work, written as two per-lane phases around one warp primitive so that the host
// runs the very code a GPU runs:
//   1. lane_values(warp, lane, v): lane `lane` of warp `warp` computes its share of each
//      of the op's kValues sums;
//   2. the warp adds the 32 shares of each sum by dot_order.h's fixed tree (tree32:
//      lane l + 16, then + 8, + 4, + 2, + 1) and every lane receives the sums;
//   3. finish(warp, lane, sums): each lane writes its part of the results.
// A GPU does step 2 with warp shuffles (cuda_device.cuh: warp_tree); the host device
// (host_device.h: launch_warps) runs the lanes of a warp one after another, then
// tree32 over their shares: the same additions in the same order, so the bits are the
// same, and they are the plain kernels' bits (dot_order.h's order is a warp's order).
#pragma once

#include <cstdint>

#include "block_decode.h"
#include "dot_order.h"

namespace fafo::cuda {

// out[t * out_stride + out_offset + r] (+)= W[r] . x[t] for a tile of up to kTile tokens:
// warp w computes row w % rows for tokens [kTile * (w / rows), + kTile) of the step's
// T. Lane l decodes its chunks l, l + 32, ... of the row once for every token of the
// tile (one read of the weights per tile instead of one per token), and adds each
// token's products in column order: each (row, token) sum is row_dot's, bit for bit
// MatmulOp's, whatever T and the tile (T-invariant).
template <Format F, MulAdd M = MulAdd::Fused>
struct MatmulWarpOp {
  static constexpr uint32_t kTile = 8;
  static constexpr uint32_t kValues = kTile;
  const uint8_t* w;
  const float* x;
  float* out;
  uint32_t rows, cols, T, x_stride, out_stride, out_offset;
  uint64_t row_bytes;
  bool accumulate;

  // Warps for a step of T tokens.
  static uint64_t warps(uint32_t rows, uint32_t T) { return uint64_t{rows} * ((T + kTile - 1) / kTile); }

  FAFO_HD void lane_values(uint32_t warp, uint32_t lane, float v[kValues]) const {
    const uint32_t r = warp % rows, t0 = (warp / rows) * kTile;
    const uint32_t n = T - t0 < kTile ? T - t0 : kTile;
    const uint8_t* row = w + static_cast<uint64_t>(r) * row_bytes;
    const float* xt = x + static_cast<uint64_t>(t0) * x_stride;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (uint32_t t = 0; t < kTile; ++t) v[t] = 0.0f;
    const uint32_t full_chunks = cols / 16;
    for (uint32_t chunk = lane; chunk < full_chunks; chunk += kLanes) {
      float wv[16];
      decode_chunk<F>(row, chunk, wv);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
      for (uint32_t t = 0; t < kTile; ++t) {
        if (t >= n) break;
        const float* xc = xt + static_cast<uint64_t>(t) * x_stride + 16 * chunk;
        float acc = v[t];
        for (uint32_t k = 0; k < 16; ++k) acc = mul_add<M>(wv[k], xc[k], acc);
        v[t] = acc;
      }
    }
    if constexpr (is_plain_float<F>) {
      if (cols % 16 != 0 && lane == full_chunks % kLanes)
        for (uint32_t t = 0; t < n; ++t)
          for (uint32_t c = 16 * full_chunks; c < cols; ++c)
            v[t] = mul_add<M>(decode_value<F>(row, c), xt[static_cast<uint64_t>(t) * x_stride + c], v[t]);
    }
  }

  // Lane t writes token t's result.
  FAFO_HD void finish(uint32_t warp, uint32_t lane, const float sums[kValues]) const {
    const uint32_t r = warp % rows, t0 = (warp / rows) * kTile;
    if (lane >= kTile || t0 + lane >= T) return;
    float* o = out + static_cast<uint64_t>(t0 + lane) * out_stride + out_offset + r;
    *o = accumulate ? add_rn(*o, sums[lane]) : sums[lane];
  }
};

// RMSNorm of row w (n values, rows contiguous): lane l's sum of squares of its chunks
// (lane_sum_squares), the tree, then every lane scales its chunks: RmsNormOp's bits.
struct RmsNormWarpOp {
  static constexpr uint32_t kValues = 1;
  const float* x;
  const float* gain;
  float* out;
  uint32_t n;
  float eps;

  FAFO_HD void lane_values(uint32_t warp, uint32_t lane, float v[kValues]) const {
    v[0] = lane_sum_squares(x + static_cast<uint64_t>(warp) * n, n, lane);
  }
  FAFO_HD void finish(uint32_t warp, uint32_t lane, const float sums[kValues]) const {
    const float scale = rms_scale(sums[0], n, eps);
    const float* row = x + static_cast<uint64_t>(warp) * n;
    float* o = out + static_cast<uint64_t>(warp) * n;
    for (uint32_t c = lane; c < n; c += kLanes) o[c] = rms_apply(row[c], scale, gain[c]);
  }
};

}  // namespace fafo::cuda
