// IEEE half (fp16) and bfloat16 scalar conversions, and the F16/BF16 row formats.
//
// Conversions to the narrow formats round to nearest, ties to even, keep infinities and
// turn NaNs into quiet NaNs (keeping the sign and the top payload bits). fp16 subnormals are
// produced and read exactly.
#include <bit>
#include <cmath>
#include <cstring>

#include "fafo/tensor_type.h"
#include "quant/formats.h"

namespace fafo {

namespace {

constexpr uint32_t kF32SignMask = 0x80000000u;
constexpr uint32_t kF32ExpMask = 0x7f800000u;     // also the bits of +infinity
constexpr uint32_t kF32MantissaBits = 23;
constexpr uint32_t kF16MantissaBits = 10;
constexpr uint32_t kF16ExpMask = 0x7c00u;
constexpr uint32_t kF16QuietBit = 0x0200u;
// (127 - 15) << 23: moves an exponent from the fp16 bias to the fp32 bias.
constexpr uint32_t kExpRebias = 112u << kF32MantissaBits;
// |x| at or above this rounds to infinity: halfway between 65504 (largest fp16) and 65536.
constexpr uint32_t kF16OverflowBits = 0x477ff000u;
// Smallest normal fp16, 2^-14, as fp32 bits.
constexpr uint32_t kF16MinNormalBits = 0x38800000u;
// Below 2^-25 (half the smallest fp16 subnormal) everything rounds to zero; exactly 2^-25 ties to zero (even).
constexpr uint32_t kF16HalfMinSubnormalBits = 0x33000000u;

}  // namespace

uint16_t fp32_to_fp16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((bits & kF32SignMask) >> 16);
  const uint32_t magnitude = bits & ~kF32SignMask;
  const uint32_t shift = kF32MantissaBits - kF16MantissaBits;  // 13 bits dropped from normals

  if (magnitude > kF32ExpMask) {  // NaN
    return static_cast<uint16_t>(sign | kF16ExpMask | kF16QuietBit | ((magnitude >> shift) & 0x03ffu));
  }
  if (magnitude >= kF16OverflowBits) return static_cast<uint16_t>(sign | kF16ExpMask);  // infinity
  if (magnitude >= kF16MinNormalBits) {
    // Add just under half an ulp, plus one more when the kept lsb is odd (ties to even); a
    // carry out of the mantissa correctly bumps the exponent.
    const uint32_t lsb = (magnitude >> shift) & 1u;
    const uint32_t rounded = magnitude + ((1u << (shift - 1)) - 1u) + lsb;
    return static_cast<uint16_t>(sign | ((rounded - kExpRebias) >> shift));
  }
  if (magnitude < kF16HalfMinSubnormalBits) return sign;  // rounds to (signed) zero

  // Subnormal result: round (1.mantissa * 2^(e - 150)) / 2^-24 to an integer.
  const uint32_t exponent = magnitude >> kF32MantissaBits;  // 102..112 here
  const uint32_t significand = (magnitude & 0x007fffffu) | 0x00800000u;
  const uint32_t drop = 126u - exponent;  // 14..24
  uint32_t q = significand >> drop;
  const uint32_t remainder = significand & ((1u << drop) - 1u);
  const uint32_t half = 1u << (drop - 1);
  if (remainder > half || (remainder == half && (q & 1u))) ++q;  // may become 0x400, the smallest normal
  return static_cast<uint16_t>(sign | q);
}

float bf16_to_fp32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

uint16_t fp32_to_bf16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & ~kF32SignMask) > kF32ExpMask) {  // NaN: truncate and force the quiet bit
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  // Round to nearest even on the 16 dropped bits; overflow carries into infinity.
  const uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7fffu + lsb) >> 16);
}

namespace quant {

void dequantize_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, sizeof h);
    dst[i] = fp16_to_fp32(h);
  }
}

void quantize_f16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_fp16(src[i]);
    std::memcpy(dst + 2 * i, &h, sizeof h);
  }
}

void dequantize_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, sizeof h);
    dst[i] = bf16_to_fp32(h);
  }
}

void quantize_bf16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = fp32_to_bf16(src[i]);
    std::memcpy(dst + 2 * i, &h, sizeof h);
  }
}

}  // namespace quant
}  // namespace fafo
