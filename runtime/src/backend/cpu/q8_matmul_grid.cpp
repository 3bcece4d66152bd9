// The integer matrix product of the `cpu` backend for the codebook formats IQ2_XXS,
// IQ2_XS, IQ3_XXS and IQ3_S (see q8_matmul.h; the decoder GridInt: q8_matmul-inl.h), its
// own translation unit so that Highway's per-target compilation builds in parallel with
// the other q8_matmul files'. As llama.cpp's CPU backend: the activations rounded to 8
// bits per 256 values, each vector's codebook entry and signs as signed bytes, the
// sub-blocks' odd integer scales in the exact integer sums. HWY_DYNAMIC_DISPATCH picks
// the same instruction set as q8_matmul.cpp's (hwy's chosen target is global).
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
#define HWY_TARGET_INCLUDE "backend/cpu/q8_matmul_grid.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// The shared per-target code, after highway.h:
#include "backend/cpu/q8_matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fafo::cpu {
namespace HWY_NAMESPACE {

// Returns false when the format is not one of these.
bool Q8MatmulRowsGridImpl(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x,
                          float* out, int64_t out_stride, int64_t panel_rows) {
  switch (w.type) {
    case TensorType::IQ2_XXS: ProductWith<GridInt<Codebook::kIq2Xxs>>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::IQ2_XS: ProductWith<GridInt<Codebook::kIq2Xs>>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::IQ3_XXS: ProductWith<GridInt<Codebook::kIq3Xxs>>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::IQ3_S: ProductWith<GridInt<Codebook::kIq3S>>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    default: return false;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fafo::cpu {

HWY_EXPORT(Q8MatmulRowsGridImpl);

void q8_matmul_rows_grid(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                          int64_t out_stride, int64_t panel_rows) {
  if (!HWY_DYNAMIC_DISPATCH(Q8MatmulRowsGridImpl)(w, r0, r1, x, out, out_stride, panel_rows))
    throw std::logic_error("q8_matmul_rows_grid: not an IQ2_XXS, IQ2_XS, IQ3_XXS or IQ3_S weight");
}

}  // namespace fafo::cpu
#endif  // HWY_ONCE
