// Vector attention for the `cpu` backend (see simd_attention.h); Highway compiles it per
// instruction set and dispatches at run time, like simd_matmul.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/cpu/simd_attention.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/simd_attention.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fafo::cpu {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;

ref::AttentionPart AttendHeadPartImpl(const float* q, const float* keys, const float* values, int64_t stride,
                                      int64_t offset, const int32_t* slots, int32_t n_keys, int32_t head_dim,
                                      float scale, float* scratch, float* acc) {
  const DF df;
  const int32_t N = static_cast<int32_t>(hn::Lanes(df));
  const int32_t main = head_dim - head_dim % N;
  ref::AttentionPart part;
  // Scores: one vector dot product per key, then the lanes' sum and a scalar tail.
  for (int32_t j = 0; j < n_keys; ++j) {
    const float* k = keys + slots[j] * stride + offset;
    VF a = hn::Zero(df);
    for (int32_t d = 0; d < main; d += N) a = hn::MulAdd(hn::LoadU(df, q + d), hn::LoadU(df, k + d), a);
    float s = hn::GetLane(hn::SumOfLanes(df, a));
    for (int32_t d = main; d < head_dim; ++d) s += q[d] * k[d];
    scratch[j] = s * scale;
    part.max = std::max(part.max, scratch[j]);
  }
  // Weights exp(score - max), in place; a NaN score stays NaN (as std::exp keeps it).
  const VF max = hn::Set(df, part.max);
  int32_t j = 0;
  for (; j + N <= n_keys; j += N) {
    const VF x = hn::Sub(hn::LoadU(df, scratch + j), max);
    hn::StoreU(hn::IfThenElse(hn::IsNaN(x), x, hn::Exp(df, x)), df, scratch + j);
  }
  for (; j < n_keys; ++j) scratch[j] = std::exp(scratch[j] - part.max);
  for (j = 0; j < n_keys; ++j) part.sum += scratch[j];
  // The weighted values, a vector of the head's dimensions at a time over every key.
  for (int32_t d = 0; d < main; d += N) {
    VF a = hn::Zero(df);
    for (j = 0; j < n_keys; ++j) a = hn::MulAdd(hn::Set(df, scratch[j]), hn::LoadU(df, values + slots[j] * stride + offset + d), a);
    hn::StoreU(a, df, acc + d);
  }
  for (int32_t d = main; d < head_dim; ++d) {
    float a = 0.0f;
    for (j = 0; j < n_keys; ++j) a += scratch[j] * values[slots[j] * stride + offset + d];
    acc[d] = a;
  }
  return part;
}

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fafo::cpu {

HWY_EXPORT(AttendHeadPartImpl);

ref::AttentionPart attend_head_part_simd(const float* q, const float* keys, const float* values, int64_t stride,
                                         int64_t offset, const int32_t* slots, int32_t n_keys, int32_t head_dim,
                                         float scale, float* scratch, float* acc) {
  return HWY_DYNAMIC_DISPATCH(AttendHeadPartImpl)(q, keys, values, stride, offset, slots, n_keys, head_dim, scale,
                                                  scratch, acc);
}

}  // namespace fafo::cpu
#endif  // HWY_ONCE
