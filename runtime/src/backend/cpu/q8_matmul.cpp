// The integer matrix product of the `cpu` backend (see q8_matmul.h): the rounding of
// activations and the product for Q4_K and Q5_K weights (q8_matmul_q6.cpp: Q6_K and the
// 32-value formats; the shared per-target code: q8_matmul-inl.h). Highway compiles this file once
// per instruction set (foreach_target.h re-includes it) and HWY_DYNAMIC_DISPATCH picks
// the best the CPU has at run time.
//
// Built with -ffp-contract=off (runtime/CMakeLists.txt), as q8_matmul-inl.h says.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "backend/cpu/q8_matmul.h"
#include "backend/cpu/q8_groups.h"

// Arrays of vectors (the tiles' accumulators) need vectors of a size known when compiling.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/q8_matmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// The shared per-target code, after highway.h:
#include "backend/cpu/q8_matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fafo::cpu {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// ---- rounding activations ----

void QuantizeImpl(const float* x, int64_t x_stride, int64_t t0, int64_t t1, int64_t cols, int64_t block, int8_t* q,
                  float* d, int16_t* sums16) {
  const hn::CappedTag<float, 16> df;
  const DQ8 d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t nb = cols / block;
  for (int64_t t = t0; t < t1; ++t) {
    const float* xr = x + t * x_stride;
    int8_t* qr = q + t * cols;
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = xr + b * block;
      auto amax = hn::Zero(df), poison = hn::Zero(df);  // poison: NaN where a value is NaN or infinite
      for (int64_t i = 0; i < block; i += N) {
        const auto v = hn::LoadU(df, xb + i);
        amax = hn::Max(amax, hn::Abs(v));
        poison = hn::Add(poison, hn::Mul(v, hn::Zero(df)));
      }
      const float m = hn::GetLane(hn::MaxOfLanes(df, amax));
      float scale = m / 127.0f, inv = m > 0.0f ? 127.0f / m : 0.0f;
      if (!(inv <= std::numeric_limits<float>::max())) scale = inv = 0.0f;  // subnormal: rounds to zeros
      if (hn::GetLane(hn::SumOfLanes(df, poison)) != 0.0f) {                 // the product's results are NaN
        scale = std::numeric_limits<float>::quiet_NaN();
        inv = 0.0f;
      }
      d[t * nb + b] = scale;
      const auto vinv = hn::Set(df, inv);
      for (int64_t i = 0; i < block; i += N)
        hn::StoreU(hn::DemoteTo(d8, hn::NearestInt(hn::Mul(hn::LoadU(df, xb + i), vinv))), d8, qr + b * block + i);
    }
    int16_t* sr = sums16 + t * (cols / 16);
    for (int64_t i = 0; i < cols / 16; ++i) {
      int32_t s = 0;
      for (int64_t j = 0; j < 16; ++j) s += qr[16 * i + j];
      sr[i] = static_cast<int16_t>(s);
    }
  }
}

// ---- the product for Q4_K and Q5_K (Q6_K and the 32-value formats: q8_matmul_q6.cpp) ----

// Returns false when the format has no integer product here.
bool Q8MatmulRowsKImpl(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                       int64_t out_stride, int64_t panel_rows) {
  switch (w.type) {
    case TensorType::Q4_K: ProductWith<Q4KInt>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    case TensorType::Q5_K: ProductWith<Q5KInt>(w, r0, r1, x, out, out_stride, panel_rows); return true;
    default: return false;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <stdexcept>
#include <string>

namespace fafo::cpu {

HWY_EXPORT(QuantizeImpl);
HWY_EXPORT(Q8MatmulRowsKImpl);

void QuantizedActivations::resize(int64_t n_rows, int64_t n_cols, int64_t n_block) {
  rows = n_rows;
  cols = n_cols;
  block = n_block;
  q.resize(static_cast<size_t>(rows * cols));
  d.resize(static_cast<size_t>(rows * (cols / block)));
  sums16.resize(static_cast<size_t>(rows * (cols / 16)));
  sums32.resize(static_cast<size_t>(rows * (cols / 32)));
  d_by_block.resize(static_cast<size_t>((rows + kPadding) * (cols / block)));
}

int64_t q8_activation_block(TensorType type, int64_t cols) {
  switch (type) {
    case TensorType::Q4_K: case TensorType::Q5_K: case TensorType::Q6_K: case TensorType::IQ4_XS:
    case TensorType::IQ2_XXS: case TensorType::IQ2_XS: case TensorType::IQ3_XXS: case TensorType::IQ3_S:
      return quant::kSuperBlock;
    case TensorType::Q8_0: case TensorType::Q4_0: case TensorType::Q4_1: case TensorType::Q5_0: case TensorType::Q5_1:
    case TensorType::IQ4_NL: case TensorType::MXFP4:
      return cols % quant::kSuperBlock == 0 ? quant::kSuperBlock : quant::kLegacyBlock;
    default: return 0;
  }
}

void quantize_activations(const float* x, int64_t x_stride, int64_t t0, int64_t t1, QuantizedActivations& out) {
  HWY_DYNAMIC_DISPATCH(QuantizeImpl)(x, x_stride, t0, t1, out.cols, out.block, out.q.data(), out.d.data(),
                                     out.sums16.data());
  const int64_t n32 = out.cols / 32, per_block = out.block / 32, nb = out.cols / out.block;
  for (int64_t t = t0; t < t1; ++t) {
    for (int64_t b = 0; b < nb; ++b)
      out.d_by_block[static_cast<size_t>(b * (out.rows + QuantizedActivations::kPadding) + t)] =
          out.d[static_cast<size_t>(t * nb + b)];
    const int16_t* s = out.sums16.data() + t * (out.cols / 16);
    const float* d = out.d.data() + t * (out.cols / out.block);
    float* m = out.sums32.data() + t * n32;
    for (int64_t i = 0; i < n32; ++i) m[i] = static_cast<float>(int32_t{s[2 * i]} + s[2 * i + 1]) * d[i / per_block];
  }
}

void q8_matmul_rows(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                    int64_t out_stride) {
  if (q8_activation_block(w.type, w.cols) != x.block || w.cols != x.cols || x.cols % x.block != 0)
    throw std::logic_error("q8_matmul_rows: activations rounded for another format or width");
  if (w.groups != nullptr) {
    q8_matmul_groups(w, r0, r1, x, out, out_stride, matmul_panel_rows(w.cols));
    return;
  }
  if (w.type == TensorType::IQ2_XXS || w.type == TensorType::IQ2_XS || w.type == TensorType::IQ3_XXS ||
      w.type == TensorType::IQ3_S) {
    q8_matmul_rows_grid(w, r0, r1, x, out, out_stride, matmul_panel_rows(w.cols));
    return;
  }
  if (w.type == TensorType::IQ4_NL || w.type == TensorType::IQ4_XS || w.type == TensorType::MXFP4) {
    q8_matmul_rows_table(w, r0, r1, x, out, out_stride, matmul_panel_rows(w.cols));
    return;
  }
  if (w.type != TensorType::Q4_K && w.type != TensorType::Q5_K) {
    q8_matmul_rows_q6(w, r0, r1, x, out, out_stride, matmul_panel_rows(w.cols));
    return;
  }
  HWY_DYNAMIC_DISPATCH(Q8MatmulRowsKImpl)(w, r0, r1, x, out, out_stride, matmul_panel_rows(w.cols));
}

}  // namespace fafo::cpu
#endif  // HWY_ONCE
