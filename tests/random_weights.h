// Random floats, and weight rows of random bytes for the kernel tests (Vulkan, CUDA decoders): every bit
// pattern of a format's codes and packed scales. The fp16 fields are random too but
// finite (NaN payloads through arithmetic are not portable); subnormal and zero scales
// occur. Plain float values are random finite bit patterns.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "../tools/synth/codebook_rows.h"
#include "fafo/tensor_type.h"

namespace fafo::test {

// n values drawn uniformly from [lo, hi) by a generator seeded with `seed`.
inline std::vector<float> random_values(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Byte offsets of the fp16 fields (scales, mins) in a block of each quantized format.
inline std::vector<uint32_t> half_fields(TensorType type) {
  switch (type) {
    case TensorType::Q4_0:
    case TensorType::Q5_0:
    case TensorType::Q8_0:
    case TensorType::IQ4_NL:
    case TensorType::IQ4_XS:
    case TensorType::IQ2_XXS:
    case TensorType::IQ2_XS:
    case TensorType::IQ3_XXS:
    case TensorType::IQ3_S:
      return {0};
    case TensorType::Q4_1:
    case TensorType::Q5_1:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
      return {0, 2};
    case TensorType::Q2_K:
      return {80, 82};
    case TensorType::Q3_K:
      return {108};
    case TensorType::Q6_K:
      return {208};
    default:
      return {};
  }
}

// rows x tensor_row_bytes(type, cols) random bytes, rows back to back.
inline std::vector<uint8_t> random_block_bytes(TensorType type, uint32_t rows, uint32_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t packed = size_t{rows} * tensor_row_bytes(type, cols);
  std::vector<uint8_t> bytes(packed);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  auto finite_half = [&](size_t at) {
    uint16_t h;
    std::memcpy(&h, &bytes[at], 2);
    if ((h & 0x7c00u) == 0x7c00u) h = static_cast<uint16_t>(h & ~0x4000u);
    std::memcpy(&bytes[at], &h, 2);
  };
  if (type == TensorType::F32) {
    for (size_t at = 0; at < packed; at += 4) {
      uint32_t f;
      std::memcpy(&f, &bytes[at], 4);
      if ((f & 0x7f800000u) == 0x7f800000u) f &= ~0x40000000u;
      std::memcpy(&bytes[at], &f, 4);
    }
  } else if (type == TensorType::F16) {
    for (size_t at = 0; at < packed; at += 2) finite_half(at);
  } else if (type == TensorType::BF16) {
    for (size_t at = 0; at < packed; at += 2) {
      uint16_t h;
      std::memcpy(&h, &bytes[at], 2);
      if ((h & 0x7f80u) == 0x7f80u) h = static_cast<uint16_t>(h & ~0x4000u);
      std::memcpy(&bytes[at], &h, 2);
    }
  } else if (type == TensorType::MXFP4) {  // exponents 2^-64 .. 2^63: finite products
    for (size_t block = 0; block < packed; block += tensor_type_info(type).block_bytes)
      bytes[block] = static_cast<uint8_t>(64 + bytes[block] % 128);
  } else {
    for (size_t block = 0; block < packed; block += tensor_type_info(type).block_bytes)
      for (const uint32_t field : half_fields(type)) finite_half(block + field);
  }
  return bytes;
}

// quantize_row for the formats fafo writes; for IQ2_XXS and IQ2_XS, which it only reads,
// random codes at the row's magnitude (tools/synth/codebook_rows.h).
inline void quantize_for_test(TensorType type, const float* x, void* out, int64_t cols) {
  synth::write_row(type, x, out, cols);
}

}  // namespace fafo::test
