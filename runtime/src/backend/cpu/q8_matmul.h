// The `cpu` backend's integer matrix product for block-quantized weights (Q4_K, Q5_K,
// Q6_K, the 32-value formats Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, the table formats IQ4_NL,
// IQ4_XS, MXFP4 and the codebook formats IQ2_XXS, IQ2_XS, IQ3_XXS, IQ3_S), as llama.cpp
// computes it:
// each activation row is rounded to 8 bits per block (one float scale per 256 values;
// per 32 for the 32-value formats' rows of other widths), and a weight block's dot
// product with it is summed exactly in integers (pairs of 8-bit products in 16 bits,
// then 16-bit multiply-adds by the sub-block scales into 32 bits; with VNNI, the
// 32-value formats sum four 8-bit products into 32 bits at once), then scaled in float.
//
// Numerics: integer sums are exact in any order, and the float steps (one multiply-add
// per block in vector lanes, blocks in order, then across lanes; Q4_1's and Q5_1's mins
// in a float of their own, blocks in order, added last) are the
// same for every step size, token tile, panel and thread count: results are
// T-invariant. The rounding of the activations puts them within about 1% of the
// reference's (kRoundedMatmulTolerance in cpu_backend.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/host/host_backend.h"

namespace fafo::cpu {

// Activation rows rounded to 8 bits per block: row t's value c is q[t * cols + c] *
// d[t * (cols / block) + c / block], |q| <= 127; sums16[t * (cols / 16) + i] is the sum
// of q over values 16i..16i+15 (what the mins of Q4_K and Q5_K and Q6_K's offset of 32
// multiply); sums32[t * (cols / 32) + i] is values 32i..32i+31's sum of q times their d,
// as a float (what the mins of Q4_1 and Q5_1 multiply).
struct QuantizedActivations {
  int64_t rows = 0, cols = 0, block = 0;
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int16_t> sums16;
  std::vector<float> sums32;
  // d again, block-major: block b's scale of row t at d_by_block[b * (rows + kPadding) + t]
  // (kPadding more per block, so a vector of a tile's tokens may read past the last row).
  static constexpr int64_t kPadding = 16;
  std::vector<float> d_by_block;
  // Sizes the arrays for `rows` x `cols` in blocks of `block` (keeps their memory).
  void resize(int64_t rows, int64_t cols, int64_t block);
};

// The activation block the integer product of `type` over `cols` columns needs: 256
// for the K-quants, IQ4_XS and the codebook formats, and for the 32-value formats where cols allows it (8 weight blocks
// then share one activation scale: less float work per block), else 32; 0 where the format
// has none (its product takes float activations: simd_matmul.h).
int64_t q8_activation_block(TensorType type, int64_t cols);

// Rounds rows [t0, t1) of x (row t at x + t * x_stride) into `out` (already sized).
// Every row is rounded on its own: the result does not depend on the other rows.
void quantize_activations(const float* x, int64_t x_stride, int64_t t0, int64_t t1, QuantizedActivations& out);

// out[t * out_stride + r] = dot(row r of w, activation row t) for r in [r0, r1), t <
// x.rows. x.block must be q8_activation_block(w.type, w.cols).
void q8_matmul_rows(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                    int64_t out_stride);

// q8_matmul_rows' product for Q6_K and the 32-value formats, rows in panels of `panel_rows`
// (q8_matmul_q6.cpp; x already checked).
void q8_matmul_rows_q6(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                       int64_t out_stride, int64_t panel_rows);

// q8_matmul_rows' product for IQ4_NL, IQ4_XS and MXFP4 (q8_matmul_table.cpp; x already
// checked).
void q8_matmul_rows_table(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                          int64_t out_stride, int64_t panel_rows);

// q8_matmul_rows' product for IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S (q8_matmul_grid.cpp; x
// already checked).
void q8_matmul_rows_grid(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                         int64_t out_stride, int64_t panel_rows);

}  // namespace fafo::cpu
