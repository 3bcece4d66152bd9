// The integer product over rows in groups of 8 (q8_groups.h), for every instruction
// set (the layout is the same for all of them), and the layout's making.
//
// Built with -ffp-contract=off (runtime/CMakeLists.txt), as q8_matmul-inl.h says.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "backend/cpu/q8_groups.h"
#include "backend/cpu/q8_matmul.h"
#include "backend/cpu/simd_matmul.h"
#include "quant/blocks.h"

// Arrays of vectors (the tiles' accumulators) need vectors of a size known when compiling.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/q8_groups.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// The shared per-target code, after highway.h:
#include "backend/cpu/q8_matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fafo::cpu {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
constexpr size_t kLanes = hn::MaxLanes(D32());
constexpr size_t kRowVecs = static_cast<size_t>(kGroupRows) / kLanes;  // vectors per group's chunk
static_assert(kLanes * 4 == kB && kRowVecs * kLanes == static_cast<size_t>(kGroupRows));
#endif

// A group block's 8 scales: ScaleOf(p, r) is row r's, Scales(p, v) the floats of rows
// v * kLanes .. (v + 1) * kLanes - 1; kScaleBytes per row.
struct HalfScales {  // fp16 d (Q4_0, IQ4_NL, Q8_0, Q5_0; Q4_K's d and dmin)
  static constexpr int64_t kValues = quant::kLegacyBlock;  // values per block
  static constexpr int64_t kScaleBytes = 2;
  static constexpr int64_t kHighBytes = 0;  // per row: Q5_0's fifth bits (Q5_0Group)
  static float ScaleOf(const uint8_t* p, int64_t r) { return LoadHalf(p + 2 * r); }
#if HWY_TARGET != HWY_SCALAR
  static HWY_INLINE VF Scales(const uint8_t* p, size_t v) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(DF(), hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p) + v * kLanes));
  }
#endif
};
struct E8m0Scales {  // MXFP4's exponent byte e: d = 2^(e - 129), half the block's power of two
  static constexpr int64_t kValues = quant::kLegacyBlock;
  static constexpr int64_t kScaleBytes = 1;
  static constexpr int64_t kHighBytes = 0;
  static float ScaleOf(const uint8_t* p, int64_t r) { return quant::e8m0_half_to_fp32(p[r]); }
#if HWY_TARGET != HWY_SCALAR
  // quant::e8m0_half_to_fp32's bits: (e - 1) << 23, or 0x200000 << e below e = 2.
  static HWY_INLINE VF Scales(const uint8_t* p, size_t v) {
    const hn::RebindToUnsigned<D32> du;
    const auto e = hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint8_t, decltype(du)>(), p + v * kLanes));
    const auto one = hn::Set(du, 1u);
    // (The shift takes min(e, 1): a lane whose e is larger takes the other value, and a
    // shift by 32 or more is undefined in the portable targets' C++.)
    const auto bits = hn::IfThenElse(hn::Lt(e, hn::Set(du, 2u)), hn::Shl(hn::Set(du, 0x00200000u), hn::Min(e, one)),
                                     hn::ShiftLeft<23>(hn::Sub(e, one)));
    return hn::BitCast(DF(), bits);
  }
#endif
};

// A table of 16 signed values, each plus kPlus, as unsigned bytes.
template <int kPlus>
constexpr std::array<uint8_t, 16> Plus(const int8_t (&values)[16]) {
  std::array<uint8_t, 16> t{};
  for (size_t i = 0; i < 16; ++i) t[i] = static_cast<uint8_t>(values[i] + kPlus);
  return t;
}

// How a chunk's weights meet 4 activation bytes in each row's 32-bit lane (Accumulate).
// UnsignedQuads: unsigned weights, with VNNI four products at once (any byte: four
// products with |x| <= 127 fit 32 bits), elsewhere in pairs of 16 bits (weights small
// enough for the pairs to fit). SignedPairs: signed weights as Q8_0's file-row product
// takes them (magnitudes times the activations with their signs), in pairs.
// kQuadsOfAnyByte: whether UnsignedQuads takes any unsigned byte (VNNI).
#if HWY_TARGET == HWY_AVX3_DL
constexpr bool kQuadsOfAnyByte = true;
#else
constexpr bool kQuadsOfAnyByte = false;
#endif
#if HWY_TARGET != HWY_SCALAR
struct UnsignedQuads {
  using Piece = V8;
  static HWY_INLINE VI Accumulate(Piece w, VI8 x, VI acc, VI& acc1) {
#if HWY_TARGET == HWY_AVX3_DL
    (void)acc1;
    return DotQuadsAdd(acc, w, x);
#else
    return MulScaleAdd(MulPairs(w, x), hn::Set(D16(), 1), acc, acc1);
#endif
  }
};
struct SignedPairs {
  using Piece = Q8_0Int::Piece;
  static HWY_INLINE Piece Of(V8 bytes) { return SignedPieceOf(hn::BitCast(DI8(), bytes)); }
  static HWY_INLINE VI Accumulate(const Piece& w, VI8 x, VI acc, VI& acc1) {
    return AccumulateScaled(w, hn::Set(D16(), 1), x, acc, acc1);
  }
};
#else
struct UnsignedQuads {};
struct SignedPairs {};
#endif
// Signed weights: as unsigned bytes plus 128 where the quads take any byte.
using SignedWeights = std::conditional_t<kQuadsOfAnyByte, UnsignedQuads, SignedPairs>;

// The codes of a group's chunk as weights. Nibble formats (kCodeBytes 16): Lo gives the
// low nibbles' (values 4k..4k+3 of each row), Hi the high ones' (16 + 4k ..); byte
// formats (kCodeBytes 32): Lo gives the bytes' (values 4k..4k+3). kOffset is what was
// added to every weight so that it is an unsigned byte (subtracted as kOffset times the
// block's activation sum). ValueOf is a code's weight, for the scalar fallback.
struct Q4_0Group : HalfScales, UnsignedQuads {
  static constexpr int64_t kCodeBytes = 16;
  static constexpr int32_t kOffset = 8;  // the codes 0..15 are the values plus 8
  static int32_t ValueOf(uint8_t code) { return static_cast<int32_t>(code) - 8; }
#if HWY_TARGET != HWY_SCALAR
  static HWY_INLINE V8 Lo(V8 c) { return hn::And(c, hn::Set(D8(), 0x0f)); }
  static HWY_INLINE V8 Hi(V8 c) { return hn::ShiftRight<4>(c); }
#endif
};

// The formats whose 4-bit codes index a table of 16 signed values, as weights plus
// kPlus (unsigned bytes) or, where kPlus is 0, signed (SignedPairs).
template <const int8_t (&kValues)[16], int kPlus, class Products>
struct TableGroup : Products {
  static constexpr int64_t kCodeBytes = 16;
  static constexpr int32_t kOffset = kPlus;
  static int32_t ValueOf(uint8_t code) { return kValues[code]; }
#if HWY_TARGET != HWY_SCALAR
  static HWY_INLINE typename Products::Piece Weights(V8 codes) {
    alignas(16) static constexpr std::array<uint8_t, 16> kTable = Plus<kPlus>(kValues);
    const V8 w = hn::TableLookupBytes(hn::LoadDup128(D8(), kTable.data()), codes);
    if constexpr (kPlus == 0) return SignedPairs::Of(w);
    else return w;
  }
  static HWY_INLINE typename Products::Piece Lo(V8 c) { return Weights(hn::And(c, hn::Set(D8(), 0x0f))); }
  static HWY_INLINE typename Products::Piece Hi(V8 c) { return Weights(hn::ShiftRight<4>(c)); }
#endif
};

// IQ4_NL: values -127..113, plus 128 where the quads take any byte, else signed.
struct Iq4NlGroup : HalfScales, TableGroup<quant::kIq4nlValues, kQuadsOfAnyByte ? 128 : 0, SignedWeights> {};
// MXFP4: doubled fp4 values -12..12, plus 12 (bytes of at most 24, whose pairs of
// products fit 16 bits on every instruction set).
struct Mxfp4Group : E8m0Scales, TableGroup<quant::kMxfp4Values, 12, UnsignedQuads> {};

// Q8_0's signed bytes: plus 128 (the sign bit flipped) where the quads take any byte,
// else signed.
struct Q8_0Group : HalfScales, SignedWeights {
  static constexpr int64_t kCodeBytes = 32;
  static constexpr int32_t kOffset = kQuadsOfAnyByte ? 128 : 0;
  static int32_t ValueOf(uint8_t code) { return static_cast<int8_t>(code); }
#if HWY_TARGET != HWY_SCALAR
  static HWY_INLINE SignedWeights::Piece Lo(V8 c) {
#if HWY_TARGET == HWY_AVX3_DL  // kQuadsOfAnyByte
    return hn::Xor(c, hn::Set(D8(), 0x80));
#else
    return SignedPairs::Of(c);
#endif
  }
#endif
};

// Q5_0: Q4_0's nibbles plus a fifth bit per value (bit j of the row's 32-bit qh for
// value j, stored after the scales, row r's word at 4r): codes 0..31, the values plus
// 16, whose pairs of products fit 16 bits.
struct Q5_0Group : HalfScales, UnsignedQuads {
  static constexpr int64_t kHighBytes = 4, kCodeBytes = 16;
  static constexpr int32_t kOffset = 16;
  static int32_t ValueOf(uint8_t code) { return static_cast<int32_t>(code) - 16; }
  static int32_t HighBit(const uint8_t* high, int64_t r, int64_t j) { return (high[4 * r + j / 8] >> (j % 8)) & 1; }
#if HWY_TARGET != HWY_SCALAR
  using DU = hn::RebindToUnsigned<D32>;
  using High = hn::Vec<DU>;
  static HWY_INLINE High HighWords(const uint8_t* high, size_t v) {
    return hn::LoadU(DU(), reinterpret_cast<const uint32_t*>(high) + v * kLanes);
  }
  // Bits `shift` .. `shift` + 3 of each lane's word as bit 4 of the lane's 4 bytes (the
  // nibble times 0x00204081 puts bit i at bit 8i; no two products overlap).
  static HWY_INLINE V8 FifthBits(High qh, int shift) {
    const DU du;
    const auto nibble = hn::And(hn::ShiftRightSame(qh, shift), hn::Set(du, 0x0fu));
    const auto spread = hn::And(hn::Mul(nibble, hn::Set(du, 0x00204081u)), hn::Set(du, 0x01010101u));
    return hn::BitCast(D8(), hn::ShiftLeft<4>(spread));
  }
  static HWY_INLINE V8 Lo(V8 c) { return Q4_0Group::Lo(c); }
  static HWY_INLINE V8 Hi(V8 c) { return Q4_0Group::Hi(c); }
#endif
};

// Q4_K (q8_groups.h's layout of its super-blocks): codes 0..15 with a scale per 32
// values, and a min per 32 values times dmin subtracted.
struct Q4KGroup : HalfScales {
  static constexpr int64_t kValues = quant::kSuperBlock;
  static constexpr int64_t kDmin = kK4GroupDmin, kScales = kK4GroupScales, kMins = kK4GroupMins,
                           kCodes = kK4GroupCodes, kBlockBytes = kK4GroupBlockBytes;
  static constexpr bool kFifthBits = false;
};

// Q5_K: Q4_K's layout and arithmetic with a fifth bit per code (codes 0..31), kept before
// the nibbles.
struct Q5KGroup : Q4KGroup {
  static constexpr int64_t kHigh = kK5GroupHigh, kCodes = kK5GroupCodes, kBlockBytes = kK5GroupBlockBytes;
  static constexpr bool kFifthBits = true;
};

// Q6_K (q8_groups.h's layout): 6-bit codes, the values plus 32, with a signed scale per
// 16 values; the offset is subtracted as 32 times the scales times the activations' sums.
struct Q6KGroup : HalfScales {
  static constexpr int64_t kValues = quant::kSuperBlock;
  static constexpr int64_t kScales = kK6GroupScales, kBlockBytes = kK6GroupBlockBytes;
};

template <class Dec>
constexpr int64_t GroupBlockBytes() {
  if constexpr (Dec::kValues == quant::kSuperBlock) return Dec::kBlockBytes;
  else return group_block_bytes(Dec::kScaleBytes, Dec::kHighBytes + Dec::kCodeBytes);
}

// The block's 32 activation bytes' sum (the halves' 16-value sums).
HWY_INLINE int32_t BlockSum(const int16_t* sums16, int64_t b) { return int32_t{sums16[2 * b]} + sums16[2 * b + 1]; }

#if HWY_TARGET != HWY_SCALAR
// 4 activation bytes in every 32-bit lane.
HWY_INLINE VI8 QuadOf(const int8_t* q) {
  int32_t word;
  std::memcpy(&word, q, 4);
  return hn::BitCast(DI8(), hn::Set(D32(), word));
}

// One group x NT tokens: sums[t * 8 + r] = dot(row r, token t). Per output (a lane):
// per block the integer sum (kOffset times the block's activation sum subtracted), as a
// float times (d * dx) in one multiply-add, blocks in order.
template <class Dec, size_t NT>
HWY_INLINE void GroupTile(const uint8_t* group, const ActTile<NT>& x, int64_t blocks, int64_t per_act, float* sums) {
  const DF df;
  const D32 di;
  constexpr int64_t kHigh = Dec::kScaleBytes * kGroupRows;  // where Q5_0's fifth bits start
  constexpr int64_t kCodes = kHigh + Dec::kHighBytes * kGroupRows;  // where the chunks start
  VF acc[NT][kRowVecs];
  for (size_t t = 0; t < NT; ++t)
    for (size_t v = 0; v < kRowVecs; ++v) acc[t][v] = hn::Zero(df);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = group + b * GroupBlockBytes<Dec>();
    VF d[kRowVecs];
    for (size_t v = 0; v < kRowVecs; ++v) d[v] = Dec::Scales(p, v);
    VI s0[NT][kRowVecs], s1[NT][kRowVecs];
    for (size_t t = 0; t < NT; ++t)
      for (size_t v = 0; v < kRowVecs; ++v) s0[t][v] = s1[t][v] = hn::Zero(di);
    const int64_t c0 = b * quant::kLegacyBlock;
    if constexpr (Dec::kCodeBytes == 16) {  // nibbles: 4 chunks, each values 4k.. and 16 + 4k..
      for (int64_t k = 0; k < 4; ++k) {
        VI8 xl[NT], xh[NT];
        for (size_t t = 0; t < NT; ++t) {
          xl[t] = QuadOf(x.q[t] + c0 + 4 * k);
          xh[t] = QuadOf(x.q[t] + c0 + 16 + 4 * k);
        }
        for (size_t v = 0; v < kRowVecs; ++v) {
          const V8 c = hn::LoadU(D8(), p + kCodes + 32 * k + static_cast<int64_t>(v * kB));
          typename Dec::Piece lo = Dec::Lo(c), hi = Dec::Hi(c);
          if constexpr (Dec::kHighBytes > 0) {
            const auto qh = Dec::HighWords(p + kHigh, v);
            lo = hn::Or(lo, Dec::FifthBits(qh, static_cast<int>(4 * k)));
            hi = hn::Or(hi, Dec::FifthBits(qh, static_cast<int>(16 + 4 * k)));
          }
          for (size_t t = 0; t < NT; ++t) {
            s0[t][v] = Dec::Accumulate(lo, xl[t], s0[t][v], s1[t][v]);
            s0[t][v] = Dec::Accumulate(hi, xh[t], s0[t][v], s1[t][v]);
          }
        }
      }
    } else {  // bytes: 8 chunks, each values 4k..
      for (int64_t k = 0; k < 8; ++k) {
        VI8 xk[NT];
        for (size_t t = 0; t < NT; ++t) xk[t] = QuadOf(x.q[t] + c0 + 4 * k);
        for (size_t v = 0; v < kRowVecs; ++v) {
          const typename Dec::Piece w = Dec::Lo(hn::LoadU(D8(), p + kCodes + 32 * k + static_cast<int64_t>(v * kB)));
          for (size_t t = 0; t < NT; ++t) s0[t][v] = Dec::Accumulate(w, xk[t], s0[t][v], s1[t][v]);
        }
      }
    }
    for (size_t t = 0; t < NT; ++t) {
      const VF dx = hn::Set(df, x.d[t][b / per_act]);
      const VI offset = hn::Set(di, Dec::kOffset * BlockSum(x.s[t], b));
      for (size_t v = 0; v < kRowVecs; ++v) {
        VI s = hn::RearrangeToOddPlusEven(s0[t][v], s1[t][v]);
        if constexpr (Dec::kOffset != 0) s = hn::Sub(s, offset);
        acc[t][v] = hn::MulAdd(hn::ConvertTo(df, s), hn::Mul(d[v], dx), acc[t][v]);
      }
    }
  }
  for (size_t t = 0; t < NT; ++t)
    for (size_t v = 0; v < kRowVecs; ++v) hn::StoreU(acc[t][v], df, sums + t * kGroupRows + v * kLanes);
}

// Q4_K's and Q5_K's group block (Dec: Q4KGroup, Q5KGroup): one group x NT tokens,
// sums[t * 8 + r] = dot(row r, token t). Per output (a lane), per super-block: the exact
// integer sum over its 8 sub-blocks of scale x (codes . activations) and the one of min
// x (the sub-block's activation sum), as floats times (d * dx) and (dmin * dx), one
// multiply-add each, super-blocks in order. A sub-block's products sum in 16-bit pairs
// before its scale multiplies them into 32 bits: all 32 for codes below 16 (at most 8 x 2
// x 15 x 127 = 30480), 16 at a time for Q5_K's below 32 (4 x 2 x 31 x 127 = 31496).
template <class Dec, size_t NT>
HWY_INLINE void K4GroupTile(const uint8_t* group, const ActTile<NT>& x, int64_t blocks, float* sums) {
  const DF df;
  const D32 di;
  const hn::RebindToUnsigned<D32> du;
  VF acc[NT][kRowVecs];
  for (size_t t = 0; t < NT; ++t)
    for (size_t v = 0; v < kRowVecs; ++v) acc[t][v] = hn::Zero(df);
  constexpr int64_t kPairSteps = Dec::kFifthBits ? 4 : 8;  // chunks summed in 16 bits before the scale
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = group + b * Dec::kBlockBytes;
    const int64_t c0 = b * quant::kSuperBlock;
    VI s0[NT][kRowVecs], s1[NT][kRowVecs];
    for (size_t t = 0; t < NT; ++t)
      for (size_t v = 0; v < kRowVecs; ++v) s0[t][v] = s1[t][v] = hn::Zero(di);
    for (int64_t j = 0; j < 8; ++j) {  // sub-block j: the low (even j) or high nibbles of pair j / 2
      V16 scale[kRowVecs];  // each row's scale in both 16-bit halves of its lane
      for (size_t v = 0; v < kRowVecs; ++v) {
        const auto sc = hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint8_t, decltype(du)>(), p + Q4KGroup::kScales + 8 * j +
                                                                                           static_cast<int64_t>(v * kLanes)));
        scale[v] = hn::BitCast(D16(), hn::Or(sc, hn::ShiftLeft<16>(sc)));
      }
      const uint8_t* chunks = p + Dec::kCodes + 256 * (j / 2);
      for (int64_t k0 = 0; k0 < 8; k0 += kPairSteps) {
        V16 pairs[NT][kRowVecs];
        for (size_t t = 0; t < NT; ++t)
          for (size_t v = 0; v < kRowVecs; ++v) pairs[t][v] = hn::Zero(D16());
        for (int64_t k = k0; k < k0 + kPairSteps; ++k)
          for (size_t v = 0; v < kRowVecs; ++v) {
            const V8 c = hn::LoadU(D8(), chunks + 32 * k + static_cast<int64_t>(v * kB));
            V8 w = (j & 1) ? hn::ShiftRight<4>(c) : hn::And(c, hn::Set(D8(), 0x0f));
            if constexpr (Dec::kFifthBits) {  // bit j of each byte to bit 4 (16-bit shifts: within each byte there)
              const V16 h = hn::BitCast(D16(), hn::LoadU(D8(), p + Q5KGroup::kHigh + 32 * k + static_cast<int64_t>(v * kB)));
              const V16 moved = j <= 4 ? hn::ShiftLeftSame(h, static_cast<int>(4 - j)) : hn::ShiftRightSame(h, static_cast<int>(j - 4));
              w = hn::Or(w, hn::And(hn::BitCast(D8(), moved), hn::Set(D8(), 0x10)));
            }
            for (size_t t = 0; t < NT; ++t)
              pairs[t][v] = hn::Add(pairs[t][v], MulPairs(w, QuadOf(x.q[t] + c0 + 32 * j + 4 * k)));
          }
        for (size_t t = 0; t < NT; ++t)
          for (size_t v = 0; v < kRowVecs; ++v) s0[t][v] = MulScaleAdd(pairs[t][v], scale[v], s0[t][v], s1[t][v]);
      }
    }
    VF d[kRowVecs], dmin[kRowVecs];
    for (size_t v = 0; v < kRowVecs; ++v) {
      d[v] = Q4KGroup::Scales(p, v);
      dmin[v] = Q4KGroup::Scales(p + Q4KGroup::kDmin, v);
    }
    for (size_t t = 0; t < NT; ++t) {
      // The sub-blocks' activation sums, two to a 32-bit word: (sub 2i, sub 2i + 1).
      VI m0[kRowVecs], m1[kRowVecs];
      for (size_t v = 0; v < kRowVecs; ++v) m0[v] = m1[v] = hn::Zero(di);
      const int16_t* s16 = x.s[t] + c0 / 16;
      for (int64_t i = 0; i < 4; ++i) {
        const uint32_t lo = static_cast<uint16_t>(BlockSum(s16, 2 * i)), hi = static_cast<uint16_t>(BlockSum(s16, 2 * i + 1));
        const V16 bsums = hn::BitCast(D16(), hn::Set(du, lo | (hi << 16)));
        for (size_t v = 0; v < kRowVecs; ++v) {
          const V16 mins = hn::PromoteTo(D16(), hn::LoadU(hn::Rebind<uint8_t, D16>(), p + Q4KGroup::kMins + 16 * i +
                                                                                          static_cast<int64_t>(v * kG)));
          m0[v] = hn::ReorderWidenMulAccumulate(di, mins, bsums, m0[v], m1[v]);
        }
      }
      const VF dx = hn::Set(df, x.d[t][b]);
      for (size_t v = 0; v < kRowVecs; ++v) {
        acc[t][v] = hn::MulAdd(hn::ConvertTo(df, hn::RearrangeToOddPlusEven(s0[t][v], s1[t][v])), hn::Mul(d[v], dx), acc[t][v]);
        acc[t][v] = hn::NegMulAdd(hn::ConvertTo(df, hn::RearrangeToOddPlusEven(m0[v], m1[v])), hn::Mul(dmin[v], dx),
                                  acc[t][v]);
      }
    }
  }
  for (size_t t = 0; t < NT; ++t)
    for (size_t v = 0; v < kRowVecs; ++v) hn::StoreU(acc[t][v], df, sums + t * kGroupRows + v * kLanes);
}

// Q6_K's group block: one group x NT tokens, sums[t * 8 + r] = dot(row r, token t). Per
// output (a lane), per super-block: the exact integer sum of scale x code x activation
// (codes 0..63 in 16-bit pairs of at most 16002, each pair times its 16 values' scale
// into 32 bits) minus 32 x the sum of scale x the 16 values' activation sum, as a float
// times (d * dx) in one multiply-add, super-blocks in order.
template <size_t NT>
HWY_INLINE void K6GroupTile(const uint8_t* group, const ActTile<NT>& x, int64_t blocks, float* sums) {
  const DF df;
  const D32 di;
  const hn::RebindToUnsigned<D32> du;
  const hn::Rebind<int8_t, D16> d8to16;
  VF acc[NT][kRowVecs];
  for (size_t t = 0; t < NT; ++t)
    for (size_t v = 0; v < kRowVecs; ++v) acc[t][v] = hn::Zero(df);
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = group + b * Q6KGroup::kBlockBytes;
    const auto* scales = reinterpret_cast<const int8_t*>(p + Q6KGroup::kScales);
    const int64_t c0 = b * quant::kSuperBlock;
    VI s0[NT][kRowVecs], s1[NT][kRowVecs];
    for (size_t t = 0; t < NT; ++t)
      for (size_t v = 0; v < kRowVecs; ++v) s0[t][v] = s1[t][v] = hn::Zero(di);
    // Values 32m .. 32m + 31 (sub-blocks 2m and 2m + 1): their low 4 bits are the low (k
    // < 2) or high nibbles of the low codes' pair 2h + k % 2, their high 2 bits bits 2k,
    // 2k + 1 of the high codes of half h (m = 4h + k).
    auto values = [&](auto m_constant) {
      constexpr int m = decltype(m_constant)::value, h = m / 4, k = m % 4;
      V16 even[kRowVecs], odd[kRowVecs];  // each row's scale of sub-block 2m (2m + 1) in both halves of its lane
      for (size_t v = 0; v < kRowVecs; ++v) {
        const auto pairs = hn::BitCast(du, hn::PromoteTo(D16(), hn::LoadU(d8to16, scales + 16 * m + static_cast<int64_t>(v * kG))));
        even[v] = hn::BitCast(D16(), hn::Or(hn::And(pairs, hn::Set(du, 0x0000ffffu)), hn::ShiftLeft<16>(pairs)));
        odd[v] = hn::BitCast(D16(), hn::Or(hn::And(pairs, hn::Set(du, 0xffff0000u)), hn::ShiftRight<16>(pairs)));
      }
      const uint8_t* low = p + k6_group_low(8 * (2 * h + k % 2));
      const uint8_t* high = p + k6_group_high(8 * h);
      for (int64_t c = 0; c < 8; ++c)
        for (size_t v = 0; v < kRowVecs; ++v) {
          const V8 l = hn::LoadU(D8(), low + 32 * c + static_cast<int64_t>(v * kB));
          const V8 nibbles = k < 2 ? hn::And(l, hn::Set(D8(), 0x0f)) : hn::ShiftRight<4>(l);
          const V8 codes = hn::Or(nibbles, MoveBits<2 * k, 4>(hn::LoadU(D8(), high + 32 * c + static_cast<int64_t>(v * kB)),
                                                              static_cast<uint8_t>(3 << (2 * k))));
          for (size_t t = 0; t < NT; ++t)
            s0[t][v] = MulScaleAdd(MulPairs(codes, QuadOf(x.q[t] + c0 + 32 * m + 4 * c)), c < 4 ? even[v] : odd[v], s0[t][v],
                                   s1[t][v]);
        }
    };
    values(std::integral_constant<int, 0>());
    values(std::integral_constant<int, 1>());
    values(std::integral_constant<int, 2>());
    values(std::integral_constant<int, 3>());
    values(std::integral_constant<int, 4>());
    values(std::integral_constant<int, 5>());
    values(std::integral_constant<int, 6>());
    values(std::integral_constant<int, 7>());
    VF d[kRowVecs];
    for (size_t v = 0; v < kRowVecs; ++v) d[v] = Q6KGroup::Scales(p, v);
    for (size_t t = 0; t < NT; ++t) {
      // The offset's sum: sub-blocks 2m and 2m + 1's activation sums, two to a 32-bit word.
      VI o0[kRowVecs], o1[kRowVecs];
      for (size_t v = 0; v < kRowVecs; ++v) o0[v] = o1[v] = hn::Zero(di);
      const int16_t* s16 = x.s[t] + c0 / 16;
      for (int64_t m = 0; m < 8; ++m) {
        const uint32_t lo = static_cast<uint16_t>(s16[2 * m]), hi = static_cast<uint16_t>(s16[2 * m + 1]);
        const V16 bsums = hn::BitCast(D16(), hn::Set(du, lo | (hi << 16)));
        for (size_t v = 0; v < kRowVecs; ++v)
          o0[v] = hn::ReorderWidenMulAccumulate(
              di, hn::PromoteTo(D16(), hn::LoadU(d8to16, scales + 16 * m + static_cast<int64_t>(v * kG))), bsums, o0[v], o1[v]);
      }
      const VF dx = hn::Set(df, x.d[t][b]);
      for (size_t v = 0; v < kRowVecs; ++v) {
        const VI s = hn::Sub(hn::RearrangeToOddPlusEven(s0[t][v], s1[t][v]),
                             hn::ShiftLeft<5>(hn::RearrangeToOddPlusEven(o0[v], o1[v])));
        acc[t][v] = hn::MulAdd(hn::ConvertTo(df, s), hn::Mul(d[v], dx), acc[t][v]);
      }
    }
  }
  for (size_t t = 0; t < NT; ++t)
    for (size_t v = 0; v < kRowVecs; ++v) hn::StoreU(acc[t][v], df, sums + t * kGroupRows + v * kLanes);
}
#else
// The same arithmetic one value at a time: the weights as signed integers (no offset).
template <class Dec, size_t NT>
HWY_INLINE void GroupTile(const uint8_t* group, const ActTile<NT>& x, int64_t blocks, int64_t per_act, float* sums) {
  float acc[NT][kGroupRows] = {};
  constexpr int64_t kHigh = Dec::kScaleBytes * kGroupRows, kCodes = kHigh + Dec::kHighBytes * kGroupRows;
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = group + b * GroupBlockBytes<Dec>();
    const int64_t c0 = b * quant::kLegacyBlock;
    for (int64_t r = 0; r < kGroupRows; ++r) {
      const float d = Dec::ScaleOf(p, r);
      for (size_t t = 0; t < NT; ++t) {
        int32_t s = 0;
        for (int64_t k = 0; k < Dec::kCodeBytes / 4; ++k)
          for (int64_t j = 0; j < 4; ++j) {
            const uint8_t byte = p[kCodes + 32 * k + 4 * r + j];
            if constexpr (Dec::kHighBytes > 0) {
              const int32_t lo = (byte & 0x0f) | (Dec::HighBit(p + kHigh, r, 4 * k + j) << 4);
              const int32_t hi = (byte >> 4) | (Dec::HighBit(p + kHigh, r, 16 + 4 * k + j) << 4);
              s += Dec::ValueOf(static_cast<uint8_t>(lo)) * x.q[t][c0 + 4 * k + j] +
                   Dec::ValueOf(static_cast<uint8_t>(hi)) * x.q[t][c0 + 16 + 4 * k + j];
            } else if constexpr (Dec::kCodeBytes == 16)
              s += Dec::ValueOf(byte & 0x0f) * x.q[t][c0 + 4 * k + j] + Dec::ValueOf(byte >> 4) * x.q[t][c0 + 16 + 4 * k + j];
            else
              s += Dec::ValueOf(byte) * x.q[t][c0 + 4 * k + j];
          }
        acc[t][r] = acc[t][r] + static_cast<float>(s) * (d * x.d[t][b / per_act]);
      }
    }
  }
  for (size_t t = 0; t < NT; ++t)
    for (int64_t r = 0; r < kGroupRows; ++r) sums[t * kGroupRows + static_cast<size_t>(r)] = acc[t][r];
}

template <class Dec, size_t NT>
HWY_INLINE void K4GroupTile(const uint8_t* group, const ActTile<NT>& x, int64_t blocks, float* sums) {
  float acc[NT][kGroupRows] = {};
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = group + b * Dec::kBlockBytes;
    const int64_t c0 = b * quant::kSuperBlock;
    for (int64_t r = 0; r < kGroupRows; ++r) {
      const float d = Q4KGroup::ScaleOf(p, r), dmin = Q4KGroup::ScaleOf(p + Q4KGroup::kDmin, r);
      for (size_t t = 0; t < NT; ++t) {
        int32_t s = 0, m = 0;
        for (int64_t j = 0; j < 8; ++j) {
          int32_t sub = 0;
          for (int64_t k = 0; k < 8; ++k)
            for (int64_t i = 0; i < 4; ++i) {
              const uint8_t byte = p[Dec::kCodes + 256 * (j / 2) + 32 * k + 4 * r + i];
              int32_t code = (j & 1) ? byte >> 4 : byte & 0x0f;
              if constexpr (Dec::kFifthBits) code |= ((p[Q5KGroup::kHigh + 32 * k + 4 * r + i] >> j) & 1) << 4;
              sub += code * x.q[t][c0 + 32 * j + 4 * k + i];
            }
          s += sub * p[Q4KGroup::kScales + 8 * j + r];
          m += p[Q4KGroup::kMins + 16 * (j / 2) + 2 * r + (j & 1)] * BlockSum(x.s[t] + c0 / 16, j);
        }
        const float dx = x.d[t][b];
        acc[t][r] = acc[t][r] + static_cast<float>(s) * (d * dx);
        acc[t][r] = acc[t][r] - static_cast<float>(m) * (dmin * dx);
      }
    }
  }
  for (size_t t = 0; t < NT; ++t)
    for (int64_t r = 0; r < kGroupRows; ++r) sums[t * kGroupRows + static_cast<size_t>(r)] = acc[t][r];
}

template <size_t NT>
HWY_INLINE void K6GroupTile(const uint8_t* group, const ActTile<NT>& x, int64_t blocks, float* sums) {
  float acc[NT][kGroupRows] = {};
  for (int64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = group + b * Q6KGroup::kBlockBytes;
    const int64_t c0 = b * quant::kSuperBlock;
    for (int64_t r = 0; r < kGroupRows; ++r) {
      const float d = Q6KGroup::ScaleOf(p, r);
      for (size_t t = 0; t < NT; ++t) {
        int32_t s = 0, offset = 0;
        for (int64_t m = 0; m < 8; ++m) {
          const int64_t h = m / 4, k = m % 4;
          for (int64_t c = 0; c < 8; ++c)
            for (int64_t i = 0; i < 4; ++i) {
              const uint8_t l = p[k6_group_low(8 * (2 * h + k % 2) + c) + 4 * r + i];
              const uint8_t hb = p[k6_group_high(8 * h + c) + 4 * r + i];
              const int32_t code = (k < 2 ? l & 0x0f : l >> 4) | (((hb >> (2 * k)) & 3) << 4);
              const int32_t scale = static_cast<int8_t>(p[Q6KGroup::kScales + 16 * m + 2 * r + (c < 4 ? 0 : 1)]);
              s += scale * code * x.q[t][c0 + 32 * m + 4 * c + i];
            }
          for (int64_t e = 0; e < 2; ++e)
            offset += static_cast<int8_t>(p[Q6KGroup::kScales + 16 * m + 2 * r + e]) * x.s[t][c0 / 16 + 2 * m + e];
        }
        acc[t][r] = acc[t][r] + static_cast<float>(s - 32 * offset) * (d * x.d[t][b]);
      }
    }
  }
  for (size_t t = 0; t < NT; ++t)
    for (int64_t r = 0; r < kGroupRows; ++r) sums[t * kGroupRows + static_cast<size_t>(r)] = acc[t][r];
}
#endif

// Groups [g0, g1) against tokens [t0, t0 + NT); rows outside [r0, r1) are not written.
template <class Dec, size_t NT>
void GroupRows(const host::HostWeight& w, int64_t g0, int64_t g1, int64_t r0, int64_t r1, const QuantizedActivations& x,
               int64_t t0, float* out, int64_t out_stride) {
  const ActTile<NT> xt = MakeActTile<NT>(x, t0);
  const int64_t blocks = w.cols / Dec::kValues, per_act = x.block / Dec::kValues;
  for (int64_t g = g0; g < g1; ++g) {
    float sums[NT * kGroupRows];
    const uint8_t* group = w.groups + g * blocks * GroupBlockBytes<Dec>();
    if constexpr (std::is_same_v<Dec, Q4KGroup> || std::is_same_v<Dec, Q5KGroup>) K4GroupTile<Dec, NT>(group, xt, blocks, sums);
    else if constexpr (std::is_same_v<Dec, Q6KGroup>) K6GroupTile<NT>(group, xt, blocks, sums);
    else GroupTile<Dec, NT>(group, xt, blocks, per_act, sums);
    const int64_t first = std::max(r0, g * kGroupRows), last = std::min(r1, (g + 1) * kGroupRows);
    for (int64_t r = first; r < last; ++r)
      for (size_t t = 0; t < NT; ++t)
        out[(t0 + static_cast<int64_t>(t)) * out_stride + r] = sums[t * kGroupRows + static_cast<size_t>(r - g * kGroupRows)];
  }
}

// Tokens per tile: as many as the accumulators' registers allow (32 vector registers on
// AVX-512 and NEON, 16 elsewhere; a group takes two 128-bit vectors per token).
#if HWY_TARGET <= HWY_AVX3 || HWY_ARCH_ARM
constexpr size_t kGroupTokens = 8;
#elif HWY_TARGET == HWY_AVX2
constexpr size_t kGroupTokens = 4;
#else
constexpr size_t kGroupTokens = 2;
#endif

// Token tiles of kGroupTokens (the last one smaller: ForTokenTiles) over groups [g0, g1).
template <class Dec>
void AllTokens(const host::HostWeight& w, int64_t g0, int64_t g1, int64_t r0, int64_t r1, const QuantizedActivations& x,
               float* out, int64_t out_stride) {
  ForTokenTiles<kGroupTokens>(x.rows, [&](auto tokens, int64_t t) {
    GroupRows<Dec, decltype(tokens)::value>(w, g0, g1, r0, r1, x, t, out, out_stride);
  });
}

// Steps of up to kGroupTokens tokens stream the groups once; larger ones take them in
// panels of `panel_rows` (kept in cache while every token tile passes over them).
template <class Dec>
void GroupsWith(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                int64_t out_stride, int64_t panel_rows) {
  const int64_t g0 = r0 / kGroupRows, g1 = (r1 + kGroupRows - 1) / kGroupRows;
  const int64_t panel = std::max<int64_t>(1, panel_rows / kGroupRows);
  if (x.rows <= static_cast<int64_t>(kGroupTokens)) {
    AllTokens<Dec>(w, g0, g1, r0, r1, x, out, out_stride);
    return;
  }
  for (int64_t p = g0; p < g1; p += panel) AllTokens<Dec>(w, p, std::min(g1, p + panel), r0, r1, x, out, out_stride);
}

// Returns false when the format has no groups.
bool Q8MatmulGroupsImpl(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                        int64_t out_stride, int64_t panel_rows) {
  switch (w.type) {
    case TensorType::Q4_0: GroupsWith<Q4_0Group>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::IQ4_NL: GroupsWith<Iq4NlGroup>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::MXFP4: GroupsWith<Mxfp4Group>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::Q8_0: GroupsWith<Q8_0Group>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::Q5_0: GroupsWith<Q5_0Group>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::Q4_K: GroupsWith<Q4KGroup>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::Q5_K: GroupsWith<Q5KGroup>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::Q6_K: GroupsWith<Q6KGroup>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    default: return false;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fafo::cpu {

HWY_EXPORT(Q8MatmulGroupsImpl);

bool multiplies_in_groups(TensorType type) {
  return type == TensorType::Q4_0 || type == TensorType::IQ4_NL || type == TensorType::MXFP4 ||
         type == TensorType::Q8_0 || type == TensorType::Q5_0 || type == TensorType::Q4_K || type == TensorType::Q5_K ||
         type == TensorType::Q6_K;
}

namespace {

// A format's block in the file and in a group: scale, Q5_0's fifth bits and code bytes per row.
struct GroupFormat {
  int64_t scale_bytes, high_bytes, code_bytes;
  int64_t group_block() const { return group_block_bytes(scale_bytes, high_bytes + code_bytes); }
};

GroupFormat group_format(TensorType type) {
  // Each source block: its scale (scale bytes), Q5_0's fifth bits (high bytes), then its
  // codes (code bytes).
  static_assert(sizeof(quant::BlockQ4_0) == 18 && sizeof(quant::BlockIq4Nl) == 18 && sizeof(quant::BlockMxfp4) == 17 &&
                sizeof(quant::BlockQ8_0) == 34 && sizeof(quant::BlockQ5_0) == 22 &&
                offsetof(quant::BlockQ4_0, qs) == 2 && offsetof(quant::BlockIq4Nl, qs) == 2 &&
                offsetof(quant::BlockMxfp4, qs) == 1 && offsetof(quant::BlockQ8_0, qs) == 2 &&
                offsetof(quant::BlockQ5_0, qh) == 2 && offsetof(quant::BlockQ5_0, qs) == 6);
  return {type == TensorType::MXFP4 ? 1 : 2, type == TensorType::Q5_0 ? 4 : 0, type == TensorType::Q8_0 ? 32 : 16};
}

// Each group of [g0, g1) zeroed (rows past the matrix's end stay so), then
// place(r, b, row, group_block) for block b of each of its rows r, `row` the row's bytes
// in the file and `group_block` where the group keeps that block (block_bytes each).
template <class Place>
void place_blocks(const host::HostWeight& w, int64_t g0, int64_t g1, int64_t blocks, int64_t block_bytes, uint8_t* out,
                  Place place) {
  for (int64_t g = g0; g < g1; ++g) {
    std::memset(out + g * blocks * block_bytes, 0, static_cast<size_t>(blocks * block_bytes));
    for (int64_t r = 0; r < kGroupRows && g * kGroupRows + r < w.rows; ++r) {
      const uint8_t* row = w.data + static_cast<size_t>(g * kGroupRows + r) * w.row_bytes;
      for (int64_t b = 0; b < blocks; ++b) place(r, b, row, out + (g * blocks + b) * block_bytes);
    }
  }
}

// Q4_K's and Q5_K's super-blocks in groups (q8_groups.h).
template <class Block>
void group_rows_k4(const host::HostWeight& w, int64_t g0, int64_t g1, uint8_t* out) {
  static_assert(sizeof(quant::BlockQ4_K) == 144 && kK4GroupBlockBytes == 8 * 148);
  static_assert(sizeof(quant::BlockQ5_K) == 176 && kK5GroupBlockBytes == 8 * 180);
  constexpr bool kFifthBits = std::is_same_v<Block, quant::BlockQ5_K>;
  place_blocks(w, g0, g1, w.cols / quant::kSuperBlock, kFifthBits ? kK5GroupBlockBytes : kK4GroupBlockBytes, out,
               [](int64_t r, int64_t b, const uint8_t* row, uint8_t* dst) {
                 const auto* src = reinterpret_cast<const Block*>(row) + b;
                 if constexpr (kFifthBits)
                   for (int64_t k = 0; k < 8; ++k) std::memcpy(dst + kK5GroupHigh + 32 * k + 4 * r, src->qh + 4 * k, 4);
                 std::memcpy(dst + 2 * r, &src->d, 2);
                 std::memcpy(dst + kK4GroupDmin + 2 * r, &src->dmin, 2);
                 uint8_t scales[8], mins[8];
                 quant::unpack_scales_mins_k4(src->scales, scales, mins);
                 for (int64_t j = 0; j < 8; ++j) {
                   dst[kK4GroupScales + 8 * j + r] = scales[j];
                   dst[kK4GroupMins + 16 * (j / 2) + 2 * r + (j & 1)] = mins[j];
                 }
                 for (int64_t i = 0; i < 4; ++i)
                   for (int64_t k = 0; k < 8; ++k)
                     std::memcpy(dst + (kFifthBits ? kK5GroupCodes : kK4GroupCodes) + 256 * i + 32 * k + 4 * r,
                                 src->qs + 32 * i + 4 * k, 4);
               });
}

// Q6_K's super-blocks in groups (q8_groups.h).
void group_rows_k6(const host::HostWeight& w, int64_t g0, int64_t g1, uint8_t* out) {
  static_assert(sizeof(quant::BlockQ6_K) == 210 && kK6GroupBlockBytes == 8 * 210);
  place_blocks(w, g0, g1, w.cols / quant::kSuperBlock, kK6GroupBlockBytes, out,
               [](int64_t r, int64_t b, const uint8_t* row, uint8_t* dst) {
                 const auto* src = reinterpret_cast<const quant::BlockQ6_K*>(row) + b;
                 std::memcpy(dst + 2 * r, &src->d, 2);
                 for (int64_t m = 0; m < 8; ++m)
                   for (int64_t e = 0; e < 2; ++e)
                     dst[kK6GroupScales + 16 * m + 2 * r + e] = static_cast<uint8_t>(src->scales[2 * m + e]);
                 for (int64_t c = 0; c < 32; ++c)  // 4 pairs of low codes, 2 halves of high codes, 8 chunks each
                   std::memcpy(dst + k6_group_low(c) + 4 * r, src->ql + 4 * c, 4);
                 for (int64_t c = 0; c < 16; ++c)
                   std::memcpy(dst + k6_group_high(c) + 4 * r, src->qh + 4 * c, 4);
               });
}

}  // namespace

size_t grouped_bytes(const host::HostWeight& w) {
  if (!multiplies_in_groups(w.type) || w.rows <= 0) return 0;
  const int64_t groups = (w.rows + kGroupRows - 1) / kGroupRows;
  if (w.type == TensorType::Q4_K || w.type == TensorType::Q5_K || w.type == TensorType::Q6_K)
    return w.cols % quant::kSuperBlock != 0
               ? 0
               : static_cast<size_t>(groups * (w.cols / quant::kSuperBlock) *
                                     (w.type == TensorType::Q4_K   ? kK4GroupBlockBytes
                                      : w.type == TensorType::Q5_K ? kK5GroupBlockBytes
                                                                   : kK6GroupBlockBytes));
  if (w.cols % quant::kLegacyBlock != 0) return 0;
  return static_cast<size_t>(groups * (w.cols / quant::kLegacyBlock) * group_format(w.type).group_block());
}

void group_rows(const host::HostWeight& w, int64_t g0, int64_t g1, uint8_t* out) {
  if (w.type == TensorType::Q4_K) {
    group_rows_k4<quant::BlockQ4_K>(w, g0, g1, out);
    return;
  }
  if (w.type == TensorType::Q5_K) {
    group_rows_k4<quant::BlockQ5_K>(w, g0, g1, out);
    return;
  }
  if (w.type == TensorType::Q6_K) {
    group_rows_k6(w, g0, g1, out);
    return;
  }
  const GroupFormat f = group_format(w.type);
  const int64_t block_bytes = f.scale_bytes + f.high_bytes + f.code_bytes;
  const int64_t high = f.scale_bytes * kGroupRows, codes = high + f.high_bytes * kGroupRows;
  place_blocks(w, g0, g1, w.cols / quant::kLegacyBlock, f.group_block(), out,
               [&](int64_t r, int64_t b, const uint8_t* row, uint8_t* dst) {
                 const uint8_t* src = row + b * block_bytes;
                 std::memcpy(dst + f.scale_bytes * r, src, static_cast<size_t>(f.scale_bytes));
                 if (f.high_bytes > 0)
                   std::memcpy(dst + high + f.high_bytes * r, src + f.scale_bytes, static_cast<size_t>(f.high_bytes));
                 for (int64_t k = 0; k < f.code_bytes / 4; ++k)
                   std::memcpy(dst + codes + 32 * k + 4 * r, src + f.scale_bytes + f.high_bytes + 4 * k, 4);
               });
}

std::vector<uint8_t> group_rows(const host::HostWeight& w) {
  std::vector<uint8_t> out(grouped_bytes(w));
  if (!out.empty()) group_rows(w, 0, (w.rows + kGroupRows - 1) / kGroupRows, out.data());
  return out;
}

void q8_matmul_groups(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                      int64_t out_stride, int64_t panel_rows) {
  if (w.groups == nullptr || !HWY_DYNAMIC_DISPATCH(Q8MatmulGroupsImpl)(w, r0, r1, x, out, out_stride, panel_rows))
    throw std::logic_error("q8_matmul_groups: not a weight with rows in groups");
}

}  // namespace fafo::cpu
#endif  // HWY_ONCE
