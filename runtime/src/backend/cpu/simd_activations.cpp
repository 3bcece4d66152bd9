// Vector gated activations for the `cpu` backend (see simd_activations.h); Highway
// compiles it per instruction set and dispatches at run time, like simd_attention.cpp.
#include <algorithm>
#include <cstdint>

#include "backend/cpu/simd_activations.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/simd_activations.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fafo::cpu {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

template <GatedActivation kAct, class DF, class VF = hn::Vec<DF>>
HWY_INLINE VF Activate(DF df, VF x) {
  if constexpr (kAct == GatedActivation::Silu) {
    // Highway's exp holds up to 104 and, as std::exp, overflows to inf past 88.7: with
    // -x clamped to 100, x / (1 + exp(-x)) is -0 for every x below -89 and NaN for
    // -inf, as the scalar formula's.
    const VF e = hn::Exp(df, hn::Min(hn::Neg(x), hn::Set(df, 100.0f)));
    return hn::Div(x, hn::Add(hn::Set(df, 1.0f), e));
  } else {
    const VF x3 = hn::Mul(hn::Mul(x, x), x);
    VF inner = hn::Mul(hn::Set(df, 0.7978845608028654f), hn::Add(x, hn::Mul(hn::Set(df, 0.044715f), x3)));
    inner = hn::Min(hn::Max(inner, hn::Set(df, -10.0f)), hn::Set(df, 10.0f));
    return hn::Mul(hn::Mul(hn::Set(df, 0.5f), x), hn::Add(hn::Set(df, 1.0f), hn::Tanh(df, inner)));
  }
}

// The activation of a gate and up vector: act(gate) * up, or gpt-oss's clamped SwiGLU
// g * sigmoid(1.702 g) * (u + 1) with g = min(gate, 7), u = clamp(up, -7, 7) (as
// scalar::swiglu_oai: g / (1 + exp(-1.702 g)); exp's argument is at least -11.9).
template <GatedActivation kAct, class DF, class VF = hn::Vec<DF>>
HWY_INLINE VF Gate(DF df, VF gate, VF up) {
  if constexpr (kAct == GatedActivation::SwigluOai) {
    // As std::min and std::clamp, so a NaN stays NaN.
    const VF limit = hn::Set(df, kSwigluOaiLimit), low = hn::Neg(limit);
    const VF g = hn::IfThenElse(hn::Lt(limit, gate), limit, gate);
    const VF u = hn::IfThenElse(hn::Lt(up, low), low, hn::IfThenElse(hn::Lt(limit, up), limit, up));
    const VF e = hn::Exp(df, hn::Min(hn::Mul(hn::Set(df, -kSwigluOaiAlpha), g), hn::Set(df, 100.0f)));
    return hn::Mul(hn::Div(g, hn::Add(hn::Set(df, 1.0f), e)), hn::Add(u, hn::Set(df, 1.0f)));
  } else {
    return hn::Mul(Activate<kAct>(df, gate), up);
  }
}

template <GatedActivation kAct>
void GatedWith(const float* gate, const float* up, float* out, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(Gate<kAct>(df, hn::LoadU(df, gate + i), hn::LoadU(df, up + i)), df, out + i);
  if (i < n) {  // the last values in a padded vector, so they take the same lanes' arithmetic
    HWY_ALIGN float g[hn::MaxLanes(df)] = {}, u[hn::MaxLanes(df)] = {}, o[hn::MaxLanes(df)];
    std::copy(gate + i, gate + n, g);
    std::copy(up + i, up + n, u);
    hn::Store(Gate<kAct>(df, hn::Load(df, g), hn::Load(df, u)), df, o);
    std::copy(o, o + (n - i), out + i);
  }
}

void GatedImpl(GatedActivation act, const float* gate, const float* up, float* out, int64_t n) {
  if (act == GatedActivation::Silu) GatedWith<GatedActivation::Silu>(gate, up, out, n);
  else if (act == GatedActivation::SwigluOai) GatedWith<GatedActivation::SwigluOai>(gate, up, out, n);
  else GatedWith<GatedActivation::GeluTanh>(gate, up, out, n);
}

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fafo::cpu {

HWY_EXPORT(GatedImpl);

void gated_simd(GatedActivation act, const float* gate, const float* up, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(GatedImpl)(act, gate, up, out, n);
}

}  // namespace fafo::cpu
#endif  // HWY_ONCE
