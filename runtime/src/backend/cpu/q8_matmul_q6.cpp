// The integer matrix product of the `cpu` backend for Q6_K and the 32-value formats
// (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1; see q8_matmul.h; Q4_K and Q5_K and the rounding of
// activations: q8_matmul.cpp; the shared per-target code: q8_matmul-inl.h), its own
// translation unit so that the two
// halves of Highway's per-target compilation build in parallel. HWY_DYNAMIC_DISPATCH
// picks the same instruction set as q8_matmul.cpp's (hwy's chosen target is global).
//
// Built with -ffp-contract=off (runtime/CMakeLists.txt), as q8_matmul-inl.h says.
#include <stdexcept>
#include <cstdint>

#include "backend/cpu/q8_matmul.h"

// Arrays of vectors (the tiles' accumulators) need vectors of a size known when compiling.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/q8_matmul_q6.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// The shared per-target code, after highway.h:
#include "backend/cpu/q8_matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fafo::cpu {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Returns false when the format has no integer product here.
bool Q8MatmulRowsQ6Impl(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                        int64_t out_stride, int64_t panel_rows) {
  switch (w.type) {
    case TensorType::Q6_K: ProductWith<Q6KInt>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::Q8_0: ProductWith<Q8_0Int>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::Q4_0: ProductWith<Q4_0Int>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::Q4_1: ProductWith<Q4_1Int>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::Q5_0: ProductWith<Q5_0Int>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::Q5_1: ProductWith<Q5_1Int>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    default: return false;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fafo::cpu {

HWY_EXPORT(Q8MatmulRowsQ6Impl);

void q8_matmul_rows_q6(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                       int64_t out_stride, int64_t panel_rows) {
  if (!HWY_DYNAMIC_DISPATCH(Q8MatmulRowsQ6Impl)(w, r0, r1, x, out, out_stride, panel_rows))
    throw std::logic_error("q8_matmul_rows_q6: not a Q6_K or 32-value-block weight");
}

}  // namespace fafo::cpu
#endif  // HWY_ONCE
