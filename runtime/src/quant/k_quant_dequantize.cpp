// Dequantization of the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and Q8_K.
//
// Each loop walks a super-block in the order of its packed layout (see blocks.h) and
// evaluates the same float expressions as ggml, in the same order, so the results are bit
// for bit ggml's:
//   Q2_K  (d * sc) * q - (dmin * mn)
//   Q3_K  (d * (sc - 32)) * (q - 4)
//   Q4_K, Q5_K  (d * sc) * q - (dmin * mn)
//   Q6_K  (d * sc) * (q - 32)
// with d and dmin read from fp16 and the integer factors converted to float exactly.
#include <cstdint>

#include "fafo/tensor_type.h"
#include "quant/blocks.h"
#include "quant/formats.h"

// Built with -ffp-contract=off (runtime/CMakeLists.txt): see there why.

namespace fafo::quant {

void dequantize_q2_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += kSuperBlock) {
    const auto block = load_block<BlockQ2_K>(src, i);
    const float d = fp16_to_fp32(block.d);
    const float dmin = fp16_to_fp32(block.dmin);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* qs = block.qs + 32 * half;
      for (int plane = 0; plane < 4; ++plane) {   // 2-bit plane: bits 2*plane..2*plane+1
        for (int part = 0; part < 2; ++part) {     // two sub-blocks of 16 per plane
          const int sub = 8 * half + 2 * plane + part;
          const float dl = d * static_cast<float>(block.scales[sub] & 0x0f);
          const float ml = dmin * static_cast<float>(block.scales[sub] >> 4);
          float* y = dst + 16 * sub;
          for (int l = 0; l < 16; ++l) {
            const int q = (qs[16 * part + l] >> (2 * plane)) & 3;
            y[l] = dl * static_cast<float>(q) - ml;
          }
        }
      }
    }
  }
}

void dequantize_q3_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += kSuperBlock) {
    const auto block = load_block<BlockQ3_K>(src, i);
    const float d = fp16_to_fp32(block.d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* qs = block.qs + 32 * half;
      for (int plane = 0; plane < 4; ++plane) {
        const int high_bit = 4 * half + plane;  // bit of hmask[] holding bit 2 of q
        for (int part = 0; part < 2; ++part) {
          const int sub = 8 * half + 2 * plane + part;
          const float dl = d * static_cast<float>(unpack_scale_q3_k(block.scales, sub) - 32);
          float* y = dst + 16 * sub;
          for (int l = 0; l < 16; ++l) {
            const int m = 16 * part + l;
            const int low = (qs[m] >> (2 * plane)) & 3;
            const int q = low - (((block.hmask[m] >> high_bit) & 1) ? 0 : 4);
            y[l] = dl * static_cast<float>(q);
          }
        }
      }
    }
  }
}

void dequantize_q4_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += kSuperBlock) {
    const auto block = load_block<BlockQ4_K>(src, i);
    const float d = fp16_to_fp32(block.d);
    const float dmin = fp16_to_fp32(block.dmin);
    for (int chunk = 0; chunk < 4; ++chunk) {  // 64 values: sub-blocks 2*chunk (low nibbles), 2*chunk+1 (high)
      const ScaleMin lo = unpack_scale_min_k4(block.scales, 2 * chunk);
      const ScaleMin hi = unpack_scale_min_k4(block.scales, 2 * chunk + 1);
      const float d1 = d * static_cast<float>(lo.scale);
      const float m1 = dmin * static_cast<float>(lo.min);
      const float d2 = d * static_cast<float>(hi.scale);
      const float m2 = dmin * static_cast<float>(hi.min);
      const uint8_t* qs = block.qs + 32 * chunk;
      float* y = dst + 64 * chunk;
      for (int l = 0; l < 32; ++l) y[l] = d1 * static_cast<float>(qs[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) y[32 + l] = d2 * static_cast<float>(qs[l] >> 4) - m2;
    }
  }
}

void dequantize_q5_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += kSuperBlock) {
    const auto block = load_block<BlockQ5_K>(src, i);
    const float d = fp16_to_fp32(block.d);
    const float dmin = fp16_to_fp32(block.dmin);
    for (int chunk = 0; chunk < 4; ++chunk) {
      const ScaleMin lo = unpack_scale_min_k4(block.scales, 2 * chunk);
      const ScaleMin hi = unpack_scale_min_k4(block.scales, 2 * chunk + 1);
      const float d1 = d * static_cast<float>(lo.scale);
      const float m1 = dmin * static_cast<float>(lo.min);
      const float d2 = d * static_cast<float>(hi.scale);
      const float m2 = dmin * static_cast<float>(hi.min);
      const uint8_t* qs = block.qs + 32 * chunk;
      float* y = dst + 64 * chunk;
      for (int l = 0; l < 32; ++l) {
        const int q = (qs[l] & 0x0f) | (((block.qh[l] >> (2 * chunk)) & 1) << 4);
        y[l] = d1 * static_cast<float>(q) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int q = (qs[l] >> 4) | (((block.qh[l] >> (2 * chunk + 1)) & 1) << 4);
        y[32 + l] = d2 * static_cast<float>(q) - m2;
      }
    }
  }
}

void dequantize_q6_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += kSuperBlock) {
    const auto block = load_block<BlockQ6_K>(src, i);
    const float d = fp16_to_fp32(block.d);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = block.ql + 64 * half;
      const uint8_t* qh = block.qh + 32 * half;
      float* y = dst + 128 * half;
      for (int k = 0; k < 4; ++k) {  // 32 values each: low nibbles of ql[0..32), ql[32..64), then high nibbles
        const int nibble_shift = k < 2 ? 0 : 4;
        const uint8_t* low_bits = ql + 32 * (k % 2);
        for (int l = 0; l < 32; ++l) {
          const int q = ((low_bits[l] >> nibble_shift) & 0x0f) | (((qh[l] >> (2 * k)) & 3) << 4);
          const int v = 32 * k + l;
          const float scale = d * static_cast<float>(block.scales[8 * half + v / 16]);
          y[v] = scale * static_cast<float>(q - 32);
        }
      }
    }
  }
}

void dequantize_q8_k(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += kSuperBlock) {
    const auto block = load_block<BlockQ8_K>(src, i);
    for (int j = 0; j < kSuperBlock; ++j) dst[j] = block.d * static_cast<float>(block.qs[j]);
  }
}

}  // namespace fafo::quant
