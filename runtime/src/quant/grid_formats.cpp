// The codebook ("grid") formats IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S (layouts: blocks.h,
// codebooks: iq_grids.h): dequantization in ggml's expressions and order, so the values
// are llama.cpp's to the bit (tests/test_grid_formats.cpp):
//   IQ2_XXS, IQ2_XS: ((d * (0.5 + s)) * 0.25 * grid) * (+-1)
//   IQ3_XXS:         ((d * (0.5 + s)) * 0.5 * grid) * (+-1)
//   IQ3_S:           ((d * (1 + 2 s)) * grid) * (+-1)
// A minus sign flips the sign bit of (db * grid), as ggml's compiled code does (see
// put_vector), a NaN's included.
//
// fafo writes the IQ3 ones (grid_quantize.cpp), not the IQ2 ones: llama.cpp quantizes to
// those only with an importance matrix, which fafo quantize does not take.
#include <cstdint>
#include <cstring>

#include "fafo/tensor_type.h"
#include "quant/blocks.h"
#include "quant/formats.h"
#include "quant/iq_grids.h"

namespace fafo::quant {

namespace {

constexpr int kGroups = kSuperBlock / 32;

// Writes the 8 values of one vector: db times grid value j, its sign bit flipped where
// bit j of the signs is set. ggml writes (db * g) * (+-1.f), which GCC compiles to the
// same flip (x * -1 as -x), so a NaN's sign flips too; branch-free so that it vectorizes.
inline void put_vector(float db, uint64_t entry, uint32_t signs, float* y) {
  for (int j = 0; j < 8; ++j) {
    const float v = db * static_cast<float>((entry >> (8 * j)) & 0xffu);
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    bits ^= ((signs >> j) & 1u) << 31;
    std::memcpy(&y[j], &bits, sizeof bits);
  }
}

// The same from two half-vector entries of 4 values each (the IQ3 codebooks).
inline void put_halves(float db, uint64_t first, uint64_t second, uint32_t signs, float* y) {
  put_vector(db, first | (second << 32), signs, y);
}

}  // namespace

void dequantize_iq2_xxs(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto block = load_block<BlockIq2Xxs>(src, i);
    const float d = fp16_to_fp32(block.d);
    const auto* qs = reinterpret_cast<const uint8_t*>(block.qs);
    for (int ib = 0; ib < kGroups; ++ib) {
      const uint32_t indices = load_u32(qs + 8 * ib), rest = load_u32(qs + 8 * ib + 4);
      const float db = d * (0.5f + static_cast<float>(rest >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l, dst += 8)
        put_vector(db, kIq2xxsGrid[(indices >> (8 * l)) & 0xffu], iq2_signs(rest >> (7 * l)), dst);
    }
  }
}

void dequantize_iq2_xs(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto block = load_block<BlockIq2Xs>(src, i);
    const float d = fp16_to_fp32(block.d);
    for (int ib = 0; ib < kGroups; ++ib) {
      const float db[2] = {d * (0.5f + static_cast<float>(block.scales[ib] & 0xf)) * 0.25f,
                           d * (0.5f + static_cast<float>(block.scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, dst += 8) {
        const uint32_t q = block.qs[4 * ib + l];
        put_vector(db[l / 2], kIq2xsGrid[q & 511u], iq2_signs(q >> 9), dst);
      }
    }
  }
}

void dequantize_iq3_xxs(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto block = load_block<BlockIq3Xxs>(src, i);
    const float d = fp16_to_fp32(block.d);
    const uint8_t* qs = block.qs;
    const uint8_t* scales_and_signs = block.qs + kSuperBlock / 4;
    for (int ib = 0; ib < kGroups; ++ib, qs += 8) {
      const uint32_t word = load_u32(scales_and_signs + 4 * ib);
      const float db = d * (0.5f + static_cast<float>(word >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l, dst += 8)
        put_halves(db, kIq3xxsGrid[qs[2 * l]], kIq3xxsGrid[qs[2 * l + 1]], iq2_signs(word >> (7 * l)), dst);
    }
  }
}

void dequantize_iq3_s(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto block = load_block<BlockIq3S>(src, i);
    const float d = fp16_to_fp32(block.d);
    for (int ib = 0; ib < kGroups; ++ib) {
      const uint32_t s = (block.scales[ib / 2] >> (4 * (ib % 2))) & 0xfu;
      const float db = d * static_cast<float>(1 + 2 * static_cast<int>(s));
      const uint8_t* qs = block.qs + 8 * ib;
      const uint32_t qh = block.qh[ib];
      for (int l = 0; l < 4; ++l, dst += 8) {
        const uint32_t first = qs[2 * l] | (((qh >> (2 * l)) & 1u) << 8);
        const uint32_t second = qs[2 * l + 1] | (((qh >> (2 * l + 1)) & 1u) << 8);
        put_halves(db, kIq3sGrid[first], kIq3sGrid[second], block.signs[4 * ib + l], dst);
      }
    }
  }
}

}  // namespace fafo::quant
