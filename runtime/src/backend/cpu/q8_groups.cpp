// The integer product over rows in groups of 8 (q8_groups.h), for every instruction
// set (the layout is the same for all of them), and the layout's making.
//
// Built with -ffp-contract=off (runtime/CMakeLists.txt), as q8_matmul-inl.h says.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
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
struct HalfScales {  // fp16 d (Q4_0, IQ4_NL)
  static constexpr int64_t kScaleBytes = 2;
  static float ScaleOf(const uint8_t* p, int64_t r) { return LoadHalf(p + 2 * r); }
#if HWY_TARGET != HWY_SCALAR
  static HWY_INLINE VF Scales(const uint8_t* p, size_t v) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(DF(), hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p) + v * kLanes));
  }
#endif
};
struct E8m0Scales {  // MXFP4's exponent byte e: d = 2^(e - 129), half the block's power of two
  static constexpr int64_t kScaleBytes = 1;
  static float ScaleOf(const uint8_t* p, int64_t r) { return quant::e8m0_half_to_fp32(p[r]); }
#if HWY_TARGET != HWY_SCALAR
  // quant::e8m0_half_to_fp32's bits: (e - 1) << 23, or 0x200000 << e below e = 2.
  static HWY_INLINE VF Scales(const uint8_t* p, size_t v) {
    const hn::RebindToUnsigned<D32> du;
    const auto e = hn::PromoteTo(du, hn::LoadU(hn::Rebind<uint8_t, decltype(du)>(), p + v * kLanes));
    const auto one = hn::Set(du, 1u);
    const auto bits = hn::IfThenElse(hn::Lt(e, hn::Set(du, 2u)), hn::Shl(hn::Set(du, 0x00200000u), e),
                                     hn::ShiftLeft<23>(hn::Sub(e, one)));
    return hn::BitCast(DF(), bits);
  }
#endif
};

// The codes of a group's chunk as weights. Nibble formats (kCodeBytes 16): Lo gives the
// low nibbles' (values 4k..4k+3 of each row), Hi the high ones' (16 + 4k ..); byte
// formats (kCodeBytes 32): Lo gives the bytes' (values 4k..4k+3). Accumulate adds the products of 4
// weights with 4 activation bytes into each row's 32-bit lane; kOffset is what was added
// to every weight so that it is an unsigned byte (subtracted as kOffset times the
// block's activation sum). ValueOf is a code's weight, for the scalar fallback.
struct Q4_0Group : HalfScales {
  static constexpr int64_t kCodeBytes = 16;
  static constexpr int32_t kOffset = 8;  // the codes 0..15 are the values plus 8
  static int32_t ValueOf(uint8_t code) { return static_cast<int32_t>(code) - 8; }
#if HWY_TARGET != HWY_SCALAR
  using Piece = V8;
  static HWY_INLINE Piece Lo(V8 c) { return hn::And(c, hn::Set(D8(), 0x0f)); }
  static HWY_INLINE Piece Hi(V8 c) { return hn::ShiftRight<4>(c); }
  // Codes of at most 15 times |x| <= 127, twice, fit MulPairs' 16 bits.
  static HWY_INLINE VI Accumulate(Piece w, VI8 x, VI acc, VI& acc1) {
#if HWY_TARGET == HWY_AVX3_DL
    (void)acc1;
    return DotQuadsAdd(acc, w, x);
#else
    return MulScaleAdd(MulPairs(w, x), hn::Set(D16(), 1), acc, acc1);
#endif
  }
#endif
};

// IQ4_NL's codes index its table of 16 signed values. With VNNI the table holds the
// values plus 128 (unsigned bytes, 1..241: four products with |x| <= 127 fit 32 bits);
// elsewhere the signed values are multiplied as Q8_0's (magnitudes times the
// activations with their signs), whose pairs fit 16 bits.
struct Iq4NlGroup : HalfScales {
  static constexpr int64_t kCodeBytes = 16;
  static int32_t ValueOf(uint8_t code) { return quant::kIq4nlValues[code]; }
#if HWY_TARGET == HWY_AVX3_DL
  static constexpr int32_t kOffset = 128;
  using Piece = V8;
  static HWY_INLINE V8 Table() {
    alignas(16) static constexpr uint8_t kPlus128[16] = {
        static_cast<uint8_t>(quant::kIq4nlValues[0] + 128),  static_cast<uint8_t>(quant::kIq4nlValues[1] + 128),
        static_cast<uint8_t>(quant::kIq4nlValues[2] + 128),  static_cast<uint8_t>(quant::kIq4nlValues[3] + 128),
        static_cast<uint8_t>(quant::kIq4nlValues[4] + 128),  static_cast<uint8_t>(quant::kIq4nlValues[5] + 128),
        static_cast<uint8_t>(quant::kIq4nlValues[6] + 128),  static_cast<uint8_t>(quant::kIq4nlValues[7] + 128),
        static_cast<uint8_t>(quant::kIq4nlValues[8] + 128),  static_cast<uint8_t>(quant::kIq4nlValues[9] + 128),
        static_cast<uint8_t>(quant::kIq4nlValues[10] + 128), static_cast<uint8_t>(quant::kIq4nlValues[11] + 128),
        static_cast<uint8_t>(quant::kIq4nlValues[12] + 128), static_cast<uint8_t>(quant::kIq4nlValues[13] + 128),
        static_cast<uint8_t>(quant::kIq4nlValues[14] + 128), static_cast<uint8_t>(quant::kIq4nlValues[15] + 128)};
    return hn::LoadDup128(D8(), kPlus128);
  }
  static HWY_INLINE Piece Lo(V8 c) { return hn::TableLookupBytes(Table(), hn::And(c, hn::Set(D8(), 0x0f))); }
  static HWY_INLINE Piece Hi(V8 c) { return hn::TableLookupBytes(Table(), hn::ShiftRight<4>(c)); }
  static HWY_INLINE VI Accumulate(Piece w, VI8 x, VI acc, VI& acc1) {
    (void)acc1;
    return DotQuadsAdd(acc, w, x);
  }
#elif HWY_TARGET != HWY_SCALAR
  static constexpr int32_t kOffset = 0;
  using Piece = Q8_0Int::Piece;
  static HWY_INLINE V8 Table() {
    const hn::Full128<uint8_t> d16;
    const auto t = hn::LoadU(d16, reinterpret_cast<const uint8_t*>(quant::kIq4nlValues));
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
    return hn::Combine(D8(), t, t);
#else
    return t;
#endif
  }
  static HWY_INLINE Piece Lo(V8 c) {
    return SignedPieceOf(hn::BitCast(DI8(), hn::TableLookupBytes(Table(), hn::And(c, hn::Set(D8(), 0x0f)))));
  }
  static HWY_INLINE Piece Hi(V8 c) {
    return SignedPieceOf(hn::BitCast(DI8(), hn::TableLookupBytes(Table(), hn::ShiftRight<4>(c))));
  }
  static HWY_INLINE VI Accumulate(const Piece& w, VI8 x, VI acc, VI& acc1) {
    return AccumulateScaled(w, hn::Set(D16(), 1), x, acc, acc1);
  }
#else
  static constexpr int32_t kOffset = 0;
#endif
};

// MXFP4's codes index its table of doubled fp4 values, -12..12: held plus 12 (unsigned
// bytes of at most 24, whose pairs of products fit 16 bits on every instruction set).
struct Mxfp4Group : E8m0Scales {
  static constexpr int64_t kCodeBytes = 16;
  static constexpr int32_t kOffset = 12;
  static int32_t ValueOf(uint8_t code) { return quant::kMxfp4Values[code]; }
#if HWY_TARGET != HWY_SCALAR
  using Piece = V8;
  static HWY_INLINE V8 Table() {
    alignas(16) static constexpr uint8_t kPlus12[16] = {
        static_cast<uint8_t>(quant::kMxfp4Values[0] + 12),  static_cast<uint8_t>(quant::kMxfp4Values[1] + 12),
        static_cast<uint8_t>(quant::kMxfp4Values[2] + 12),  static_cast<uint8_t>(quant::kMxfp4Values[3] + 12),
        static_cast<uint8_t>(quant::kMxfp4Values[4] + 12),  static_cast<uint8_t>(quant::kMxfp4Values[5] + 12),
        static_cast<uint8_t>(quant::kMxfp4Values[6] + 12),  static_cast<uint8_t>(quant::kMxfp4Values[7] + 12),
        static_cast<uint8_t>(quant::kMxfp4Values[8] + 12),  static_cast<uint8_t>(quant::kMxfp4Values[9] + 12),
        static_cast<uint8_t>(quant::kMxfp4Values[10] + 12), static_cast<uint8_t>(quant::kMxfp4Values[11] + 12),
        static_cast<uint8_t>(quant::kMxfp4Values[12] + 12), static_cast<uint8_t>(quant::kMxfp4Values[13] + 12),
        static_cast<uint8_t>(quant::kMxfp4Values[14] + 12), static_cast<uint8_t>(quant::kMxfp4Values[15] + 12)};
    return hn::LoadDup128(D8(), kPlus12);
  }
  static HWY_INLINE Piece Lo(V8 c) { return hn::TableLookupBytes(Table(), hn::And(c, hn::Set(D8(), 0x0f))); }
  static HWY_INLINE Piece Hi(V8 c) { return hn::TableLookupBytes(Table(), hn::ShiftRight<4>(c)); }
  static HWY_INLINE VI Accumulate(Piece w, VI8 x, VI acc, VI& acc1) { return Q4_0Group::Accumulate(w, x, acc, acc1); }
#endif
};

// Q8_0's signed bytes: with VNNI, plus 128 (the sign bit flipped) as unsigned bytes;
// elsewhere multiplied as the file-row product multiplies them (magnitudes times the
// activations with their signs), whose pairs fit 16 bits.
struct Q8_0Group : HalfScales {
  static constexpr int64_t kCodeBytes = 32;
  static int32_t ValueOf(uint8_t code) { return static_cast<int8_t>(code); }
#if HWY_TARGET == HWY_AVX3_DL
  static constexpr int32_t kOffset = 128;
  using Piece = V8;
  static HWY_INLINE Piece Lo(V8 c) { return hn::Xor(c, hn::Set(D8(), 0x80)); }
  static HWY_INLINE VI Accumulate(Piece w, VI8 x, VI acc, VI& acc1) {
    (void)acc1;
    return DotQuadsAdd(acc, w, x);
  }
#elif HWY_TARGET != HWY_SCALAR
  static constexpr int32_t kOffset = 0;
  using Piece = Q8_0Int::Piece;
  static HWY_INLINE Piece Lo(V8 c) { return SignedPieceOf(hn::BitCast(DI8(), c)); }
  static HWY_INLINE VI Accumulate(const Piece& w, VI8 x, VI acc, VI& acc1) {
    return AccumulateScaled(w, hn::Set(D16(), 1), x, acc, acc1);
  }
#else
  static constexpr int32_t kOffset = 0;
#endif
};

template <class Dec>
constexpr int64_t GroupBlockBytes() {
  return group_block_bytes(Dec::kScaleBytes, Dec::kCodeBytes);
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
  constexpr int64_t kCodes = Dec::kScaleBytes * kGroupRows;  // where the chunks start
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
          const typename Dec::Piece lo = Dec::Lo(c), hi = Dec::Hi(c);
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
#else
// The same arithmetic one value at a time: the weights as signed integers (no offset).
template <class Dec, size_t NT>
HWY_INLINE void GroupTile(const uint8_t* group, const ActTile<NT>& x, int64_t blocks, int64_t per_act, float* sums) {
  float acc[NT][kGroupRows] = {};
  constexpr int64_t kCodes = Dec::kScaleBytes * kGroupRows;
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
            if constexpr (Dec::kCodeBytes == 16)
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
#endif

// Groups [g0, g1) against tokens [t0, t0 + NT); rows outside [r0, r1) are not written.
template <class Dec, size_t NT>
void GroupRows(const host::HostWeight& w, int64_t g0, int64_t g1, int64_t r0, int64_t r1, const QuantizedActivations& x,
               int64_t t0, float* out, int64_t out_stride) {
  const ActTile<NT> xt = MakeActTile<NT>(x, t0);
  const int64_t blocks = w.cols / quant::kLegacyBlock, per_act = x.block / quant::kLegacyBlock;
  for (int64_t g = g0; g < g1; ++g) {
    float sums[NT * kGroupRows];
    GroupTile<Dec, NT>(w.groups + g * blocks * GroupBlockBytes<Dec>(), xt, blocks, per_act, sums);
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

// Tokens [t, t + n) (n < NT) in one tile of n tokens.
template <class Dec, size_t NT>
void FewTokens(const host::HostWeight& w, int64_t g0, int64_t g1, int64_t r0, int64_t r1, const QuantizedActivations& x,
               int64_t t, int64_t n, float* out, int64_t out_stride) {
  if constexpr (NT > 1) {
    if (n == static_cast<int64_t>(NT) - 1) GroupRows<Dec, NT - 1>(w, g0, g1, r0, r1, x, t, out, out_stride);
    else FewTokens<Dec, NT - 1>(w, g0, g1, r0, r1, x, t, n, out, out_stride);
  }
}

// Token tiles of kGroupTokens (the last one smaller) over groups [g0, g1).
template <class Dec>
void AllTokens(const host::HostWeight& w, int64_t g0, int64_t g1, int64_t r0, int64_t r1, const QuantizedActivations& x,
               float* out, int64_t out_stride) {
  int64_t t = 0;
  for (; t + static_cast<int64_t>(kGroupTokens) <= x.rows; t += kGroupTokens)
    GroupRows<Dec, kGroupTokens>(w, g0, g1, r0, r1, x, t, out, out_stride);
  if (t < x.rows) FewTokens<Dec, kGroupTokens>(w, g0, g1, r0, r1, x, t, x.rows - t, out, out_stride);
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
  return type == TensorType::Q4_0 || type == TensorType::IQ4_NL || type == TensorType::MXFP4 || type == TensorType::Q8_0;
}

std::vector<uint8_t> group_rows(const host::HostWeight& w) {
  if (!multiplies_in_groups(w.type) || w.rows <= 0 || w.cols % quant::kLegacyBlock != 0) return {};
  // Each source block: its scale (scale bytes), then its codes (code bytes).
  static_assert(sizeof(quant::BlockQ4_0) == 18 && sizeof(quant::BlockIq4Nl) == 18 && sizeof(quant::BlockMxfp4) == 17 &&
                sizeof(quant::BlockQ8_0) == 34 && offsetof(quant::BlockQ4_0, qs) == 2 &&
                offsetof(quant::BlockIq4Nl, qs) == 2 && offsetof(quant::BlockMxfp4, qs) == 1 &&
                offsetof(quant::BlockQ8_0, qs) == 2);
  const int64_t scale_bytes = w.type == TensorType::MXFP4 ? 1 : 2, code_bytes = w.type == TensorType::Q8_0 ? 32 : 16;
  const int64_t block_bytes = scale_bytes + code_bytes, group_block = group_block_bytes(scale_bytes, code_bytes);
  const int64_t codes = scale_bytes * kGroupRows;
  const int64_t blocks = w.cols / quant::kLegacyBlock, groups = (w.rows + kGroupRows - 1) / kGroupRows;
  std::vector<uint8_t> out(static_cast<size_t>(groups * blocks * group_block), 0);
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t r = 0; r < kGroupRows && g * kGroupRows + r < w.rows; ++r) {
      const uint8_t* row = w.data + static_cast<size_t>(g * kGroupRows + r) * w.row_bytes;
      for (int64_t b = 0; b < blocks; ++b) {
        const uint8_t* src = row + b * block_bytes;
        uint8_t* dst = out.data() + (g * blocks + b) * group_block;
        std::memcpy(dst + scale_bytes * r, src, static_cast<size_t>(scale_bytes));
        for (int64_t k = 0; k < code_bytes / 4; ++k)
          std::memcpy(dst + codes + 32 * k + 4 * r, src + scale_bytes + 4 * k, 4);
      }
    }
  return out;
}

void q8_matmul_groups(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                      int64_t out_stride, int64_t panel_rows) {
  if (w.groups == nullptr || !HWY_DYNAMIC_DISPATCH(Q8MatmulGroupsImpl)(w, r0, r1, x, out, out_stride, panel_rows))
    throw std::logic_error("q8_matmul_groups: not a weight with rows in groups");
}

}  // namespace fafo::cpu
#endif  // HWY_ONCE
