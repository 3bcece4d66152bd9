// The formats whose 4-bit codes index a table of 16 values: IQ4_NL, IQ4_XS (the
// non-linear grid kIq4nlValues) and MXFP4 (twice the fp4 E2M1 numbers, kMxfp4Values).
//
// Dequantization evaluates ggml's expressions in its order: d * value (IQ4_NL),
// (d * (scale - 32)) * value (IQ4_XS), value * 2^(e - 128) (MXFP4).
//
// Quantization is llama.cpp's without an importance matrix (llama-quantize's
// quantize_iq4_nl / quantize_iq4_xs / quantize_mxfp4), the same float operations in the
// same order, so it writes llama.cpp's bits (tests/test_table_formats.cpp compares them):
//   IQ4_NL / IQ4_XS: per 32 values, each value weighted by its square, a scale from the
//     value of largest magnitude (mapped to -127), then 15 more scales tried around it,
//     keeping the one with the best weighted fit; IQ4_XS then stores the sub-block scales
//     as 6-bit multiples of a super-block d (the largest scale / -32) and picks the codes
//     again for the stored scale.
//   MXFP4: e = floor(log2(max |x|)) - 2 + 127 (clamped to 0..254, where ggml's cast would
//     be undefined), each value the nearest of the 16 (the lower code on ties).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "fafo/tensor_type.h"
#include "quant/blocks.h"
#include "quant/formats.h"

// Built with -ffp-contract=off (runtime/CMakeLists.txt): llama.cpp's quantizer has no
// fused multiply-adds either.

namespace fafo::quant {

namespace {

constexpr int kCodePairs = kLegacyBlock / 2;
constexpr int kIq4XsSubBlocks = kSuperBlock / kLegacyBlock;
constexpr float kIq4MinAbsMax = 1e-15f;  // a sub-block with max |x| below this gets scale 0

// The index of the entry of `values` (16 ascending) nearest to x: the ends for x beyond
// them, the upper of two on a tie; NaN gives 15 (as ggml's search does).
int best_table_index(const int8_t* values, float x) {
  if (x <= values[0]) return 0;
  if (x >= values[15]) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (x < values[mid]) hi = mid;
    else lo = mid;
  }
  return x - values[hi - 1] < values[hi] - x ? hi - 1 : hi;
}

void pack_table_codes(const uint8_t* codes, uint8_t* qs) {
  for (int j = 0; j < kCodePairs; ++j) qs[j] = static_cast<uint8_t>(codes[j] | (codes[j + kCodePairs] << 4));
}

// The weighted least-squares scale of one sub-block of 32 (the codes found on the way are
// not kept: the callers pick them again for the scale they store).
float iq4_sub_block_scale(const float* x) {
  float weight[kLegacyBlock];
  for (int j = 0; j < kLegacyBlock; ++j) weight[j] = x[j] * x[j];
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kLegacyBlock; ++j) {
    const float ax = std::fabs(x[j]);
    if (ax > amax) {
      amax = ax;
      max = x[j];
    }
  }
  if (amax < kIq4MinAbsMax) return 0.0f;
  const auto* values = kIq4nlValues;
  constexpr int kTries = 7;
  float d = -max / static_cast<float>(values[0]);
  float id = 1 / d;
  float sumqx = 0, sumq2 = 0;
  for (int j = 0; j < kLegacyBlock; ++j) {
    const auto q = static_cast<float>(values[best_table_index(values, id * x[j])]);
    const float w = weight[j];
    sumqx += w * q * x[j];
    sumq2 += w * q * q;
  }
  d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int itry = -kTries; itry <= kTries; ++itry) {
    id = static_cast<float>(itry + values[0]) / max;
    sumqx = sumq2 = 0;
    for (int j = 0; j < kLegacyBlock; ++j) {
      const auto q = static_cast<float>(values[best_table_index(values, id * x[j])]);
      const float w = weight[j];
      sumqx += w * q * x[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

}  // namespace

// ---- dequantization ----

void dequantize_iq4_nl(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += kLegacyBlock) {
    const auto block = load_block<BlockIq4Nl>(src, i);
    const float d = fp16_to_fp32(block.d);
    for (int j = 0; j < kCodePairs; ++j) {
      dst[j] = d * static_cast<float>(kIq4nlValues[block.qs[j] & 0x0f]);
      dst[j + kCodePairs] = d * static_cast<float>(kIq4nlValues[block.qs[j] >> 4]);
    }
  }
}

void dequantize_iq4_xs(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto block = load_block<BlockIq4Xs>(src, i);
    const float d = fp16_to_fp32(block.d);
    for (int ib = 0; ib < kIq4XsSubBlocks; ++ib, dst += kLegacyBlock) {
      const float dl = d * static_cast<float>(unpack_scale_iq4_xs(block.scales_h, block.scales_l, ib) - 32);
      const uint8_t* qs = block.qs + kCodePairs * ib;
      for (int j = 0; j < kCodePairs; ++j) {
        dst[j] = dl * static_cast<float>(kIq4nlValues[qs[j] & 0x0f]);
        dst[j + kCodePairs] = dl * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
      }
    }
  }
}

void dequantize_mxfp4(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += kLegacyBlock) {
    const auto block = load_block<BlockMxfp4>(src, i);
    const float d = e8m0_half_to_fp32(block.e);
    for (int j = 0; j < kCodePairs; ++j) {
      dst[j] = static_cast<float>(kMxfp4Values[block.qs[j] & 0x0f]) * d;
      dst[j + kCodePairs] = static_cast<float>(kMxfp4Values[block.qs[j] >> 4]) * d;
    }
  }
}

// ---- quantization ----

void quantize_iq4_nl(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += kLegacyBlock) {
    BlockIq4Nl block{};
    const float scale = iq4_sub_block_scale(src);
    block.d = fp32_to_fp16(scale);
    const float id = scale != 0.0f ? 1 / scale : 0.0f;  // the unrounded scale, as llama.cpp
    uint8_t codes[kLegacyBlock];
    for (int j = 0; j < kLegacyBlock; ++j) codes[j] = static_cast<uint8_t>(best_table_index(kIq4nlValues, id * src[j]));
    pack_table_codes(codes, block.qs);
    store_block(dst, i, block);
  }
}

void quantize_iq4_xs(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += kSuperBlock) {
    BlockIq4Xs block{};
    float scales[kIq4XsSubBlocks];
    float max_scale = 0.0f, amax_scale = 0.0f;
    for (int ib = 0; ib < kIq4XsSubBlocks; ++ib) {
      scales[ib] = iq4_sub_block_scale(src + kLegacyBlock * ib);
      if (std::fabs(scales[ib]) > amax_scale) {
        amax_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    const float d = -max_scale / 32;
    block.d = fp32_to_fp16(d);
    const float id = d != 0.0f ? 1 / d : 0.0f;
    for (int ib = 0; ib < kIq4XsSubBlocks; ++ib) {
      int l = nearest_int_even(id * scales[ib]);
      l = l < -32 ? -32 : (l > 31 ? 31 : l);
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0.0f ? 1 / dl : 0.0f;
      const float* xb = src + kLegacyBlock * ib;
      uint8_t codes[kLegacyBlock];
      for (int j = 0; j < kLegacyBlock; ++j) codes[j] = static_cast<uint8_t>(best_table_index(kIq4nlValues, idl * xb[j]));
      pack_table_codes(codes, block.qs + kCodePairs * ib);
      const int biased = l + 32;
      block.scales_l[ib / 2] = static_cast<uint8_t>(block.scales_l[ib / 2] | ((biased & 0x0f) << (4 * (ib % 2))));
      block.scales_h = static_cast<uint16_t>(block.scales_h | ((biased >> 4) << (2 * ib)));
    }
    store_block(dst, i, block);
  }
}

void quantize_mxfp4(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += kLegacyBlock) {
    BlockMxfp4 block{};
    float amax = 0.0f;
    for (int j = 0; j < kLegacyBlock; ++j)
      if (amax < std::fabs(src[j])) amax = std::fabs(src[j]);
    if (amax > 0.0f) {
      const float e = std::floor(std::log2(amax)) - 2 + 127;
      block.e = static_cast<uint8_t>(e < 0.0f ? 0.0f : (e > 254.0f ? 254.0f : e));
    }
    const float d = e8m0_half_to_fp32(block.e);
    uint8_t codes[kLegacyBlock];
    for (int j = 0; j < kLegacyBlock; ++j) {
      int best = 0;
      float best_err = std::fabs(static_cast<float>(kMxfp4Values[0]) * d - src[j]);
      for (int k = 1; k < 16; ++k) {
        const float err = std::fabs(static_cast<float>(kMxfp4Values[k]) * d - src[j]);
        if (err < best_err) {
          best = k;
          best_err = err;
        }
      }
      codes[j] = static_cast<uint8_t>(best);
    }
    pack_table_codes(codes, block.qs);
    store_block(dst, i, block);
  }
}

}  // namespace fafo::quant
