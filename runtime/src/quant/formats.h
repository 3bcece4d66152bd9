// Per-format row kernels behind fafo::dequantize_row / fafo::quantize_row (type_table.cpp).
//
// Each kernel converts n_blocks whole blocks; the public entry points validate the type and
// the value count first. Packed data is read and written through byte pointers without any
// alignment requirement.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace fafo::quant {

// Plain float formats (half_float.cpp). n is a value count.
void dequantize_f16(const uint8_t* src, float* dst, int64_t n);
void quantize_f16(const float* src, uint8_t* dst, int64_t n);
void dequantize_bf16(const uint8_t* src, float* dst, int64_t n);
void quantize_bf16(const float* src, uint8_t* dst, int64_t n);

// Legacy 32-value block formats (legacy_formats.cpp).
void dequantize_q4_0(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_q4_1(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_q5_0(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_q5_1(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_q8_0(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_q8_1(const uint8_t* src, float* dst, int64_t n_blocks);
void quantize_q4_0(const float* src, uint8_t* dst, int64_t n_blocks);
void quantize_q4_1(const float* src, uint8_t* dst, int64_t n_blocks);
void quantize_q5_0(const float* src, uint8_t* dst, int64_t n_blocks);
void quantize_q5_1(const float* src, uint8_t* dst, int64_t n_blocks);
void quantize_q8_0(const float* src, uint8_t* dst, int64_t n_blocks);
void quantize_q8_1(const float* src, uint8_t* dst, int64_t n_blocks);

// K-quants, 256-value super-blocks (k_quant_dequantize.cpp, k_quant_quantize.cpp).
void dequantize_q2_k(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_q3_k(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_q4_k(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_q5_k(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_q6_k(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_q8_k(const uint8_t* src, float* dst, int64_t n_blocks);
void quantize_q2_k(const float* src, uint8_t* dst, int64_t n_blocks);
void quantize_q3_k(const float* src, uint8_t* dst, int64_t n_blocks);
void quantize_q4_k(const float* src, uint8_t* dst, int64_t n_blocks);
void quantize_q5_k(const float* src, uint8_t* dst, int64_t n_blocks);
void quantize_q6_k(const float* src, uint8_t* dst, int64_t n_blocks);
void quantize_q8_k(const float* src, uint8_t* dst, int64_t n_blocks);

// Formats whose 4-bit codes index a table of 16 values (table_formats.cpp): IQ4_NL and
// MXFP4 in blocks of 32, IQ4_XS in super-blocks of 256.
void dequantize_iq4_nl(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_iq4_xs(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_mxfp4(const uint8_t* src, float* dst, int64_t n_blocks);
void quantize_iq4_nl(const float* src, uint8_t* dst, int64_t n_blocks);
void quantize_iq4_xs(const float* src, uint8_t* dst, int64_t n_blocks);
void quantize_mxfp4(const float* src, uint8_t* dst, int64_t n_blocks);

// Codebook formats, 256-value super-blocks (grid_formats.cpp; fafo writes the IQ3 ones:
// grid_quantize.cpp).
void dequantize_iq2_xxs(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_iq2_xs(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_iq3_xxs(const uint8_t* src, float* dst, int64_t n_blocks);
void dequantize_iq3_s(const uint8_t* src, float* dst, int64_t n_blocks);
void quantize_iq3_xxs(const float* src, uint8_t* dst, int64_t n_blocks);
void quantize_iq3_s(const float* src, uint8_t* dst, int64_t n_blocks);

// Rounds v to the nearest integer, halves to even, through the float's mantissa (ggml's
// nearest_int, which llama.cpp's non-linear quantizers use); callers keep |v| well below
// 2^22 (beyond, and for NaN, the result is some integer, never undefined behaviour).
inline int nearest_int_even(float v) {
  const float shifted = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

// Rounds v to the nearest integer (halves away from zero) after clamping it to [lo, hi].
// NaN maps to lo. Used by every quantizer, so out-of-range or non-finite inputs never
// reach an undefined float-to-int conversion.
// Written without early returns so that compilers can vectorise the loops that call it.
inline int round_clamped(float v, int lo, int hi) {
  const auto lo_f = static_cast<float>(lo);
  const auto hi_f = static_cast<float>(hi);
  v = v > lo_f ? v : lo_f;  // false for NaN too
  v = v < hi_f ? v : hi_f;
  return static_cast<int>(v + std::copysign(0.5f, v));
}

}  // namespace fafo::quant
