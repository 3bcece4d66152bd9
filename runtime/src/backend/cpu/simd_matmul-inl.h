// The cpu backend's SIMD per-target code of simd_matmul.cpp (see simd_matmul.h): the
// decoders (whole rows: embeddings, and the panels of the float product) and the
// token-tiled float product. Included after hwy/highway.h by a file that
// foreach_target.h re-includes, once per target, as Highway's "-inl.h" headers are.
//
// Built with -ffp-contract=off (runtime/CMakeLists.txt): the decoders evaluate the
// reference dequantizer's expressions with a rounding after every product, so they give
// its floats bit for bit; the only fused multiply-adds are the explicit MulAdd of the
// dot products.
#if defined(FAFO_BACKEND_CPU_SIMD_MATMUL_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FAFO_BACKEND_CPU_SIMD_MATMUL_INL_H_
#undef FAFO_BACKEND_CPU_SIMD_MATMUL_INL_H_
#else
#define FAFO_BACKEND_CPU_SIMD_MATMUL_INL_H_
#endif

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "backend/cpu/simd_matmul.h"
#include "fafo/tensor_type.h"
#include "quant/blocks.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
// Per-target helpers, after highway.h:
#include "backend/cpu/half-inl.h"


HWY_BEFORE_NAMESPACE();
namespace fafo::cpu {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// At most 16 lanes: every block size (16, 32, 256) is then a multiple of the lane count.
using DF = hn::CappedTag<float, 16>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using DU8 = hn::Rebind<uint8_t, DF>;
using DI8 = hn::Rebind<int8_t, DF>;
using DU16 = hn::Rebind<uint16_t, DF>;
using DF16 = hn::Rebind<hwy::float16_t, DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;

// N bytes at p as int32 lanes.
HWY_INLINE VI LoadBytes(const uint8_t* p) { return hn::PromoteTo(DI(), hn::LoadU(DU8(), p)); }

// ---- decoders ----
// One per format with a SIMD path. Prepare() reads a block's scales; Group(sub, l) gives
// the N values at offset sub * kSubValues + l of the block as floats, evaluating the
// reference dequantizer's expressions (so the floats are the reference's bit for bit).
// Both the fused product (small steps) and the panel product (large steps) take their
// weights from Group(), in column order, so the two give every result identically.

// out[j] = d * float(in[j]) for j < n (n a multiple of 8), as the reference rounds it.
template <typename T>
HWY_INLINE void ScaleBytes(float d, const T* in, float* out, size_t n) {
  const hn::CappedTag<float, 8> d8;
  const hn::Rebind<int32_t, decltype(d8)> di8;
  const hn::Rebind<T, decltype(d8)> dt8;
  const size_t N8 = hn::Lanes(d8);
  for (size_t j = 0; j < n; j += N8)
    hn::StoreU(hn::Mul(hn::Set(d8, d), hn::ConvertTo(d8, hn::PromoteTo(di8, hn::LoadU(dt8, in + j)))), d8, out + j);
}

// Q4_K and Q5_K start alike: d, dmin, then the 12 bytes of packed scales and mins.
static_assert(offsetof(quant::BlockQ4_K, dmin) == offsetof(quant::BlockQ5_K, dmin) &&
              offsetof(quant::BlockQ4_K, scales) == offsetof(quant::BlockQ5_K, scales));

// The 8 sub-block factors d * scale and dmin * min of a Q4_K/Q5_K super-block.
struct K4Factors {
  static constexpr size_t kSubs = 8;
  HWY_ALIGN float dl[kSubs], ml[kSubs];
  HWY_INLINE void Load(const uint8_t* b) {
    uint8_t sc[kSubs], mn[kSubs];
    quant::unpack_scales_mins_k4(b + offsetof(quant::BlockQ4_K, scales), sc, mn);
    ScaleBytes(LoadHalf(b + offsetof(quant::BlockQ4_K, d)), sc, dl, kSubs);
    ScaleBytes(LoadHalf(b + offsetof(quant::BlockQ4_K, dmin)), mn, ml, kSubs);
  }
};

struct Q4KDecoder : K4Factors {
  static constexpr int64_t kValues = quant::kSuperBlock, kBytes = sizeof(quant::BlockQ4_K);
  static constexpr size_t kSubValues = 32;
  const uint8_t* qs;
  HWY_INLINE void Prepare(const uint8_t* b) {
    Load(b);
    qs = b + offsetof(quant::BlockQ4_K, qs);
  }
  template <size_t kSub>
  HWY_INLINE VF Group(size_t l) const {
    const VI v = LoadBytes(qs + 32 * (kSub / 2) + l);
    VI q;
    if constexpr (kSub & 1) q = hn::ShiftRight<4>(v);
    else q = hn::And(v, hn::Set(DI(), 0x0f));
    return hn::Sub(hn::Mul(hn::Set(DF(), dl[kSub]), hn::ConvertTo(DF(), q)), hn::Set(DF(), ml[kSub]));
  }
};

struct Q5KDecoder : K4Factors {
  static constexpr int64_t kValues = quant::kSuperBlock, kBytes = sizeof(quant::BlockQ5_K);
  static constexpr size_t kSubValues = 32;
  const uint8_t* qs;
  const uint8_t* qh;
  HWY_INLINE void Prepare(const uint8_t* b) {
    Load(b);
    qs = b + offsetof(quant::BlockQ5_K, qs);
    qh = b + offsetof(quant::BlockQ5_K, qh);
  }
  template <size_t kSub>
  HWY_INLINE VF Group(size_t l) const {
    const VI v = LoadBytes(qs + 32 * (kSub / 2) + l);
    VI low;
    if constexpr (kSub & 1) low = hn::ShiftRight<4>(v);
    else low = hn::And(v, hn::Set(DI(), 0x0f));
    // Bit 4 of sub-block kSub is bit kSub of qh[l].
    const VI high = hn::And(hn::ShiftRight<kSub>(LoadBytes(qh + l)), hn::Set(DI(), 1));
    return hn::Sub(hn::Mul(hn::Set(DF(), dl[kSub]), hn::ConvertTo(DF(), hn::Or(low, hn::ShiftLeft<4>(high)))),
                   hn::Set(DF(), ml[kSub]));
  }
};

struct Q6KDecoder {
  static constexpr int64_t kValues = quant::kSuperBlock, kBytes = sizeof(quant::BlockQ6_K);
  static constexpr size_t kSubs = 16, kSubValues = 16;
  HWY_ALIGN float dl[kSubs];
  const uint8_t* ql;
  const uint8_t* qh;
  HWY_INLINE void Prepare(const uint8_t* b) {
    const float d = LoadHalf(b + offsetof(quant::BlockQ6_K, d));
    const auto* scales = reinterpret_cast<const int8_t*>(b + offsetof(quant::BlockQ6_K, scales));
    ScaleBytes(d, scales, dl, kSubs);
    ql = b + offsetof(quant::BlockQ6_K, ql);
    qh = b + offsetof(quant::BlockQ6_K, qh);
  }
  template <size_t kSub>
  HWY_INLINE VF Group(size_t l) const {
    // Value 16 * kSub + l = 128 * half + 32 * k + m.
    constexpr size_t kHalf = kSub / 8, kK = (kSub % 8) / 2, kM = 16 * (kSub % 2);
    const VI lo = hn::And(hn::ShiftRight<kK < 2 ? 0 : 4>(LoadBytes(ql + 64 * kHalf + 32 * (kK % 2) + kM + l)),
                          hn::Set(DI(), 0x0f));
    const VI hi = hn::And(hn::ShiftRight<2 * kK>(LoadBytes(qh + 32 * kHalf + kM + l)), hn::Set(DI(), 3));
    const VI q = hn::Sub(hn::Or(lo, hn::ShiftLeft<4>(hi)), hn::Set(DI(), 32));
    return hn::Mul(hn::Set(DF(), dl[kSub]), hn::ConvertTo(DF(), q));
  }
};

struct Q8_0Decoder {
  static constexpr int64_t kValues = quant::kLegacyBlock, kBytes = sizeof(quant::BlockQ8_0);
  static constexpr size_t kSubs = 1, kSubValues = 32;
  VF d;
  const int8_t* qs;
  HWY_INLINE void Prepare(const uint8_t* b) {
    d = hn::Set(DF(), LoadHalf(b));
    qs = reinterpret_cast<const int8_t*>(b + offsetof(quant::BlockQ8_0, qs));
  }
  template <size_t kSub>
  HWY_INLINE VF Group(size_t l) const {
    return hn::Mul(hn::ConvertTo(DF(), hn::PromoteTo(DI(), hn::LoadU(DI8(), qs + l))), d);
  }
};

// The 32-value formats' 4-bit codes (Q4_0, Q4_1, and the low bits of Q5_0, Q5_1):
// sub-block 0 (values 0..15) in the low nibbles of qs[0..15], sub-block 1 in the high.
template <size_t kSub>
HWY_INLINE VI LegacyNibbles(const uint8_t* qs, size_t l) {
  const VI v = LoadBytes(qs + l);
  if constexpr (kSub == 1) return hn::ShiftRight<4>(v);
  else return hn::And(v, hn::Set(DI(), 0x0f));
}

struct Q4_0Decoder {
  static constexpr int64_t kValues = quant::kLegacyBlock, kBytes = sizeof(quant::BlockQ4_0);
  static constexpr size_t kSubs = 2, kSubValues = 16;  // low nibbles: values 0..15, high: 16..31
  VF d;
  const uint8_t* qs;
  HWY_INLINE void Prepare(const uint8_t* b) {
    d = hn::Set(DF(), LoadHalf(b));
    qs = b + offsetof(quant::BlockQ4_0, qs);
  }
  template <size_t kSub>
  HWY_INLINE VF Group(size_t l) const {
    return hn::Mul(hn::ConvertTo(DF(), hn::Sub(LegacyNibbles<kSub>(qs, l), hn::Set(DI(), 8))), d);
  }
};

// Q4_1: value = q * d + m (a multiply, then an add: the scalar dequantization's two
// roundings), low nibbles values 0..15, high nibbles 16..31.
struct Q4_1Decoder {
  static constexpr int64_t kValues = quant::kLegacyBlock, kBytes = sizeof(quant::BlockQ4_1);
  static constexpr size_t kSubs = 2, kSubValues = 16;
  VF d, m;
  const uint8_t* qs;
  HWY_INLINE void Prepare(const uint8_t* b) {
    d = hn::Set(DF(), LoadHalf(b + offsetof(quant::BlockQ4_1, d)));
    m = hn::Set(DF(), LoadHalf(b + offsetof(quant::BlockQ4_1, m)));
    qs = b + offsetof(quant::BlockQ4_1, qs);
  }
  template <size_t kSub>
  HWY_INLINE VF Group(size_t l) const {
    return hn::Add(hn::Mul(hn::ConvertTo(DF(), LegacyNibbles<kSub>(qs, l)), d), m);
  }
};

// Q5_0 and Q5_1's five-bit codes: the nibble as in Q4_0 / Q4_1, and bit 4 of value j
// is bit j of the 32-bit qh (values 16 * kSub + l + lane).
template <size_t kSub>
HWY_INLINE VI FiveBitCodes(const uint8_t* qs, uint32_t qh, size_t l) {
  const VI low = LegacyNibbles<kSub>(qs, l);
  const auto bits = hn::Shr(hn::Set(DU(), qh >> (16 * kSub + l)), hn::Iota(DU(), 0));
  const VI high = hn::BitCast(DI(), hn::ShiftLeft<4>(hn::And(bits, hn::Set(DU(), 1u))));
  return hn::Or(low, high);
}

// Q5_0: value = (q - 16) * d.
struct Q5_0Decoder {
  static constexpr int64_t kValues = quant::kLegacyBlock, kBytes = sizeof(quant::BlockQ5_0);
  static constexpr size_t kSubs = 2, kSubValues = 16;
  VF d;
  uint32_t qh;
  const uint8_t* qs;
  HWY_INLINE void Prepare(const uint8_t* b) {
    d = hn::Set(DF(), LoadHalf(b + offsetof(quant::BlockQ5_0, d)));
    std::memcpy(&qh, b + offsetof(quant::BlockQ5_0, qh), 4);
    qs = b + offsetof(quant::BlockQ5_0, qs);
  }
  template <size_t kSub>
  HWY_INLINE VF Group(size_t l) const {
    return hn::Mul(hn::ConvertTo(DF(), hn::Sub(FiveBitCodes<kSub>(qs, qh, l), hn::Set(DI(), 16))), d);
  }
};

// Q5_1: value = q * d + m.
struct Q5_1Decoder {
  static constexpr int64_t kValues = quant::kLegacyBlock, kBytes = sizeof(quant::BlockQ5_1);
  static constexpr size_t kSubs = 2, kSubValues = 16;
  VF d, m;
  uint32_t qh;
  const uint8_t* qs;
  HWY_INLINE void Prepare(const uint8_t* b) {
    d = hn::Set(DF(), LoadHalf(b + offsetof(quant::BlockQ5_1, d)));
    m = hn::Set(DF(), LoadHalf(b + offsetof(quant::BlockQ5_1, m)));
    std::memcpy(&qh, b + offsetof(quant::BlockQ5_1, qh), 4);
    qs = b + offsetof(quant::BlockQ5_1, qs);
  }
  template <size_t kSub>
  HWY_INLINE VF Group(size_t l) const {
    return hn::Add(hn::Mul(hn::ConvertTo(DF(), FiveBitCodes<kSub>(qs, qh, l)), d), m);
  }
};

// Unquantized formats: a "block" is one vector of values; a row's last cols % N values
// are the scalar tail of the dot product.
constexpr int64_t kLanes = static_cast<int64_t>(hn::MaxLanes(DF()));

struct F32Decoder {
  static constexpr int64_t kValues = kLanes, kBytes = kLanes * 4;
  static constexpr size_t kSubs = 1, kSubValues = static_cast<size_t>(kLanes);
  const float* p;
  HWY_INLINE void Prepare(const uint8_t* b) { p = reinterpret_cast<const float*>(b); }
  template <size_t kSub>
  HWY_INLINE VF Group(size_t) const { return hn::LoadU(DF(), p); }
  static float Scalar(const uint8_t* row, int64_t c) {
    float v;
    std::memcpy(&v, row + 4 * c, 4);
    return v;
  }
};

struct F16Decoder {
  static constexpr int64_t kValues = kLanes, kBytes = kLanes * 2;
  static constexpr size_t kSubs = 1, kSubValues = static_cast<size_t>(kLanes);
  const hwy::float16_t* p;
  HWY_INLINE void Prepare(const uint8_t* b) { p = reinterpret_cast<const hwy::float16_t*>(b); }
  template <size_t kSub>
  HWY_INLINE VF Group(size_t) const { return hn::PromoteTo(DF(), hn::LoadU(DF16(), p)); }
  static float Scalar(const uint8_t* row, int64_t c) {
    uint16_t h;
    std::memcpy(&h, row + 2 * c, 2);
    return fp16_to_fp32(h);
  }
};

struct BF16Decoder {
  static constexpr int64_t kValues = kLanes, kBytes = kLanes * 2;
  static constexpr size_t kSubs = 1, kSubValues = static_cast<size_t>(kLanes);
  const uint16_t* p;
  HWY_INLINE void Prepare(const uint8_t* b) { p = reinterpret_cast<const uint16_t*>(b); }
  template <size_t kSub>
  HWY_INLINE VF Group(size_t) const {
    return hn::BitCast(DF(), hn::ShiftLeft<16>(hn::PromoteTo(DU(), hn::LoadU(DU16(), p))));
  }
  static float Scalar(const uint8_t* row, int64_t c) {
    uint16_t h;
    std::memcpy(&h, row + 2 * c, 2);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
};

template <class Dec>
constexpr bool kHasTail = Dec::kValues == kLanes && (std::is_same_v<Dec, F32Decoder> || std::is_same_v<Dec, F16Decoder> ||
                                                     std::is_same_v<Dec, BF16Decoder>);

// f(std::integral_constant<size_t, sub>) for every sub-block of Dec's block, so each
// Group<sub>() is compiled with its shifts and offsets known.
template <class Dec, class F, size_t... kSubs>
HWY_INLINE void ForEachSubImpl(F&& f, std::index_sequence<kSubs...>) {
  (f(std::integral_constant<size_t, kSubs>{}), ...);
}
template <class Dec, class F>
HWY_INLINE void ForEachSub(F&& f) {
  ForEachSubImpl<Dec>(f, std::make_index_sequence<Dec::kSubs>{});
}

// A whole row (cols values) to floats through the decoder.
template <class Dec>
void DecodeRowWith(const uint8_t* src, float* dst, int64_t cols) {
  const size_t N = hn::Lanes(DF());
  const int64_t blocks = cols / Dec::kValues;
  Dec dec;
  for (int64_t b = 0; b < blocks; ++b) {
    dec.Prepare(src + b * Dec::kBytes);
    ForEachSub<Dec>([&](auto sub) {
      for (size_t l = 0; l < Dec::kSubValues; l += N)
        hn::StoreU(dec.template Group<decltype(sub)::value>(l), DF(), dst + b * Dec::kValues + static_cast<int64_t>(decltype(sub)::value * Dec::kSubValues + l));
    });
  }
  if constexpr (kHasTail<Dec>)
    for (int64_t c = blocks * Dec::kValues; c < cols; ++c) dst[c] = Dec::Scalar(src, c);
}

// ---- the product ----

// R weight rows x NT tokens: sums[r * NT + t] = dot(w[r], x[t]) over n columns. The
// per-output arithmetic (one accumulator vector, columns in order, then the lane sum
// and a scalar tail) is the same for every R and NT.
template <size_t R, size_t NT>
HWY_INLINE void Tile(const float* const* w, const float* const* x, int64_t n, float* sums) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  VF acc[R][NT];
  for (size_t r = 0; r < R; ++r)
    for (size_t t = 0; t < NT; ++t) acc[r][t] = hn::Zero(df);
  const int64_t main = n - n % N;
  for (int64_t c = 0; c < main; c += N) {
    VF xv[NT];
    for (size_t t = 0; t < NT; ++t) xv[t] = hn::LoadU(df, x[t] + c);
    for (size_t r = 0; r < R; ++r) {
      const VF wv = hn::LoadU(df, w[r] + c);
      for (size_t t = 0; t < NT; ++t) acc[r][t] = hn::MulAdd(wv, xv[t], acc[r][t]);
    }
  }
  for (size_t r = 0; r < R; ++r)
    for (size_t t = 0; t < NT; ++t) {
      float s = hn::GetLane(hn::SumOfLanes(df, acc[r][t]));
      float tail = 0.0f;
      for (int64_t c = main; c < n; ++c) tail += w[r][c] * x[t][c];
      sums[r * NT + t] = s + tail;
    }
}

// Rows x tokens per tile. One-token steps read one row at a time: a single sequential
// stream, which measured faster than 4 or 8 rows at once (TinyLlama Q4_K_M on AVX-512,
// 12.3 against 9.9 tokens/s). Larger tiles fit the register budget: 32 vector registers
// on AVX-512 (and NEON), 16 elsewhere.
constexpr size_t kRowsOneToken = 1;
#if HWY_TARGET <= HWY_AVX3 || HWY_ARCH_ARM
constexpr size_t kRows = 4, kTokens = 4;
#else
constexpr size_t kRows = 2, kTokens = 4;
#endif

// Tokens [t0, t0 + nt) against `rows` dequantized rows (rows <= R; missing rows repeat
// row 0 and are not written).
template <size_t R, size_t NT>
void TileOut(const float* const* w, int64_t rows, const float* x, int64_t x_stride, int64_t t0, int64_t cols, float* out,
             int64_t out_stride, int64_t r0) {
  const float* xs[NT];
  for (size_t t = 0; t < NT; ++t) xs[t] = x + (t0 + static_cast<int64_t>(t)) * x_stride;
  float sums[R * NT];
  Tile<R, NT>(w, xs, cols, sums);
  for (int64_t r = 0; r < rows; ++r)
    for (size_t t = 0; t < NT; ++t)
      out[(t0 + static_cast<int64_t>(t)) * out_stride + r0 + r] = sums[static_cast<size_t>(r) * NT + t];
}

template <size_t R>
void RowBlock(const float* const* w, int64_t rows, const float* x, int64_t x_stride, int64_t T, int64_t cols, float* out,
              int64_t out_stride, int64_t r0) {
  int64_t t = 0;
  for (; t + static_cast<int64_t>(kTokens) <= T; t += kTokens)
    TileOut<R, kTokens>(w, rows, x, x_stride, t, cols, out, out_stride, r0);
  switch (T - t) {
    case 3: TileOut<R, 3>(w, rows, x, x_stride, t, cols, out, out_stride, r0); break;
    case 2: TileOut<R, 2>(w, rows, x, x_stride, t, cols, out, out_stride, r0); break;
    case 1: TileOut<R, 1>(w, rows, x, x_stride, t, cols, out, out_stride, r0); break;
    default: break;
  }
}

// The fused product of small steps: R rows x NT tokens decoded straight into registers
// (no dequantized copy), each weight group read once for the tile's tokens. Same
// per-output arithmetic as Tile() over DecodeRowWith<Dec>()'s floats.
//
// The R rows lie next to each other in memory, and a row may be a single 4 KiB page (an
// F16 row of 2048 values), where hardware prefetchers stop: so while reading a block of
// each row, a tile of several tokens asks for the same block of the next tile's rows
// (`ahead` bytes on; 0: no such requests). One-token steps read one row at a time, a
// single stream the hardware prefetchers follow: asking there measured slower (F16
// TinyLlama on AVX-512, one thread: 8.7 against 9.9 tokens/s).
// An activation vector: floats, or fp16 halves widened (exactly) to floats.
HWY_INLINE VF LoadX(const float* p) { return hn::LoadU(DF(), p); }
HWY_INLINE VF LoadX(const hwy::float16_t* p) { return hn::PromoteTo(DF(), hn::LoadU(DF16(), p)); }
HWY_INLINE float ScalarX(const float* p) { return *p; }
HWY_INLINE float ScalarX(const hwy::float16_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

template <class Dec, size_t R, size_t NT, class XT>
HWY_INLINE void FusedTile(const uint8_t* const* rows, const XT* const* x, int64_t cols, float* sums, size_t ahead) {
  const DF df;
  const size_t N = hn::Lanes(df);
  VF acc[R][NT];
  for (size_t r = 0; r < R; ++r)
    for (size_t t = 0; t < NT; ++t) acc[r][t] = hn::Zero(df);
  const int64_t blocks = cols / Dec::kValues;
  Dec dec[R];
  for (int64_t b = 0; b < blocks; ++b) {
    const bool new_line = ((b * Dec::kBytes) & 63) < Dec::kBytes;  // the block starts a cache line
    for (size_t r = 0; r < R; ++r) {
      if (ahead != 0 && new_line) hwy::Prefetch(rows[r] + b * Dec::kBytes + ahead);
      dec[r].Prepare(rows[r] + b * Dec::kBytes);
    }
    ForEachSub<Dec>([&](auto sub) {
      for (size_t l = 0; l < Dec::kSubValues; l += N) {
        const int64_t c = b * Dec::kValues + static_cast<int64_t>(decltype(sub)::value * Dec::kSubValues + l);
        VF xv[NT];
        for (size_t t = 0; t < NT; ++t) xv[t] = LoadX(x[t] + c);
        for (size_t r = 0; r < R; ++r) {
          const VF wv = dec[r].template Group<decltype(sub)::value>(l);
          for (size_t t = 0; t < NT; ++t) acc[r][t] = hn::MulAdd(wv, xv[t], acc[r][t]);
        }
      }
    });
  }
  for (size_t r = 0; r < R; ++r)
    for (size_t t = 0; t < NT; ++t) {
      const float s = hn::GetLane(hn::SumOfLanes(df, acc[r][t]));
      float tail = 0.0f;
      if constexpr (kHasTail<Dec>)
        for (int64_t c = blocks * Dec::kValues; c < cols; ++c) tail += Dec::Scalar(rows[r], c) * ScalarX(x[t] + c);
      sums[r * NT + t] = s + tail;
    }
}

template <class Dec, size_t R, size_t NT, class XT>
void FusedRows(const host::HostWeight& w, int64_t r0, int64_t r1, const XT* x, int64_t x_stride, float* out,
               int64_t out_stride) {
  const XT* xs[NT];
  for (size_t t = 0; t < NT; ++t) xs[t] = x + static_cast<int64_t>(t) * x_stride;
  for (int64_t b0 = r0; b0 < r1; b0 += static_cast<int64_t>(R)) {
    const int64_t rows = std::min<int64_t>(static_cast<int64_t>(R), r1 - b0);
    const uint8_t* rp[R];
    for (size_t r = 0; r < R; ++r)
      rp[r] = w.data + static_cast<size_t>(b0 + (static_cast<int64_t>(r) < rows ? static_cast<int64_t>(r) : 0)) * w.row_bytes;
    float sums[R * NT];
    FusedTile<Dec, R, NT, XT>(rp, xs, w.cols, sums, NT == 1 ? 0 : R * w.row_bytes);
    for (int64_t r = 0; r < rows; ++r)
      for (size_t t = 0; t < NT; ++t) out[static_cast<int64_t>(t) * out_stride + b0 + r] = sums[static_cast<size_t>(r) * NT + t];
  }
}

// Steps of at most this many tokens use the fused product (tiles of kRows rows, or of 2
// rows past 4 tokens); larger ones the panels.
#if HWY_TARGET <= HWY_AVX3 || HWY_ARCH_ARM
constexpr int64_t kFusedMaxT = 8;
#else
constexpr int64_t kFusedMaxT = 4;
#endif
static_assert(kFusedMaxT <= kHalfActivationsMaxT);

template <class Dec, size_t NT, class XT>
void FusedProductOf(const host::HostWeight& w, int64_t r0, int64_t r1, const XT* x, int64_t x_stride, int64_t T,
                    float* out, int64_t out_stride) {
  if (T == static_cast<int64_t>(NT)) {
    constexpr size_t R = NT == 1 ? kRowsOneToken : NT <= 4 ? kRows : 2;
    FusedRows<Dec, R, NT>(w, r0, r1, x, x_stride, out, out_stride);
  } else if constexpr (NT > 1) {
    FusedProductOf<Dec, NT - 1>(w, r0, r1, x, x_stride, T, out, out_stride);
  }
}

template <class Dec, class XT>
void FusedProduct(const host::HostWeight& w, int64_t r0, int64_t r1, const XT* x, int64_t x_stride, int64_t T,
                  float* out, int64_t out_stride) {
  FusedProductOf<Dec, static_cast<size_t>(kFusedMaxT)>(w, r0, r1, x, x_stride, T, out, out_stride);
}

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#endif  // FAFO_BACKEND_CPU_SIMD_MATMUL_INL_H_ (toggled per target)
