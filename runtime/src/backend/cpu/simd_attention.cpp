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

// The heads of one group, kHeads at a time (0: any count, through memory): each head's
// arithmetic is that of a group of one, whatever the group size.
template <class DF, int32_t kHeads>
void AttendHeads(const float* q, int32_t n_heads, const scalar::KvRows& keys, const scalar::KvRows& values,
                 const int32_t* slots, int32_t n_keys, scalar::ScoreMap score, float* scratch, scalar::AttentionPart* parts,
                 float* accs) {
  using VF = hn::Vec<DF>;
  const DF df;
  const int32_t H = kHeads > 0 ? kHeads : n_heads;
  const int32_t N = static_cast<int32_t>(hn::Lanes(df));
  const int32_t head_dim = keys.width, value_dim = values.width;
  const int32_t main = head_dim - head_dim % N;
  for (int32_t h = 0; h < H; ++h) parts[h] = scalar::AttentionPart{};
  // Scores: one vector dot product per head and key (the key read once for the group),
  // then the lanes' sum and a scalar tail.
  for (int32_t j = 0; j < n_keys; ++j) {
    const float* k = keys.row(slots[j]);
    for (int32_t h = 0; h < H; ++h) {
      const float* qh = q + static_cast<int64_t>(h) * head_dim;
      VF a = hn::Zero(df);
      for (int32_t d = 0; d < main; d += N) a = hn::MulAdd(hn::LoadU(df, qh + d), hn::LoadU(df, k + d), a);
      float s = hn::GetLane(hn::SumOfLanes(df, a));
      for (int32_t d = main; d < head_dim; ++d) s += qh[d] * k[d];
      float& out = scratch[static_cast<int64_t>(h) * n_keys + j];
      out = score(s);
      parts[h].max = std::max(parts[h].max, out);
    }
  }
  // Weights exp(score - max), in place; a NaN score stays NaN (as std::exp keeps it).
  for (int32_t h = 0; h < H; ++h) {
    float* w = scratch + static_cast<int64_t>(h) * n_keys;
    const VF max = hn::Set(df, parts[h].max);
    int32_t j = 0;
    for (; j + N <= n_keys; j += N) {
      const VF x = hn::Sub(hn::LoadU(df, w + j), max);
      hn::StoreU(hn::IfThenElse(hn::IsNaN(x), x, hn::Exp(df, x)), df, w + j);
    }
    for (; j < n_keys; ++j) w[j] = std::exp(w[j] - parts[h].max);
    for (j = 0; j < n_keys; ++j) parts[h].sum += w[j];
  }
  // The weighted values, a vector of dimensions at a time over every key, each value
  // vector read once for the group.
  const int32_t value_main = value_dim - value_dim % N;
  for (int32_t d = 0; d < value_main; d += N) {
    VF a[kHeads > 0 ? kHeads : 1];
    if constexpr (kHeads > 0) {
      for (int32_t h = 0; h < kHeads; ++h) a[h] = hn::Zero(df);
      for (int32_t j = 0; j < n_keys; ++j) {
        const VF v = hn::LoadU(df, values.row(slots[j]) + d);
        for (int32_t h = 0; h < kHeads; ++h)
          a[h] = hn::MulAdd(hn::Set(df, scratch[static_cast<int64_t>(h) * n_keys + j]), v, a[h]);
      }
      for (int32_t h = 0; h < kHeads; ++h) hn::StoreU(a[h], df, accs + static_cast<int64_t>(h) * value_dim + d);
    } else {
      for (int32_t h = 0; h < H; ++h) {
        a[0] = hn::Zero(df);
        for (int32_t j = 0; j < n_keys; ++j)
          a[0] = hn::MulAdd(hn::Set(df, scratch[static_cast<int64_t>(h) * n_keys + j]), hn::LoadU(df, values.row(slots[j]) + d),
                            a[0]);
        hn::StoreU(a[0], df, accs + static_cast<int64_t>(h) * value_dim + d);
      }
    }
  }
  for (int32_t h = 0; h < H; ++h)
    for (int32_t d = value_main; d < value_dim; ++d) {
      float a = 0.0f;
      for (int32_t j = 0; j < n_keys; ++j) a += scratch[static_cast<int64_t>(h) * n_keys + j] * values.row(slots[j])[d];
      accs[static_cast<int64_t>(h) * value_dim + d] = a;
    }
}

template <class DF>
void AttendGroup(const float* q, int32_t n_heads, const scalar::KvRows& keys, const scalar::KvRows& values, const int32_t* slots,
                 int32_t n_keys, scalar::ScoreMap score, float* scratch, scalar::AttentionPart* parts, float* accs) {
  switch (n_heads) {
    case 1: AttendHeads<DF, 1>(q, 1, keys, values, slots, n_keys, score, scratch, parts, accs); break;
    case 2: AttendHeads<DF, 2>(q, 2, keys, values, slots, n_keys, score, scratch, parts, accs); break;
    case 4: AttendHeads<DF, 4>(q, 4, keys, values, slots, n_keys, score, scratch, parts, accs); break;
    case 8: AttendHeads<DF, 8>(q, 8, keys, values, slots, n_keys, score, scratch, parts, accs); break;
    default: AttendHeads<DF, 0>(q, n_heads, keys, values, slots, n_keys, score, scratch, parts, accs); break;
  }
}

// The widest vector (at most 16 lanes) that divides the head: small heads (stories260K's
// 8 dimensions) still run in vectors. The choice depends on head_dim alone.
void AttendGroupPartImpl(const float* q, int32_t n_heads, const scalar::KvRows& keys, const scalar::KvRows& values,
                         const int32_t* slots, int32_t n_keys, scalar::ScoreMap score, float* scratch, scalar::AttentionPart* parts,
                         float* accs) {
  const int32_t head_dim = keys.width;
  if (head_dim % static_cast<int32_t>(hn::Lanes(hn::CappedTag<float, 16>())) == 0)
    AttendGroup<hn::CappedTag<float, 16>>(q, n_heads, keys, values, slots, n_keys, score, scratch, parts, accs);
  else if (head_dim % static_cast<int32_t>(hn::Lanes(hn::CappedTag<float, 8>())) == 0)
    AttendGroup<hn::CappedTag<float, 8>>(q, n_heads, keys, values, slots, n_keys, score, scratch, parts, accs);
  else
    AttendGroup<hn::CappedTag<float, 4>>(q, n_heads, keys, values, slots, n_keys, score, scratch, parts, accs);
}

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fafo::cpu {

HWY_EXPORT(AttendGroupPartImpl);

void attend_group_part_simd(const float* q, int32_t n_heads, const scalar::KvRows& keys, const scalar::KvRows& values,
                            const int32_t* slots, int32_t n_keys, scalar::ScoreMap score, float* scratch, scalar::AttentionPart* parts,
                            float* accs) {
  HWY_DYNAMIC_DISPATCH(AttendGroupPartImpl)(q, n_heads, keys, values, slots, n_keys, score, scratch, parts, accs);
}

}  // namespace fafo::cpu
#endif  // HWY_ONCE
