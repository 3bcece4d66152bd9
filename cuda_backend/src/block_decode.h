// Decoding GGUF weight rows 16 values at a time, as the CUDA kernels read them and as
// host tests check them: every function here is `__host__ __device__` under nvcc and
// plain C++ elsewhere, so CI (no GPU) compiles this very code into tests against fafo's
// dequantize_row (runtime/src/quant).
//
// decode_chunk<T>(row, chunk, v) writes values [16 * chunk, 16 * chunk + 16) of the row
// starting at `row` (GGUF bytes); decode_value<T>(row, col) one value of a plain float
// row (F32, F16, BF16: their rows may end in a partial chunk). Every format's blocks and
// sub-block scales align to 16 values, so a chunk never straddles two of them.
//
// Bit-exactness: each value is the same float expression, in the same order, as the
// CPU's (ggml's order, e.g. (d * sc) * q - (dmin * m) for Q4_K), each operation rounded
// on its own: on the device through the _rn intrinsics, which the compiler never fuses
// into an FMA; on the host the including file must be compiled with -ffp-contract=off.
// fp16 is decoded by bit manipulation, exact for subnormals, infinities and NaNs.
#pragma once

#include <cstdint>
#include <cstring>

#include "../../shaders/iq_grids.inc"

#if defined(__CUDACC__)
#define FAFO_HD __host__ __device__ __forceinline__
#else
#define FAFO_HD inline
#endif

// Loops over a kernel's small register arrays are unrolled on the GPU so that their
// indices are constants (an array indexed at run time lives in local memory).
#if defined(__CUDA_ARCH__)
#define FAFO_UNROLL _Pragma("unroll")
#else
#define FAFO_UNROLL
#endif

namespace fafo::cuda {

// The weight formats, numbered as GGUF (ggml) type ids.
enum class Format : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18,
  IQ4_NL = 20, IQ3_S = 21, IQ4_XS = 23, BF16 = 30, MXFP4 = 39,
};

template <Format F> struct FormatTraits;
template <> struct FormatTraits<Format::F32> { static constexpr uint32_t block = 1, bytes = 4; };
template <> struct FormatTraits<Format::F16> { static constexpr uint32_t block = 1, bytes = 2; };
template <> struct FormatTraits<Format::BF16> { static constexpr uint32_t block = 1, bytes = 2; };
template <> struct FormatTraits<Format::Q8_0> { static constexpr uint32_t block = 32, bytes = 34; };
template <> struct FormatTraits<Format::Q4_0> { static constexpr uint32_t block = 32, bytes = 18; };
template <> struct FormatTraits<Format::Q4_1> { static constexpr uint32_t block = 32, bytes = 20; };
template <> struct FormatTraits<Format::Q5_0> { static constexpr uint32_t block = 32, bytes = 22; };
template <> struct FormatTraits<Format::Q5_1> { static constexpr uint32_t block = 32, bytes = 24; };
template <> struct FormatTraits<Format::Q2_K> { static constexpr uint32_t block = 256, bytes = 84; };
template <> struct FormatTraits<Format::Q3_K> { static constexpr uint32_t block = 256, bytes = 110; };
template <> struct FormatTraits<Format::Q4_K> { static constexpr uint32_t block = 256, bytes = 144; };
template <> struct FormatTraits<Format::Q5_K> { static constexpr uint32_t block = 256, bytes = 176; };
template <> struct FormatTraits<Format::Q6_K> { static constexpr uint32_t block = 256, bytes = 210; };
template <> struct FormatTraits<Format::IQ4_NL> { static constexpr uint32_t block = 32, bytes = 18; };
template <> struct FormatTraits<Format::IQ4_XS> { static constexpr uint32_t block = 256, bytes = 136; };
template <> struct FormatTraits<Format::MXFP4> { static constexpr uint32_t block = 32, bytes = 17; };
template <> struct FormatTraits<Format::IQ2_XXS> { static constexpr uint32_t block = 256, bytes = 66; };
template <> struct FormatTraits<Format::IQ2_XS> { static constexpr uint32_t block = 256, bytes = 74; };
template <> struct FormatTraits<Format::IQ3_XXS> { static constexpr uint32_t block = 256, bytes = 98; };
template <> struct FormatTraits<Format::IQ3_S> { static constexpr uint32_t block = 256, bytes = 110; };

template <Format F>
constexpr bool is_plain_float = FormatTraits<F>::block == 1;

// ---- exact arithmetic and readers ----

FAFO_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
FAFO_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
FAFO_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

FAFO_HD float bits_to_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// float -> its bits.
FAFO_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

FAFO_HD uint32_t read_u16(const uint8_t* p) { return uint32_t{p[0]} | (uint32_t{p[1]} << 8); }
FAFO_HD uint32_t read_u32(const uint8_t* p) { return read_u16(p) | (read_u16(p + 2) << 16); }

// IEEE half bits -> float, exactly (subnormals become normal floats).
FAFO_HD float half_bits_to_float(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return bits_to_float(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent != 0) return bits_to_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return bits_to_float(sign);  // +-0
  // Subnormal: shift the mantissa up to a leading 1, lowering the exponent each step.
  uint32_t e = 113;
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --e;
  }
  return bits_to_float(sign | (e << 23) | ((mantissa & 0x3ffu) << 13));
}

// float -> IEEE half bits, rounded to nearest even (fafo::fp32_to_fp16's result):
// overflow to infinity, subnormals, NaN kept a NaN.
FAFO_HD uint16_t float_to_half_bits(float f) {
  const uint32_t u = float_bits(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to infinity (or is one)
  if (abs < 0x38800000u) {
    // A half subnormal (or zero): the value in units of 2^-24, rounded to nearest even.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // below half of the smallest subnormal
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent;  // 14..24
    uint32_t h = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((abs - 0x38000000u) >> 13);  // rebias the exponent, keep 10 mantissa bits
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

FAFO_HD float bf16_bits_to_float(uint32_t h) { return bits_to_float(h << 16); }

// ---- plain float rows ----

template <Format F>
FAFO_HD float decode_value(const uint8_t* row, uint32_t col) {
  static_assert(is_plain_float<F>, "decode_value reads plain float rows");
  if constexpr (F == Format::F32) return bits_to_float(read_u32(row + 4 * col));
  else if constexpr (F == Format::F16) return half_bits_to_float(read_u16(row + 2 * col));
  else return bf16_bits_to_float(read_u16(row + 2 * col));
}

// ---- one 16-value chunk of a block (quantized formats) ----

// value = q * d, q a signed byte.
FAFO_HD void decode_q8_0(const uint8_t* b, uint32_t sub, float v[16]) {
  const float d = half_bits_to_float(read_u16(b));
  const uint8_t* qs = b + 2 + 16 * sub;
  for (uint32_t k = 0; k < 16; ++k) v[k] = mul_rn(static_cast<float>(static_cast<int8_t>(qs[k])), d);
}

// Value j (< 16) is the low nibble of qs[j], value j + 16 the high one.
// Q4_0: (q - 8) * d.  Q4_1: q * d + m.
template <bool WithMin>
FAFO_HD void decode_q4(const uint8_t* b, uint32_t sub, float v[16]) {
  const float d = half_bits_to_float(read_u16(b));
  const float m = WithMin ? half_bits_to_float(read_u16(b + 2)) : 0.0f;
  const uint8_t* qs = b + (WithMin ? 4 : 2);
  for (uint32_t k = 0; k < 16; ++k) {
    const uint32_t q = (qs[k] >> (4 * sub)) & 0xfu;
    v[k] = WithMin ? add_rn(mul_rn(static_cast<float>(q), d), m) : mul_rn(static_cast<float>(static_cast<int>(q) - 8), d);
  }
}

// As Q4 plus a fifth bit: bit 4 of value j is bit j of the 32-bit qh.
// Q5_0: (q - 16) * d.  Q5_1: q * d + m.
template <bool WithMin>
FAFO_HD void decode_q5(const uint8_t* b, uint32_t sub, float v[16]) {
  const float d = half_bits_to_float(read_u16(b));
  const float m = WithMin ? half_bits_to_float(read_u16(b + 2)) : 0.0f;
  const uint32_t qh = read_u32(b + (WithMin ? 4 : 2));
  const uint8_t* qs = b + (WithMin ? 8 : 6);
  for (uint32_t k = 0; k < 16; ++k) {
    const uint32_t q = ((qs[k] >> (4 * sub)) & 0xfu) | (((qh >> (16 * sub + k)) & 1u) << 4);
    v[k] = WithMin ? add_rn(mul_rn(static_cast<float>(q), d), m)
                   : mul_rn(static_cast<float>(static_cast<int>(q) - 16), d);
  }
}

// 16 sub-blocks of 16; sub-block s = 8 * half + 2 * plane + part holds bits
// 2 * plane..+1 of qs[32 * half + 16 * part + l].
// Q2_K: (d * (sc & 15)) * q - (dmin * (sc >> 4)); scales at 0, qs at 16, d at 80, dmin at 82.
FAFO_HD void decode_q2_k(const uint8_t* b, uint32_t sub, float v[16]) {
  const uint32_t half = sub >> 3, plane = (sub >> 1) & 3u, part = sub & 1u;
  const uint32_t sc = b[sub];
  const float d = half_bits_to_float(read_u16(b + 80)), dmin = half_bits_to_float(read_u16(b + 82));
  const float dl = mul_rn(d, static_cast<float>(sc & 0xfu));
  const float ml = mul_rn(dmin, static_cast<float>(sc >> 4));
  const uint8_t* qs = b + 16 + 32 * half + 16 * part;
  for (uint32_t k = 0; k < 16; ++k) v[k] = sub_rn(mul_rn(dl, static_cast<float>((qs[k] >> (2 * plane)) & 3u)), ml);
}

// Q3_K: (d * (scale6 - 32)) * (q - (hmask bit ? 0 : 4)), the bit 4 * half + plane of
// hmask[16 * part + l]; hmask at 0, qs at 32, 6-bit scales at 96, d at 108.
FAFO_HD void decode_q3_k(const uint8_t* b, uint32_t sub, float v[16]) {
  const uint32_t half = sub >> 3, plane = (sub >> 1) & 3u, part = sub & 1u;
  const uint32_t low4 = sub < 8 ? b[96 + sub] & 0xfu : b[96 + sub - 8] >> 4;
  const uint32_t high2 = (b[104 + (sub & 3u)] >> (2 * (sub >> 2))) & 3u;
  const int scale = static_cast<int>(low4 | (high2 << 4)) - 32;
  const float dl = mul_rn(half_bits_to_float(read_u16(b + 108)), static_cast<float>(scale));
  const uint8_t* qs = b + 32 + 32 * half + 16 * part;
  const uint8_t* hm = b + 16 * part;
  const uint32_t high_bit = 4 * half + plane;
  for (uint32_t k = 0; k < 16; ++k) {
    const int q = static_cast<int>((qs[k] >> (2 * plane)) & 3u) - (((hm[k] >> high_bit) & 1u) != 0 ? 0 : 4);
    v[k] = mul_rn(dl, static_cast<float>(q));
  }
}

// 8 sub-blocks of 32, 6-bit scales and mins packed in 12 bytes at 4 (d at 0, dmin at
// 2). Chunk s is in sub-block j = s / 2: nibble j % 2 of qs[32 * (s / 4) + 16 * (s % 2)
// + l]; Q5_K adds bit j of qh[16 * (s % 2) + l] as bit 4. value = (d * sc) * q - (dmin * m).
template <bool FifthBit>
FAFO_HD void decode_q45_k(const uint8_t* b, uint32_t sub, float v[16]) {
  const uint32_t j = sub >> 1;
  const uint8_t* scales = b + 4;
  uint32_t sc, mn;
  if (j < 4) {
    sc = scales[j] & 63u;
    mn = scales[j + 4] & 63u;
  } else {
    sc = (scales[j + 4] & 0xfu) | ((scales[j - 4] >> 6) << 4);
    mn = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
  const float dl = mul_rn(half_bits_to_float(read_u16(b)), static_cast<float>(sc));
  const float ml = mul_rn(half_bits_to_float(read_u16(b + 2)), static_cast<float>(mn));
  const uint32_t shift = 4 * (j & 1u);
  const uint8_t* qs = b + (FifthBit ? 48 : 16) + 32 * (sub >> 2) + 16 * (sub & 1u);
  const uint8_t* qh = b + 16 + 16 * (sub & 1u);
  for (uint32_t k = 0; k < 16; ++k) {
    uint32_t q = (qs[k] >> shift) & 0xfu;
    if (FifthBit) q |= ((qh[k] >> j) & 1u) << 4;
    v[k] = sub_rn(mul_rn(dl, static_cast<float>(q)), ml);
  }
}

// 16 sub-blocks of 16, signed 8-bit scales at 192, d at 208. Chunk s = 8 * half + 2 * k
// + part: low 4 bits are nibble k / 2 of ql[64 * half + 32 * (k % 2) + 16 * part + l],
// high 2 bits are bits 2k..2k+1 of qh[128 + 32 * half + 16 * part + l].
// value = (d * scales[s]) * (q - 32).
FAFO_HD void decode_q6_k(const uint8_t* b, uint32_t sub, float v[16]) {
  const uint32_t half = sub >> 3, k4 = (sub >> 1) & 3u, part = sub & 1u;
  const float scale = mul_rn(half_bits_to_float(read_u16(b + 208)), static_cast<float>(static_cast<int8_t>(b[192 + sub])));
  const uint8_t* ql = b + 64 * half + 32 * (k4 & 1u) + 16 * part;
  const uint8_t* qh = b + 128 + 32 * half + 16 * part;
  const uint32_t low_shift = 4 * (k4 >> 1);
  for (uint32_t k = 0; k < 16; ++k) {
    const uint32_t q = ((ql[k] >> low_shift) & 0xfu) | (((qh[k] >> (2 * k4)) & 3u) << 4);
    v[k] = mul_rn(scale, static_cast<float>(static_cast<int>(q) - 32));
  }
}

// The 4-bit codes that index a table of 16 signed bytes (runtime/src/quant/blocks.h),
// packed eight to a 64-bit word so that a lookup stays in registers: IQ4_NL's and
// IQ4_XS's non-linear grid, and MXFP4's doubled fp4 numbers.
template <bool Fp4>
FAFO_HD float table_value(uint32_t code) {
  constexpr uint64_t lo = Fp4 ? 0x0c08060403020100ull : 0xf6eaddcfbfad9881ull;
  constexpr uint64_t hi = Fp4 ? 0xf4f8fafcfdfeff00ull : 0x7159453526190d01ull;
  const uint64_t word = code < 8 ? lo : hi;
  return static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(word >> (8 * (code & 7u)))));
}

// Value j (< 16) of a 32-value group is the low nibble of qs[j], value j + 16 the high one.
// IQ4_NL: d * table[q]; d at 0, qs at 2.
FAFO_HD void decode_iq4_nl(const uint8_t* b, uint32_t sub, float v[16]) {
  const float d = half_bits_to_float(read_u16(b));
  const uint8_t* qs = b + 2;
  for (uint32_t k = 0; k < 16; ++k) v[k] = mul_rn(d, table_value<false>((qs[k] >> (4 * sub)) & 0xfu));
}

// IQ4_XS: 8 sub-blocks of 32, (d * (scale6 - 32)) * table[q]; d at 0, the scales' high
// 2 bits at 2 (bits 2ib..2ib+1 of 16), their low 4 bits in the nibbles of 4..7, the
// codes of sub-block ib at 8 + 16 ib.
FAFO_HD void decode_iq4_xs(const uint8_t* b, uint32_t sub, float v[16]) {
  const uint32_t ib = sub >> 1;
  const uint32_t low4 = (b[4 + (ib >> 1)] >> (4 * (ib & 1u))) & 0xfu;
  const uint32_t high2 = (read_u16(b + 2) >> (2 * ib)) & 3u;
  const float dl = mul_rn(half_bits_to_float(read_u16(b)), static_cast<float>(static_cast<int>(low4 | (high2 << 4)) - 32));
  const uint8_t* qs = b + 8 + 16 * ib;
  const uint32_t shift = 4 * (sub & 1u);
  for (uint32_t k = 0; k < 16; ++k) v[k] = mul_rn(dl, table_value<false>((qs[k] >> shift) & 0xfu));
}

// MXFP4: table[q] * 2^(e - 128), e the byte at 0 (ggml's reading: 255 is 2^127), qs at 1.
FAFO_HD void decode_mxfp4(const uint8_t* b, uint32_t sub, float v[16]) {
  const uint32_t e = b[0];
  const float d = bits_to_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
  const uint8_t* qs = b + 1;
  for (uint32_t k = 0; k < 16; ++k) v[k] = mul_rn(table_value<true>((qs[k] >> (4 * sub)) & 0xfu), d);
}

// ---- the codebook formats IQ2_XXS, IQ2_XS, IQ3_XXS, IQ3_S (runtime/src/quant/blocks.h) ----
// Their codebooks are the packed entries of shaders/iq_grids.inc (level indices, 2 bits a
// value for IQ2, 3 for IQ3), kept in device memory on the GPU; a value's level is
// arithmetic: IQ2 8, 25, 43; IQ3_XXS 4 + 8 l (62 for l = 7); IQ3_S 2 l + 1.

#if defined(__CUDACC__)
static __device__ const uint16_t kIq2xxsGridDevice[] = {FAFO_IQ2XXS_GRID};
static __device__ const uint16_t kIq2xsGridDevice[] = {FAFO_IQ2XS_GRID};
static __device__ const uint16_t kIq3xxsGridDevice[] = {FAFO_IQ3XXS_GRID};
static __device__ const uint16_t kIq3sGridDevice[] = {FAFO_IQ3S_GRID};
#endif
inline constexpr uint16_t kIq2xxsGridHost[] = {FAFO_IQ2XXS_GRID};
inline constexpr uint16_t kIq2xsGridHost[] = {FAFO_IQ2XS_GRID};
inline constexpr uint16_t kIq3xxsGridHost[] = {FAFO_IQ3XXS_GRID};
inline constexpr uint16_t kIq3sGridHost[] = {FAFO_IQ3S_GRID};

#if defined(__CUDA_ARCH__)
#define FAFO_GRID(name, i) name##Device[i]
#else
#define FAFO_GRID(name, i) name##Host[i]
#endif

// The 8 signs of a vector from its 7 stored bits: the 8th makes the count of minus signs even.
FAFO_HD uint32_t iq2_signs(uint32_t seven) {
  seven &= 127u;
#if defined(__CUDA_ARCH__)
  const uint32_t parity = __popc(seven) & 1u;
#else
  uint32_t parity = 0;
  for (uint32_t x = seven; x != 0; x &= x - 1) parity ^= 1u;
#endif
  return seven | (parity << 7);
}

FAFO_HD float iq2_level(uint32_t l) { return l == 0 ? 8.0f : (l == 1 ? 25.0f : 43.0f); }
FAFO_HD float iq3xxs_level(uint32_t l) { return l == 7 ? 62.0f : static_cast<float>(4 + 8 * l); }
FAFO_HD float iq3s_level(uint32_t l) { return static_cast<float>(2 * l + 1); }

// One value: db * level, its sign bit flipped where bit j of the signs is set (ggml's
// (db * level) * -1.f as GCC compiles it: a NaN's sign flips too).
FAFO_HD float signed_grid_value(float db, float level, uint32_t signs, uint32_t j) {
  return bits_to_float(float_bits(mul_rn(db, level)) ^ (((signs >> j) & 1u) << 31));
}

// A 16-value chunk is vectors 2 (sub & 1) and 2 (sub & 1) + 1 of group sub / 2.
// IQ2_XXS: per group two words at 2 + 8 ib: four 8-bit indices; 4 x 7 sign bits and the
// scale s in the top 4 bits. db = (d * (0.5 + s)) * 0.25.
FAFO_HD void decode_iq2_xxs(const uint8_t* b, uint32_t sub, float v[16]) {
  const uint32_t ib = sub >> 1;
  const uint32_t indices = read_u32(b + 2 + 8 * ib), rest = read_u32(b + 6 + 8 * ib);
  const float d = half_bits_to_float(read_u16(b));
  const float db = mul_rn(mul_rn(d, add_rn(0.5f, static_cast<float>(rest >> 28))), 0.25f);
  FAFO_UNROLL for (uint32_t t = 0; t < 2; ++t) {
    const uint32_t l = 2 * (sub & 1u) + t;
    const uint32_t entry = FAFO_GRID(kIq2xxsGrid, (indices >> (8 * l)) & 0xffu);
    const uint32_t signs = iq2_signs(rest >> (7 * l));
    FAFO_UNROLL for (uint32_t j = 0; j < 8; ++j) v[8 * t + j] = signed_grid_value(db, iq2_level((entry >> (2 * j)) & 3u), signs, j);
  }
}

// IQ2_XS: 16 bits per vector at 2 + 2 (4 ib + l): a 9-bit index, 7 sign bits; the
// group's two 4-bit scales at 66 + ib (the low one for vectors 0 and 1).
FAFO_HD void decode_iq2_xs(const uint8_t* b, uint32_t sub, float v[16]) {
  const uint32_t ib = sub >> 1, half = sub & 1u;
  const float d = half_bits_to_float(read_u16(b));
  const uint32_t s = (b[66 + ib] >> (4 * half)) & 0xfu;
  const float db = mul_rn(mul_rn(d, add_rn(0.5f, static_cast<float>(s))), 0.25f);
  FAFO_UNROLL for (uint32_t t = 0; t < 2; ++t) {
    const uint32_t q = read_u16(b + 2 + 2 * (4 * ib + 2 * half + t));
    const uint32_t entry = FAFO_GRID(kIq2xsGrid, q & 511u);
    const uint32_t signs = iq2_signs(q >> 9);
    FAFO_UNROLL for (uint32_t j = 0; j < 8; ++j) v[8 * t + j] = signed_grid_value(db, iq2_level((entry >> (2 * j)) & 3u), signs, j);
  }
}

// IQ3_XXS: half-vector indices at 2 + 8 ib + 2 l (+1); the group's word of signs and
// scale at 66 + 4 ib. db = (d * (0.5 + s)) * 0.5.
FAFO_HD void decode_iq3_xxs(const uint8_t* b, uint32_t sub, float v[16]) {
  const uint32_t ib = sub >> 1;
  const uint32_t word = read_u32(b + 66 + 4 * ib);
  const float d = half_bits_to_float(read_u16(b));
  const float db = mul_rn(mul_rn(d, add_rn(0.5f, static_cast<float>(word >> 28))), 0.5f);
  FAFO_UNROLL for (uint32_t t = 0; t < 2; ++t) {
    const uint32_t l = 2 * (sub & 1u) + t;
    const uint32_t first = FAFO_GRID(kIq3xxsGrid, b[2 + 8 * ib + 2 * l]);
    const uint32_t second = FAFO_GRID(kIq3xxsGrid, b[3 + 8 * ib + 2 * l]);
    const uint32_t entry = first | (second << 12);
    const uint32_t signs = iq2_signs(word >> (7 * l));
    FAFO_UNROLL for (uint32_t j = 0; j < 8; ++j) v[8 * t + j] = signed_grid_value(db, iq3xxs_level((entry >> (3 * j)) & 7u), signs, j);
  }
}

// IQ3_S: half-vector indices' low 8 bits at 2 + 8 ib + 2 l (+1), their 9th bits in the
// byte at 66 + ib (bit k for half-vector k); vector l's 8 sign bits at 74 + 4 ib + l;
// the 4-bit scales at 106 + ib / 2. db = d * (1 + 2 s).
FAFO_HD void decode_iq3_s(const uint8_t* b, uint32_t sub, float v[16]) {
  const uint32_t ib = sub >> 1;
  const float d = half_bits_to_float(read_u16(b));
  const uint32_t s = (b[106 + (ib >> 1)] >> (4 * (ib & 1u))) & 0xfu;
  const float db = mul_rn(d, static_cast<float>(1 + 2 * static_cast<int>(s)));
  const uint32_t qh = b[66 + ib];
  FAFO_UNROLL for (uint32_t t = 0; t < 2; ++t) {
    const uint32_t l = 2 * (sub & 1u) + t;
    const uint32_t first = FAFO_GRID(kIq3sGrid, b[2 + 8 * ib + 2 * l] | (((qh >> (2 * l)) & 1u) << 8));
    const uint32_t second = FAFO_GRID(kIq3sGrid, b[3 + 8 * ib + 2 * l] | (((qh >> (2 * l + 1)) & 1u) << 8));
    const uint32_t entry = first | (second << 12);
    const uint32_t signs = b[74 + 4 * ib + l];
    FAFO_UNROLL for (uint32_t j = 0; j < 8; ++j) v[8 * t + j] = signed_grid_value(db, iq3s_level((entry >> (3 * j)) & 7u), signs, j);
  }
}

#undef FAFO_GRID

// ---- a row, 16 values at a time ----

template <Format F>
FAFO_HD void decode_chunk(const uint8_t* row, uint32_t chunk, float v[16]) {
  using Tr = FormatTraits<F>;
  if constexpr (is_plain_float<F>) {
    for (uint32_t k = 0; k < 16; ++k) v[k] = decode_value<F>(row, 16 * chunk + k);
  } else {
    constexpr uint32_t chunks_per_block = Tr::block / 16;
    const uint8_t* b = row + (chunk / chunks_per_block) * Tr::bytes;
    const uint32_t sub = chunk % chunks_per_block;
    if constexpr (F == Format::Q8_0) decode_q8_0(b, sub, v);
    else if constexpr (F == Format::Q4_0) decode_q4<false>(b, sub, v);
    else if constexpr (F == Format::Q4_1) decode_q4<true>(b, sub, v);
    else if constexpr (F == Format::Q5_0) decode_q5<false>(b, sub, v);
    else if constexpr (F == Format::Q5_1) decode_q5<true>(b, sub, v);
    else if constexpr (F == Format::Q2_K) decode_q2_k(b, sub, v);
    else if constexpr (F == Format::Q3_K) decode_q3_k(b, sub, v);
    else if constexpr (F == Format::Q4_K) decode_q45_k<false>(b, sub, v);
    else if constexpr (F == Format::Q5_K) decode_q45_k<true>(b, sub, v);
    else if constexpr (F == Format::IQ4_NL) decode_iq4_nl(b, sub, v);
    else if constexpr (F == Format::IQ4_XS) decode_iq4_xs(b, sub, v);
    else if constexpr (F == Format::MXFP4) decode_mxfp4(b, sub, v);
    else if constexpr (F == Format::IQ2_XXS) decode_iq2_xxs(b, sub, v);
    else if constexpr (F == Format::IQ2_XS) decode_iq2_xs(b, sub, v);
    else if constexpr (F == Format::IQ3_XXS) decode_iq3_xxs(b, sub, v);
    else if constexpr (F == Format::IQ3_S) decode_iq3_s(b, sub, v);
    else decode_q6_k(b, sub, v);
  }
}

// Calls f.template operator()<F>() for a runtime format id (host code: the one place
// that turns a tensor type into a decoder). Returns false for a format with no decoder.
template <typename Fn>
inline bool with_format(uint32_t type, Fn&& f) {
  switch (static_cast<Format>(type)) {
    case Format::F32: f.template operator()<Format::F32>(); return true;
    case Format::F16: f.template operator()<Format::F16>(); return true;
    case Format::BF16: f.template operator()<Format::BF16>(); return true;
    case Format::Q8_0: f.template operator()<Format::Q8_0>(); return true;
    case Format::Q4_0: f.template operator()<Format::Q4_0>(); return true;
    case Format::Q4_1: f.template operator()<Format::Q4_1>(); return true;
    case Format::Q5_0: f.template operator()<Format::Q5_0>(); return true;
    case Format::Q5_1: f.template operator()<Format::Q5_1>(); return true;
    case Format::Q2_K: f.template operator()<Format::Q2_K>(); return true;
    case Format::Q3_K: f.template operator()<Format::Q3_K>(); return true;
    case Format::Q4_K: f.template operator()<Format::Q4_K>(); return true;
    case Format::Q5_K: f.template operator()<Format::Q5_K>(); return true;
    case Format::Q6_K: f.template operator()<Format::Q6_K>(); return true;
    case Format::IQ4_NL: f.template operator()<Format::IQ4_NL>(); return true;
    case Format::IQ4_XS: f.template operator()<Format::IQ4_XS>(); return true;
    case Format::MXFP4: f.template operator()<Format::MXFP4>(); return true;
    case Format::IQ2_XXS: f.template operator()<Format::IQ2_XXS>(); return true;
    case Format::IQ2_XS: f.template operator()<Format::IQ2_XS>(); return true;
    case Format::IQ3_XXS: f.template operator()<Format::IQ3_XXS>(); return true;
    case Format::IQ3_S: f.template operator()<Format::IQ3_S>(); return true;
  }
  return false;
}

inline bool has_decoder(uint32_t type) {
  return with_format(type, []<Format F>() { static_assert(FormatTraits<F>::block > 0); });
}

}  // namespace fafo::cuda
