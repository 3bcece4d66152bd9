// The CUDA backend's KV cache entries in each KvCacheType, on the device and the host
// alike: fp32 values, fp16 words, or GGUF's 32-value Q8_0 (an fp16 scale d, 32 signed
// bytes: q * d) and Q4_0 blocks (an fp16 scale d, 16 bytes of nibbles: value j the low
// nibble of byte j, value j + 16 the high one: (q - 8) * d). A layer's cache is its
// entries one after another (kv_dim values each, kv_dim a multiple of 32 for the block
// types), so value i of the layer is value i % 32 of block i / 32.
//
// quantize_kv_block is the host's quantize_row (runtime/src/quant/legacy_formats.cpp)
// operation for operation, each rounded as there (no fused multiply-adds), so the device
// writes the blocks the cpu backend and the reference write for the same values.
#pragma once

#include <cstdint>

#include "block_decode.h"

namespace fafo::cuda {

enum class KvFormat : uint32_t { F32 = 0, F16 = 1, Q8_0 = 2, Q4_0 = 3 };

FAFO_HD bool kv_blocks(KvFormat f) { return f == KvFormat::Q8_0 || f == KvFormat::Q4_0; }
FAFO_HD uint32_t kv_block_bytes(KvFormat f) { return f == KvFormat::Q8_0 ? 34u : 18u; }
// Bytes of `n` values (n a multiple of 32 for the block types).
FAFO_HD uint64_t kv_bytes(KvFormat f, uint64_t n) {
  switch (f) {
    case KvFormat::F32: return 4 * n;
    case KvFormat::F16: return 2 * n;
    default: return n / 32 * kv_block_bytes(f);
  }
}

// Value i of a block-format row starting at `base`.
FAFO_HD float kv_block_value(const uint8_t* base, uint64_t i, KvFormat f) {
  const uint8_t* b = base + (i >> 5) * kv_block_bytes(f);
  const float d = half_bits_to_float(read_u16(b));
  const uint32_t j = static_cast<uint32_t>(i & 31u);
  if (f == KvFormat::Q8_0) return mul_rn(static_cast<float>(static_cast<int8_t>(b[2 + j])), d);
  const uint32_t q = (b[2 + (j & 15u)] >> (j < 16 ? 0 : 4)) & 0xfu;
  return mul_rn(static_cast<float>(static_cast<int>(q) - 8), d);
}

// Value i of a layer's cache (or of any row in the cache's format) starting at `base`.
FAFO_HD float kv_value(const void* base, uint64_t i, KvFormat f) {
  const uint8_t* bytes = static_cast<const uint8_t*>(base);
  switch (f) {
#if defined(__CUDA_ARCH__)
    case KvFormat::F32: return reinterpret_cast<const float*>(bytes)[i];
    case KvFormat::F16: return half_bits_to_float(reinterpret_cast<const uint16_t*>(bytes)[i]);
#else  // the host reads bytes (the caches and staging are byte buffers there)
    case KvFormat::F32: return bits_to_float(read_u32(bytes + 4 * i));
    case KvFormat::F16: return half_bits_to_float(read_u16(bytes + 2 * i));
#endif
    default: return kv_block_value(bytes, i, f);
  }
}

FAFO_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// The host quantizer's rounding: clamp to [lo, hi] (NaN to lo), then halves away from zero.
FAFO_HD int kv_round_clamped(float v, float lo, float hi) {
  v = v > lo ? v : lo;
  v = v < hi ? v : hi;
  return static_cast<int>(add_rn(v, v < 0.0f ? -0.5f : 0.5f));
}

// Quantizes x[0..32) into one block at `out` (kv_block_bytes(f) bytes).
FAFO_HD void quantize_kv_block(const float* x, uint8_t* out, KvFormat f) {
  float scale;
  if (f == KvFormat::Q8_0) {
    float amax = 0.0f;
    for (uint32_t j = 0; j < 32; ++j) {
      const float a = x[j] < 0.0f ? -x[j] : x[j];
      amax = a > amax ? a : amax;
    }
    scale = div_rn(amax, 127.0f);
  } else {  // the value of largest magnitude, with its sign (the first on ties), to level -8
    float best = 0.0f, best_abs = 0.0f;
    for (uint32_t j = 0; j < 32; ++j) {
      const float a = x[j] < 0.0f ? -x[j] : x[j];
      if (a > best_abs) best_abs = a, best = x[j];
    }
    scale = div_rn(best, -8.0f);
  }
  const uint16_t d_bits = float_to_half_bits(scale);
  const float d = half_bits_to_float(d_bits);
  const float inv = d != 0.0f ? div_rn(1.0f, d) : 0.0f;
  out[0] = static_cast<uint8_t>(d_bits & 0xffu);
  out[1] = static_cast<uint8_t>(d_bits >> 8);
  if (f == KvFormat::Q8_0) {
    for (uint32_t j = 0; j < 32; ++j)
      out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(kv_round_clamped(mul_rn(x[j], inv), -127.0f, 127.0f)));
    return;
  }
  for (uint32_t j = 0; j < 16; ++j) {
    const int lo = kv_round_clamped(mul_rn(x[j], inv), -8.0f, 7.0f) + 8;
    const int hi = kv_round_clamped(mul_rn(x[j + 16], inv), -8.0f, 7.0f) + 8;
    out[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

}  // namespace fafo::cuda
