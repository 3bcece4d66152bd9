// The integer matrix product's per-target code (see q8_matmul.h): the 8-bit products,
// the weight decoders and the tiled product. Three files instantiate it (q8_matmul.cpp:
// Q4_K and Q5_K; q8_matmul_q6.cpp: Q6_K, Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1;
// q8_matmul_table.cpp: IQ4_NL, IQ4_XS, MXFP4; q8_matmul_grid.cpp: IQ2_XXS, IQ2_XS,
// IQ3_XXS, IQ3_S), so that Highway's compilation for every
// instruction set is spread over translation units that build in parallel. Included after hwy/highway.h by a file that
// foreach_target.h re-includes, once per target, as Highway's "-inl.h" headers are.
//
// Built with -ffp-contract=off (runtime/CMakeLists.txt): the only fused multiply-adds
// are the explicit MulAdd of the per-block scaling, so every path does the same float
// arithmetic.
#if defined(FAFO_BACKEND_CPU_Q8_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FAFO_BACKEND_CPU_Q8_MATMUL_INL_H_
#undef FAFO_BACKEND_CPU_Q8_MATMUL_INL_H_
#else
#define FAFO_BACKEND_CPU_Q8_MATMUL_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "backend/cpu/q8_matmul.h"
#include "backend/cpu/simd_matmul.h"
#include "fafo/tensor_type.h"
#include "quant/blocks.h"
#include "quant/iq_grids.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
// Per-target helpers, after highway.h:
#include "backend/cpu/half-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fafo::cpu {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Weight and activation bytes meet in pieces of kB values: 32 (a 256-bit vector) on
// AVX2 and AVX-512, 16 on SSE4/SSSE3/NEON, 1 on the scalar fallback. A piece's pairwise
// products land in kG 16-bit lanes, whose sums widen into 32-bit lanes.
using D8 = hn::CappedTag<uint8_t, 32>;
using DI8 = hn::RebindToSigned<D8>;
#if HWY_TARGET == HWY_SCALAR
using D16 = hn::Rebind<int16_t, D8>;  // one lane: one product per lane
using D32 = hn::Rebind<int32_t, D8>;
#else
using D16 = hn::Repartition<int16_t, D8>;  // a pair of products per lane
using D32 = hn::Repartition<int32_t, D8>;
#endif
using DF = hn::RebindToFloat<D32>;
using DQ8 = hn::Rebind<int8_t, hn::CappedTag<float, 16>>;  // bytes, one per float lane: the rounding's output
using V8 = hn::Vec<D8>;
using VI8 = hn::Vec<DI8>;
using V16 = hn::Vec<D16>;
using VI = hn::Vec<D32>;
using VF = hn::Vec<DF>;

constexpr size_t kB = hn::MaxLanes(D8());
constexpr size_t kG = hn::MaxLanes(D16());
static_assert(kB == 32 || 16 % kB == 0);

// ---- 8-bit products ----

// Lane i: w[2i] * x[2i] + w[2i + 1] * x[2i + 1] (on the scalar fallback w[i] * x[i]), w
// unsigned, x signed. Exact while every such sum fits 16 bits, as the callers' ranges
// ensure: weights of at most 128 times |x| <= 127, twice, is 32512. Highway 1.0 has no
// 8-bit multiply-add, so x86 uses its instruction for this (pmaddubsw) directly. The
// SSSE3 target takes the portable form that NEON uses, so tests on x86 run it too.
HWY_INLINE V16 MulPairs(V8 w, VI8 x) {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  return V16{_mm256_maddubs_epi16(w.raw, x.raw)};
#elif HWY_TARGET == HWY_SSE4
  return V16{_mm_maddubs_epi16(w.raw, x.raw)};
#elif HWY_TARGET == HWY_SCALAR
  return hn::Mul(hn::PromoteTo(D16(), w), hn::PromoteTo(D16(), x));
#else
  const D16 d16;
  const hn::RebindToUnsigned<D16> du16;
  const V16 w_even = hn::BitCast(d16, hn::And(hn::BitCast(du16, w), hn::Set(du16, 0xff)));
  const V16 w_odd = hn::BitCast(d16, hn::ShiftRight<8>(hn::BitCast(du16, w)));
  const V16 x_even = hn::ShiftRight<8>(hn::ShiftLeft<8>(hn::BitCast(d16, x)));
  const V16 x_odd = hn::ShiftRight<8>(hn::BitCast(d16, x));
  return hn::Add(hn::Mul(w_even, x_even), hn::Mul(w_odd, x_odd));
#endif
}

// x where s >= 0, -x where s < 0 (where s is 0 the caller's weight is 0: either will
// do). Portable form on SSSE3, as in MulPairs.
HWY_INLINE VI8 SignOf(VI8 x, VI8 s) {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  return VI8{_mm256_sign_epi8(x.raw, s.raw)};
#elif HWY_TARGET == HWY_SSE4
  return VI8{_mm_sign_epi8(x.raw, s.raw)};
#else
  return hn::IfThenElse(hn::Lt(s, hn::Zero(DI8())), hn::Neg(x), x);
#endif
}

// VNNI's instructions in their AVX-512 encoding. Written out because Highway 1.0
// compiles its AVX3_DL target with AVX-VNNI enabled too, so the compiler would encode
// the intrinsics in AVX-VNNI's form, which CPUs with VNNI through AVX-512 only (Zen 4)
// fault on. acc + the sums of adjacent pairs of 16-bit products (vpdpwssd), or of four
// adjacent products of unsigned and signed bytes (vpdpbusd).
#if HWY_TARGET == HWY_AVX3_DL
HWY_INLINE VI DotPairsAdd(VI acc, V16 a, V16 b) {
  __m256i r = acc.raw;
  asm("%{evex%} vpdpwssd %2, %1, %0" : "+v"(r) : "v"(a.raw), "v"(b.raw));
  return VI{r};
}
HWY_INLINE VI DotQuadsAdd(VI acc, V8 u, VI8 s) {
  __m256i r = acc.raw;
  asm("%{evex%} vpdpbusd %2, %1, %0" : "+v"(r) : "v"(u.raw), "v"(s.raw));
  return VI{r};
}
#endif

// acc + (lanes 2k and 2k + 1 of p times those of scale): Highway's 16-bit multiply-add,
// one instruction where the CPU has VNNI.
HWY_INLINE VI MulScaleAdd(V16 p, V16 scale, VI acc, VI& acc1) {
#if HWY_TARGET == HWY_AVX3_DL
  (void)acc1;
  return DotPairsAdd(acc, p, scale);
#else
  return hn::ReorderWidenMulAccumulate(D32(), p, scale, acc, acc1);
#endif
}

// 16 values of 16 bits in 16 / kG vectors.
struct Vec16x16 {
  V16 v[16 / kG];
};

// 32-bit lanes whose sum is sum_i c[i] * s[i] over 16 entries.
HWY_INLINE VI Dot16(const Vec16x16& c, const int16_t* s) {
  const D32 di;
  VI a0 = hn::Zero(di), a1 = hn::Zero(di);
  for (size_t i = 0; i < 16 / kG; ++i) a0 = hn::ReorderWidenMulAccumulate(di, c.v[i], hn::LoadU(D16(), s + i * kG), a0, a1);
  return hn::RearrangeToOddPlusEven(a0, a1);
}

// Bytes as 16-bit values, built in registers (a vector loaded from values just stored one
// by one would wait for those stores).
#if HWY_TARGET == HWY_SCALAR
HWY_INLINE Vec16x16 Widen16(const uint8_t* b) {
  Vec16x16 r;
  for (size_t i = 0; i < 16; ++i) r.v[i] = hn::Set(D16(), static_cast<int16_t>(b[i]));
  return r;
}
#else
using D8x16 = hn::Full128<uint8_t>;
using D16x8 = hn::Full128<int16_t>;
// Four words as one 128-bit vector of bytes.
HWY_INLINE hn::Vec<D8x16> FromWords(const uint32_t w[4]) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_EMU128
  return hn::Vec<D8x16>{_mm_set_epi32(static_cast<int>(w[3]), static_cast<int>(w[2]), static_cast<int>(w[1]),
                                      static_cast<int>(w[0]))};
#else
  return hn::BitCast(D8x16(), hn::LoadU(hn::Full128<uint32_t>(), w));
#endif
}
// The 8 bytes in the lower or upper half of v (a vector of Full128<int8_t> or
// <uint8_t>) as 16-bit values, in every 128-bit block.
template <bool kUpper, class V>
HWY_INLINE V16 Widen8Dup(V v) {
  const hn::Half<hn::DFromV<V>> dh;
  const auto half = kUpper ? hn::UpperHalf(dh, v) : hn::LowerHalf(dh, v);
  const hn::Vec<D16x8> w = hn::PromoteTo(D16x8(), half);
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  return hn::Combine(D16(), w, w);
#else
  return w;
#endif
}
// The 16 bytes of v as 16-bit values (signed bytes when kSigned).
template <bool kSigned>
HWY_INLINE Vec16x16 Widen16(hn::Vec<D8x16> v) {
  using DB = std::conditional_t<kSigned, hn::Full128<int8_t>, D8x16>;
  const auto b = hn::BitCast(DB(), v);
  Vec16x16 r;
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  r.v[0] = hn::PromoteTo(D16(), b);
#else
  const hn::Half<DB> dh;
  r.v[0] = hn::PromoteTo(D16(), hn::LowerHalf(dh, b));
  r.v[1] = hn::PromoteTo(D16(), hn::UpperHalf(dh, b));
#endif
  return r;
}
#endif

// ---- weight decoders ----
// Each gives a weight block as pieces of kB unsigned bytes (Weights<P>() = values P*kB
// .. P*kB + kB - 1), per piece the integer scale of each 16-bit lane (Scale<P>()), how
// a piece's products with the activations add into 32-bit lanes (Accumulate), the
// float factor d, and a correction over the activations' 16-value sums:
//   Corr::kFloat (Q4_K, Q5_K): the mins: dmin * sum_i corr[i] * sums16[i] is subtracted in float;
//   Corr::kInt (Q6_K): its values are stored plus 32: 32 * sum_i corr[i] * sums16[i] is
//   subtracted from the integer sum;
//   Corr::kMin (Q4_1, Q5_1): value = code * d + m: m * sums32 (the block's sum times dx)
//   is added, in a float kept apart from the lanes and added after their sum.

enum class Corr { kNone, kFloat, kInt, kMin };

static_assert(offsetof(quant::BlockQ4_K, dmin) == offsetof(quant::BlockQ5_K, dmin) &&
              offsetof(quant::BlockQ4_K, scales) == offsetof(quant::BlockQ5_K, scales));

// Two adjacent fp16 values (a block's d and dmin) as floats, in one conversion.
HWY_INLINE void LoadHalves(const uint8_t* p, float& a, float& b) {
#if HWY_TARGET == HWY_SCALAR
  a = LoadHalf(p);
  b = LoadHalf(p + 2);
#else
  const hn::CappedTag<float, 2> df2;
  const hn::Rebind<hwy::float16_t, decltype(df2)> dh2;
  const auto v = hn::PromoteTo(df2, hn::LoadU(dh2, reinterpret_cast<const hwy::float16_t*>(p)));
  a = hn::GetLane(v);
  b = hn::ExtractLane(v, 1);
#endif
}

// Eight 16-bit scales (of 8 sub-blocks) and, per sub-block, a vector of its scale:
// the eight sit in every 128-bit block of `dup`, and a byte shuffle spreads one of them.
struct Scales8 {
#if HWY_TARGET == HWY_SCALAR
  int16_t v[8];
#else
  V16 dup;
#endif
  // Lanes [0, kG/2) get scale j, the rest scale k (j == k: all lanes scale j).
  template <size_t j, size_t k = j>
  HWY_INLINE V16 Get() const {
#if HWY_TARGET == HWY_SCALAR
    return hn::Set(D16(), v[j]);
#else
    constexpr int16_t kPickJ = static_cast<int16_t>(((2 * j + 1) << 8) | (2 * j));
    constexpr int16_t kPickK = static_cast<int16_t>(((2 * k + 1) << 8) | (2 * k));
    if constexpr (j == k) return hn::TableLookupBytes(dup, hn::Set(D16(), kPickJ));
    else
      return hn::TableLookupBytes(
          dup, hn::IfThenElse(hn::FirstN(D16(), kG / 2), hn::Set(D16(), kPickJ), hn::Set(D16(), kPickK)));
#endif
  }
};

// Bits of `v` selected by `mask` moved to start at bit `to` (from bit `from`).
template <int from, int to>
HWY_INLINE V8 MoveBits(V8 v, uint8_t mask) {
  const V8 m = hn::And(v, hn::Set(D8(), mask));
  if constexpr (from < to) return hn::ShiftLeft<to - from>(m);
  else if constexpr (from > to) return hn::ShiftRight<from - to>(m);
  else return m;
}

// What Q4_K and Q5_K share: d, dmin, 8 scales and 8 mins of 6 bits.
struct K4Int {
  static constexpr int64_t kValues = quant::kSuperBlock;
  static constexpr Corr kCorr = Corr::kFloat;
  using Piece = V8;
  float d, dmin;
  Scales8 sc;
  Vec16x16 corr;  // each min twice: it multiplies the sums of both halves of its sub-block
  HWY_INLINE void LoadFactors(const uint8_t* b) {
    LoadHalves(b + offsetof(quant::BlockQ4_K, d), d, dmin);
    uint32_t words[4];  // scales 0-7, then mins 0-7
    quant::unpack_scales_mins_k4_words(b + offsetof(quant::BlockQ4_K, scales), words);
#if HWY_TARGET == HWY_SCALAR
    uint8_t sm[16], twice[16];
    std::memcpy(sm, words, 16);
    for (size_t j = 0; j < 8; ++j) {
      sc.v[j] = sm[j];
      twice[2 * j] = twice[2 * j + 1] = sm[8 + j];
    }
    corr = Widen16(twice);
#else
    const auto sm = FromWords(words);
    sc.dup = Widen8Dup<false>(sm);
    corr = Widen16<false>(hn::InterleaveUpper(D8x16(), sm, sm));  // mins 0,0,1,1,..,7,7
#endif
  }
  // The 4 low bits of piece P: the low nibbles of 32 bytes for even sub-blocks, their
  // high nibbles for odd ones.
  template <size_t P>
  static HWY_INLINE V8 Nibbles(const uint8_t* qs) {
    constexpr size_t v = P * kB, sub = v / 32, l = v % 32;
    const V8 raw = hn::LoadU(D8(), qs + 32 * (sub / 2) + l);
    if constexpr (sub & 1) return hn::ShiftRight<4>(raw);
    else return hn::And(raw, hn::Set(D8(), 0x0f));
  }
  template <size_t P>
  HWY_INLINE V16 Scale() const {
    return sc.Get<P * kB / 32>();
  }
  static HWY_INLINE VI Accumulate(V8 w, V16 scale, VI8 x, VI acc, VI& acc1) {
    return MulScaleAdd(MulPairs(w, x), scale, acc, acc1);
  }
};

struct Q4KInt : K4Int {
  static constexpr int64_t kBytes = sizeof(quant::BlockQ4_K);
  const uint8_t* qs;
  HWY_INLINE void Prepare(const uint8_t* b) {
    LoadFactors(b);
    qs = b + offsetof(quant::BlockQ4_K, qs);
  }
  template <size_t P>
  HWY_INLINE V8 Weights() const {
    return Nibbles<P>(qs);
  }
};

struct Q5KInt : K4Int {
  static constexpr int64_t kBytes = sizeof(quant::BlockQ5_K);
  const uint8_t* qs;
  const uint8_t* qh;
  HWY_INLINE void Prepare(const uint8_t* b) {
    LoadFactors(b);
    qs = b + offsetof(quant::BlockQ5_K, qs);
    qh = b + offsetof(quant::BlockQ5_K, qh);
  }
  template <size_t P>
  HWY_INLINE V8 Weights() const {
    constexpr size_t v = P * kB, sub = v / 32, l = v % 32;
    // Bit 4 of sub-block `sub` is bit `sub` of qh[l].
    return hn::Or(Nibbles<P>(qs), MoveBits<static_cast<int>(sub), 4>(hn::LoadU(D8(), qh + l), uint8_t{1} << sub));
  }
};

struct Q6KInt {
  static constexpr int64_t kValues = quant::kSuperBlock, kBytes = sizeof(quant::BlockQ6_K);
  static constexpr Corr kCorr = Corr::kInt;
  using Piece = V8;
  float d;
  const uint8_t* ql;
  const uint8_t* qh;
  Scales8 sc[2];  // scales of values 0..127 and 128..255
  Vec16x16 corr;  // the 16 scales
  HWY_INLINE void Prepare(const uint8_t* b) {
    d = LoadHalf(b + offsetof(quant::BlockQ6_K, d));
    ql = b + offsetof(quant::BlockQ6_K, ql);
    qh = b + offsetof(quant::BlockQ6_K, qh);
    const uint8_t* scales = b + offsetof(quant::BlockQ6_K, scales);
#if HWY_TARGET == HWY_SCALAR
    for (size_t j = 0; j < 16; ++j) {
      const auto s = static_cast<int16_t>(static_cast<int8_t>(scales[j]));
      sc[j / 8].v[j % 8] = s;
      corr.v[j] = hn::Set(D16(), s);
    }
#else
    const hn::Full128<int8_t> di8x16;
    const auto s = hn::LoadU(di8x16, reinterpret_cast<const int8_t*>(scales));
    corr = Widen16<true>(hn::BitCast(D8x16(), s));
    sc[0].dup = Widen8Dup<false>(s);
    sc[1].dup = Widen8Dup<true>(s);
#endif
  }
  // Value v = 128 * half + 32 * k + m (its 6 bits, 0..63: the stored value plus 32).
  template <size_t P>
  HWY_INLINE V8 Weights() const {
    constexpr size_t v = P * kB, half = v / 128, k = (v % 128) / 32, m = v % 32;
    const V8 l = hn::LoadU(D8(), ql + 64 * half + 32 * (k % 2) + m);
    const V8 lo = k < 2 ? hn::And(l, hn::Set(D8(), 0x0f)) : hn::ShiftRight<4>(l);
    return hn::Or(lo, MoveBits<static_cast<int>(2 * k), 4>(hn::LoadU(D8(), qh + 32 * half + m), uint8_t{3} << (2 * k)));
  }
  template <size_t P>
  HWY_INLINE V16 Scale() const {
    constexpr size_t v = P * kB, half = v / 128, j = (v % 128) / 16;
    if constexpr (kB == 32) return sc[half].Get<j, j + 1>();  // a piece of 32 spans scales j and j + 1
    else return sc[half].Get<j>();
  }
  static HWY_INLINE VI Accumulate(V8 w, V16 scale, VI8 x, VI acc, VI& acc1) {
    return MulScaleAdd(MulPairs(w, x), scale, acc, acc1);
  }
};

struct Q8_0Int {
  static constexpr int64_t kValues = quant::kLegacyBlock, kBytes = sizeof(quant::BlockQ8_0);
  static constexpr Corr kCorr = Corr::kNone;
  struct Piece {
    V8 abs;    // |w| (128 for -128)
    VI8 sign;  // w
  };
  float d;
  const int8_t* qs;
  HWY_INLINE void Prepare(const uint8_t* b) {
    d = LoadHalf(b);
    qs = reinterpret_cast<const int8_t*>(b + offsetof(quant::BlockQ8_0, qs));
  }
  template <size_t P>
  HWY_INLINE Piece Weights() const {
    const VI8 w = hn::LoadU(DI8(), qs + P * kB);
    return {hn::BitCast(D8(), hn::Abs(w)), w};
  }
  template <size_t P>
  HWY_INLINE V16 Scale() const {
    return hn::Set(D16(), 1);
  }
  // |w| * (x with w's sign) = w * x; with VNNI, four products summed into each 32-bit
  // lane in one instruction (vpdpbusd), as the pairs times scale 1 would sum them.
  static HWY_INLINE VI Accumulate(const Piece& w, V16 scale, VI8 x, VI acc, VI& acc1) {
#if HWY_TARGET == HWY_AVX3_DL
    (void)scale;
    (void)acc1;
    return DotQuadsAdd(acc, w.abs, SignOf(x, w.sign));
#else
    return MulScaleAdd(MulPairs(w.abs, SignOf(x, w.sign)), scale, acc, acc1);
#endif
  }
};

// |w| * (x with w's sign) in pairs of 16 bits, times each pair's integer scale into 32
// bits (the formats with sub-block scales: IQ4_XS, the codebook formats).
HWY_INLINE VI AccumulateScaled(const Q8_0Int::Piece& w, V16 scale, VI8 x, VI acc, VI& acc1) {
  return MulScaleAdd(MulPairs(w.abs, SignOf(x, w.sign)), scale, acc, acc1);
}
// Signed weight bytes as Q8_0's piece: their magnitudes and the bytes (for the signs).
HWY_INLINE Q8_0Int::Piece SignedPieceOf(VI8 v) { return {hn::BitCast(D8(), hn::Abs(v)), v}; }
// The piece of kB signed weight bytes stored at p.
HWY_INLINE Q8_0Int::Piece SignedPieceAt(const uint8_t* p) {
  return SignedPieceOf(hn::BitCast(DI8(), hn::LoadU(D8(), p)));
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// The 32 codes in 16 bytes of nibbles as a 256-bit vector of bytes: codes 0..15 (the low
// nibbles) in the lower half, 16..31 (the high ones) in the upper; the bytes loaded into
// both halves, the upper half's shifted by 4 (a per-lane shift), then masked.
HWY_INLINE V8 NibbleCodes(const uint8_t* qs) {
  const hn::Repartition<uint32_t, D8> d32;
  alignas(32) static constexpr uint32_t kShifts[8] = {0, 0, 0, 0, 4, 4, 4, 4};
  const auto raw = hn::BitCast(d32, hn::LoadDup128(D8(), qs));
  return hn::And(hn::BitCast(D8(), hn::Shr(raw, hn::Load(d32, kShifts))), hn::Set(D8(), 0x0f));
}
#endif

// The 32-value formats Q4_0, Q4_1, Q5_0 and Q5_1: a block's codes (0..15, or 0..31 with
// the fifth bit: bit 4 of value j is bit j of the 32-bit qh; low nibbles are values
// 0..15, high nibbles 16..31), decoded once in Prepare and kept in registers.
//   kOffset > 0 (Q4_0: 8, Q5_0: 16): value = (code - kOffset) * d, as signed bytes
//     multiplied as Q8_0's;
//   kOffset == 0 (Q4_1, Q5_1): value = code * d + m, the codes as unsigned bytes; the
//     min adds m * dx * (the activation block's sum) to the output (Corr::kMin).
template <class Block, bool kFifth, int kOffset>
struct LegacyInt {
  static constexpr int64_t kValues = quant::kLegacyBlock, kBytes = sizeof(Block);
  static constexpr bool kSigned = kOffset > 0;
  static constexpr Corr kCorr = kSigned ? Corr::kNone : Corr::kMin;
  using Piece = std::conditional_t<kSigned, Q8_0Int::Piece, V8>;
  float d, m = 0.0f;
#if HWY_TARGET == HWY_SCALAR
  HWY_ALIGN uint8_t w[quant::kLegacyBlock];
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  V8 u;  // the block's 32 values (NibbleCodes' order)
#else
  hn::Vec<D8x16> lo, hi;  // values 0..15 and 16..31
#endif
  HWY_INLINE void Prepare(const uint8_t* b) {
    if constexpr (kSigned) {
      d = LoadHalf(b + offsetof(Block, d));
    } else {
      static_assert(offsetof(Block, m) == offsetof(Block, d) + 2);
      LoadHalves(b + offsetof(Block, d), d, m);  // m follows d
    }
    uint32_t qh = 0;
    if constexpr (kFifth) std::memcpy(&qh, b + offsetof(Block, qh), 4);
    const uint8_t* qs = b + offsetof(Block, qs);
#if HWY_TARGET == HWY_SCALAR
    for (size_t j = 0; j < 16; ++j) {
      w[j] = static_cast<uint8_t>(((qs[j] & 0x0f) | (((qh >> j) & 1u) << 4)) - kOffset);
      w[j + 16] = static_cast<uint8_t>(((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - kOffset);
    }
#else
    [[maybe_unused]] const D8x16 d8;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
    u = NibbleCodes(qs);
#else
    const auto v = hn::LoadU(d8, qs);
    lo = hn::And(v, hn::Set(d8, 0x0f));
    hi = hn::ShiftRight<4>(v);
#endif
    if constexpr (kFifth) {
      // Bit j of a 16-bit half of qh as 16 or 0 in byte j: each byte takes the half's
      // byte j / 8, then tests bit j % 8.
      static constexpr uint8_t kByteOf[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
      static constexpr uint8_t kBitOf[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
      const auto byte_of = hn::LoadU(d8, kByteOf);
      const auto bit_of = hn::LoadU(d8, kBitOf);
      const hn::Full128<uint16_t> d16;
      auto fifth = [&](uint32_t half) {
        const auto bytes = hn::TableLookupBytes(hn::BitCast(d8, hn::Set(d16, static_cast<uint16_t>(half))), byte_of);
        return hn::IfThenElseZero(hn::TestBit(bytes, bit_of), hn::Set(d8, 16));
      };
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
      u = hn::Or(u, hn::Combine(D8(), fifth(qh >> 16), fifth(qh & 0xffffu)));
#else
      lo = hn::Or(lo, fifth(qh & 0xffffu));
      hi = hn::Or(hi, fifth(qh >> 16));
#endif
    }
    if constexpr (kSigned) {  // wraps to the signed byte's two's complement
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
      u = hn::Sub(u, hn::Set(D8(), kOffset));
#else
      lo = hn::Sub(lo, hn::Set(d8, kOffset));
      hi = hn::Sub(hi, hn::Set(d8, kOffset));
#endif
    }
#endif
  }
  template <size_t P>
  HWY_INLINE Piece Weights() const {
#if HWY_TARGET == HWY_SCALAR
    const V8 u = hn::Load(D8(), w + P * kB);
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
    static_assert(kB == 32 && P == 0);  // one piece of the whole block
#else
    static_assert(kB == 16);  // D8 is 128 bits: two pieces
    const V8 u = P == 0 ? lo : hi;
#endif
    if constexpr (kSigned) {
      return SignedPieceOf(hn::BitCast(DI8(), u));
    } else {
      return u;
    }
  }
  template <size_t P>
  HWY_INLINE V16 Scale() const {
    return hn::Set(D16(), 1);
  }
  // Codes of at most 31 times |x| <= 127, twice, fit MulPairs' 16 bits.
  static HWY_INLINE VI Accumulate(const Piece& p, V16 scale, VI8 x, VI acc, VI& acc1) {
    if constexpr (kSigned) {
      return Q8_0Int::Accumulate(p, scale, x, acc, acc1);
    } else {
#if HWY_TARGET == HWY_AVX3_DL
      (void)scale;
      (void)acc1;
      return DotQuadsAdd(acc, p, x);
#else
      return MulScaleAdd(MulPairs(p, x), scale, acc, acc1);
#endif
    }
  }
};

using Q4_0Int = LegacyInt<quant::BlockQ4_0, false, 8>;
using Q4_1Int = LegacyInt<quant::BlockQ4_1, false, 0>;
using Q5_0Int = LegacyInt<quant::BlockQ5_0, true, 16>;
using Q5_1Int = LegacyInt<quant::BlockQ5_1, true, 0>;

// ---- the formats whose 4-bit codes index a table of 16 signed values ----
// (quant/blocks.h: IQ4_NL's and IQ4_XS's non-linear grid, MXFP4's doubled fp4 numbers.)
// The codes are looked up with a byte shuffle and multiplied as Q8_0's signed bytes.

#if HWY_TARGET != HWY_SCALAR
// The 16 codes' values in a 128-bit vector of bytes, and the values of 16 nibbles.
template <bool kFp4>
HWY_INLINE hn::Vec<D8x16> CodeTable() {
  return hn::LoadU(D8x16(), reinterpret_cast<const uint8_t*>(kFp4 ? quant::kMxfp4Values : quant::kIq4nlValues));
}
HWY_INLINE hn::Vec<D8x16> LowNibbles(hn::Vec<D8x16> v) { return hn::And(v, hn::Set(D8x16(), 0x0f)); }

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// The values of the 32 codes in 16 bytes of nibbles, in a 256-bit piece (NibbleCodes'
// order): one table lookup.
template <bool kFp4>
HWY_INLINE Q8_0Int::Piece TablePiece(const uint8_t* qs) {
  const V8 codes = NibbleCodes(qs);
  const V8 table =
      hn::LoadDup128(D8(), reinterpret_cast<const uint8_t*>(kFp4 ? quant::kMxfp4Values : quant::kIq4nlValues));
  return SignedPieceOf(hn::BitCast(DI8(), hn::TableLookupBytes(table, codes)));
}
#endif

#if !(HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2)
// Piece P (of two of 16 bytes) of the values in a block's two 16-byte halves (values
// 0..15 and 16..31 of a 32-value group).
template <size_t P>
HWY_INLINE Q8_0Int::Piece SignedPiece(hn::Vec<D8x16> lo, hn::Vec<D8x16> hi) {
  static_assert(kB == 16);
  return SignedPieceOf(hn::BitCast(DI8(), P == 0 ? lo : hi));
}
#endif
#endif  // HWY_TARGET != HWY_SCALAR

// IQ4_NL (kFp4 false: d the block's fp16 scale) and MXFP4 (kFp4: d half the block's
// power of two, 2^(e - 128)): 32 codes, value = d * table[code].
template <bool kFp4>
struct TableInt {
  using Block = std::conditional_t<kFp4, quant::BlockMxfp4, quant::BlockIq4Nl>;
  static constexpr int64_t kValues = quant::kLegacyBlock, kBytes = sizeof(Block);
  static constexpr Corr kCorr = Corr::kNone;
  using Piece = Q8_0Int::Piece;
  float d;
#if HWY_TARGET == HWY_SCALAR
  HWY_ALIGN uint8_t w[quant::kLegacyBlock];  // the values' bytes
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  Piece piece;  // the whole block
#else
  hn::Vec<D8x16> lo, hi;  // values 0..15 and 16..31
#endif
  HWY_INLINE void Prepare(const uint8_t* b) {
    if constexpr (kFp4) d = quant::e8m0_half_to_fp32(b[offsetof(Block, e)]);
    else d = LoadHalf(b + offsetof(Block, d));
    const uint8_t* qs = b + offsetof(Block, qs);
#if HWY_TARGET == HWY_SCALAR
    const int8_t* table = kFp4 ? quant::kMxfp4Values : quant::kIq4nlValues;
    for (size_t j = 0; j < 16; ++j) {
      w[j] = static_cast<uint8_t>(table[qs[j] & 0x0f]);
      w[j + 16] = static_cast<uint8_t>(table[qs[j] >> 4]);
    }
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
    piece = TablePiece<kFp4>(qs);
#else
    const auto table = CodeTable<kFp4>();
    const auto v = hn::LoadU(D8x16(), qs);
    lo = hn::TableLookupBytes(table, LowNibbles(v));
    hi = hn::TableLookupBytes(table, hn::ShiftRight<4>(v));
#endif
  }
  template <size_t P>
  HWY_INLINE Piece Weights() const {
#if HWY_TARGET == HWY_SCALAR
    return SignedPieceAt(w + P * kB);
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
    static_assert(P == 0);
    return piece;
#else
    return SignedPiece<P>(lo, hi);
#endif
  }
  template <size_t P>
  HWY_INLINE V16 Scale() const {
    return hn::Set(D16(), 1);
  }
  // Values of magnitude at most 127 times |x| <= 127, twice, fit MulPairs' 16 bits.
  static HWY_INLINE VI Accumulate(const Piece& p, V16 scale, VI8 x, VI acc, VI& acc1) {
    return Q8_0Int::Accumulate(p, scale, x, acc, acc1);
  }
};

// IQ4_XS: 8 sub-blocks of 32 codes into IQ4_NL's table; each sub-block's 6-bit scale
// minus 32 multiplies its pairs' sums in 16 bits (as a K-quant's scale), d the fp16 factor.
struct Iq4XsInt {
  static constexpr int64_t kValues = quant::kSuperBlock, kBytes = sizeof(quant::BlockIq4Xs);
  static constexpr Corr kCorr = Corr::kNone;
  using Piece = Q8_0Int::Piece;
  float d;
  Scales8 sc;
#if HWY_TARGET == HWY_SCALAR
  HWY_ALIGN uint8_t w[quant::kSuperBlock];  // the values' bytes
#else
  const uint8_t* qs;
#if !(HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2)
  hn::Vec<D8x16> table;
#endif
#endif
  HWY_INLINE void Prepare(const uint8_t* b) {
    d = LoadHalf(b + offsetof(quant::BlockIq4Xs, d));
    // The eight 6-bit scales as bytes, in a word's lanes: sub-block ib's low 4 bits are
    // nibble ib % 2 of scales_l[ib / 2], its high 2 bits bits 2ib..2ib+1 of scales_h.
    uint16_t h16;
    uint32_t l32;
    std::memcpy(&h16, b + offsetof(quant::BlockIq4Xs, scales_h), 2);
    std::memcpy(&l32, b + offsetof(quant::BlockIq4Xs, scales_l), 4);
    uint64_t lo = l32;  // bytes 0..3 to the even bytes, then each byte's nibbles to two bytes
    lo = (lo | (lo << 16)) & 0x0000ffff0000ffffull;
    lo = (lo | (lo << 8)) & 0x00ff00ff00ff00ffull;
    lo = (lo & 0x000f000f000f000full) | ((lo & 0x00f000f000f000f0ull) << 4);
    uint64_t hi = h16;  // 2-bit fields to bytes
    hi = (hi | (hi << 24)) & 0x000000ff000000ffull;
    hi = (hi | (hi << 12)) & 0x000f000f000f000full;
    hi = (hi | (hi << 6)) & 0x0303030303030303ull;
    // Minus 32 in each byte (no byte is below 0 or above 63: no borrow across bytes).
    const uint64_t biased = lo | (hi << 4);
    const uint64_t words = ((biased | 0x8080808080808080ull) - 0x2020202020202020ull) ^ 0x8080808080808080ull;
    const uint8_t* q = b + offsetof(quant::BlockIq4Xs, qs);
#if HWY_TARGET == HWY_SCALAR
    for (size_t j = 0; j < 8; ++j) sc.v[j] = static_cast<int8_t>(words >> (8 * j));
    for (size_t ib = 0; ib < 8; ++ib)
      for (size_t j = 0; j < 16; ++j) {
        w[32 * ib + j] = static_cast<uint8_t>(quant::kIq4nlValues[q[16 * ib + j] & 0x0f]);
        w[32 * ib + j + 16] = static_cast<uint8_t>(quant::kIq4nlValues[q[16 * ib + j] >> 4]);
      }
#else
    // Built in registers (a vector loaded from bytes just stored would wait for them).
    sc.dup = Widen8Dup<false>(hn::BitCast(hn::Full128<int8_t>(), hn::Set(hn::Full128<uint64_t>(), words)));
    qs = q;
#if !(HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2)
    table = CodeTable<false>();
#endif
#endif
  }
  template <size_t P>
  HWY_INLINE Piece Weights() const {
#if HWY_TARGET == HWY_SCALAR
    return SignedPieceAt(w + P * kB);
#else
    constexpr size_t v = P * kB, ib = v / 32;
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2  // a piece is a whole sub-block
    return TablePiece<false>(qs + 16 * ib);
#else  // values 0..15 of a sub-block (its low nibbles), then 16..31
    const auto raw = hn::LoadU(D8x16(), qs + 16 * ib);
    const auto codes = (v % 32) / 16 == 0 ? LowNibbles(raw) : hn::ShiftRight<4>(raw);
    return SignedPieceOf(hn::BitCast(DI8(), hn::TableLookupBytes(table, codes)));
#endif
#endif
  }
  template <size_t P>
  HWY_INLINE V16 Scale() const {
    return sc.Get<P * kB / 32>();
  }
  // Pairs' sums are at most 2 x 127 x 127; times a scale of at most 32 in 32 bits.
  static HWY_INLINE VI Accumulate(const Piece& p, V16 scale, VI8 x, VI acc, VI& acc1) {
    return AccumulateScaled(p, scale, x, acc, acc1);
  }
};

// ---- the codebook formats IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S ----
// (quant/grid_formats.cpp.) A block is 32 vectors of 8 values, value = d * f * (2s + 1)
// * grid value * sign, f = 1/8 (IQ2), 1/4 (IQ3_XXS), 1 (IQ3_S): the float factor is d * f
// (exact: a power of two), the integer scale (2s + 1) <= 31 of each sub-block (IQ2_XS:
// of each 16 values) multiplies its pairs' sums in 16 bits, as a K-quant's scale. A
// vector's 8 grid values (at most 62) are the bytes of its 64-bit codebook entry and its
// signs 8 bytes of +-1 from a table: a piece's magnitudes are its vectors' entries.

enum class Codebook { kIq2Xxs, kIq2Xs, kIq3Xxs, kIq3S };

#if HWY_TARGET != HWY_SCALAR
// Eight bytes a vector (codebook entries, sign bytes) as one piece (vector i: bytes 8i ..
// 8i + 7).
template <size_t N>
HWY_INLINE V8 EntryBytes(const uint64_t (&e)[N]) {
  static_assert(N * 8 == kB);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return V8{_mm256_set_epi64x(static_cast<long long>(e[3]), static_cast<long long>(e[2]),
                              static_cast<long long>(e[1]), static_cast<long long>(e[0]))};
#elif HWY_ARCH_X86 && HWY_TARGET != HWY_EMU128
  return V8{_mm_set_epi64x(static_cast<long long>(e[1]), static_cast<long long>(e[0]))};
#else
  const hn::Full64<uint64_t> d64;
  return hn::BitCast(D8(), hn::Combine(hn::Full128<uint64_t>(), hn::Set(d64, e[1]), hn::Set(d64, e[0])));
#endif
}

#endif

template <Codebook kC>
struct GridInt {
  using Block = std::conditional_t<
      kC == Codebook::kIq2Xxs, quant::BlockIq2Xxs,
      std::conditional_t<kC == Codebook::kIq2Xs, quant::BlockIq2Xs,
                         std::conditional_t<kC == Codebook::kIq3Xxs, quant::BlockIq3Xxs, quant::BlockIq3S>>>;
  static constexpr int64_t kValues = quant::kSuperBlock, kBytes = sizeof(Block);
  static constexpr Corr kCorr = Corr::kNone;
  static constexpr bool kPerSixteen = kC == Codebook::kIq2Xs;  // a scale per 16 values
  static constexpr float kFactor = kC == Codebook::kIq3S ? 1.0f : kC == Codebook::kIq3Xxs ? 0.25f : 0.125f;
  using Piece = Q8_0Int::Piece;
  float d;
  const uint8_t* qs;  // the block's bytes after d
  Scales8 sc[kPerSixteen ? 2 : 1];
#if HWY_TARGET == HWY_SCALAR
  HWY_ALIGN uint8_t w[quant::kSuperBlock];  // the values' signed bytes
#endif

  // Vector k's codebook entry (8 values, one a byte) and its 8 signs as +-1 bytes.
  HWY_INLINE uint64_t Entry(size_t k) const {
    if constexpr (kC == Codebook::kIq2Xxs) {
      return quant::kIq2xxsGrid[qs[8 * (k / 4) + k % 4]];
    } else if constexpr (kC == Codebook::kIq2Xs) {
      return quant::kIq2xsGrid[(qs[2 * k] | (uint32_t{qs[2 * k + 1]} << 8)) & 511u];
    } else if constexpr (kC == Codebook::kIq3Xxs) {
      return quant::kIq3xxsGrid[qs[2 * k]] | (quant::kIq3xxsGrid[qs[2 * k + 1]] << 32);
    } else {
      const uint32_t high = qs[offsetof(Block, qh) - 2 + k / 4] >> (2 * (k % 4));
      return quant::kIq3sGrid[qs[2 * k] | ((high & 1u) << 8)] |
             (quant::kIq3sGrid[qs[2 * k + 1] | ((high & 2u) << 7)] << 32);
    }
  }
  HWY_INLINE uint64_t Signs(size_t k) const {
    if constexpr (kC == Codebook::kIq2Xxs) {
      return quant::kSignBytes7[(quant::load_u32(qs + 8 * (k / 4) + 4) >> (7 * (k % 4))) & 127u];
    } else if constexpr (kC == Codebook::kIq2Xs) {
      return quant::kSignBytes7[qs[2 * k + 1] >> 1];
    } else if constexpr (kC == Codebook::kIq3Xxs) {
      return quant::kSignBytes7[(quant::load_u32(qs + 64 + 4 * (k / 4)) >> (7 * (k % 4))) & 127u];
    } else {
      return quant::kSignBytes8[qs[offsetof(Block, signs) - 2 + k]];
    }
  }

  HWY_INLINE void Prepare(const uint8_t* b) {
    static_assert(offsetof(Block, d) == 0);
    d = LoadHalf(b) * kFactor;
    qs = b + 2;
    // The scales (2s + 1) as bytes, in order: 8 (a sub-block's) or 16 (IQ2_XS: 16 values').
    uint64_t odd[2] = {0, 0};
    if constexpr (kC == Codebook::kIq2Xxs || kC == Codebook::kIq3Xxs) {
      // s is the top 4 bits of each sub-block's 32-bit word of signs
      for (size_t ib = 0; ib < 8; ++ib)
        odd[0] |= static_cast<uint64_t>(qs[(kC == Codebook::kIq2Xxs ? 8 * ib + 4 : 64 + 4 * ib) + 3] >> 4) << (8 * ib);
    } else {
      // 4-bit scales, two a byte, the low one first: each byte's nibbles to two bytes
      constexpr size_t kAt = offsetof(Block, scales) - 2;
      uint64_t lo;
      if constexpr (kPerSixteen) {
        std::memcpy(&lo, qs + kAt, 8);
        const uint64_t hi = (lo >> 4) & 0x0f0f0f0f0f0f0f0full;
        lo &= 0x0f0f0f0f0f0f0f0full;
        for (size_t j = 0; j < 16; ++j)
          odd[j / 8] |= ((((j % 2) ? hi : lo) >> (8 * (j / 2))) & 0xffu) << (8 * (j % 8));
      } else {
        uint32_t l32;
        std::memcpy(&l32, qs + kAt, 4);
        lo = l32;
        lo = (lo | (lo << 16)) & 0x0000ffff0000ffffull;
        lo = (lo | (lo << 8)) & 0x00ff00ff00ff00ffull;
        odd[0] = (lo & 0x000f000f000f000full) | ((lo & 0x00f000f000f000f0ull) << 4);
      }
    }
    for (auto& o : odd) o = (o << 1) | 0x0101010101010101ull;  // 2s + 1: no carry out of a byte
#if HWY_TARGET == HWY_SCALAR
    for (size_t j = 0; j < (kPerSixteen ? 16 : 8); ++j) sc[j / 8].v[j % 8] = static_cast<int16_t>((odd[j / 8] >> (8 * (j % 8))) & 0xff);
    for (size_t k = 0; k < 32; ++k) {
      const uint64_t e = Entry(k), s = Signs(k);
      for (size_t i = 0; i < 8; ++i) {
        const auto v = static_cast<int>((e >> (8 * i)) & 0xffu);
        w[8 * k + i] = static_cast<uint8_t>(((s >> (8 * i)) & 0xffu) == 0xffu ? -v : v);
      }
    }
#else
    const hn::Full128<uint64_t> d64;
    const auto scales = hn::BitCast(hn::Full128<int8_t>(), hn::InterleaveLower(d64, hn::Set(d64, odd[0]), hn::Set(d64, odd[1])));
    sc[0].dup = Widen8Dup<false>(scales);
    if constexpr (kPerSixteen) sc[1].dup = Widen8Dup<true>(scales);
#endif
  }
  template <size_t P>
  HWY_INLINE Piece Weights() const {
#if HWY_TARGET == HWY_SCALAR
    return SignedPieceAt(w + P * kB);
#else
    constexpr size_t kV = kB / 8, k0 = P * kV;
    uint64_t e[kV], s[kV];
    for (size_t i = 0; i < kV; ++i) {
      e[i] = Entry(k0 + i);
      s[i] = Signs(k0 + i);
    }
    return {EntryBytes(e), hn::BitCast(DI8(), EntryBytes(s))};
#endif
  }
  template <size_t P>
  HWY_INLINE V16 Scale() const {
    if constexpr (kPerSixteen) {
      constexpr size_t j = P * kB / 16;
      if constexpr (kB == 32) return sc[j / 8].template Get<j % 8, j % 8 + 1>();  // a piece spans two scales
      else return sc[j / 8].template Get<j % 8>();
    } else {
      return sc[0].template Get<P * kB / 32>();
    }
  }
  // Pairs' sums are at most 2 x 62 x 127; times a scale of at most 31 in 32 bits.
  static HWY_INLINE VI Accumulate(const Piece& p, V16 scale, VI8 x, VI acc, VI& acc1) {
    return AccumulateScaled(p, scale, x, acc, acc1);
  }
};

template <class F, size_t... kPieces>
HWY_INLINE void ForEachPieceImpl(F&& f, std::index_sequence<kPieces...>) {
  (f(std::integral_constant<size_t, kPieces>{}), ...);
}
// f(std::integral_constant<size_t, P>) for every piece of Dec's block.
template <class Dec, class F>
HWY_INLINE void ForEachPiece(F&& f) {
  ForEachPieceImpl(f, std::make_index_sequence<static_cast<size_t>(Dec::kValues) / kB>{});
}

// ---- the product ----

// The activation rows of a tile.
template <size_t NT>
struct ActTile {
  const int8_t* q[NT];
  const float* d[NT];
  const int16_t* s[NT];
  const float* m[NT];  // the 32-value blocks' sums times their scale
  // The tokens' scales block by block: block b's of the tile's tokens at
  // d_by_block + b * d_stride (QuantizedActivations::d_by_block).
  const float* d_by_block;
  int64_t d_stride;
};

template <size_t NT>
ActTile<NT> MakeActTile(const QuantizedActivations& x, int64_t t0) {
  ActTile<NT> a;
  const int64_t nb = x.cols / x.block;
  for (size_t t = 0; t < NT; ++t) {
    const int64_t row = t0 + static_cast<int64_t>(t);
    a.q[t] = x.q.data() + row * x.cols;
    a.d[t] = x.d.data() + row * nb;
    a.s[t] = x.sums16.data() + row * (x.cols / 16);
    a.m[t] = x.sums32.data() + row * (x.cols / 32);
  }
  a.d_by_block = x.d_by_block.data() + t0;
  a.d_stride = x.rows + QuantizedActivations::kPadding;
  return a;
}

// R weight rows x NT tokens: sums[r * NT + t] = dot(w[r], x[t]). Per output: the
// block's exact integer sum (in D32's lanes; Q6_K's correction subtracted there), one
// multiply-add per block by d * dx in float lanes (Q4_K/Q5_K: and one by dmin * dx for
// the mins; the tile's d * dx products in one vector multiply, the same IEEE products),
// blocks in order; then the lane sum (Q4_1/Q5_1: plus their mins, m * sums32 summed
// in a float of their own, blocks in order). Each piece of a weight block is
// decoded once and used for all NT tokens; the arithmetic per output is the same for
// every R and NT. While reading a block of each row, the tile asks for the same block
// `ahead` bytes on (the next tile's rows; 0: no such requests, as for one-token steps,
// whose single stream of rows the hardware prefetchers follow).
template <class Dec, size_t R, size_t NT>
HWY_INLINE void IntTile(const uint8_t* const* rows, const ActTile<NT>& x, int64_t blocks, int64_t per_act, float* sums,
                        size_t ahead) {
  const DF df;
  const D32 di;
  constexpr int64_t kSums = Dec::kValues / 16;  // the activations' 16-value sums per block
  VF facc[R][NT], part[R][NT];
  float mins[R][NT];  // Corr::kMin's sum of m * dx * block sums, blocks in order
  for (size_t r = 0; r < R; ++r)
    for (size_t t = 0; t < NT; ++t) {
      facc[r][t] = part[r][t] = hn::Zero(df);
      mins[r][t] = 0.0f;
    }
  Dec dec[R];
  int64_t act = 0, in_act = 0;  // the activation block, and weight blocks of it summed so far
  for (int64_t b = 0; b < blocks; ++b) {
    for (size_t r = 0; r < R; ++r) {
      if (ahead != 0)  // every cache line of the block `ahead` bytes on
        for (int64_t o = 0; o < Dec::kBytes; o += 64) hwy::Prefetch(rows[r] + b * Dec::kBytes + ahead + o);
      dec[r].Prepare(rows[r] + b * Dec::kBytes);
    }
    VI s0[R][NT], s1[R][NT];
    for (size_t r = 0; r < R; ++r)
      for (size_t t = 0; t < NT; ++t) s0[r][t] = s1[r][t] = hn::Zero(di);
    const int64_t c0 = b * Dec::kValues;
    ForEachPiece<Dec>([&](auto p) {
      constexpr size_t P = decltype(p)::value;
      VI8 xv[NT];
      for (size_t t = 0; t < NT; ++t) xv[t] = hn::LoadU(DI8(), x.q[t] + c0 + static_cast<int64_t>(P * kB));
      for (size_t r = 0; r < R; ++r) {
        const typename Dec::Piece w = dec[r].template Weights<P>();
        const V16 scale = dec[r].template Scale<P>();
        for (size_t t = 0; t < NT; ++t)
          s0[r][t] = Dec::Accumulate(w, scale, xv[t], s0[r][t], s1[r][t]);
      }
    });
    if (per_act == 1) {  // one activation scale per weight block: scale by d * dx
      // The products d * dx (and dmin * dx) of the tile's tokens, one vector multiply by
      // the block's column of activation scales (the same IEEE products as one by one).
      constexpr bool kVectorScales = NT > 1 && NT <= hn::MaxLanes(DF());
      static_assert(QuantizedActivations::kPadding >= static_cast<int64_t>(hn::MaxLanes(DF())));
      HWY_ALIGN float dd[kVectorScales ? R : 1][hn::MaxLanes(DF())];
      HWY_ALIGN float dm[kVectorScales && Dec::kCorr == Corr::kFloat ? R : 1][hn::MaxLanes(DF())];
      if constexpr (kVectorScales) {
        const VF dx = hn::LoadU(df, x.d_by_block + b * x.d_stride);
        for (size_t r = 0; r < R; ++r) {
          hn::Store(hn::Mul(hn::Set(df, dec[r].d), dx), df, dd[r]);
          if constexpr (Dec::kCorr == Corr::kFloat) hn::Store(hn::Mul(hn::Set(df, dec[r].dmin), dx), df, dm[r]);
        }
      }
      for (size_t r = 0; r < R; ++r)
        for (size_t t = 0; t < NT; ++t) {
          float d_dx, dmin_dx = 0.0f;
          if constexpr (kVectorScales) {
            d_dx = dd[r][t];
            if constexpr (Dec::kCorr == Corr::kFloat) dmin_dx = dm[r][t];
          } else {
            const float dx = x.d[t][b];
            d_dx = dec[r].d * dx;
            if constexpr (Dec::kCorr == Corr::kFloat) dmin_dx = dec[r].dmin * dx;
          }
          VI s = hn::RearrangeToOddPlusEven(s0[r][t], s1[r][t]);
          if constexpr (Dec::kCorr == Corr::kInt) s = hn::Sub(s, hn::ShiftLeft<5>(Dot16(dec[r].corr, x.s[t] + b * kSums)));
          facc[r][t] = hn::MulAdd(hn::ConvertTo(df, s), hn::Set(df, d_dx), facc[r][t]);
          if constexpr (Dec::kCorr == Corr::kFloat)
            facc[r][t] = hn::NegMulAdd(hn::ConvertTo(df, Dot16(dec[r].corr, x.s[t] + b * kSums)), hn::Set(df, dmin_dx),
                                       facc[r][t]);
        }
    } else if constexpr (Dec::kCorr == Corr::kNone || Dec::kCorr == Corr::kMin) {
      // per_act weight blocks (the 32-value formats') share an activation scale: sum them
      // scaled by d, then scale by dx
      for (size_t r = 0; r < R; ++r) {
        const VF dw = hn::Set(df, dec[r].d);
        for (size_t t = 0; t < NT; ++t) {
          part[r][t] = hn::MulAdd(hn::ConvertTo(df, hn::RearrangeToOddPlusEven(s0[r][t], s1[r][t])), dw, part[r][t]);
        }
      }
      if (++in_act == per_act) {  // the activation block is complete
        for (size_t r = 0; r < R; ++r)
          for (size_t t = 0; t < NT; ++t) {
            facc[r][t] = hn::MulAdd(part[r][t], hn::Set(df, x.d[t][act]), facc[r][t]);
            part[r][t] = hn::Zero(df);
          }
        in_act = 0;
        ++act;
      }
    }
    if constexpr (Dec::kCorr == Corr::kMin)
      for (size_t r = 0; r < R; ++r)
        for (size_t t = 0; t < NT; ++t) mins[r][t] += dec[r].m * x.m[t][b];
  }
  for (size_t r = 0; r < R; ++r)
    for (size_t t = 0; t < NT; ++t) {
      sums[r * NT + t] = hn::GetLane(hn::SumOfLanes(df, facc[r][t]));
      if constexpr (Dec::kCorr == Corr::kMin) sums[r * NT + t] += mins[r][t];
    }
}

// Rows [r0, r1) of a matrix whose row r starts at base + r * row_bytes, by tiles of R
// rows (missing rows repeat the first and are not written), against tokens [t0, t0 + NT).
template <class Dec, size_t R, size_t NT>
void IntRows(const uint8_t* base, size_t row_bytes, int64_t r0, int64_t r1, const QuantizedActivations& x, int64_t t0,
             int64_t blocks, float* out, int64_t out_stride, bool prefetch) {
  const ActTile<NT> xt = MakeActTile<NT>(x, t0);
  for (int64_t b0 = r0; b0 < r1; b0 += static_cast<int64_t>(R)) {
    const int64_t rows = std::min<int64_t>(static_cast<int64_t>(R), r1 - b0);
    const uint8_t* rp[R];
    for (size_t r = 0; r < R; ++r)
      rp[r] = base + static_cast<size_t>(b0 + (static_cast<int64_t>(r) < rows ? static_cast<int64_t>(r) : 0)) * row_bytes;
    float sums[R * NT];
    IntTile<Dec, R, NT>(rp, xt, blocks, x.block / Dec::kValues, sums, prefetch ? R * row_bytes : 0);
    for (int64_t r = 0; r < rows; ++r)
      for (size_t t = 0; t < NT; ++t)
        out[(t0 + static_cast<int64_t>(t)) * out_stride + b0 + r] = sums[static_cast<size_t>(r) * NT + t];
  }
}

// Rows x tokens per tile for steps of more than kFusedMaxT tokens; smaller steps read
// one row at a time against all their tokens (a single sequential stream). The tiles
// fit the register budget: 32 vector registers on AVX-512 and NEON, 16 on the other
// SIMD targets (the scalar fallback uses no tiles: ProductWith).
#if HWY_TARGET <= HWY_AVX3 || HWY_ARCH_ARM
constexpr size_t kRows = 1, kTokens = 8;
constexpr int64_t kFusedMaxT = 8;
#else
constexpr size_t kRows = 2, kTokens = 2;
constexpr int64_t kFusedMaxT = 4;
#endif

// The last `left` tokens (fewer than NT) from token t: tile(integral_constant<left>, t).
template <size_t NT, class F>
void LastTokenTile(int64_t left, int64_t t, F& tile) {
  if constexpr (NT > 1) {
    if (left == static_cast<int64_t>(NT) - 1) tile(std::integral_constant<size_t, NT - 1>{}, t);
    else LastTokenTile<NT - 1>(left, t, tile);
  }
}

// Tokens [0, n) in tiles of NT, the last one of exactly the tokens left:
// tile(std::integral_constant<size_t, tokens>{}, first token) for each (the integer
// products' and the groups' token tiles).
template <size_t NT, class F>
void ForTokenTiles(int64_t n, F&& tile) {
  int64_t t = 0;
  for (; t + static_cast<int64_t>(NT) <= n; t += NT) tile(std::integral_constant<size_t, NT>{}, t);
  if (t < n) LastTokenTile<NT>(n - t, t, tile);
}

// Token tiles of NT (the last one smaller) outer, row tiles of R inner.
template <class Dec, size_t R, size_t NT>
void AllTokens(const uint8_t* base, size_t row_bytes, int64_t r0, int64_t r1, const QuantizedActivations& x,
               int64_t blocks, float* out, int64_t out_stride, bool prefetch) {
  ForTokenTiles<NT>(x.rows, [&](auto tokens, int64_t t) {
    IntRows<Dec, R, decltype(tokens)::value>(base, row_bytes, r0, r1, x, t, blocks, out, out_stride, prefetch);
  });
}

// Steps of up to kFusedMaxT tokens stream the rows once; larger ones take the rows in
// panels of `panel_rows` (kept in cache while every token tile passes over them). The
// scalar fallback takes one row and one token at a time: the same arithmetic per output
// as any tile, and one tile shape to compile where its pieces are single bytes, each
// piece its own template instance (256 per K-quant block): compiled alone, the scalar
// target of q8_matmul_grid.cpp took 118 s with the six tile shapes, 13 s with one.
template <class Dec>
void ProductWith(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                 int64_t out_stride, int64_t panel_rows) {
  const int64_t blocks = w.cols / Dec::kValues;
#if HWY_TARGET == HWY_SCALAR
  (void)panel_rows;
  for (int64_t t = 0; t < x.rows; ++t)
    IntRows<Dec, 1, 1>(w.data, w.row_bytes, r0, r1, x, t, blocks, out, out_stride, false);
#else
  if (x.rows == 1) {
    IntRows<Dec, 1, 1>(w.data, w.row_bytes, r0, r1, x, 0, blocks, out, out_stride, false);
    return;
  }
  if (x.rows <= kFusedMaxT) {
    AllTokens<Dec, 1, kFusedMaxT>(w.data, w.row_bytes, r0, r1, x, blocks, out, out_stride, true);
    return;
  }
  for (int64_t p0 = r0; p0 < r1; p0 += panel_rows)
    AllTokens<Dec, kRows, kTokens>(w.data, w.row_bytes, p0, std::min(r1, p0 + panel_rows), x, blocks, out, out_stride,
                                   false);
#endif
}
}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#endif  // FAFO_BACKEND_CPU_Q8_MATMUL_INL_H_ (toggled per target)
