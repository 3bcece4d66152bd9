// SIMD decoders and the token-tiled matrix product of the `cpu` backend (see
// simd_matmul.h): whole rows decoded, the float product (the formats without an integer
// one: F32, F16, BF16, Q2_K, Q3_K), fp16 rounding of activations; the shared
// per-target code is simd_matmul-inl.h. Highway compiles this file once per
// instruction set (foreach_target.h re-includes it) and HWY_DYNAMIC_DISPATCH picks the
// best the CPU has at run time.
//
// Built with -ffp-contract=off (runtime/CMakeLists.txt), as simd_matmul-inl.h says.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/simd_matmul.h"
#include "fafo/tensor_type.h"

// Arrays of vectors (the tiles' accumulators) need vectors of a size known when compiling.
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS (HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128 | HWY_RVV)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/simd_matmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// The shared per-target code, after highway.h:
#include "backend/cpu/simd_matmul-inl.h"

HWY_BEFORE_NAMESPACE();
namespace fafo::cpu {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Returns false when the format has no SIMD decoder here.
bool DecodeRow(TensorType type, const uint8_t* src, float* dst, int64_t n) {
  switch (type) {
    case TensorType::Q4_K: DecodeRowWith<Q4KDecoder>(src, dst, n); return true;
    case TensorType::Q5_K: DecodeRowWith<Q5KDecoder>(src, dst, n); return true;
    case TensorType::Q6_K: DecodeRowWith<Q6KDecoder>(src, dst, n); return true;
    case TensorType::Q8_0: DecodeRowWith<Q8_0Decoder>(src, dst, n); return true;
    case TensorType::Q4_0: DecodeRowWith<Q4_0Decoder>(src, dst, n); return true;
    case TensorType::Q4_1: DecodeRowWith<Q4_1Decoder>(src, dst, n); return true;
    case TensorType::Q5_0: DecodeRowWith<Q5_0Decoder>(src, dst, n); return true;
    case TensorType::Q5_1: DecodeRowWith<Q5_1Decoder>(src, dst, n); return true;
    case TensorType::F16: DecodeRowWith<F16Decoder>(src, dst, n); return true;
    case TensorType::BF16: DecodeRowWith<BF16Decoder>(src, dst, n); return true;
    case TensorType::F32: DecodeRowWith<F32Decoder>(src, dst, n); return true;
    default: return false;
  }
}

void DequantizeRowImpl(TensorType type, const uint8_t* src, float* dst, int64_t n) {
  if (!DecodeRow(type, src, dst, n)) dequantize_row(type, src, dst, n);
}

bool HasDecoderImpl(TensorType type) {
  switch (type) {
    case TensorType::Q4_K: case TensorType::Q5_K: case TensorType::Q6_K: case TensorType::Q8_0:
    case TensorType::Q4_0: case TensorType::Q4_1: case TensorType::Q5_0: case TensorType::Q5_1:
    case TensorType::F16: case TensorType::BF16: case TensorType::F32: return true;
    default: return false;
  }
}

// Returns false when the format has no fused product. With `x_half` (the activations as
// fp16, same stride), F16 weights read it instead of x: half the bytes, which measured
// 1.6x faster one-token steps (F16 TinyLlama on AVX-512, one thread: 12.4 against 7.9
// tokens/s).
bool Fused(const host::HostWeight& w, int64_t r0, int64_t r1, const float* x, const uint16_t* x_half,
           int64_t x_stride, int64_t T, float* out, int64_t out_stride) {
  const auto* xh = reinterpret_cast<const hwy::float16_t*>(x_half);
  if (xh != nullptr && w.type == TensorType::F16) {
    FusedProduct<F16Decoder>(w, r0, r1, xh, x_stride, T, out, out_stride);
    return true;
  }
  switch (w.type) {
    case TensorType::F16: FusedProduct<F16Decoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    case TensorType::BF16: FusedProduct<BF16Decoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    case TensorType::F32: FusedProduct<F32Decoder>(w, r0, r1, x, x_stride, T, out, out_stride); return true;
    default: return false;
  }
}

// Rows [p0, p1) of a decoded panel (row r at scratch + (r - p0) * cols) against tokens
// [t0, t0 + NT), by tiles of kRows rows.
template <size_t NT>
void PanelTiles(const float* scratch, int64_t p0, int64_t p1, int64_t cols, const float* x, int64_t x_stride, int64_t t0,
                float* out, int64_t out_stride) {
  for (int64_t b0 = p0; b0 < p1; b0 += static_cast<int64_t>(kRows)) {
    const int64_t rows = std::min<int64_t>(static_cast<int64_t>(kRows), p1 - b0);
    const float* wr[kRows];
    for (size_t r = 0; r < kRows; ++r)
      wr[r] = scratch + (b0 - p0 + (static_cast<int64_t>(r) < rows ? static_cast<int64_t>(r) : 0)) * cols;
    TileOut<kRows, NT>(wr, rows, x, x_stride, t0, cols, out, out_stride, b0);
  }
}

void MatmulRowsImpl(const host::HostWeight& w, int64_t r0, int64_t r1, const float* x, const uint16_t* x_half,
                    int64_t x_stride, int64_t T, float* out, int64_t out_stride, float* scratch, int64_t panel_rows) {
  if (T <= kFusedMaxT && Fused(w, r0, r1, x, x_half, x_stride, T, out, out_stride)) return;
  const int64_t cols = w.cols;
  // Larger steps: panels of dequantized rows (decoded once), each multiplied with every
  // token tile while it is hot in cache.
  for (int64_t p0 = r0; p0 < r1; p0 += panel_rows) {
    const int64_t p1 = std::min(r1, p0 + panel_rows);
    for (int64_t r = p0; r < p1; ++r) {
      const uint8_t* src = w.data + static_cast<size_t>(r) * w.row_bytes;
      DequantizeRowImpl(w.type, src, scratch + (r - p0) * cols, cols);
    }
    if (T == 1) {
      for (int64_t b0 = p0; b0 < p1; ++b0) {
        const float* wr[1] = {scratch + (b0 - p0) * cols};
        RowBlock<kRowsOneToken>(wr, 1, x, x_stride, T, cols, out, out_stride, b0);
      }
      continue;
    }
    // Token tiles outer, row tiles inner: a tile's tokens stay in L1 while the panel
    // (in L2) passes under them.
    int64_t t = 0;
    for (; t + static_cast<int64_t>(kTokens) <= T; t += kTokens)
      PanelTiles<kTokens>(scratch, p0, p1, cols, x, x_stride, t, out, out_stride);
    switch (T - t) {
      case 3: PanelTiles<3>(scratch, p0, p1, cols, x, x_stride, t, out, out_stride); break;
      case 2: PanelTiles<2>(scratch, p0, p1, cols, x, x_stride, t, out, out_stride); break;
      case 1: PanelTiles<1>(scratch, p0, p1, cols, x, x_stride, t, out, out_stride); break;
      default: break;
    }
  }
}

// Activations to fp16 (rounded to nearest even; overflow gives infinity and NaN stays
// NaN, as the CPU's conversion instruction does) and back to floats. Highway converts
// by truncation on targets without that instruction (x86 before AVX2, the portable
// emulation), so those convert value by value like the reference's fp32_to_fp16.
void RoundToHalfImpl(const float* x, int64_t n, uint16_t* half, float* rounded) {
  int64_t i = 0;
#if !(HWY_TARGET == HWY_SSE4 || HWY_TARGET == HWY_SSSE3 || HWY_TARGET == HWY_EMU128 || HWY_TARGET == HWY_SCALAR)
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  auto* h = reinterpret_cast<hwy::float16_t*>(half);
  for (; i + N <= n; i += N) {
    const auto v = hn::DemoteTo(DF16(), hn::LoadU(df, x + i));
    if (h != nullptr) hn::StoreU(v, DF16(), h + i);
    hn::StoreU(hn::PromoteTo(df, v), df, rounded + i);
  }
#endif
  for (; i < n; ++i) {
    const uint16_t b = fp32_to_fp16(x[i]);
    if (half != nullptr) half[i] = b;
    rounded[i] = fp16_to_fp32(b);
  }
}

const char* TargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace fafo::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace fafo::cpu {

HWY_EXPORT(MatmulRowsImpl);
HWY_EXPORT(DequantizeRowImpl);
HWY_EXPORT(HasDecoderImpl);
HWY_EXPORT(TargetNameImpl);
HWY_EXPORT(RoundToHalfImpl);

namespace {
// About 256 KiB of dequantized rows per panel: they stay in the core's L2 cache while
// every token tile passes over them.
constexpr int64_t kPanelBytes = 256 * 1024;
}  // namespace

int64_t matmul_panel_rows(int64_t cols) {
  const int64_t rows = kPanelBytes / (std::max<int64_t>(1, cols) * static_cast<int64_t>(sizeof(float)));
  return std::clamp<int64_t>(rows / 8 * 8, 8, 64);
}

size_t matmul_scratch_floats(int64_t cols) { return static_cast<size_t>(matmul_panel_rows(cols) * cols); }

void matmul_rows(const host::HostWeight& w, int64_t r0, int64_t r1, const float* x, const uint16_t* x_half,
                 int64_t x_stride, int64_t T, float* out, int64_t out_stride, float* scratch) {
  HWY_DYNAMIC_DISPATCH(MatmulRowsImpl)(w, r0, r1, x, x_half, x_stride, T, out, out_stride, scratch,
                                       matmul_panel_rows(w.cols));
}

bool rounds_activations_to_half(TensorType type) { return type == TensorType::F16; }

void round_to_half(const float* x, int64_t n, uint16_t* half, float* rounded) {
  HWY_DYNAMIC_DISPATCH(RoundToHalfImpl)(x, n, half, rounded);
}

void dequantize_row_simd(TensorType type, const uint8_t* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(DequantizeRowImpl)(type, src, dst, n);
}

bool has_simd_decoder(TensorType type) { return HWY_DYNAMIC_DISPATCH(HasDecoderImpl)(type); }

const char* simd_target_name() {
  // Highway's target names, in the words CPU vendors use.
  const std::string_view name = HWY_DYNAMIC_DISPATCH(TargetNameImpl)();
  if (name == "AVX3") return "AVX-512";
  if (name == "AVX3_DL") return "AVX-512 with VNNI";
  if (name == "AVX3_ZEN4") return "AVX-512 (Zen 4)";
  if (name == "SSE4") return "SSE4.2";
  if (name == "EMU128" || name == "SCALAR") return "scalar";
  return HWY_DYNAMIC_DISPATCH(TargetNameImpl)();
}

std::vector<std::string> simd_targets() {
  std::vector<std::string> names;  // what the CPU runs, whatever use_simd_target chose
  for (const int64_t t : hwy::SupportedAndGeneratedTargets()) names.emplace_back(hwy::TargetName(t));
  return names;
}

void use_simd_target(const std::string& name) {
  hwy::SetSupportedTargetsForTest(0);  // every target again, then the one asked for
  if (name.empty()) return;
  for (const int64_t t : hwy::SupportedAndGeneratedTargets())
    if (name == hwy::TargetName(t)) {
      hwy::SetSupportedTargetsForTest(t);
      return;
    }
  throw std::invalid_argument("use_simd_target: '" + name + "' is not an instruction set this build runs here");
}

}  // namespace fafo::cpu
#endif  // HWY_ONCE

