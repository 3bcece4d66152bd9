// SIMD decoders and the token-tiled matrix product of the `cpu` backend (see
// simd_matmul.h). Highway compiles this file once per instruction set (foreach_target.h
// re-includes it) and HWY_DYNAMIC_DISPATCH picks the best the CPU has at run time.
//
// Built with -ffp-contract=off (runtime/CMakeLists.txt): the decoders evaluate the
// reference dequantizer's expressions with a rounding after every product, so they give
// its floats bit for bit; the only fused multiply-adds are the explicit MulAdd of the
// dot products.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>
#include <string_view>
#include <type_traits>
#include <utility>

#include "backend/cpu/simd_matmul.h"
#include "fafo/tensor_type.h"
#include "quant/blocks.h"

// Arrays of vectors (the tiles' accumulators) need vectors of a size known when compiling.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/simd_matmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
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
    const VI v = LoadBytes(qs + l);
    VI q;
    if constexpr (kSub == 1) q = hn::ShiftRight<4>(v);
    else q = hn::And(v, hn::Set(DI(), 0x0f));
    return hn::Mul(hn::ConvertTo(DF(), hn::Sub(q, hn::Set(DI(), 8))), d);
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

// Returns false when the format has no SIMD decoder here.
bool DecodeRow(TensorType type, const uint8_t* src, float* dst, int64_t n) {
  switch (type) {
    case TensorType::Q4_K: DecodeRowWith<Q4KDecoder>(src, dst, n); return true;
    case TensorType::Q5_K: DecodeRowWith<Q5KDecoder>(src, dst, n); return true;
    case TensorType::Q6_K: DecodeRowWith<Q6KDecoder>(src, dst, n); return true;
    case TensorType::Q8_0: DecodeRowWith<Q8_0Decoder>(src, dst, n); return true;
    case TensorType::Q4_0: DecodeRowWith<Q4_0Decoder>(src, dst, n); return true;
    case TensorType::F16: DecodeRowWith<F16Decoder>(src, dst, n); return true;
    case TensorType::BF16: DecodeRowWith<BF16Decoder>(src, dst, n); return true;
    case TensorType::F32: DecodeRowWith<F32Decoder>(src, dst, n); return true;
    default: return false;
  }
}

void DequantizeRowImpl(TensorType type, const uint8_t* src, float* dst, int64_t n) {
  if (!DecodeRow(type, src, dst, n)) dequantize_row(type, src, dst, n);
}

bool HasDecoderImpl(TensorType type) {
  switch (type) {
    case TensorType::Q4_K: case TensorType::Q5_K: case TensorType::Q6_K: case TensorType::Q8_0:
    case TensorType::Q4_0: case TensorType::F16: case TensorType::BF16: case TensorType::F32: return true;
    default: return false;
  }
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

// Returns false when the format has no fused product. With `x_half` (the activations as
// fp16, same stride), F16 weights read it instead of x: half the bytes, which measured
// 1.6x faster one-token steps (F16 TinyLlama on AVX-512, one thread: 12.4 against 7.9
// tokens/s).
bool Fused(const host::HostWeight& w, int64_t r0, int64_t r1, const float* x, const uint16_t* x_half,
           int64_t x_stride, int64_t T, float* out, int64_t out_stride) {
  const auto* xh = reinterpret_cast<const hwy::float16_t*>(x_half);
  if (xh != nullptr && w.type == TensorType::F16) {
    FusedProduct<F16Decoder>(w, r0, r1, xh, x_stride, T, out, out_stride);
    return true;
  }
  switch (w.type) {
    case TensorType::Q4_K: FusedProduct<Q4KDecoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    case TensorType::Q5_K: FusedProduct<Q5KDecoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    case TensorType::Q6_K: FusedProduct<Q6KDecoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    case TensorType::Q8_0: FusedProduct<Q8_0Decoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    case TensorType::Q4_0: FusedProduct<Q4_0Decoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    case TensorType::F16: FusedProduct<F16Decoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    case TensorType::BF16: FusedProduct<BF16Decoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    case TensorType::F32: FusedProduct<F32Decoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    default: return false;
  }
}

// Rows [p0, p1) of a decoded panel (row r at scratch + (r - p0) * cols) against tokens
// [t0, t0 + NT), by tiles of kRows rows.
template <size_t NT>
void PanelTiles(const float* scratch, int64_t p0, int64_t p1, int64_t cols, const float* x, int64_t x_stride, int64_t t0,
                float* out, int64_t out_stride) {
  for (int64_t b0 = p0; b0 < p1; b0 += static_cast<int64_t>(kRows)) {
    const int64_t rows = std::min<int64_t>(static_cast<int64_t>(kRows), p1 - b0);
    const float* wr[kRows];
    for (size_t r = 0; r < kRows; ++r)
      wr[r] = scratch + (b0 - p0 + (static_cast<int64_t>(r) < rows ? static_cast<int64_t>(r) : 0)) * cols;
    TileOut<kRows, NT>(wr, rows, x, x_stride, t0, cols, out, out_stride, b0);
  }
}

void MatmulRowsImpl(const host::HostWeight& w, int64_t r0, int64_t r1, const float* x, const uint16_t* x_half,
                    int64_t x_stride, int64_t T, float* out, int64_t out_stride, float* scratch, int64_t panel_rows) {
  if (T <= kFusedMaxT && Fused(w, r0, r1, x, x_half, x_stride, T, out, out_stride)) return;
  const int64_t cols = w.cols;
  // Larger steps: panels of dequantized rows (decoded once), each multiplied with every
  // token tile while it is hot in cache.
  for (int64_t p0 = r0; p0 < r1; p0 += panel_rows) {
    const int64_t p1 = std::min(r1, p0 + panel_rows);
    for (int64_t r = p0; r < p1; ++r) {
      const uint8_t* src = w.data + static_cast<size_t>(r) * w.row_bytes;
      DequantizeRowImpl(w.type, src, scratch + (r - p0) * cols, cols);
    }
    if (T == 1) {
      for (int64_t b0 = p0; b0 < p1; ++b0) {
        const float* wr[1] = {scratch + (b0 - p0) * cols};
        RowBlock<kRowsOneToken>(wr, 1, x, x_stride, T, cols, out, out_stride, b0);
      }
      continue;
    }
    // Token tiles outer, row tiles inner: a tile's tokens stay in L1 while the panel
    // (in L2) passes under them.
    int64_t t = 0;
    for (; t + static_cast<int64_t>(kTokens) <= T; t += kTokens)
      PanelTiles<kTokens>(scratch, p0, p1, cols, x, x_stride, t, out, out_stride);
    switch (T - t) {
      case 3: PanelTiles<3>(scratch, p0, p1, cols, x, x_stride, t, out, out_stride); break;
      case 2: PanelTiles<2>(scratch, p0, p1, cols, x, x_stride, t, out, out_stride); break;
      case 1: PanelTiles<1>(scratch, p0, p1, cols, x, x_stride, t, out, out_stride); break;
      default: break;
    }
  }
}

// Activations to fp16 (rounded to nearest even; overflow gives infinity and NaN stays
// NaN, as the CPU's conversion instruction does) and back to floats. Highway converts
// by truncation on targets without that instruction (x86 before AVX2, the portable
// emulation), so those convert value by value like the reference's fp32_to_fp16.
void RoundToHalfImpl(const float* x, int64_t n, uint16_t* half, float* rounded) {
  int64_t i = 0;
#if !(HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3 || HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR)
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto* h = reinterpret_cast<hwy::float16_t*>(half);
  for (; i + N <= n; i += N) {
    const auto v = hn::DemoteTo(DF16(), hn::LoadU(df, x + i));
    if (h != nullptr) hn::StoreU(v, DF16(), h + i);
    hn::StoreU(hn::PromoteTo(df, v), df, rounded + i);
  }
#endif
  for (; i < n; ++i) {
    const uint16_t b = fp32_to_fp16(x[i]);
    if (half != nullptr) half[i] = b;
    rounded[i] = fp16_to_fp32(b);
  }
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fafo::cpu {

HWY_EXPORT(MatmulRowsImpl);
HWY_EXPORT(DequantizeRowImpl);
HWY_EXPORT(HasDecoderImpl);
HWY_EXPORT(TargetNameImpl);
HWY_EXPORT(RoundToHalfImpl);

namespace {
// About 256 KiB of dequantized rows per panel: they stay in the core's L2 cache while
// every token tile passes over them.
constexpr int64_t kPanelBytes = 256 * 1024;
}  // namespace

int64_t matmul_panel_rows(int64_t cols) {
  const int64_t rows = kPanelBytes / (std::max<int64_t>(1, cols) * static_cast<int64_t>(sizeof(float)));
  return std::clamp<int64_t>(rows / 8 * 8, 8, 64);
}

size_t matmul_scratch_floats(int64_t cols) { return static_cast<size_t>(matmul_panel_rows(cols) * cols); }

void matmul_rows(const host::HostWeight& w, int64_t r0, int64_t r1, const float* x, const uint16_t* x_half,
                 int64_t x_stride, int64_t T, float* out, int64_t out_stride, float* scratch) {
  HWY_DYNAMIC_DISPATCH(MatmulRowsImpl)(w, r0, r1, x, x_half, x_stride, T, out, out_stride, scratch,
                                       matmul_panel_rows(w.cols));
}

bool rounds_activations_to_half(TensorType type) { return type == TensorType::F16; }

void round_to_half(const float* x, int64_t n, uint16_t* half, float* rounded) {
  HWY_DYNAMIC_DISPATCH(RoundToHalfImpl)(x, n, half, rounded);
}

void dequantize_row_simd(TensorType type, const uint8_t* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(DequantizeRowImpl)(type, src, dst, n);
}

bool has_simd_decoder(TensorType type) { return HWY_DYNAMIC_DISPATCH(HasDecoderImpl)(type); }

const char* simd_target_name() {
  // Highway's target names, in the words CPU vendors use.
  const std::string_view name = HWY_DYNAMIC_DISPATCH(TargetNameImpl)();
  if (name == "AVX3") return "AVX-512";
  if (name == "AVX3_DL") return "AVX-512 with VNNI";
  if (name == "AVX3_ZEN4") return "AVX-512 (Zen 4)";
  if (name == "SSE4") return "SSE4.2";
  if (name == "EMU128" || name == "SCALAR") return "scalar";
  return HWY_DYNAMIC_DISPATCH(TargetNameImpl)();
}

std::vector<std::string> simd_targets() {
  std::vector<std::string> names;  // what the CPU runs, whatever use_simd_target chose
  for (const int64_t t : hwy::SupportedAndGeneratedTargets()) names.emplace_back(hwy::TargetName(t));
  return names;
}

void use_simd_target(const std::string& name) {
  hwy::SetSupportedTargetsForTest(0);  // every target again, then the one asked for
  if (name.empty()) return;
  for (const int64_t t : hwy::SupportedAndGeneratedTargets())
    if (name == hwy::TargetName(t)) {
      hwy::SetSupportedTargetsForTest(t);
      return;
    }
  throw std::invalid_argument("use_simd_target: '" + name + "' is not an instruction set this build runs here");
}

}  // namespace fafo::cpu
#endif  // HWY_ONCE
