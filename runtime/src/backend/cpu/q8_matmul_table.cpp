// The integer matrix product of the `cpu` backend for the formats whose 4-bit codes
// index a table of 16 values: IQ4_NL, IQ4_XS and MXFP4 (see q8_matmul.h; the decoders
// TableInt and Iq4XsInt: q8_matmul-inl.h), its own translation unit so that Highway's
// per-target compilation builds in parallel with q8_matmul.cpp's and q8_matmul_q6.cpp's.
// As llama.cpp's CPU backend: the activations rounded to 8 bits, the codes' values as
// signed bytes, exact integer sums. HWY_DYNAMIC_DISPATCH picks the same instruction set
// as q8_matmul.cpp's (hwy's chosen target is global).
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
#define HWY_TARGET_INCLUDE "backend/cpu/q8_matmul_table.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// The shared per-target code, after highway.h:
#include "backend/cpu/q8_matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fafo::cpu {
namespace HWY_NAMESPACE {

// Returns false when the format is not one of these.
bool Q8MatmulRowsTableImpl(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x,
                           float* out, int64_t out_stride, int64_t panel_rows) {
  switch (w.type) {
    case TensorType::IQ4_NL: ProductWith<TableInt<false>>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::MXFP4: ProductWith<TableInt<true>>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::IQ4_XS: ProductWith<Iq4XsInt>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    default: return false;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fafo::cpu {

HWY_EXPORT(Q8MatmulRowsTableImpl);

void q8_matmul_rows_table(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                          int64_t out_stride, int64_t panel_rows) {
  if (!HWY_DYNAMIC_DISPATCH(Q8MatmulRowsTableImpl)(w, r0, r1, x, out, out_stride, panel_rows))
    throw std::logic_error("q8_matmul_rows_table: not an IQ4_NL, IQ4_XS or MXFP4 weight");
}

}  // namespace fafo::cpu
#endif  // HWY_ONCE
