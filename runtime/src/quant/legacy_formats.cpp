// The 32-value block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (and Q8_1).
//
// Dequantization evaluates exactly the float expressions ggml does, in the same order:
// (q - zero_point) * d for the symmetric formats (so a negative d yields -0.0 at
// q == zero_point) and q * d + m for the formats with a minimum, d and m read from fp16.
//
// Quantization: symmetric formats map the block's largest-magnitude value (with its sign)
// to the most negative level, which uses the extra negative code; formats with a minimum
// spread [min, max] over all levels. Values are then rounded against the fp16-rounded scale
// that is actually stored, so re-quantizing dequantized data gives the same blocks back.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "fafo/tensor_type.h"
#include "quant/blocks.h"
#include "quant/formats.h"

// Built with -ffp-contract=off (runtime/CMakeLists.txt): see there why.

namespace fafo::quant {

namespace {

constexpr int kHalf = kLegacyBlock / 2;

// The value of largest magnitude in x[0..n), with its sign (the first one on ties).
float signed_absmax(const float* x, int n) {
  float best = 0.0f;
  float best_abs = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > best_abs) {
      best_abs = std::fabs(x[i]);
      best = x[i];
    }
  }
  return best;
}

// Stores scale as fp16 and returns the float value actually stored.
float store_scale(float scale, uint16_t& field) {
  field = fp32_to_fp16(scale);
  return fp16_to_fp32(field);
}

float inverse_or_zero(float d) { return d != 0.0f ? 1.0f / d : 0.0f; }

// Symmetric block: value = (q - zero) * d with q in [0, 2*zero). Writes d and the codes.
void quantize_symmetric(const float* x, int zero, uint16_t& d_field, uint8_t* q) {
  const float d = store_scale(signed_absmax(x, kLegacyBlock) / static_cast<float>(-zero), d_field);
  const float inv = inverse_or_zero(d);
  for (int j = 0; j < kLegacyBlock; ++j) q[j] = static_cast<uint8_t>(round_clamped(x[j] * inv, -zero, zero - 1) + zero);
}

// Block with a minimum: value = q * d + m with q in [0, levels]. Writes d, m and the codes.
void quantize_with_min(const float* x, int levels, uint16_t& d_field, uint16_t& m_field, uint8_t* q) {
  float lo = x[0];
  float hi = x[0];
  for (int j = 1; j < kLegacyBlock; ++j) {
    lo = std::fmin(lo, x[j]);
    hi = std::fmax(hi, x[j]);
  }
  const float d = store_scale((hi - lo) / static_cast<float>(levels), d_field);
  const float m = store_scale(lo, m_field);
  const float inv = inverse_or_zero(d);
  for (int j = 0; j < kLegacyBlock; ++j) q[j] = static_cast<uint8_t>(round_clamped((x[j] - m) * inv, 0, levels));
}

// qs[j] = q[j] | q[j + 16] << 4 (low 4 bits of each code).
void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < kHalf; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | ((q[j + kHalf] & 0x0f) << 4));
}

// Bit 4 of each of the 32 codes, as the 4 little-endian bytes of Q5's qh.
void pack_fifth_bits(const uint8_t* q, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < kLegacyBlock; ++j) bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &bits, sizeof bits);
}

// The 5-bit codes of a Q5 block: code j and code j + 16 for each j < 16.
struct FiveBitPair {
  int low;
  int high;
};

FiveBitPair five_bit_codes(const uint8_t* qs, uint32_t qh, int j) {
  const int low = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
  const int high = (qs[j] >> 4) | static_cast<int>(((qh >> (j + kHalf)) & 1u) << 4);
  return {low, high};
}

}  // namespace

// ---- dequantization ----

void dequantize_q4_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += kLegacyBlock) {
    const auto block = load_block<BlockQ4_0>(src, i);
    const float d = fp16_to_fp32(block.d);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = (block.qs[j] & 0x0f) - 8;
      const int q1 = (block.qs[j] >> 4) - 8;
      dst[j] = static_cast<float>(q0) * d;
      dst[j + kHalf] = static_cast<float>(q1) * d;
    }
  }
}

void dequantize_q4_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += kLegacyBlock) {
    const auto block = load_block<BlockQ4_1>(src, i);
    const float d = fp16_to_fp32(block.d);
    const float m = fp16_to_fp32(block.m);
    for (int j = 0; j < kHalf; ++j) {
      const int q0 = block.qs[j] & 0x0f;
      const int q1 = block.qs[j] >> 4;
      dst[j] = static_cast<float>(q0) * d + m;
      dst[j + kHalf] = static_cast<float>(q1) * d + m;
    }
  }
}

void dequantize_q5_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += kLegacyBlock) {
    const auto block = load_block<BlockQ5_0>(src, i);
    const float d = fp16_to_fp32(block.d);
    const uint32_t qh = load_u32(block.qh);
    for (int j = 0; j < kHalf; ++j) {
      const FiveBitPair q = five_bit_codes(block.qs, qh, j);
      dst[j] = static_cast<float>(q.low - 16) * d;
      dst[j + kHalf] = static_cast<float>(q.high - 16) * d;
    }
  }
}

void dequantize_q5_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += kLegacyBlock) {
    const auto block = load_block<BlockQ5_1>(src, i);
    const float d = fp16_to_fp32(block.d);
    const float m = fp16_to_fp32(block.m);
    const uint32_t qh = load_u32(block.qh);
    for (int j = 0; j < kHalf; ++j) {
      const FiveBitPair q = five_bit_codes(block.qs, qh, j);
      dst[j] = static_cast<float>(q.low) * d + m;
      dst[j + kHalf] = static_cast<float>(q.high) * d + m;
    }
  }
}

void dequantize_q8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += kLegacyBlock) {
    const auto block = load_block<BlockQ8_0>(src, i);
    const float d = fp16_to_fp32(block.d);
    for (int j = 0; j < kLegacyBlock; ++j) dst[j] = static_cast<float>(block.qs[j]) * d;
  }
}

void dequantize_q8_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += kLegacyBlock) {
    const auto block = load_block<BlockQ8_1>(src, i);
    const float d = fp16_to_fp32(block.d);
    for (int j = 0; j < kLegacyBlock; ++j) dst[j] = static_cast<float>(block.qs[j]) * d;
  }
}

// ---- quantization ----

void quantize_q4_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += kLegacyBlock) {
    BlockQ4_0 block{};
    uint8_t q[kLegacyBlock];
    quantize_symmetric(src, 8, block.d, q);
    pack_nibbles(q, block.qs);
    store_block(dst, i, block);
  }
}

void quantize_q4_1(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += kLegacyBlock) {
    BlockQ4_1 block{};
    uint8_t q[kLegacyBlock];
    quantize_with_min(src, 15, block.d, block.m, q);
    pack_nibbles(q, block.qs);
    store_block(dst, i, block);
  }
}

void quantize_q5_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += kLegacyBlock) {
    BlockQ5_0 block{};
    uint8_t q[kLegacyBlock];
    quantize_symmetric(src, 16, block.d, q);
    pack_nibbles(q, block.qs);
    pack_fifth_bits(q, block.qh);
    store_block(dst, i, block);
  }
}

void quantize_q5_1(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += kLegacyBlock) {
    BlockQ5_1 block{};
    uint8_t q[kLegacyBlock];
    quantize_with_min(src, 31, block.d, block.m, q);
    pack_nibbles(q, block.qs);
    pack_fifth_bits(q, block.qh);
    store_block(dst, i, block);
  }
}

namespace {

// Q8_0/Q8_1 codes: d = max|x| / 127 (stored as fp16), q = round(x / d). Returns d as stored.
float quantize_8bit(const float* x, uint16_t& d_field, int8_t* q) {
  float amax = 0.0f;
  for (int j = 0; j < kLegacyBlock; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = store_scale(amax / 127.0f, d_field);
  const float inv = inverse_or_zero(d);
  for (int j = 0; j < kLegacyBlock; ++j) q[j] = static_cast<int8_t>(round_clamped(x[j] * inv, -127, 127));
  return d;
}

}  // namespace

void quantize_q8_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += kLegacyBlock) {
    BlockQ8_0 block{};
    quantize_8bit(src, block.d, block.qs);
    store_block(dst, i, block);
  }
}

void quantize_q8_1(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += kLegacyBlock) {
    BlockQ8_1 block{};
    const float d = quantize_8bit(src, block.d, block.qs);
    int sum = 0;
    for (int j = 0; j < kLegacyBlock; ++j) sum += block.qs[j];
    block.s = fp32_to_fp16(d * static_cast<float>(sum));
    store_block(dst, i, block);
  }
}

}  // namespace fafo::quant
