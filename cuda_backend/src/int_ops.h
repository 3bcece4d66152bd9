// The CUDA backend's integer products: the warp kernels' product for weights in every
// format but Q2_K, the codebook ones and plain floats (has_int_product), for every step
// size, as llama.cpp's CUDA backend multiplies them:
//   1. QuantizeRowsOp rounds each activation row to 8 bits per block of 32 values
//      (d = max |x| RN(1 / 127), q = the integer nearest to x / d, and d times the
//      block's sum of q: no division, so every device rounds alike), after the
//      RMSNorm when one is fused (the bits of RmsNormWarpOp's values);
//   2. IntMatmulWarpOp: a warp per weight row and tile of up to 8 tokens; the row is cut
//      into units (IntUnit: a Q8_0 block, a Q6_K or Q3_K run of 32 values, a pair of
//      Q4_K/Q5_K sub-blocks of 32, a block of 32 4- or 5-bit codes), lane l takes units l, l + 32, ...;
//      a unit's dot products with the rounded activations are integer sums (dot4: four
//      byte products at a time, __dp4a on the GPU), exact in any order; lane l adds each
//      unit's value to its sum
//      in unit order by one fixed float expression of those sums and the scales
//      (IntUnit::add_to: fused multiply-adds), and the warp adds the 32 lane sums by
//      dot_order.h's tree.
// Every float step is fixed by the row, the unit and the token alone: the result does
// not depend on T, the tile or the other rows (T-invariant), and a kernel that gets the
// same integer sums another way (tensor cores) gives the same bits by applying the same
// expressions in the same order. The rounding of the activations puts the products
// within the backend's rounded_matmul_tolerance of the reference.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

#include "block_decode.h"
#include "dot_order.h"
#include "ops.h"
#include "warp.h"

namespace fafo::cuda {

constexpr uint32_t kQ8Block = 32;  // activation values per rounding block

// The formats with an integer product.
template <Format F>
constexpr bool has_int_product = F == Format::Q4_K || F == Format::Q5_K || F == Format::Q6_K || F == Format::Q8_0 ||
                                  F == Format::Q3_K || F == Format::Q4_0 || F == Format::Q4_1 || F == Format::Q5_0 ||
                                  F == Format::Q5_1 || F == Format::IQ4_NL || F == Format::IQ4_XS || F == Format::MXFP4;
inline bool has_int_product_for(uint32_t type) {
  bool yes = false;
  with_format(type, [&]<Format F>() { yes = has_int_product<F>; });
  return yes;
}

// A step's activations rounded to 8 bits: row t's values at q + t * cols, its blocks'
// scales at d + t * (cols / 32) and each block's d times its sum of q at
// s + t * (cols / 32) (one rounding: what the Q4_K/Q5_K minimums multiply).
struct Q8Rows {
  int8_t* q;
  float* d;
  float* s;
  uint32_t cols;
};

// ---- integer and bit helpers ----

// c + the sum of the four products of the signed bytes of a and b.
FAFO_HD int32_t dot4(uint32_t a, uint32_t b, int32_t c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (uint32_t k = 0; k < 4; ++k) c += static_cast<int8_t>(a >> (8 * k)) * static_cast<int8_t>(b >> (8 * k));
  return c;
#endif
}

// Four bytes from an address aligned to 4 (a Q4_K/Q5_K block's quants, Q4_1/Q5_1/IQ4_XS
// codes, the rounded activations) or only to 2 (Q8_0, Q6_K, Q3_K, Q4_0, Q5_0 and IQ4_NL
// blocks, whose sizes are even).
FAFO_HD uint32_t load_word4(const void* p) {
#if defined(__CUDA_ARCH__)
  return *static_cast<const uint32_t*>(p);
#else
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}
FAFO_HD uint32_t load_word2(const void* p) {
#if defined(__CUDA_ARCH__)
  const uint16_t* h = static_cast<const uint16_t*>(p);
  return uint32_t{h[0]} | (uint32_t{h[1]} << 16);
#else
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}

// Sixteen bytes from p as four words: one 16-byte load on the GPU where p is aligned to
// 16 (a Q4_K/Q5_K block's quants in a row of whole blocks; cudaMalloc's memory is), four
// 4-byte loads otherwise.
FAFO_HD void load_words16(const void* p, uint32_t out[4]) {
#if defined(__CUDA_ARCH__)
  if ((reinterpret_cast<uintptr_t>(p) & 15u) == 0) {
    const uint4 v = *static_cast<const uint4*>(p);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
    return;
  }
  FAFO_UNROLL
  for (uint32_t k = 0; k < 4; ++k) out[k] = static_cast<const uint32_t*>(p)[k];
#else
  std::memcpy(out, p, 16);
#endif
}

// lo >> shift with the low bits of hi above it (shift 0 or 16): __funnelshift_r.
FAFO_HD uint32_t funnel_right(uint32_t lo, uint32_t hi, uint32_t shift) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_r(lo, hi, shift);
#else
  return shift == 0 ? lo : (lo >> shift) | (hi << (32 - shift));
#endif
}

// The eight words of 32 bytes from p, aligned to 2 (a run of a Q6_K, Q3_K or Q8_0 block), by
// eight 4-byte loads from the aligned word at or below p and the run's last two bytes,
// put together by funnel shifts of 0 or 16 bits, instead of sixteen 2-byte loads; the
// same on the host. Nothing past the run is read; where p is not aligned to 4 the two
// bytes before it are (inside the block, or the previous block's: a weight's memory
// starts aligned to 4, so never before it).
FAFO_HD void load_words32_a2(const uint8_t* p, uint32_t out[8]) {
  const uint32_t misaligned = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 3u);
  const uint8_t* a = p - misaligned;
  const uint32_t shift = misaligned * 8u;
  uint32_t w[9];
  FAFO_UNROLL
  for (uint32_t k = 0; k < 8; ++k) w[k] = load_word4(a + 4 * k);
  w[8] = read_u16(p + 30);  // where p is aligned to 4 the shift is 0 and this is not used
  FAFO_UNROLL
  for (uint32_t k = 0; k < 8; ++k) out[k] = funnel_right(w[k], w[k + 1], shift);
}

// Each byte b (0..63) of w as the signed byte b - 32 (no borrow crosses bytes).
FAFO_HD uint32_t bytes_minus_32(uint32_t w) { return ((w | 0x80808080u) - 0x20202020u) ^ 0x80808080u; }
// Each byte b of w as the signed byte b - 8 (b < 16), b - 16 (b < 32) or b - 4 (b < 8).
FAFO_HD uint32_t bytes_minus_8(uint32_t w) { return ((w | 0x80808080u) - 0x08080808u) ^ 0x80808080u; }
FAFO_HD uint32_t bytes_minus_16(uint32_t w) { return ((w | 0x80808080u) - 0x10101010u) ^ 0x80808080u; }
FAFO_HD uint32_t bytes_minus_4(uint32_t w) { return ((w | 0x80808080u) - 0x04040404u) ^ 0x80808080u; }
// Bits 0..3 of n at bits 0, 8, 16 and 24 (the products of n's bits do not overlap).
FAFO_HD uint32_t spread_bits4(uint32_t n) { return (n * 0x00204081u) & 0x01010101u; }

// Bytes of the pool y:x (x's bytes 0..3, then y's) picked by the four selectors (0..7)
// in the low nibbles of s's bytes 0..3: __byte_perm's default mode on the GPU, the same
// selection on the host.
FAFO_HD uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t pool = (uint64_t{y} << 32) | x;
  uint32_t r = 0;
  for (uint32_t k = 0; k < 4; ++k) r |= static_cast<uint32_t>((pool >> (8 * ((s >> (4 * k)) & 7u))) & 0xffu) << (8 * k);
  return r;
#endif
}

// Each byte (a code 0..15) of c replaced by entry c of a table of 16 signed bytes
// (block_decode.h's table_value: IQ4_NL's and IQ4_XS's non-linear grid, or with Fp4
// MXFP4's doubled fp4 numbers), held four to a word: two byte permutations pick entry
// c & 7 from the table's low and high halves, bit 3 of the code chooses.
template <bool Fp4>
FAFO_HD uint32_t table_bytes(uint32_t c) {
  constexpr uint32_t t0 = Fp4 ? 0x03020100u : 0xbfad9881u, t1 = Fp4 ? 0x0c080604u : 0xf6eaddcfu;
  constexpr uint32_t t2 = Fp4 ? 0xfdfeff00u : 0x26190d01u, t3 = Fp4 ? 0xf4f8fafcu : 0x71594535u;
  const uint32_t low3 = c & 0x07070707u;
  const uint32_t packed = low3 | (low3 >> 4);  // codes 0 and 1 in bits 0..7, 2 and 3 in 16..23
  const uint32_t selector = (packed & 0xffu) | ((packed >> 8) & 0xff00u);
  const uint32_t low = byte_perm(t0, t1, selector), high = byte_perm(t2, t3, selector);
  const uint32_t high_mask = ((c >> 3) & 0x01010101u) * 0xffu;
  return (low & ~high_mask) | (high & high_mask);
}

// A 32-value group whose value j < 16 is the low nibble of byte j of its 16 code bytes
// (as four words) and value j + 16 the high nibble: word k < 4 of the unit is the low
// nibbles of code word k, word 4 + k the high ones.
FAFO_HD void nibble_words(const uint32_t codes[4], uint32_t out[8]) {
  FAFO_UNROLL
  for (uint32_t k = 0; k < 4; ++k) {
    out[k] = codes[k] & 0x0f0f0f0fu;
    out[4 + k] = (codes[k] >> 4) & 0x0f0f0f0fu;
  }
}
// The four words of 16 code bytes at p aligned to 4 (Aligned4) or to 2.
template <bool Aligned4>
FAFO_HD void code_words(const uint8_t* p, uint32_t out[4]) {
  FAFO_UNROLL
  for (uint32_t k = 0; k < 4; ++k) out[k] = Aligned4 ? load_word4(p + 4 * k) : load_word2(p + 4 * k);
}
// The four words of 16 bytes at any address (MXFP4's codes follow a 1-byte scale in
// 17-byte blocks): the aligned words at or below p shifted into place, and the bytes
// past the last aligned word read one by one, so nothing past p + 16 is read.
FAFO_HD void code_words_a1(const uint8_t* p, uint32_t out[4]) {
  const uint32_t misaligned = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 3u);
  const uint8_t* a = p - misaligned;
  uint32_t w[5];
  FAFO_UNROLL
  for (uint32_t k = 0; k < 4; ++k) w[k] = load_word4(a + 4 * k);
  w[4] = 0;
  for (uint32_t i = 0; i < misaligned; ++i) w[4] |= uint32_t{a[16 + i]} << (8 * i);
  FAFO_UNROLL
  for (uint32_t k = 0; k < 4; ++k)
    out[k] = static_cast<uint32_t>(((uint64_t{w[k + 1]} << 32) | w[k]) >> (8 * misaligned));
}

// RN(1 / 127): a block's scale is its largest magnitude times this (one rounding,
// the same on every device: Vulkan's division is not correctly rounded, its product is).
constexpr float kInv127 = 1.0f / 127.0f;

// The integer nearest to x / d (ties to even) for d > 0 finite and |x / d| < 2^22,
// without a division: an estimate within one of it (x times an approximate reciprocal,
// rounded), then the sign of x - (e +- 1/2) d, each exact in one fused multiply-add
// (rounding keeps a sign and gives 0 only for 0 where d >= 2^-125, the difference then
// being a multiple of the smallest subnormal), moves it to the nearest integer; at an exact half, to the even one. Every
// device with a fused multiply-add gets these bits (shaders/quantize.comp is its twin).
FAFO_HD int32_t nearest_quotient(float x, float d) {
#if defined(__CUDA_ARCH__)
  const float e = rintf(x * __frcp_rn(d));
#else
  const float e = std::nearbyint(x * (1.0f / d));
#endif
  const int32_t n = static_cast<int32_t>(e);
  const float above = fma_rn(-(e + 0.5f), d, x), below = fma_rn(-(e - 0.5f), d, x);
  if (above > 0.0f || (above == 0.0f && (n & 1) != 0)) return n + 1;
  if (below < 0.0f || (below == 0.0f && (n & 1) != 0)) return n - 1;
  return n;
}
FAFO_HD float int_to_float(int32_t v) {
#if defined(__CUDA_ARCH__)
  return __int2float_rn(v);
#else
  return static_cast<float>(v);  // rounds to nearest, ties to even
#endif
}

// ---- 1. rounding the activations ----

// Warp w rounds kBlocksPerWarp blocks of one row (row w / warps_per_row(cols), blocks
// from kBlocksPerWarp * (w % warps_per_row(cols))) of x, normalized first by `gain`, as
// RmsNormWarpOp, when given (each warp computes its row's norm scale itself: the same
// lane sums and tree, so the same bits, and no step waits on a per-row pass): block b's
// 32 values one per lane; the block's largest magnitude (NaN counted as infinite) by the
// warp's max; d = max RN(1 / 127) (kInv127); q = the integer nearest to x / d (ties to
// even; nearest_quotient), 0 where d is 0 or not finite; d times the block's sum of q. Every block on its own: a value's bits
// depend on its row and block alone, whatever the number of warps.
struct QuantizeRowsOp {
  static constexpr uint32_t kBlocksPerWarp = 4;
  const float* x;
  uint32_t x_stride;
  const float* gain;  // null: no norm
  float eps;
  Q8Rows out;

  static FAFO_HD uint32_t warps_per_row(uint32_t cols) {
    const uint32_t n_blocks = cols / kQ8Block;
    return n_blocks == 0 ? 1 : (n_blocks + kBlocksPerWarp - 1) / kBlocksPerWarp;
  }
  // The warps that round T rows.
  static uint64_t warps(uint32_t T, uint32_t cols) { return uint64_t{T} * warps_per_row(cols); }

  template <class W>
  FAFO_HD void run(W& warp, uint32_t w) const {
    const uint32_t cols = out.cols, n_blocks = cols / kQ8Block, per_row = warps_per_row(cols);
    const uint32_t t = w / per_row, first = (w % per_row) * kBlocksPerWarp;
    const uint32_t end = first + kBlocksPerWarp < n_blocks ? first + kBlocksPerWarp : n_blocks;
    const float* xt = x + static_cast<uint64_t>(t) * x_stride;
    float scale = 1.0f;
    if (gain != nullptr) {
      typename W::template Vec<float> squares;
      warp.each([&](uint32_t lane) { squares[lane] = lane_sum_squares(xt, cols, lane); });
      scale = rms_scale(warp.sum(squares), cols, eps);
    }
    int8_t* q = out.q + static_cast<uint64_t>(t) * cols;
    for (uint32_t b = first; b < end; ++b) {
      typename W::template Vec<float> v, magnitude;
      warp.each([&](uint32_t lane) {
        const uint32_t c = kQ8Block * b + lane;
        const float value = gain != nullptr ? rms_apply(xt[c], scale, gain[c]) : xt[c];
        const float m = bits_to_float(float_bits(value) & 0x7fffffffu);  // -0.0 counts as +0.0
        v[lane] = value;
        magnitude[lane] = m == m ? m : bits_to_float(0x7f800000u);
      });
      const float d = mul_rn(warp.max(magnitude), kInv127);
      const bool usable = d > 0.0f && d < bits_to_float(0x7f800000u);
      typename W::template Vec<int32_t> qv;
      warp.each([&](uint32_t lane) {
        int32_t r = usable ? nearest_quotient(v[lane], d) : 0;
        r = r > 127 ? 127 : (r < -127 ? -127 : r);
        qv[lane] = r;
        q[kQ8Block * b + lane] = static_cast<int8_t>(r);
      });
      const int32_t sum = warp.sum_int(qv);
      warp.each([&](uint32_t lane) {
        if (lane != 0) return;
        out.d[static_cast<uint64_t>(t) * n_blocks + b] = d;
        out.s[static_cast<uint64_t>(t) * n_blocks + b] = mul_rn(d, int_to_float(sum));
      });
    }
  }
};

// ---- 2. units of a weight row ----

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block's 12 bytes.
FAFO_HD void k_scale_min(const uint8_t* scales, uint32_t j, int32_t& sc, int32_t& mn) {
  if (j < 4) {
    sc = scales[j] & 63;
    mn = scales[j + 4] & 63;
  } else {
    sc = (scales[j + 4] & 0xf) | ((scales[j - 4] >> 6) << 4);
    mn = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

// The rounded activations of token row t from value `first` (a unit's first value).
struct Q8Run {
  const int8_t* q;  // the run's first value
  const float* d;   // its first block's scale
  const float* s;   // its first block's d * sum of q
};
FAFO_HD Q8Run q8_run(const Q8Rows& x, uint32_t t, uint32_t first) {
  const uint64_t n_blocks = x.cols / kQ8Block;
  return Q8Run{x.q + static_cast<uint64_t>(t) * x.cols + first, x.d + t * n_blocks + first / kQ8Block,
               x.s + t * n_blocks + first / kQ8Block};
}
// The scales and sums of a run's first N blocks, loaded.
template <uint32_t N>
struct Q8Scales {
  float d[N], s[N];
  FAFO_HD void load(const Q8Run& run) {
    FAFO_UNROLL
    for (uint32_t b = 0; b < N; ++b) {
      d[b] = run.d[b];
      s[b] = run.s[b];
    }
  }
};

// A unit of a weight row, for every kernel that multiplies it: its kValues weights as
// kValues / 4 words of four signed bytes (`word(row, u, k)`: values 4k..4k + 3 of unit u,
// which meet the activation bytes 4k..4k + 3 of the unit's run; `words`: all of them, by
// 16-byte loads where the format allows), its kSums integer sums
// (sum i over words i * kWordsPerSum, ...), its scales (`scales`), and how its value
// joins a lane's running sum (`add_to(acc, ...)`: fused multiply-adds in a fixed order),
// the one float expression every kernel applies. `add_to` reads the activation blocks'
// d and d * sum as x.d[b] and x.s[b] (b < kValues / 32): a Q8Run's pointers, or the
// values loaded once (Q8Scales).
template <Format F>
struct IntUnit;

// Q8_0: a block of 32; acc = fma(d_w * d_x, sum, acc).
template <>
struct IntUnit<Format::Q8_0> {
  static constexpr uint32_t kValues = 32, kSums = 1, kWordsPerSum = 8;
  struct Scales {
    float d;
  };
  static FAFO_HD uint32_t word(const uint8_t* row, uint32_t u, uint32_t k) { return load_word2(row + 34ull * u + 2 + 4 * k); }
  static FAFO_HD void words(const uint8_t* row, uint32_t u, uint32_t out[kValues / 4]) { load_words32_a2(row + 34ull * u + 2, out); }
  static FAFO_HD Scales scales(const uint8_t* row, uint32_t u) { return Scales{half_bits_to_float(read_u16(row + 34ull * u))}; }
  template <MulAdd M = MulAdd::Fused, class X>
  static FAFO_HD float add_to(float acc, const Scales& w, const int32_t sums[kSums], const X& x) {
    return mul_add<M>(mul_rn(w.d, x.d[0]), int_to_float(sums[0]), acc);
  }
};

// Q6_K: 32 values (half h, plane k4 of a block), sub-blocks a and b of 16 with signed
// scales, weights q6 - 32; acc = fma(d * d_x, sc_a * sum_a + sc_b * sum_b, acc) (the
// integer combination exact).
template <>
struct IntUnit<Format::Q6_K> {
  static constexpr uint32_t kValues = 32, kSums = 2, kWordsPerSum = 4;
  struct Scales {
    float d;
    int32_t sc_a, sc_b;
  };
  static FAFO_HD uint32_t word(const uint8_t* row, uint32_t u, uint32_t k) {
    const uint8_t* b = row + 210ull * (u / 8);
    const uint32_t h = (u % 8) / 4, k4 = u % 4;
    const uint32_t low = (load_word2(b + 64 * h + 32 * (k4 & 1u) + 4 * k) >> (4 * (k4 >> 1))) & 0x0f0f0f0fu;
    const uint32_t high = ((load_word2(b + 128 + 32 * h + 4 * k) >> (2 * k4)) & 0x03030303u) << 4;
    return bytes_minus_32(low | high);
  }
  static FAFO_HD void words(const uint8_t* row, uint32_t u, uint32_t out[kValues / 4]) {
    const uint8_t* b = row + 210ull * (u / 8);
    const uint32_t h = (u % 8) / 4, k4 = u % 4;
    uint32_t low[8], high[8];
    load_words32_a2(b + 64 * h + 32 * (k4 & 1u), low);
    load_words32_a2(b + 128 + 32 * h, high);
    FAFO_UNROLL
    for (uint32_t k = 0; k < 8; ++k)
      out[k] = bytes_minus_32(((low[k] >> (4 * (k4 >> 1))) & 0x0f0f0f0fu) | (((high[k] >> (2 * k4)) & 0x03030303u) << 4));
  }
  static FAFO_HD Scales scales(const uint8_t* row, uint32_t u) {
    const uint8_t* b = row + 210ull * (u / 8);
    const uint32_t h = (u % 8) / 4, k4 = u % 4;
    return Scales{half_bits_to_float(read_u16(b + 208)), static_cast<int8_t>(b[192 + 8 * h + 2 * k4]),
                  static_cast<int8_t>(b[192 + 8 * h + 2 * k4 + 1])};
  }
  template <MulAdd M = MulAdd::Fused, class X>
  static FAFO_HD float add_to(float acc, const Scales& w, const int32_t sums[kSums], const X& x) {
    return mul_add<M>(mul_rn(w.d, x.d[0]), int_to_float(w.sc_a * sums[0] + w.sc_b * sums[1]), acc);
  }
};

// The blocks of 32 4- or 5-bit codes with one scale (and Q4_1/Q5_1: a minimum): value
// j < 16 of a block is the low nibble of code byte j, value j + 16 the high one, and
// Q5_0/Q5_1's fifth bits are bits j and j + 16 of the 32-bit qh; the weights are
//   Q4_0:   code - 8, d the half at 0, codes at 2 (18-byte blocks);
//   Q5_0:   code - 16, d at 0, qh at 2, codes at 6 (22-byte blocks);
//   Q4_1:   d * code + m, d at 0, m at 2, codes at 4 (20-byte blocks);
//   Q5_1:   d * code + m, d at 0, m at 2, qh at 4, codes at 8 (24-byte blocks);
//   IQ4_NL: table[code] (table_bytes), as Q4_0's layout;
//   IQ4_XS: table[code], unit u sub-block u % 8 of a 136-byte block of 256, d = the half
//           at 0 times its 6-bit scale - 32 (exact), codes at 8 + 16 (u % 8);
//   MXFP4:  table[code] (doubled fp4 numbers), d = 2^(e - 128) for the byte e at 0,
//           codes at 1 (17-byte blocks).
// A token adds acc = fma(d * d_x, sum, acc) as Q8_0, then with a minimum
// acc = fma(m, d_x * s_x, acc) (the m of every weight times the rounded activations: m
// times d_x's block sum of q, Q8Rows::s).
template <Format F>
struct IntUnitCodes {
  static constexpr bool kMin = F == Format::Q4_1 || F == Format::Q5_1;
  static constexpr bool kFifthBit = F == Format::Q5_0 || F == Format::Q5_1;
  static constexpr uint32_t kValues = 32, kSums = 1, kWordsPerSum = 8;
  struct ScalesD {
    float d;
  };
  struct ScalesDM {
    float d, m;
  };
  using Scales = std::conditional_t<kMin, ScalesDM, ScalesD>;
  static constexpr uint64_t kBlockBytes = F == Format::Q4_0 || F == Format::IQ4_NL ? 18
                                          : F == Format::Q4_1                      ? 20
                                          : F == Format::Q5_0                      ? 22
                                          : F == Format::Q5_1                      ? 24
                                          : F == Format::MXFP4                     ? 17
                                                                                   : 136;
  static FAFO_HD const uint8_t* block(const uint8_t* row, uint32_t u) {
    return F == Format::IQ4_XS ? row + 136ull * (u / 8) : row + kBlockBytes * u;
  }
  static FAFO_HD const uint8_t* codes(const uint8_t* row, uint32_t u) {
    if constexpr (F == Format::IQ4_XS) return block(row, u) + 8 + 16 * (u % 8);
    else if constexpr (F == Format::MXFP4) return block(row, u) + 1;
    else return block(row, u) + (kFifthBit ? 4 : 0) + (kMin ? 4 : 2);
  }
  // Word k's four weights from its four codes' low 4 bits and qh (kFifthBit).
  static FAFO_HD uint32_t signed_word(uint32_t nibbles, uint32_t qh, uint32_t k) {
    if constexpr (kFifthBit) nibbles |= spread_bits4((qh >> (4 * k)) & 0xfu) << 4;
    if constexpr (F == Format::Q4_0) return bytes_minus_8(nibbles);
    else if constexpr (F == Format::Q5_0) return bytes_minus_16(nibbles);
    else if constexpr (F == Format::Q4_1 || F == Format::Q5_1) return nibbles;
    else return table_bytes<F == Format::MXFP4>(nibbles);
  }
  static FAFO_HD uint32_t qh_of(const uint8_t* row, uint32_t u) {
    if constexpr (!kFifthBit) return 0;
    else if constexpr (kMin) return load_word4(block(row, u) + 4);
    else return load_word2(block(row, u) + 2);
  }
  // The unit's 16 code bytes as four words: aligned to 4 in IQ4_XS, Q4_1 and Q5_1 blocks,
  // to 2 in Q4_0, Q5_0 and IQ4_NL ones, at any offset in MXFP4's.
  static FAFO_HD void code_words_of(const uint8_t* row, uint32_t u, uint32_t c[4]) {
    if constexpr (F == Format::MXFP4) code_words_a1(codes(row, u), c);
    else code_words<F == Format::IQ4_XS || F == Format::Q4_1 || F == Format::Q5_1>(codes(row, u), c);
  }
  static FAFO_HD void words(const uint8_t* row, uint32_t u, uint32_t out[kValues / 4]) {
    uint32_t c[4], n[8];
    code_words_of(row, u, c);
    nibble_words(c, n);
    const uint32_t qh = qh_of(row, u);
    FAFO_UNROLL
    for (uint32_t k = 0; k < 8; ++k) out[k] = signed_word(n[k], qh, k);
  }
  static FAFO_HD uint32_t word(const uint8_t* row, uint32_t u, uint32_t k) {
    uint32_t c[4];
    code_words_of(row, u, c);
    return signed_word(k < 4 ? c[k] & 0x0f0f0f0fu : (c[k - 4] >> 4) & 0x0f0f0f0fu, qh_of(row, u), k);
  }
  static FAFO_HD Scales scales(const uint8_t* row, uint32_t u) {
    const uint8_t* b = block(row, u);
    if constexpr (F == Format::IQ4_XS) {
      const uint32_t ib = u % 8;
      const uint32_t low4 = (b[4 + ib / 2] >> (4 * (ib % 2))) & 0xfu, high2 = (read_u16(b + 2) >> (2 * ib)) & 3u;
      return Scales{mul_rn(half_bits_to_float(read_u16(b)), int_to_float(static_cast<int32_t>(low4 | (high2 << 4)) - 32))};
    } else if constexpr (F == Format::MXFP4) {
      const uint32_t e = b[0];
      return Scales{bits_to_float(e < 2 ? 0x00200000u << e : (e - 1) << 23)};
    } else if constexpr (kMin) {
      return Scales{half_bits_to_float(read_u16(b)), half_bits_to_float(read_u16(b + 2))};
    } else {
      return Scales{half_bits_to_float(read_u16(b))};
    }
  }
  template <MulAdd M = MulAdd::Fused, class X>
  static FAFO_HD float add_to(float acc, const Scales& w, const int32_t sums[kSums], const X& x) {
    acc = mul_add<M>(mul_rn(w.d, x.d[0]), int_to_float(sums[0]), acc);
    if constexpr (kMin) acc = mul_add<M>(w.m, x.s[0], acc);
    return acc;
  }
};
template <>
struct IntUnit<Format::Q4_0> : IntUnitCodes<Format::Q4_0> {};
template <>
struct IntUnit<Format::Q4_1> : IntUnitCodes<Format::Q4_1> {};
template <>
struct IntUnit<Format::Q5_0> : IntUnitCodes<Format::Q5_0> {};
template <>
struct IntUnit<Format::Q5_1> : IntUnitCodes<Format::Q5_1> {};
template <>
struct IntUnit<Format::IQ4_NL> : IntUnitCodes<Format::IQ4_NL> {};
template <>
struct IntUnit<Format::IQ4_XS> : IntUnitCodes<Format::IQ4_XS> {};
template <>
struct IntUnit<Format::MXFP4> : IntUnitCodes<Format::MXFP4> {};

// Q3_K: 32 values (half h = u % 8 / 4, plane p = u % 4 of a 110-byte block of 256), the
// sub-blocks a = 2 (u % 8) and a + 1 of 16 with 6-bit scales - 32, weights
// ((qs >> 2p) & 3) - 4 + 4 * (bit 4h + p of hmask); value j of the unit is from
// qs[32 + 32h + j] and hmask[j]. As Q6_K: acc = fma(d * d_x, sc_a * sum_a + sc_b * sum_b, acc).
template <>
struct IntUnit<Format::Q3_K> {
  static constexpr uint32_t kValues = 32, kSums = 2, kWordsPerSum = 4;
  struct Scales {
    float d;
    int32_t sc_a, sc_b;
  };
  static FAFO_HD uint32_t assemble(uint32_t q, uint32_t hm, uint32_t u) {
    const uint32_t h = (u % 8) / 4, p = u % 4;
    return bytes_minus_4(((q >> (2 * p)) & 0x03030303u) | (((hm >> (4 * h + p)) & 0x01010101u) << 2));
  }
  static FAFO_HD uint32_t word(const uint8_t* row, uint32_t u, uint32_t k) {
    const uint8_t* b = row + 110ull * (u / 8);
    return assemble(load_word2(b + 32 + 32 * ((u % 8) / 4) + 4 * k), load_word2(b + 4 * k), u);
  }
  static FAFO_HD void words(const uint8_t* row, uint32_t u, uint32_t out[kValues / 4]) {
    const uint8_t* b = row + 110ull * (u / 8);
    uint32_t q[8], hm[8];
    load_words32_a2(b + 32 + 32 * ((u % 8) / 4), q);
    load_words32_a2(b, hm);
    FAFO_UNROLL
    for (uint32_t k = 0; k < 8; ++k) out[k] = assemble(q[k], hm[k], u);
  }
  static FAFO_HD int32_t scale_of(const uint8_t* b, uint32_t s) {
    const uint32_t low4 = s < 8 ? b[96 + s] & 0xfu : b[96 + s - 8] >> 4;
    const uint32_t high2 = (b[104 + (s & 3u)] >> (2 * (s >> 2))) & 3u;
    return static_cast<int32_t>(low4 | (high2 << 4)) - 32;
  }
  static FAFO_HD Scales scales(const uint8_t* row, uint32_t u) {
    const uint8_t* b = row + 110ull * (u / 8);
    const uint32_t a = 2 * (u % 8);
    return Scales{half_bits_to_float(read_u16(b + 108)), scale_of(b, a), scale_of(b, a + 1)};
  }
  template <MulAdd M = MulAdd::Fused, class X>
  static FAFO_HD float add_to(float acc, const Scales& w, const int32_t sums[kSums], const X& x) {
    return mul_add<M>(mul_rn(w.d, x.d[0]), int_to_float(w.sc_a * sums[0] + w.sc_b * sums[1]), acc);
  }
};

// Q4_K and Q5_K: sub-blocks j = 2i and 2i + 1 of a block (64 values: the low then the
// high nibbles of 32 bytes; Q5_K's fifth bit from qh bit j). Sub-block j's value is
// d_x,j * (d * sc_j * sum_j - dmin * m_j * s_x,j); with the products d * sc_j and
// dmin * m_j of the scales (exact in a float: 11 significant bits of a half by 6 of the
// scale) formed once a unit and d_x,j * s_x,j once a block of activations (Q8Rows::s),
// a token adds it as acc = fma(d_x,j, (d * sc_j) * sum_j, acc), then
// acc = fma(-(dmin * m_j), d_x,j * s_x,j, acc): four instructions a sub-block.
template <bool FifthBit>
struct IntUnitQ45 {
  static constexpr uint32_t kValues = 64, kSums = 2, kWordsPerSum = 8;
  static constexpr uint64_t kBlockBytes = FifthBit ? 176 : 144;
  struct Scales {
    float dsc[2], dm[2];  // d * sc_j, dmin * m_j
  };
  static FAFO_HD uint32_t word(const uint8_t* row, uint32_t u, uint32_t k) {
    const uint8_t* b = row + kBlockBytes * (u / 4);
    const uint32_t i = u % 4, high = k / 8, w = k % 8;
    uint32_t v = (load_word4(b + (FifthBit ? 48 : 16) + 32 * i + 4 * w) >> (4 * high)) & 0x0f0f0f0fu;
    if constexpr (FifthBit) v |= ((load_word4(b + 16 + 4 * w) >> (2 * i + high)) & 0x01010101u) << 4;
    return v;
  }
  // All kValues / 4 words of unit u (word(row, u, k) for every k) from 16-byte loads.
  static FAFO_HD void words(const uint8_t* row, uint32_t u, uint32_t out[kValues / 4]) {
    const uint8_t* b = row + kBlockBytes * (u / 4);
    const uint32_t i = u % 4;
    uint32_t q[8], h[8];
    load_words16(b + (FifthBit ? 48 : 16) + 32 * i, q);
    load_words16(b + (FifthBit ? 48 : 16) + 32 * i + 16, q + 4);
    if constexpr (FifthBit) {
      load_words16(b + 16, h);
      load_words16(b + 32, h + 4);
    }
    FAFO_UNROLL
    for (uint32_t w = 0; w < 8; ++w)
      FAFO_UNROLL
      for (uint32_t high = 0; high < 2; ++high) {
        uint32_t v = (q[w] >> (4 * high)) & 0x0f0f0f0fu;
        if constexpr (FifthBit) v |= ((h[w] >> (2 * i + high)) & 0x01010101u) << 4;
        out[8 * high + w] = v;
      }
  }
  static FAFO_HD Scales scales(const uint8_t* row, uint32_t u) {
    const uint8_t* b = row + kBlockBytes * (u / 4);
    const uint32_t i = u % 4;
    const float d = half_bits_to_float(read_u16(b)), dmin = half_bits_to_float(read_u16(b + 2));
    Scales w;
    FAFO_UNROLL
    for (uint32_t j = 0; j < 2; ++j) {
      int32_t sc, mn;
      k_scale_min(b + 4, 2 * i + j, sc, mn);
      w.dsc[j] = mul_rn(d, int_to_float(sc));
      w.dm[j] = mul_rn(dmin, int_to_float(mn));
    }
    return w;
  }
  template <MulAdd M = MulAdd::Fused, class X>
  static FAFO_HD float add_to(float acc, const Scales& w, const int32_t sums[kSums], const X& x) {
    FAFO_UNROLL
    for (uint32_t j = 0; j < 2; ++j) {
      acc = mul_add<M>(x.d[j], mul_rn(w.dsc[j], int_to_float(sums[j])), acc);
      acc = mul_add<M>(-w.dm[j], x.s[j], acc);
    }
    return acc;
  }
};
template <>
struct IntUnit<Format::Q4_K> : IntUnitQ45<false> {};
template <>
struct IntUnit<Format::Q5_K> : IntUnitQ45<true> {};

// A unit decoded once (its words and scales) for the dot4 kernel, which then takes its
// value against several tokens: the sums by dot4 over the words, then IntUnit::add_to.
template <Format F>
struct LoadedUnit {
  using Unit = IntUnit<F>;
  typename Unit::Scales scales;
  uint32_t w[Unit::kValues / 4];
  FAFO_HD void load(const uint8_t* row, uint32_t u) {
    scales = Unit::scales(row, u);
    Unit::words(row, u, w);
  }
  // acc with this unit's value for the token of run x added (IntUnit::add_to).
  template <MulAdd M = MulAdd::Fused>
  FAFO_HD float add_to(float acc, const Q8Run& x) const {
    int32_t sums[Unit::kSums];
    for (uint32_t i = 0; i < Unit::kSums; ++i) {
      int32_t s = 0;
      for (uint32_t k = i * Unit::kWordsPerSum; k < (i + 1) * Unit::kWordsPerSum; ++k) s = dot4(w[k], load_word4(x.q + 4 * k), s);
      sums[i] = s;
    }
    return Unit::template add_to<M>(acc, scales, sums, x);
  }
};

// W[r] . x[t] from rounded activations, in the order of the file comment: lane l's units
// l, l + 32, ... in order, then the tree (what IntMatmulWarpOp computes; tests compare).
// MulAdd::Rounded: each multiply-add rounded twice, as a Vulkan device without fused
// ones (lavapipe) computes shaders/int_units.glsl's expression.
template <Format F, MulAdd M = MulAdd::Fused>
FAFO_HD float int_row_dot(const uint8_t* row, const Q8Rows& x, uint32_t t) {
  float s[kLanes];
  const uint32_t units = x.cols / IntUnit<F>::kValues;
  for (uint32_t lane = 0; lane < kLanes; ++lane) {
    s[lane] = 0.0f;
    for (uint32_t u = lane; u < units; u += kLanes) {
      LoadedUnit<F> unit;
      unit.load(row, u);
      s[lane] = unit.template add_to<M>(s[lane], q8_run(x, t, IntUnit<F>::kValues * u));
    }
  }
  return tree32(s);
}

// out[t * out_stride + r] (+)= W[r] . x[t] (Gated: silu(W[r] . x[t]) * (W[r + rows] . x[t]),
// the gate's rows then the up projection's in one weight) for a tile of up to kTile
// tokens: warp w computes row w % rows for tokens [kTile * (w / rows), + kTile); each
// unit's weights are decoded once for the tile. Tile 1 (one-token steps) keeps one sum
// a lane instead of 8 (16 gated): fewer registers, more warps streaming weights; a
// token's operations are the same either way.
template <Format F, bool Gated = false, uint32_t Tile = 8>
struct IntMatmulWarpOp {
  static constexpr uint32_t kTile = Tile;
  static constexpr uint32_t kValues = Gated ? 2 * kTile : kTile;
  const uint8_t* w;
  Q8Rows x;
  float* out;
  uint32_t rows, T, out_stride;
  uint64_t row_bytes;
  bool accumulate;

  static uint64_t warps(uint32_t rows, uint32_t T) { return uint64_t{rows} * ((T + kTile - 1) / kTile); }

  FAFO_HD void lane_values(uint32_t warp, uint32_t lane, float v[kValues]) const {
    const uint32_t r = warp % rows, t0 = (warp / rows) * kTile;
    const uint32_t n = T - t0 < kTile ? T - t0 : kTile;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (uint32_t k = 0; k < kValues; ++k) v[k] = 0.0f;
    const uint32_t units = x.cols / IntUnit<F>::kValues;
    for (uint32_t u = lane; u < units; u += kLanes) {
      LoadedUnit<F> gate, up;
      gate.load(w + static_cast<uint64_t>(r) * row_bytes, u);
      if constexpr (Gated) up.load(w + static_cast<uint64_t>(r + rows) * row_bytes, u);
#if defined(__CUDA_ARCH__)
#pragma unroll  // v stays in registers
#endif
      for (uint32_t t = 0; t < kTile; ++t) {
        if (t >= n) continue;
        const Q8Run xr = q8_run(x, t0 + t, IntUnit<F>::kValues * u);
        v[t] = gate.add_to(v[t], xr);
        if constexpr (Gated) v[kTile + t] = up.add_to(v[kTile + t], xr);
      }
    }
  }

  // Lane t writes token t's result.
  FAFO_HD void finish(uint32_t warp, uint32_t lane, const float sums[kValues]) const {
    const uint32_t r = warp % rows, t0 = (warp / rows) * kTile;
    if (lane >= kTile || t0 + lane >= T) return;
    float* o = out + static_cast<uint64_t>(t0 + lane) * out_stride + r;
    float gate = 0.0f, up = 0.0f;  // sums[lane] by selects: an array indexed by lane would live in memory
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (uint32_t k = 0; k < kTile; ++k)
      if (k == lane) {
        gate = sums[k];
        if constexpr (Gated) up = sums[kTile + k];
      }
    if constexpr (Gated) *o = swiglu_value(gate, up);
    else *o = accumulate ? add_rn(*o, gate) : gate;
  }
};

}  // namespace fafo::cuda
