// The integer matrix product of the `cpu` backend (see q8_matmul.h). Highway compiles
// this file once per instruction set (foreach_target.h re-includes it) and
// HWY_DYNAMIC_DISPATCH picks the best the CPU has at run time.
//
// Built with -ffp-contract=off (runtime/CMakeLists.txt): the only fused multiply-adds
// are the explicit MulAdd of the per-block scaling, so every path does the same float
// arithmetic.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "backend/cpu/q8_matmul.h"
#include "backend/cpu/simd_matmul.h"
#include "fafo/tensor_type.h"
#include "quant/blocks.h"

// Arrays of vectors (the tiles' accumulators) need vectors of a size known when compiling.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/q8_matmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace fafo::cpu {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;
using DI = hn::RebindToSigned<DF>;
#if HWY_TARGET == HWY_SCALAR
using D16 = hn::Rebind<int16_t, DI>;  // one lane: the multiply-add widens it in place
#else
using D16 = hn::Repartition<int16_t, DI>;  // twice DI's lanes: one multiply-add fills DI
#endif
using DU8W = hn::Rebind<uint8_t, D16>;
using DI8W = hn::Rebind<int8_t, D16>;
using D16Narrow = hn::Rebind<int16_t, DF>;  // DF's lanes, for rounding floats
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;
using V16 = hn::Vec<D16>;

// Values per group: one 16-bit vector (1 on the scalar fallback, 8 on SSE4/NEON, 16 on
// AVX2, 32 on AVX-512).
// Every sub-block (16 or 32 values) is then a whole number of groups, or a group holds
// two 16-value sub-blocks.
constexpr size_t kG = hn::MaxLanes(D16());
static_assert(32 % kG == 0);

// ---- rounding activations ----

void QuantizeImpl(const float* x, int64_t x_stride, int64_t t0, int64_t t1, int64_t cols, int64_t block, int16_t* q,
                  float* d, int16_t* sums32) {
  const DF df;
  const D16Narrow d16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t nb = cols / block;
  for (int64_t t = t0; t < t1; ++t) {
    const float* xr = x + t * x_stride;
    int16_t* qr = q + t * cols;
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = xr + b * block;
      VF amax = hn::Zero(df), poison = hn::Zero(df);  // poison: NaN where a value is NaN or infinite
      for (int64_t i = 0; i < block; i += N) {
        const VF v = hn::LoadU(df, xb + i);
        amax = hn::Max(amax, hn::Abs(v));
        poison = hn::Add(poison, hn::Mul(v, hn::Zero(df)));
      }
      const float m = hn::GetLane(hn::MaxOfLanes(df, amax));
      float scale = m / 127.0f, inv = m > 0.0f ? 127.0f / m : 0.0f;
      if (!(inv <= std::numeric_limits<float>::max())) scale = inv = 0.0f;  // subnormal: rounds to zeros
      if (hn::GetLane(hn::SumOfLanes(df, poison)) != 0.0f) {                 // the product's results are NaN
        scale = std::numeric_limits<float>::quiet_NaN();
        inv = 0.0f;
      }
      d[t * nb + b] = scale;
      const VF vinv = hn::Set(df, inv);
      for (int64_t i = 0; i < block; i += N)
        hn::StoreU(hn::DemoteTo(d16, hn::NearestInt(hn::Mul(hn::LoadU(df, xb + i), vinv))), d16, qr + b * block + i);
    }
    int16_t* sr = sums32 + t * (cols / 32);
    for (int64_t i = 0; i < cols / 32; ++i) {
      int32_t s = 0;
      for (int64_t j = 0; j < 32; ++j) s += qr[32 * i + j];
      sr[i] = static_cast<int16_t>(s);
    }
  }
}

// ---- weight decoders ----
// Each gives a weight block as groups of kG 16-bit values already multiplied by their
// sub-block's integer scale (Group<g>() = values g*kG .. g*kG + kG - 1), its float
// factor d (and, for Q4_K/Q5_K, dmin and the mins that multiply the activation sums).

HWY_INLINE V16 Bytes(const uint8_t* p) { return hn::PromoteTo(D16(), hn::LoadU(DU8W(), p)); }
HWY_INLINE float LoadHalf(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

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
  HWY_ALIGN int16_t v[8];
#if HWY_TARGET != HWY_SCALAR
  V16 dup;
#endif
  HWY_INLINE void Spread() {
#if HWY_TARGET != HWY_SCALAR
    dup = hn::LoadDup128(D16(), v);
#endif
  }
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

// What Q4_K and Q5_K share: d, dmin, 8 scales and 8 mins of 6 bits.
struct K4Int {
  static constexpr bool kDecoded = false;
  static constexpr int64_t kValues = quant::kSuperBlock;
  static constexpr bool kMins = true;
  float d, dmin;
  Scales8 sc;
  HWY_ALIGN int16_t mn[8];
  HWY_INLINE void LoadFactors(const uint8_t* b) {
    LoadHalves(b + offsetof(quant::BlockQ4_K, d), d, dmin);
    uint8_t s8[8], m8[8];
    quant::unpack_scales_mins_k4(b + offsetof(quant::BlockQ4_K, scales), s8, m8);
    for (size_t j = 0; j < 8; ++j) {
      sc.v[j] = s8[j];
      mn[j] = m8[j];
    }
    sc.Spread();
  }
  // The 4 low bits of the kG values of sub-block `sub` from offset l: the low nibbles
  // of 32 bytes for even sub-blocks, their high nibbles for odd ones.
  template <size_t sub, size_t l>
  static HWY_INLINE V16 Nibbles(const uint8_t* qs) {
    const V16 raw = Bytes(qs + 32 * (sub / 2) + l);
    if constexpr (sub & 1) return hn::ShiftRight<4>(raw);
    else return hn::And(raw, hn::Set(D16(), 0x0f));
  }
};

struct Q4KInt : K4Int {
  static constexpr int64_t kBytes = sizeof(quant::BlockQ4_K);
  const uint8_t* qs;
  HWY_INLINE void Prepare(const uint8_t* b) {
    LoadFactors(b);
    qs = b + offsetof(quant::BlockQ4_K, qs);
  }
  template <size_t g>
  HWY_INLINE V16 Group() const {
    constexpr size_t v = g * kG, sub = v / 32, l = v % 32;
    return hn::Mul(Nibbles<sub, l>(qs), sc.Get<sub>());
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
  template <size_t g>
  HWY_INLINE V16 Group() const {
    constexpr size_t v = g * kG, sub = v / 32, l = v % 32;
    const V16 low = Nibbles<sub, l>(qs);
    // Bit 4 of sub-block `sub` is bit `sub` of qh[l].
    const V16 high = hn::And(hn::ShiftRight<sub>(Bytes(qh + l)), hn::Set(D16(), 1));
    return hn::Mul(hn::Or(low, hn::ShiftLeft<4>(high)), sc.Get<sub>());
  }
};

struct Q6KInt {
  static constexpr bool kDecoded = false;
  static constexpr int64_t kValues = quant::kSuperBlock, kBytes = sizeof(quant::BlockQ6_K);
  static constexpr bool kMins = false;
  float d, dmin = 0.0f;
  const uint8_t* ql;
  const uint8_t* qh;
  Scales8 sc[2];  // scales of values 0..127 and 128..255
  HWY_INLINE void Prepare(const uint8_t* b) {
    d = LoadHalf(b + offsetof(quant::BlockQ6_K, d));
    ql = b + offsetof(quant::BlockQ6_K, ql);
    qh = b + offsetof(quant::BlockQ6_K, qh);
    const auto* scales = reinterpret_cast<const int8_t*>(b + offsetof(quant::BlockQ6_K, scales));
    for (size_t j = 0; j < 8; ++j) {
      sc[0].v[j] = scales[j];
      sc[1].v[j] = scales[8 + j];
    }
    sc[0].Spread();
    sc[1].Spread();
  }
  template <size_t g>
  HWY_INLINE V16 Group() const {
    // Value v = 128 * half + 32 * k + m; its scale is scales[v / 16].
    constexpr size_t v = g * kG, half = v / 128, k = (v % 128) / 32, m = v % 32;
    const V16 lo = hn::And(hn::ShiftRight<k < 2 ? 0 : 4>(Bytes(ql + 64 * half + 32 * (k % 2) + m)), hn::Set(D16(), 0x0f));
    const V16 hi = hn::And(hn::ShiftRight<2 * k>(Bytes(qh + 32 * half + m)), hn::Set(D16(), 3));
    const V16 q = hn::Sub(hn::Or(lo, hn::ShiftLeft<4>(hi)), hn::Set(D16(), 32));
    constexpr size_t j = (v % 128) / 16;  // a group of 32 spans scales j and j + 1
    if constexpr (kG > 16) return hn::Mul(q, sc[half].Get<j, j + 1>());
    else return hn::Mul(q, sc[half].Get<j>());
  }
};

struct Q8_0Int {
  static constexpr bool kDecoded = false;
  static constexpr int64_t kValues = quant::kLegacyBlock, kBytes = sizeof(quant::BlockQ8_0);
  static constexpr bool kMins = false;
  float d, dmin = 0.0f;
  const int8_t* qs;
  HWY_INLINE void Prepare(const uint8_t* b) {
    d = LoadHalf(b);
    qs = reinterpret_cast<const int8_t*>(b + offsetof(quant::BlockQ8_0, qs));
  }
  template <size_t g>
  HWY_INLINE V16 Group() const {
    return hn::PromoteTo(D16(), hn::LoadU(DI8W(), qs + g * kG));
  }
};

// A decoded copy of Dec's blocks (for products over many tokens): per block the kValues
// groups as Dec gives them, then d, dmin and the 8 mins (16 bits each). Same Group(), d,
// dmin and mins as Dec, so a product from the copy gives the same bits as one from the file.
template <class Dec>
struct Decoded {
  static constexpr bool kDecoded = true;
  static constexpr int64_t kValues = Dec::kValues;
  static constexpr int64_t kBytes = 2 * kValues + 24;
  static constexpr bool kMins = Dec::kMins;
  float d, dmin;
  const int16_t* vals;
  const int16_t* mn;
  HWY_INLINE void Prepare(const uint8_t* b) {
    vals = reinterpret_cast<const int16_t*>(b);
    std::memcpy(&d, b + 2 * kValues, 4);
    std::memcpy(&dmin, b + 2 * kValues + 4, 4);
    mn = reinterpret_cast<const int16_t*>(b + 2 * kValues + 8);
  }
  HWY_INLINE V16 GroupAt(size_t g) const { return hn::LoadU(D16(), vals + g * kG); }
  static void Write(const Dec& dec, uint8_t* dst);
};

template <class Dec, class F, size_t... kGroups>
HWY_INLINE void ForEachGroupImpl(F&& f, std::index_sequence<kGroups...>) {
  (f(std::integral_constant<size_t, kGroups>{}), ...);
}
// f(std::integral_constant<size_t, g>) for every group of Dec's block.
template <class Dec, class F>
HWY_INLINE void ForEachGroup(F&& f) {
  ForEachGroupImpl<Dec>(f, std::make_index_sequence<static_cast<size_t>(Dec::kValues) / kG>{});
}

template <class Dec>
void Decoded<Dec>::Write(const Dec& dec, uint8_t* dst) {
  auto* vals = reinterpret_cast<int16_t*>(dst);
  ForEachGroup<Dec>([&](auto g) { hn::StoreU(dec.template Group<decltype(g)::value>(), D16(), vals + decltype(g)::value * kG); });
  std::memcpy(dst + 2 * kValues, &dec.d, 4);
  std::memcpy(dst + 2 * kValues + 4, &dec.dmin, 4);
  int16_t mn[8] = {};
  if constexpr (Dec::kMins) std::memcpy(mn, dec.mn, sizeof mn);
  std::memcpy(dst + 2 * kValues + 8, mn, sizeof mn);
}

// sum over the block's 8 sub-blocks of 32 values of min * (sum of the activations' q there).
HWY_INLINE int32_t MinDot(const int16_t* mins, const int16_t* sums32) {
#if HWY_TARGET == HWY_SCALAR
  int32_t s = 0;
  for (size_t j = 0; j < 8; ++j) s += static_cast<int32_t>(mins[j]) * sums32[j];
  return s;
#else
  const hn::Full128<int16_t> d8;
  const hn::Full128<int32_t> d4;
  auto odd = hn::Zero(d4);
  const auto even = hn::ReorderWidenMulAccumulate(d4, hn::LoadU(d8, mins), hn::LoadU(d8, sums32), hn::Zero(d4), odd);
  return hn::GetLane(hn::SumOfLanes(d4, hn::RearrangeToOddPlusEven(even, odd)));
#endif
}

// ---- the product ----

// The activation rows of a tile.
template <size_t NT>
struct ActTile {
  const int16_t* q[NT];
  const float* d[NT];
  const int16_t* s[NT];
};

template <size_t NT>
ActTile<NT> MakeActTile(const QuantizedActivations& x, int64_t t0) {
  ActTile<NT> a;
  const int64_t nb = x.cols / x.block;
  for (size_t t = 0; t < NT; ++t) {
    const int64_t row = t0 + static_cast<int64_t>(t);
    a.q[t] = x.q.data() + row * x.cols;
    a.d[t] = x.d.data() + row * nb;
    a.s[t] = x.sums32.data() + row * (x.cols / 32);
  }
  return a;
}

// R weight rows x NT tokens: sums[r * NT + t] = dot(w[r], x[t]). Per output: exact
// integer sums per block (in DI's lanes), one multiply-add per block by d * dx in float
// lanes, blocks in order; then the lane sum, minus the mins' float sum (blocks in order).
// The same for every R and NT, and for Dec and Decoded<Dec>. While reading a block of
// each row, the tile asks for the same block `ahead` bytes on (the next tile's rows).
template <class Dec, size_t R, size_t NT>
HWY_INLINE void IntTile(const uint8_t* const* rows, const ActTile<NT>& x, int64_t blocks, int64_t per_act, float* sums,
                        size_t ahead) {
  const DF df;
  const DI di;
  VF facc[R][NT], part[R][NT];
  float fmin[R][NT];
  for (size_t r = 0; r < R; ++r)
    for (size_t t = 0; t < NT; ++t) {
      facc[r][t] = part[r][t] = hn::Zero(df);
      fmin[r][t] = 0.0f;
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
    if constexpr (Dec::kDecoded) {
      // Plain 16-bit rows: a loop kept rolled, so the accumulators stay in registers
      // (unrolled, GCC reorders the integer sums into a tree that spills).
#pragma GCC unroll 1
      for (size_t g = 0; g < static_cast<size_t>(Dec::kValues) / kG; ++g) {
        V16 xv[NT];
        for (size_t t = 0; t < NT; ++t) xv[t] = hn::LoadU(D16(), x.q[t] + c0 + static_cast<int64_t>(g * kG));
        for (size_t r = 0; r < R; ++r) {
          const V16 w = dec[r].GroupAt(g);
          for (size_t t = 0; t < NT; ++t) s0[r][t] = hn::ReorderWidenMulAccumulate(di, w, xv[t], s0[r][t], s1[r][t]);
        }
      }
    } else {
      ForEachGroup<Dec>([&](auto g) {
        constexpr size_t G = decltype(g)::value;
        V16 xv[NT];
        for (size_t t = 0; t < NT; ++t) xv[t] = hn::LoadU(D16(), x.q[t] + c0 + static_cast<int64_t>(G * kG));
        for (size_t r = 0; r < R; ++r) {
          const V16 w = dec[r].template Group<G>();
          for (size_t t = 0; t < NT; ++t) s0[r][t] = hn::ReorderWidenMulAccumulate(di, w, xv[t], s0[r][t], s1[r][t]);
        }
      });
    }
    if (per_act == 1) {  // one activation scale per weight block: scale by d * dx
      for (size_t r = 0; r < R; ++r) {
        const VF dw = hn::Set(df, dec[r].d);
        for (size_t t = 0; t < NT; ++t) {
          const float dx = x.d[t][b];
          const VF s = hn::ConvertTo(df, hn::RearrangeToOddPlusEven(s0[r][t], s1[r][t]));
          facc[r][t] = hn::MulAdd(s, hn::Mul(dw, hn::Set(df, dx)), facc[r][t]);  // d * dx, in every lane
          if constexpr (Dec::kMins)
            fmin[r][t] += (dec[r].dmin * dx) * static_cast<float>(MinDot(dec[r].mn, x.s[t] + b * (Dec::kValues / 32)));
        }
      }
    } else {  // per_act weight blocks share an activation scale: sum them scaled by d, then scale by dx
      for (size_t r = 0; r < R; ++r) {
        const VF dw = hn::Set(df, dec[r].d);
        for (size_t t = 0; t < NT; ++t)
          part[r][t] = hn::MulAdd(hn::ConvertTo(df, hn::RearrangeToOddPlusEven(s0[r][t], s1[r][t])), dw, part[r][t]);
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
  }
  for (size_t r = 0; r < R; ++r)
    for (size_t t = 0; t < NT; ++t) sums[r * NT + t] = hn::GetLane(hn::SumOfLanes(df, facc[r][t])) - fmin[r][t];
}

// Rows [r0, r1) of a matrix whose row r starts at base + r * row_bytes, by tiles of R
// rows (missing rows repeat the first and are not written), against tokens [t0, t0 + NT).
template <class Dec, size_t R, size_t NT>
void IntRows(const uint8_t* base, size_t row_bytes, int64_t r0, int64_t r1, int64_t out_r0, const QuantizedActivations& x,
             int64_t t0, int64_t blocks, float* out, int64_t out_stride, bool prefetch) {
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
        out[(t0 + static_cast<int64_t>(t)) * out_stride + out_r0 + (b0 - r0) + r] = sums[static_cast<size_t>(r) * NT + t];
  }
}

// Rows x tokens per tile of decoded panels; steps of up to kFusedMaxT tokens read one
// row at a time (a single sequential stream). The tiles fit the register budget: 32
// vector registers on AVX-512 and NEON (4 x 2 measured best on AVX-512: 39.7 prompt
// tokens/s at TinyLlama Q4_K_M, one thread, against 37.6 for 2 x 4, 36.4 for 4 x 4 and
// 33.6 for 3 x 4), 16 elsewhere.
#if HWY_TARGET <= HWY_AVX3 || HWY_ARCH_ARM
constexpr size_t kRows = 4, kTokens = 2;
#else
constexpr size_t kRows = 2, kTokens = 2;
#endif

// Steps of at most this many tokens read the weights straight from the file; larger
// ones decode panels of rows first, each multiplied with every token tile.
constexpr int64_t kFusedMaxT = 4;

template <class Dec, size_t R>
void AllTokens(const uint8_t* base, size_t row_bytes, int64_t r0, int64_t r1, int64_t out_r0,
               const QuantizedActivations& x, int64_t blocks, float* out, int64_t out_stride, bool prefetch) {
  int64_t t = 0;
  for (; t + static_cast<int64_t>(kTokens) <= x.rows; t += kTokens)
    IntRows<Dec, R, kTokens>(base, row_bytes, r0, r1, out_r0, x, t, blocks, out, out_stride, prefetch);
  switch (x.rows - t) {
    case 3: IntRows<Dec, R, 3>(base, row_bytes, r0, r1, out_r0, x, t, blocks, out, out_stride, prefetch); break;
    case 2: IntRows<Dec, R, 2>(base, row_bytes, r0, r1, out_r0, x, t, blocks, out, out_stride, prefetch); break;
    case 1: IntRows<Dec, R, 1>(base, row_bytes, r0, r1, out_r0, x, t, blocks, out, out_stride, prefetch); break;
    default: break;
  }
}

template <class Dec>
void ProductWith(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                 int64_t out_stride, uint8_t* scratch, int64_t panel_rows) {
  const int64_t blocks = w.cols / Dec::kValues;
  if (x.rows == 1) {
    IntRows<Dec, 1, 1>(w.data, w.row_bytes, r0, r1, r0, x, 0, blocks, out, out_stride, true);
    return;
  }
  if (x.rows <= kFusedMaxT) {
    AllTokens<Dec, 1>(w.data, w.row_bytes, r0, r1, r0, x, blocks, out, out_stride, true);
    return;
  }
  using Copy = Decoded<Dec>;
  const size_t copy_row_bytes = static_cast<size_t>(blocks * Copy::kBytes);
  for (int64_t p0 = r0; p0 < r1; p0 += panel_rows) {
    const int64_t p1 = std::min(r1, p0 + panel_rows);
    for (int64_t r = p0; r < p1; ++r) {
      const uint8_t* src = w.data + static_cast<size_t>(r) * w.row_bytes;
      uint8_t* dst = scratch + static_cast<size_t>(r - p0) * copy_row_bytes;
      Dec dec;
      for (int64_t b = 0; b < blocks; ++b) {
        dec.Prepare(src + b * Dec::kBytes);
        Copy::Write(dec, dst + b * Copy::kBytes);
      }
    }
    AllTokens<Copy, kRows>(scratch, copy_row_bytes, 0, p1 - p0, p0, x, blocks, out, out_stride, false);
  }
}

// Returns false when the format has no integer product.
bool Q8MatmulRowsImpl(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                      int64_t out_stride, uint8_t* scratch, int64_t panel_rows) {
  switch (w.type) {
    case TensorType::Q4_K: ProductWith<Q4KInt>(w, r0, r1, x, out, out_stride, scratch, panel_rows); return true;
    case TensorType::Q5_K: ProductWith<Q5KInt>(w, r0, r1, x, out, out_stride, scratch, panel_rows); return true;
    case TensorType::Q6_K: ProductWith<Q6KInt>(w, r0, r1, x, out, out_stride, scratch, panel_rows); return true;
    case TensorType::Q8_0: ProductWith<Q8_0Int>(w, r0, r1, x, out, out_stride, scratch, panel_rows); return true;
    default: return false;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <stdexcept>
#include <string>

namespace fafo::cpu {

HWY_EXPORT(QuantizeImpl);
HWY_EXPORT(Q8MatmulRowsImpl);

void QuantizedActivations::resize(int64_t n_rows, int64_t n_cols, int64_t n_block) {
  rows = n_rows;
  cols = n_cols;
  block = n_block;
  q.resize(static_cast<size_t>(rows * cols));
  d.resize(static_cast<size_t>(rows * (cols / block)));
  sums32.resize(static_cast<size_t>(rows * (cols / 32)));
}

int64_t q8_activation_block(TensorType type, int64_t cols) {
  switch (type) {
    case TensorType::Q4_K: case TensorType::Q5_K: case TensorType::Q6_K: return quant::kSuperBlock;
    case TensorType::Q8_0: return cols % quant::kSuperBlock == 0 ? quant::kSuperBlock : quant::kLegacyBlock;
    default: return 0;
  }
}

void quantize_activations(const float* x, int64_t x_stride, int64_t t0, int64_t t1, QuantizedActivations& out) {
  HWY_DYNAMIC_DISPATCH(QuantizeImpl)(x, x_stride, t0, t1, out.cols, out.block, out.q.data(), out.d.data(),
                                     out.sums32.data());
}

size_t q8_matmul_scratch_bytes(int64_t cols) {
  // A decoded block takes 2 bytes per value and 24 more: at most 2.75 bytes per value (Q8_0).
  return static_cast<size_t>(matmul_panel_rows(cols)) * static_cast<size_t>(cols / 32) * 88;
}

void q8_matmul_rows(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                    int64_t out_stride, void* scratch) {
  if (q8_activation_block(w.type, w.cols) != x.block || w.cols != x.cols || x.cols % x.block != 0)
    throw std::logic_error("q8_matmul_rows: activations rounded for another format or width");
  HWY_DYNAMIC_DISPATCH(Q8MatmulRowsImpl)(w, r0, r1, x, out, out_stride, static_cast<uint8_t*>(scratch),
                                         matmul_panel_rows(w.cols));
}

}  // namespace fafo::cpu
#endif  // HWY_ONCE
