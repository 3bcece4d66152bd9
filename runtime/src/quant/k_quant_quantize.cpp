// Quantization to the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) and Q8_K.
//
// Two levels, as the formats themselves:
//  1. Each sub-block (16 or 32 values) gets a float scale (and for Q2_K/Q4_K/Q5_K a min)
//     that minimises the squared error. We try 21 candidate step sizes around the obvious
//     one (the value range spread over levels +- 1), round the values with each, refit the
//     scale (and min) by least squares for those codes, keep the best, then re-round and
//     refit twice more.
//  2. The sub-block scales (and mins) are themselves quantized against one fp16 super-block
//     scale: 4 bits for Q2_K, 6 bits for Q3_K/Q4_K/Q5_K, 8 bits for Q6_K. Finally every value
//     is rounded again against the scale and min it will really be decoded with.
// This is not llama.cpp's code and the bits usually differ from llama-quantize's, but the
// blocks are valid and the error matches llama.cpp's (no importance matrix). Because the
// candidate window covers the step sizes llama.cpp's own search tries, re-quantizing values
// decoded from a llama.cpp file mostly reproduces them exactly (Q2_K always, in our tests).
// Cost: about 2.5 s (Q4_K) and 4 s (Q6_K) per 4096 x 14336 matrix on one core.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "fafo/tensor_type.h"
#include "quant/blocks.h"
#include "quant/formats.h"

namespace fafo::quant {

namespace {

// Candidate step sizes: (levels + k * kStepDelta) / range for k in [-kSteps, kSteps].
constexpr int kSteps = 10;
constexpr float kStepDelta = 0.1f;
// Re-round-and-refit passes after the best candidate.
constexpr int kRefineIterations = 2;

// x ~ scale * q - min with q in [0, levels], scale >= 0, min >= 0.
struct AffineFit {
  float scale = 0.0f;
  float min = 0.0f;
};

// Sums over a sub-block for a least-squares fit of x against codes q.
struct FitSums {
  float count = 0.0f;
  float q = 0.0f;
  float qq = 0.0f;
  float qx = 0.0f;
  float x = 0.0f;
  float xx = 0.0f;
};

// The least-squares x ~ scale * q - min for fixed codes, with min >= 0 enforced, and its
// squared error. Returns false when the codes cannot give a positive scale.
bool solve_affine(const FitSums& s, AffineFit& fit, float& err) {
  float scale = 0.0f;
  float offset = 0.0f;  // x ~ scale * q + offset, offset = -min
  const float det = s.count * s.qq - s.q * s.q;
  if (det > 0.0f) {
    scale = (s.count * s.qx - s.q * s.x) / det;
    offset = (s.qq * s.x - s.q * s.qx) / det;
  }
  if (det <= 0.0f || offset > 0.0f) {  // the format needs min >= 0: refit through the origin
    offset = 0.0f;
    scale = s.qq > 0.0f ? s.qx / s.qq : 0.0f;
  }
  if (!(scale > 0.0f)) return false;
  // The residual of a least-squares fit is sum x^2 - (scale * sum qx + offset * sum x); this
  // also holds for the fit through the origin.
  err = s.xx - (scale * s.qx + offset * s.x);
  fit = {scale, -offset};
  return true;
}

// Codes of x for step `inv` (1/scale) and offset `lo` (the value of code 0), with their sums.
FitSums affine_sums(const float* x, int n, float inv, float lo, int levels, float sum_x, float sum_xx) {
  FitSums s;
  s.count = static_cast<float>(n);
  s.x = sum_x;
  s.xx = sum_xx;
  for (int i = 0; i < n; ++i) {
    const auto q = static_cast<float>(round_clamped((x[i] - lo) * inv, 0, levels));
    s.q += q;
    s.qq += q * q;
    s.qx += q * x[i];
  }
  return s;
}

// Least-squares affine fit of n values to codes 0..levels.
AffineFit fit_affine(const float* x, int n, int levels) {
  // The lowest level must be able to represent 0 or less (min >= 0 in the format).
  float lo = 0.0f;
  float hi = x[0];
  float sum_x = 0.0f;
  float sum_xx = 0.0f;
  for (int i = 0; i < n; ++i) {
    lo = std::fmin(lo, x[i]);
    hi = std::fmax(hi, x[i]);
    sum_x += x[i];
    sum_xx += x[i] * x[i];
  }
  if (!(hi > lo)) return {0.0f, -lo};

  // Baseline: the range spread evenly over the levels.
  AffineFit best{(hi - lo) / static_cast<float>(levels), -lo};
  float best_err = std::numeric_limits<float>::infinity();
  for (int k = -kSteps; k <= kSteps; ++k) {
    const float inv = (static_cast<float>(levels) + kStepDelta * static_cast<float>(k)) / (hi - lo);
    AffineFit fit;
    float err = 0.0f;
    if (solve_affine(affine_sums(x, n, inv, lo, levels, sum_x, sum_xx), fit, err) && err < best_err) {
      best_err = err;
      best = fit;
    }
  }
  // Refine: re-round against the best fit and refit while that helps. On values that are
  // already on a grid this lands on the grid itself.
  for (int iter = 0; iter < kRefineIterations && std::isfinite(best_err); ++iter) {
    AffineFit fit;
    float err = 0.0f;
    const FitSums sums = affine_sums(x, n, 1.0f / best.scale, -best.min, levels, sum_x, sum_xx);
    if (!solve_affine(sums, fit, err) || !(err < best_err)) break;
    best_err = err;
    best = fit;
  }
  return best;
}

// Codes of x for step 1/inv in [-neg, pos]: returns sum q^2 and sum q*x.
void symmetric_sums(const float* x, int n, float inv, int neg, int pos, float& sum_qq, float& sum_qx) {
  sum_qq = 0.0f;
  sum_qx = 0.0f;
  for (int i = 0; i < n; ++i) {
    const auto q = static_cast<float>(round_clamped(x[i] * inv, -neg, pos));
    sum_qq += q * q;
    sum_qx += q * x[i];
  }
}

// Least-squares symmetric fit x ~ scale * q with q in [-neg, pos] (neg = pos + 1); the
// returned scale is signed: the largest-magnitude value goes to the extra negative level.
float fit_symmetric(const float* x, int n, int neg, int pos) {
  float vmax = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > std::fabs(vmax)) vmax = x[i];
  }
  if (vmax == 0.0f) return 0.0f;

  // For fixed codes the best scale is sum qx / sum qq and the squared error is
  // sum x^2 - gain with gain = sum_qx^2 / sum_qq: maximise the gain.
  float best_scale = vmax / static_cast<float>(-neg);
  float best_gain = -1.0f;
  float sum_qq = 0.0f;
  float sum_qx = 0.0f;
  for (int k = -kSteps; k <= kSteps; ++k) {
    const float inv = -(static_cast<float>(neg) + kStepDelta * static_cast<float>(k)) / vmax;
    symmetric_sums(x, n, inv, neg, pos, sum_qq, sum_qx);
    if (sum_qq > 0.0f && sum_qx * sum_qx / sum_qq > best_gain) {
      best_gain = sum_qx * sum_qx / sum_qq;
      best_scale = sum_qx / sum_qq;
    }
  }
  for (int iter = 0; iter < kRefineIterations && best_gain > 0.0f; ++iter) {
    symmetric_sums(x, n, 1.0f / best_scale, neg, pos, sum_qq, sum_qx);
    if (!(sum_qq > 0.0f && sum_qx * sum_qx / sum_qq > best_gain)) break;
    best_gain = sum_qx * sum_qx / sum_qq;
    best_scale = sum_qx / sum_qq;
  }
  return best_scale;
}

// Stores the super-block scale d = extreme / levels as fp16 and returns the value decoders
// will read. `extreme` is the sub-block scale (or min) of largest magnitude; `levels` is
// where it should land (63 for 6-bit scales, -128 for Q6_K's int8 scales, ...). When fp16
// rounding makes |d| smaller, extreme / d could round past the last level and be clipped,
// so |d| is then moved up by one fp16 step.
float store_super_scale(float extreme, float levels, uint16_t& field) {
  field = fp32_to_fp16(extreme / levels);
  float d = fp16_to_fp32(field);
  if (d != 0.0f && std::fabs(extreme / d) >= std::fabs(levels) + 0.5f && (field & 0x7fff) < 0x7bff) {
    ++field;  // the next fp16 away from zero
    d = fp16_to_fp32(field);
  }
  return d;
}

// Integer sub-block scale for `scale` against the stored super-block scale d.
int quantize_sub_scale(float scale, float d, int lo, int hi) {
  return d != 0.0f ? round_clamped(scale / d, lo, hi) : 0;
}

// Codes 0..levels for n values decoded as step * q - min.
void quantize_affine_codes(const float* x, int n, float step, float min, int levels, uint8_t* q) {
  const float inv = step > 0.0f ? 1.0f / step : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = static_cast<uint8_t>(inv > 0.0f ? round_clamped((x[i] + min) * inv, 0, levels) : 0);
}

// Codes -neg..pos for n values decoded as step * q, returned biased by +neg.
void quantize_symmetric_codes(const float* x, int n, float step, int neg, int pos, uint8_t* q) {
  const float inv = step != 0.0f ? 1.0f / step : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = static_cast<uint8_t>(round_clamped(x[i] * inv, -neg, pos) + neg);
}

// Shared by Q2_K, Q4_K and Q5_K: fits n_sub sub-blocks of sub_len values to codes 0..levels
// with scales and mins quantized to 0..scale_levels against fp16 d and dmin.
// Writes the integer scales/mins and the codes (one per value, 0..levels).
void quantize_affine_super_block(const float* x, int n_sub, int sub_len, int levels, int scale_levels,
                                 uint16_t& d_field, uint16_t& dmin_field, uint8_t* scales, uint8_t* mins,
                                 uint8_t* q) {
  AffineFit fits[16];
  float max_scale = 0.0f;
  float max_min = 0.0f;
  for (int s = 0; s < n_sub; ++s) {
    fits[s] = fit_affine(x + s * sub_len, sub_len, levels);
    max_scale = std::max(max_scale, fits[s].scale);
    max_min = std::max(max_min, fits[s].min);
  }
  const float d = store_super_scale(max_scale, static_cast<float>(scale_levels), d_field);
  const float dmin = store_super_scale(max_min, static_cast<float>(scale_levels), dmin_field);
  for (int s = 0; s < n_sub; ++s) {
    scales[s] = static_cast<uint8_t>(quantize_sub_scale(fits[s].scale, d, 0, scale_levels));
    mins[s] = static_cast<uint8_t>(quantize_sub_scale(fits[s].min, dmin, 0, scale_levels));
    // Same float products as the decoder.
    const float step = d * static_cast<float>(scales[s]);
    const float min = dmin * static_cast<float>(mins[s]);
    quantize_affine_codes(x + s * sub_len, sub_len, step, min, levels, q + s * sub_len);
  }
}

}  // namespace

void quantize_q2_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += kSuperBlock) {
    BlockQ2_K block{};
    uint8_t scales[16];
    uint8_t mins[16];
    uint8_t q[kSuperBlock];
    quantize_affine_super_block(src, 16, 16, 3, 15, block.d, block.dmin, scales, mins, q);
    for (int s = 0; s < 16; ++s) block.scales[s] = static_cast<uint8_t>(scales[s] | (mins[s] << 4));
    // Value 128*half + 32*plane + m lives in bits 2*plane of qs[32*half + m].
    for (int v = 0; v < kSuperBlock; ++v) {
      const int half = v / 128;
      const int plane = (v % 128) / 32;
      const int m = v % 32;
      block.qs[32 * half + m] = static_cast<uint8_t>(block.qs[32 * half + m] | (q[v] << (2 * plane)));
    }
    store_block(dst, i, block);
  }
}

void quantize_q3_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  constexpr int kNeg = 4;
  constexpr int kPos = 3;
  for (int64_t i = 0; i < n_blocks; ++i, src += kSuperBlock) {
    BlockQ3_K block{};
    float fits[16];
    float vmax = 0.0f;  // the sub-block scale of largest magnitude, signed
    for (int s = 0; s < 16; ++s) {
      fits[s] = fit_symmetric(src + 16 * s, 16, kNeg, kPos);
      if (std::fabs(fits[s]) > std::fabs(vmax)) vmax = fits[s];
    }
    const float d = store_super_scale(vmax, -32.0f, block.d);
    uint8_t biased_scales[16];
    uint8_t q[kSuperBlock];
    for (int s = 0; s < 16; ++s) {
      const int scale = quantize_sub_scale(fits[s], d, -32, 31);
      biased_scales[s] = static_cast<uint8_t>(scale + 32);
      quantize_symmetric_codes(src + 16 * s, 16, d * static_cast<float>(scale), kNeg, kPos, q + 16 * s);
    }
    pack_scales_q3_k(biased_scales, block.scales);
    // Low 2 bits as in Q2_K; bit 2 of value 128*half + 32*plane + m is bit 4*half + plane of hmask[m].
    for (int v = 0; v < kSuperBlock; ++v) {
      const int half = v / 128;
      const int plane = (v % 128) / 32;
      const int m = v % 32;
      block.qs[32 * half + m] = static_cast<uint8_t>(block.qs[32 * half + m] | ((q[v] & 3) << (2 * plane)));
      block.hmask[m] = static_cast<uint8_t>(block.hmask[m] | ((q[v] >> 2) << (4 * half + plane)));
    }
    store_block(dst, i, block);
  }
}

void quantize_q4_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += kSuperBlock) {
    BlockQ4_K block{};
    uint8_t scales[8];
    uint8_t mins[8];
    uint8_t q[kSuperBlock];
    quantize_affine_super_block(src, 8, 32, 15, 63, block.d, block.dmin, scales, mins, q);
    pack_scale_min_k4(scales, mins, block.scales);
    for (int chunk = 0; chunk < 4; ++chunk) {
      for (int l = 0; l < 32; ++l) {
        block.qs[32 * chunk + l] = static_cast<uint8_t>(q[64 * chunk + l] | (q[64 * chunk + 32 + l] << 4));
      }
    }
    store_block(dst, i, block);
  }
}

void quantize_q5_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += kSuperBlock) {
    BlockQ5_K block{};
    uint8_t scales[8];
    uint8_t mins[8];
    uint8_t q[kSuperBlock];
    quantize_affine_super_block(src, 8, 32, 31, 63, block.d, block.dmin, scales, mins, q);
    pack_scale_min_k4(scales, mins, block.scales);
    for (int chunk = 0; chunk < 4; ++chunk) {
      for (int l = 0; l < 32; ++l) {
        const int lo = q[64 * chunk + l];
        const int hi = q[64 * chunk + 32 + l];
        block.qs[32 * chunk + l] = static_cast<uint8_t>((lo & 0x0f) | ((hi & 0x0f) << 4));
        const int fifth_bits = ((lo >> 4) << (2 * chunk)) | ((hi >> 4) << (2 * chunk + 1));
        block.qh[l] = static_cast<uint8_t>(block.qh[l] | fifth_bits);
      }
    }
    store_block(dst, i, block);
  }
}

void quantize_q6_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  constexpr int kNeg = 32;
  constexpr int kPos = 31;
  for (int64_t i = 0; i < n_blocks; ++i, src += kSuperBlock) {
    BlockQ6_K block{};
    float fits[16];
    float vmax = 0.0f;
    for (int s = 0; s < 16; ++s) {
      fits[s] = fit_symmetric(src + 16 * s, 16, kNeg, kPos);
      if (std::fabs(fits[s]) > std::fabs(vmax)) vmax = fits[s];
    }
    const float d = store_super_scale(vmax, -128.0f, block.d);
    uint8_t q[kSuperBlock];
    for (int s = 0; s < 16; ++s) {
      const int scale = quantize_sub_scale(fits[s], d, -128, 127);
      block.scales[s] = static_cast<int8_t>(scale);
      quantize_symmetric_codes(src + 16 * s, 16, d * static_cast<float>(scale), kNeg, kPos, q + 16 * s);
    }
    // Value 128*half + 32*k + l: low nibble in ql[64*half + 32*(k%2) + l] (low half of the
    // byte for k < 2, high half otherwise), high 2 bits in bits 2k of qh[32*half + l].
    for (int v = 0; v < kSuperBlock; ++v) {
      const int half = v / 128;
      const int k = (v % 128) / 32;
      const int l = v % 32;
      uint8_t& low = block.ql[64 * half + 32 * (k % 2) + l];
      low = static_cast<uint8_t>(low | ((q[v] & 0x0f) << (k < 2 ? 0 : 4)));
      uint8_t& high = block.qh[32 * half + l];
      high = static_cast<uint8_t>(high | ((q[v] >> 4) << (2 * k)));
    }
    store_block(dst, i, block);
  }
}

void quantize_q8_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += kSuperBlock) {
    BlockQ8_K block{};
    float vmax = 0.0f;
    for (int j = 0; j < kSuperBlock; ++j) {
      if (std::fabs(src[j]) > std::fabs(vmax)) vmax = src[j];
    }
    if (vmax != 0.0f) {
      // The signed extreme maps to -127 (as in ggml); d is kept in float32.
      const float inv = -127.0f / vmax;
      block.d = 1.0f / inv;
      for (int j = 0; j < kSuperBlock; ++j) block.qs[j] = static_cast<int8_t>(round_clamped(src[j] * inv, -127, 127));
    }
    for (int s = 0; s < kSuperBlock / 16; ++s) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += block.qs[16 * s + j];
      block.bsums[s] = static_cast<int16_t>(sum);
    }
    store_block(dst, i, block);
  }
}

}  // namespace fafo::quant
