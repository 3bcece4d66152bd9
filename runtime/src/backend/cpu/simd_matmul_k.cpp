// The `cpu` backend's fused product (decode and multiply in one pass, steps of up to
// kFusedMaxT tokens) for Q4_K, Q5_K, Q6_K and Q8_0 weights (see simd_matmul.h; the other
// formats and the rest: simd_matmul.cpp; the shared per-target code:
// simd_matmul-inl.h), its own translation unit so that the two halves of Highway's
// per-target compilation build in parallel. HWY_DYNAMIC_DISPATCH picks the same
// instruction set as simd_matmul.cpp's (hwy's chosen target is global).
//
// Built with -ffp-contract=off (runtime/CMakeLists.txt), as simd_matmul-inl.h says.
#include <cstdint>
#include <stdexcept>

#include "backend/cpu/simd_matmul.h"
#include "fafo/tensor_type.h"

// Arrays of vectors (the tiles' accumulators) need vectors of a size known when compiling.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/simd_matmul_k.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// The shared per-target code, after highway.h:
#include "backend/cpu/simd_matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fafo::cpu {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Returns false when the format has no fused product here.
bool FusedRowsKImpl(const host::HostWeight& w, int64_t r0, int64_t r1, const float* x, int64_t x_stride, int64_t T,
                    float* out, int64_t out_stride) {
  switch (w.type) {
    case TensorType::Q4_K: FusedProduct<Q4KDecoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    case TensorType::Q5_K: FusedProduct<Q5KDecoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    case TensorType::Q6_K: FusedProduct<Q6KDecoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    case TensorType::Q8_0: FusedProduct<Q8_0Decoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    default: return false;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fafo::cpu {

HWY_EXPORT(FusedRowsKImpl);

void fused_rows_k(const host::HostWeight& w, int64_t r0, int64_t r1, const float* x, int64_t x_stride, int64_t T,
                  float* out, int64_t out_stride) {
  if (!HWY_DYNAMIC_DISPATCH(FusedRowsKImpl)(w, r0, r1, x, x_stride, T, out, out_stride))
    throw std::logic_error("fused_rows_k: not a Q4_K, Q5_K, Q6_K or Q8_0 weight");
}

}  // namespace fafo::cpu
#endif  // HWY_ONCE
