// Vector widening of a packed KV cache's rows for the `cpu` backend (see
// simd_kv_rows.h); Highway compiles it per instruction set and dispatches at run time.
#include <cstdint>
#include <cstring>

#include "backend/cpu/simd_kv_rows.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/simd_kv_rows.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "fafo/tensor_type.h"

HWY_BEFORE_NAMESPACE();
namespace fafo::cpu {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// n fp16 values from src into out, as fp16_to_fp32 converts them on every target (a
// target's own half conversion may be emulated without infinities and NaNs): the half's
// exponent and mantissa placed in a float's and scaled by 2^112 (exact for normals,
// subnormals and zeros: a power of two), the top exponent for infinities and NaNs, the sign.
void WidenHalves(const uint8_t* src, int32_t n, float* out) {
  const hn::CappedTag<float, 16> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::Rebind<uint16_t, decltype(df)> dh;
  const int32_t N = static_cast<int32_t>(hn::Lanes(df));
  const auto mask = hn::Set(du, 0x7fffu), top = hn::Set(du, 0x7c00u), inf = hn::Set(du, 0x7f800000u);
  const auto sign = hn::Set(du, 0x8000u);
  const auto scale = hn::Set(df, 0x1p112f);
  int32_t i = 0;
  for (; i + N <= n; i += N) {
    const auto h = hn::PromoteTo(du, hn::LoadU(dh, reinterpret_cast<const uint16_t*>(src + 2 * static_cast<size_t>(i))));
    const auto em = hn::ShiftLeft<13>(hn::And(h, mask));
    const auto scaled = hn::BitCast(du, hn::Mul(hn::BitCast(df, em), scale));
    const auto bits = hn::IfThenElse(hn::Eq(hn::And(h, top), top), hn::Or(em, inf), scaled);
    hn::StoreU(hn::BitCast(df, hn::Or(bits, hn::ShiftLeft<16>(hn::And(h, sign)))), df, out + i);
  }
  for (; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * static_cast<size_t>(i), sizeof h);
    out[i] = fp16_to_fp32(h);
  }
}

// The 32 values of one Q8_0 (q * d) or Q4_0 ((q - 8) * d) block into out.
template <bool kQ8>
void WidenBlock(const uint8_t* block, float* out) {
  const hn::CappedTag<float, 16> df;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<int8_t, decltype(df)> d8;
  const hn::Rebind<uint8_t, decltype(df)> du8;
  const int32_t N = static_cast<int32_t>(hn::Lanes(df));
  uint16_t h;
  std::memcpy(&h, block, sizeof h);
  const auto d = hn::Set(df, fp16_to_fp32(h));  // (any scale, an infinite one too, exactly)
  const uint8_t* qs = block + 2;
  if constexpr (kQ8) {
    for (int32_t j = 0; j < 32; j += N)
      hn::StoreU(hn::Mul(hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const int8_t*>(qs + j)))), d), df,
                 out + j);
  } else {
    const auto eight = hn::Set(di, 8), low = hn::Set(di, 0x0f);
    for (int32_t j = 0; j < 16; j += N) {
      const auto bytes = hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<decltype(df)>(), hn::LoadU(du8, qs + j)));
      hn::StoreU(hn::Mul(hn::ConvertTo(df, hn::Sub(hn::And(bytes, low), eight)), d), df, out + j);
      hn::StoreU(hn::Mul(hn::ConvertTo(df, hn::Sub(hn::ShiftRight<4>(bytes), eight)), d), df, out + 16 + j);
    }
  }
}

void WidenKvRowsImpl(const host::HostKvCache::Rows& rows, const int32_t* slots, int32_t count, int32_t first, int32_t n,
                     float* out) {
  const bool blocks = rows.type == KvCacheType::Q8_0 || rows.type == KvCacheType::Q4_0;
  for (int32_t j = 0; j < count; ++j) {
    float* to = out + static_cast<int64_t>(j) * n;
    const uint8_t* row = rows.packed + static_cast<size_t>(slots[j]) * rows.row_bytes;
    if (rows.type == KvCacheType::F16) {
      WidenHalves(row + 2 * static_cast<size_t>(first), n, to);
    } else if (blocks && first % 32 == 0 && n % 32 == 0) {  // whole blocks (a head of a multiple of 32)
      const size_t block_bytes = rows.type == KvCacheType::Q8_0 ? 34 : 18;
      for (int32_t b = 0; b < n / 32; ++b) {
        const uint8_t* block = row + static_cast<size_t>(first / 32 + b) * block_bytes;
        if (rows.type == KvCacheType::Q8_0) WidenBlock<true>(block, to + 32 * b);
        else WidenBlock<false>(block, to + 32 * b);
      }
    } else {
      rows.widen(slots[j], first, n, to);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fafo::cpu {

HWY_EXPORT(WidenKvRowsImpl);

void widen_kv_rows_simd(const host::HostKvCache::Rows& rows, const int32_t* slots, int32_t count, int32_t first, int32_t n,
                        float* out) {
  HWY_DYNAMIC_DISPATCH(WidenKvRowsImpl)(rows, slots, count, first, n, out);
}

}  // namespace fafo::cpu
#endif  // HWY_ONCE
