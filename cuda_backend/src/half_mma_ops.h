// The CUDA backend's products with F16 and BF16 weights on the tensor cores (the default
// kernels, every step size), as llama.cpp's CUDA backend multiplies them: activations
// rounded to the weights' 16-bit format as they are read, mma.sync.m16n8k16 (16-bit
// values in, floats accumulated: warp.h's mma_half) over tiles of 16 weight rows by 8
// tokens.
//   1. HalfMmaWarpOp<F>: warp w takes one tile and one part of kPartCols columns (the row
//      is split so that enough warps stream the weights at one token as at many), steps
//      through its part 16 columns at a time in column order, and writes the tile's 128
//      partial sums;
//   2. HalfCombineOp adds each output's parts in part order (then the SwiGLU, or the
//      add onto the output).
//   1b. Steps of more than 8 tokens: HalfMmaBlockOp<F>, a block per tile, part and up to
//      64 tokens, stages the tile's part of the weights in shared memory once and its
//      warps (8 tokens each) take their A fragments there: each weight read once per 64
//      tokens instead of once per 8, with each warp's instructions those of the warp
//      kernel for its 8 tokens, so the same bits.
// The parts depend on the row length only and every token's sums are made by the same
// instructions in the same order whatever T (a tile's tokens never meet), so the result
// is T-invariant on a GPU. The host's emulation of the instruction rounds each 16-product
// step once, which a GPU's tensor cores may not match in the last bit: both are within
// the backend's half_matmul_tolerance (F16) or bf16_matmul_tolerance (BF16) of the
// reference, which the conformance table checks on each.
#pragma once

#include <cstdint>

#include "block.h"
#include "block_decode.h"
#include "dot_order.h"
#include "ops.h"
#include "warp.h"

namespace fafo::cuda {

// v rounded to F (F16: an IEEE half; BF16: a bfloat16), as bits.
template <Format F>
FAFO_HD uint32_t half_bits_of(float v) {
  if constexpr (F == Format::F16) return float_to_half_bits(v);
  else return float_to_bf16_bits(v);
}

template <Format F>
struct HalfMmaWarpOp {
  static_assert(F == Format::F16 || F == Format::BF16);
  static constexpr uint32_t kRows = 16, kTokens = 8, kPartCols = 256;
  const uint8_t* w;  // F16 or BF16 rows: `rows` (Gated: 2 x rows, the gate's then the up projection's)
  const float* x;
  float* partials;  // [matrix][part][token][row]
  uint32_t rows, cols, T, x_stride, matrices;
  uint64_t row_bytes;

  static FAFO_HD uint32_t row_tiles(uint32_t rows) { return (rows + kRows - 1) / kRows; }
  static FAFO_HD uint32_t parts(uint32_t cols) { return (cols + kPartCols - 1) / kPartCols; }
  static uint64_t warps(uint32_t rows, uint32_t cols, uint32_t T) {
    return uint64_t{row_tiles(rows)} * ((T + kTokens - 1) / kTokens) * parts(cols);
  }

  template <class W>
  FAFO_HD void run(W& warp, uint32_t index) const {
    const uint32_t n_parts = parts(cols), part = index % n_parts, tile = index / n_parts;
    const uint32_t tiles = row_tiles(rows);
    const uint32_t r0 = (tile % tiles) * kRows, t0 = (tile / tiles) * kTokens;
    const uint32_t c_begin = part * kPartCols, c_end = c_begin + kPartCols < cols ? c_begin + kPartCols : cols;
    // Two halves of row r of the tile (of matrix m) at columns c, c + 1 (0 past the part).
    const auto weights = [&](uint32_t m, uint32_t r, uint32_t c) {
      const uint32_t rr = r0 + r < rows ? r0 + r : rows - 1;
      const uint8_t* row = w + static_cast<uint64_t>(rr + m * rows) * row_bytes;
      const uint32_t lo = c < c_end ? read_u16(row + 2ull * c) : 0u, hi = c + 1 < c_end ? read_u16(row + 2ull * c + 2) : 0u;
      return lo | (hi << 16);
    };
    // Token t of the tile's activations at columns c, c + 1, rounded to the weights' format.
    const auto round = [](float v) { return half_bits_of<F>(v); };
    const auto inputs = [&](uint32_t t, uint32_t c) {
      const float* xt = x + static_cast<uint64_t>(t0 + t < T ? t0 + t : T - 1) * x_stride;
      const uint32_t lo = c < c_end ? round(xt[c]) : 0u, hi = c + 1 < c_end ? round(xt[c + 1]) : 0u;
      return lo | (hi << 16);
    };
    typename W::template Vec<float> acc[2][4];
    warp.each([&](uint32_t lane) {
      FAFO_UNROLL
      for (uint32_t m = 0; m < 2; ++m)
        FAFO_UNROLL
        for (uint32_t e = 0; e < 4; ++e) acc[m][e][lane] = 0.0f;
    });
    for (uint32_t c0 = c_begin; c0 < c_end; c0 += 16) {
      typename W::template Vec<uint32_t> a[2][4], b[2];
      warp.each([&](uint32_t lane) {
        const uint32_t g = lane / 4, i = lane % 4;
        FAFO_UNROLL
        for (uint32_t m = 0; m < 2; ++m) {
          if (m >= matrices) continue;
          a[m][0][lane] = weights(m, g, c0 + 2 * i);
          a[m][1][lane] = weights(m, g + 8, c0 + 2 * i);
          a[m][2][lane] = weights(m, g, c0 + 2 * i + 8);
          a[m][3][lane] = weights(m, g + 8, c0 + 2 * i + 8);
        }
        b[0][lane] = inputs(g, c0 + 2 * i);
        b[1][lane] = inputs(g, c0 + 2 * i + 8);
      });
      warp.template mma_half<F>(a[0], b, acc[0]);
      if (matrices == 2) warp.template mma_half<F>(a[1], b, acc[1]);
    }
    warp.each([&](uint32_t lane) {
      const uint32_t g = lane / 4, i = lane % 4;
      FAFO_UNROLL
      for (uint32_t e = 0; e < 4; ++e) {
        const uint32_t r = r0 + g + 8 * (e / 2), t = t0 + 2 * i + e % 2;
        if (r >= rows || t >= T) continue;
        FAFO_UNROLL
        for (uint32_t m = 0; m < 2; ++m)
          if (m < matrices)
            partials[((static_cast<uint64_t>(m) * n_parts + part) * T + t) * rows + r] = acc[m][e][lane];
      }
    });
  }
};

// HalfMmaWarpOp for wide steps: block b takes tile and part b / token_blocks and tokens
// from 64 * (b % token_blocks); its threads first copy the part's weights of the tile's
// rows (each matrix's 16 rows by kPartCols columns, two halves a word, 0 past the part)
// into shared memory, then warp w multiplies tokens [8w, 8w + 8) of the block as
// HalfMmaWarpOp's warp for that tile, part and tokens does, reading the weight words
// from shared memory instead of global memory: the same values into the same mma_half
// calls in the same order, so the same partial sums.
template <Format F>
struct HalfMmaBlockOp {
  using Warp = HalfMmaWarpOp<F>;
  static constexpr uint32_t kRows = Warp::kRows, kTokens = Warp::kTokens, kPartCols = Warp::kPartCols;
  static constexpr uint32_t kMaxWarps = 8, kBlockTokens = kMaxWarps * kTokens;
  static constexpr uint32_t kRowWords = kPartCols / 2 + 4;  // a staged row's stride: the A reads hit 32 banks
  static constexpr size_t kSharedBytes = size_t{2} * kRows * kRowWords * 4;
  Warp op;

  FAFO_HD uint32_t token_blocks() const { return (op.T + kBlockTokens - 1) / kBlockTokens; }
  FAFO_HD uint32_t warps() const {
    const uint32_t needed = (op.T + kTokens - 1) / kTokens;
    return needed < kMaxWarps ? needed : kMaxWarps;
  }
  uint64_t blocks() const { return uint64_t{Warp::row_tiles(op.rows)} * Warp::parts(op.cols) * token_blocks(); }

  template <class B>
  FAFO_HD void run(B& block, uint32_t index) const {
    const uint32_t n_parts = Warp::parts(op.cols), tb = index % token_blocks(), tile_part = index / token_blocks();
    const uint32_t part = tile_part % n_parts, r0 = (tile_part / n_parts) * kRows;
    const uint32_t c_begin = part * kPartCols, c_end = c_begin + kPartCols < op.cols ? c_begin + kPartCols : op.cols;
    const uint32_t threads = block.threads();
    uint32_t* staged = reinterpret_cast<uint32_t*>(block.shared());
    block.each([&](uint32_t t) {
      for (uint32_t i = t; i < op.matrices * kRows * (kPartCols / 2); i += threads) {
        const uint32_t k = i % (kPartCols / 2), r = (i / (kPartCols / 2)) % kRows, m = i / (kRows * (kPartCols / 2));
        const uint32_t c = c_begin + 2 * k, rr = r0 + r < op.rows ? r0 + r : op.rows - 1;
        const uint8_t* row = op.w + static_cast<uint64_t>(rr + m * op.rows) * op.row_bytes;
        const uint32_t lo = c < c_end ? read_u16(row + 2ull * c) : 0u, hi = c + 1 < c_end ? read_u16(row + 2ull * c + 2) : 0u;
        staged[(m * kRows + r) * kRowWords + k] = lo | (hi << 16);
      }
    });
    block.sync();
    const auto round = [](float v) { return half_bits_of<F>(v); };
    const auto token_first = [&](uint32_t t) { return tb * kBlockTokens + kTokens * (t / kLanes); };
    typename B::template Vec<float> acc[2][4];
    block.each([&](uint32_t t) {
      FAFO_UNROLL
      for (uint32_t m = 0; m < 2; ++m)
        FAFO_UNROLL
        for (uint32_t e = 0; e < 4; ++e) acc[m][e][t] = 0.0f;
    });
    for (uint32_t c0 = c_begin; c0 < c_end; c0 += 16) {
      typename B::template Vec<uint32_t> a[2][4], b[2];
      block.each([&](uint32_t t) {
        const uint32_t lane = t % kLanes, g = lane / 4, i = lane % 4, k = (c0 - c_begin) / 2 + i;
        FAFO_UNROLL
        for (uint32_t m = 0; m < 2; ++m) {
          if (m >= op.matrices) continue;
          a[m][0][t] = staged[(m * kRows + g) * kRowWords + k];
          a[m][1][t] = staged[(m * kRows + g + 8) * kRowWords + k];
          a[m][2][t] = staged[(m * kRows + g) * kRowWords + k + 4];
          a[m][3][t] = staged[(m * kRows + g + 8) * kRowWords + k + 4];
        }
        const uint32_t token = token_first(t) + g;
        const float* xt = op.x + static_cast<uint64_t>(token < op.T ? token : op.T - 1) * op.x_stride;
        FAFO_UNROLL
        for (uint32_t h = 0; h < 2; ++h) {
          const uint32_t c = c0 + 2 * i + 8 * h;
          const uint32_t lo = c < c_end ? round(xt[c]) : 0u, hi = c + 1 < c_end ? round(xt[c + 1]) : 0u;
          b[h][t] = lo | (hi << 16);
        }
      });
      block.template mma_half<F>(a[0], b, acc[0]);
      if (op.matrices == 2) block.template mma_half<F>(a[1], b, acc[1]);
    }
    block.each([&](uint32_t t) {
      const uint32_t lane = t % kLanes, g = lane / 4, i = lane % 4;
      FAFO_UNROLL
      for (uint32_t e = 0; e < 4; ++e) {
        const uint32_t r = r0 + g + 8 * (e / 2), token = token_first(t) + 2 * i + e % 2;
        if (r >= op.rows || token >= op.T) continue;
        FAFO_UNROLL
        for (uint32_t m = 0; m < 2; ++m)
          if (m < op.matrices)
            op.partials[((static_cast<uint64_t>(m) * n_parts + part) * op.T + token) * op.rows + r] = acc[m][e][t];
      }
    });
  }
};

// out[t * out_stride + r] (+)= the sum of HalfMmaWarpOp's parts of (t, r) in part order
// (gated: silu(the gate's sum) * the up projection's), one thread per output.
struct HalfCombineOp {
  const float* partials;
  float* out;
  uint32_t rows, T, n_parts, out_stride;
  bool gated, accumulate;
  FAFO_HD void operator()(uint32_t i) const {
    const uint32_t t = i / rows, r = i % rows;
    const auto sum = [&](uint32_t m) {
      const float* p = partials + (static_cast<uint64_t>(m) * n_parts * T + t) * rows + r;
      float s = p[0];
      for (uint32_t part = 1; part < n_parts; ++part) s = add_rn(s, p[static_cast<uint64_t>(part) * T * rows]);
      return s;
    };
    float* o = out + static_cast<uint64_t>(t) * out_stride + r;
    if (gated) *o = swiglu_value(sum(0), sum(1));
    else *o = accumulate ? add_rn(*o, sum(0)) : sum(0);
  }
};

}  // namespace fafo::cuda
