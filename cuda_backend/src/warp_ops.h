// The CUDA backend's warp kernels (the default kernel set; `FAFO_CUDA_KERNELS=plain`
// selects ops.h's one-thread-per-output kernels instead): a warp of 32 lanes per piece
// of work, written as two per-lane phases around one warp primitive so that the host
// runs the very code a GPU runs:
//   1. lane_values(warp, lane, v): lane `lane` of warp `warp` computes its share of each
//      of the op's kValues sums;
//   2. the warp adds the 32 shares of each sum by dot_order.h's fixed tree (tree32:
//      lane l + 16, then + 8, + 4, + 2, + 1) and every lane receives the sums;
//   3. finish(warp, lane, sums): each lane writes its part of the results.
// Attention (attention_ops.h), whose warps reduce inside a loop, is written instead
// over a block of warps (block.h), which a GPU runs thread by thread and the host warp
// by warp, lane by lane.
// A GPU does step 2 with warp shuffles (cuda_device.cuh: warp_tree); the host device
// (host_device.h: launch_warps) runs the lanes of a warp one after another, then
// tree32 over their shares: the same additions in the same order, so the bits are the
// same, and they are the plain kernels' bits (dot_order.h's order is a warp's order).
#pragma once

#include <cstdint>

#include "block_decode.h"
#include "dot_order.h"
#include "ops.h"
#include "warp.h"

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

// The fused products, over a Warp (warp.h): out = W rms_norm(x) (with `gain`: the RMSNorm
// fused into the product), and the feed-forward gate out = silu(W_gate x') * (W_up x')
// (Gated: W is the gate's `rows` rows then the up projection's, one weight; x' = x or
// rms_norm(x)). Warp w computes row w % rows for a tile of up to kTile tokens, as
// MatmulWarpOp: first each token's norm scale (lane_sum_squares, the tree, rms_scale,
// as RmsNormWarpOp), then each lane's chunks, normalizing each x value as it reads it
// (rms_apply, RmsNormWarpOp's value), the tree per token, and the SwiGLU
// (swiglu_value): the bits of rms_norm, matmul (twice) and swiglu apart, with one read
// of x and none of a normalized copy.
template <Format F, bool Gated>
struct FusedProductWarpOp {
  static constexpr uint32_t kTile = 8;
  static constexpr bool gated = Gated;  // a template parameter: the plain products keep no up accumulators
  const uint8_t* w;
  const float* x;
  float* out;
  const float* gain;  // null: no norm
  float eps;
  uint32_t rows, cols, T, x_stride, out_stride;
  uint64_t row_bytes;

  static uint64_t warps(uint32_t rows, uint32_t T) { return uint64_t{rows} * ((T + kTile - 1) / kTile); }

  template <class W>
  FAFO_HD void run(W& warp, uint32_t index) const {
    const uint32_t r = index % rows, t0 = (index / rows) * kTile;
    const uint32_t n = T - t0 < kTile ? T - t0 : kTile;
    const float* xt = x + static_cast<uint64_t>(t0) * x_stride;
    float scale[kTile];
    for (uint32_t t = 0; t < kTile; ++t) {
      scale[t] = 1.0f;
      if (gain == nullptr || t >= n) continue;
      typename W::template Vec<float> squares;
      warp.each([&](uint32_t lane) { squares[lane] = lane_sum_squares(xt + static_cast<uint64_t>(t) * x_stride, cols, lane); });
      scale[t] = rms_scale(warp.sum(squares), cols, eps);
    }
    typename W::template Vec<float> acc[kTile], acc_up[Gated ? kTile : 1];
    const uint8_t* gate_row = w + static_cast<uint64_t>(r) * row_bytes;
    const uint8_t* up_row = w + static_cast<uint64_t>(r + rows) * row_bytes;
    warp.each([&](uint32_t lane) {
      for (uint32_t t = 0; t < kTile; ++t) acc[t][lane] = 0.0f;
      if constexpr (Gated)
        for (uint32_t t = 0; t < kTile; ++t) acc_up[t][lane] = 0.0f;
      const uint32_t full_chunks = cols / 16;
      // x value c of token t, normalized when the norm is fused.
      const auto input = [&](uint32_t t, uint32_t c) {
        const float v = xt[static_cast<uint64_t>(t) * x_stride + c];
        return gain != nullptr ? rms_apply(v, scale[t], gain[c]) : v;
      };
      for (uint32_t chunk = lane; chunk < full_chunks; chunk += kLanes) {
        float wg[16], wu[Gated ? 16 : 1];
        decode_chunk<F>(gate_row, chunk, wg);
        if constexpr (Gated) decode_chunk<F>(up_row, chunk, wu);
        for (uint32_t t = 0; t < kTile; ++t) {
          if (t >= n) break;
          float a = acc[t][lane];
          if constexpr (Gated) {
            float b = acc_up[t][lane];
            for (uint32_t k = 0; k < 16; ++k) {
              const float v = input(t, 16 * chunk + k);
              a = fma_rn(wg[k], v, a);
              b = fma_rn(wu[k], v, b);
            }
            acc_up[t][lane] = b;
          } else {
            for (uint32_t k = 0; k < 16; ++k) a = fma_rn(wg[k], input(t, 16 * chunk + k), a);
          }
          acc[t][lane] = a;
        }
      }
      if constexpr (is_plain_float<F>) {
        if (cols % 16 != 0 && lane == full_chunks % kLanes)
          for (uint32_t t = 0; t < n; ++t)
            for (uint32_t c = 16 * full_chunks; c < cols; ++c) {
              const float v = input(t, c);
              acc[t][lane] = fma_rn(decode_value<F>(gate_row, c), v, acc[t][lane]);
              if constexpr (Gated) acc_up[t][lane] = fma_rn(decode_value<F>(up_row, c), v, acc_up[t][lane]);
            }
      }
    });
    for (uint32_t t = 0; t < kTile; ++t) {
      if (t >= n) break;
      const float g = warp.sum(acc[t]);
      float result = g;
      if constexpr (Gated) result = swiglu_value(g, warp.sum(acc_up[t]));
      warp.each([&](uint32_t lane) {
        if (lane == t) out[static_cast<uint64_t>(t0 + t) * out_stride + r] = result;
      });
    }
  }
};

// RMSNorm of rows of n values (rows contiguous; out must not be x when parts > 1), `parts` warps a row: warp w takes row
// w / parts and writes its part w % parts of the columns (parts of 32 x ceil(n / (32
// parts)) columns); every warp of a row computes the row's lane sums of squares
// (lane_sum_squares) and the tree itself, so each value is RmsNormOp's bits whatever
// `parts` is. parts_for(n) spreads a long row over warps of 512 columns or more.
struct RmsNormWarpOp {
  static constexpr uint32_t kValues = 1;
  const float* x;
  const float* gain;
  float* out;
  uint32_t n;
  float eps;
  uint32_t parts = 1;

  static uint32_t parts_for(uint32_t n) { return n >= 1024 ? n / 512 : 1; }

  FAFO_HD void lane_values(uint32_t warp, uint32_t lane, float v[kValues]) const {
    v[0] = lane_sum_squares(x + static_cast<uint64_t>(warp / parts) * n, n, lane);
  }
  FAFO_HD void finish(uint32_t warp, uint32_t lane, const float sums[kValues]) const {
    const float scale = rms_scale(sums[0], n, eps);
    const uint64_t row_at = static_cast<uint64_t>(warp / parts) * n;
    const uint32_t span = (n + kLanes * parts - 1) / (kLanes * parts) * kLanes, first = (warp % parts) * span;
    const uint32_t end = first + span < n ? first + span : n;
    const float* row = x + row_at;
    float* o = out + row_at;
    for (uint32_t c = first + lane; c < end; c += kLanes) o[c] = rms_apply(row[c], scale, gain[c]);
  }
};

}  // namespace fafo::cuda
