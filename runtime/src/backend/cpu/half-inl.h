// fp16 scalars as floats for the cpu backend's per-target code (q8_matmul-inl.h and
// simd_matmul-inl.h include this after hwy/highway.h, once per target, as Highway's
// "-inl.h" headers are).
#if defined(FAFO_BACKEND_CPU_HALF_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef FAFO_BACKEND_CPU_HALF_INL_H_
#undef FAFO_BACKEND_CPU_HALF_INL_H_
#else
#define FAFO_BACKEND_CPU_HALF_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "fafo/tensor_type.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace fafo::cpu {
namespace HWY_NAMESPACE {

// The fp16 value at p as a float (exact): one instruction where the CPU converts halves
// (F16C on x86 with AVX2 or later, NEON); the portable conversion elsewhere. A block
// scale is read this way once per 32 weights, so the difference shows in whole-model speed.
HWY_INLINE float LoadHalf(const uint8_t* p) {
#if HWY_TARGET == HWY_SCALAR
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
#else
  const hwy::HWY_NAMESPACE::CappedTag<float, 1> df1;
  const hwy::HWY_NAMESPACE::Rebind<hwy::float16_t, decltype(df1)> dh1;
  return hwy::HWY_NAMESPACE::GetLane(
      hwy::HWY_NAMESPACE::PromoteTo(df1, hwy::HWY_NAMESPACE::LoadU(dh1, reinterpret_cast<const hwy::float16_t*>(p))));
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#endif  // FAFO_BACKEND_CPU_HALF_INL_H_
