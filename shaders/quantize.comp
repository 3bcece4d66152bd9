#version 450
// Rounds activation rows to 8 bits per block of 32 values for the integer products
// (shaders/int_units.glsl), as the CUDA backend's QuantizeRowsOp does
// (cuda_backend/src/int_ops.h), bit for bit on every device for scales of at least
// 2^-100 (no division but for an estimate, no fused multiply-add: only correctly rounded
// products and differences):
// block b of row t: d = max |x| * RN(1/127) (a NaN counted as infinite); q = the integer
// nearest to x / d (ties to even), found without a division (an estimate moved by the
// exact signs of x - (q +- 1/2) d), 0 where d is 0 or not
// finite, within -127..127; and d times the block's sum of q. Output row t at word
// t * out_stride: cols / 4 words of q (four signed bytes, the first lowest), cols / 32
// scales, cols / 32 sums (floats as bits). One invocation per block: every block on its
// own, so a value's bits depend on its row and block alone.
//
// NORM=1: the rows are first normalized with binding 2's gain and the push constant
// eps, the bits shaders/rms_norm.comp would write (shaders/rms_tree.glsl): a workgroup
// takes 32 blocks of one row, its 32 invocations compute the row's 32 lane sums into
// shared memory, each then the row's scale by the fixed tree, and each its block of
// normalized values (an RMSNorm and the rounding after it in one dispatch, as the CUDA
// backend's quantize_norm).
#ifndef NORM
#define NORM 0
#endif
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 32) in;

layout(std430, binding = 0) readonly buffer InX { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { uint xq[]; };
#if NORM
layout(std430, binding = 2) readonly buffer InGain { float gain[]; };
#endif

layout(push_constant) uniform Params {
  uint T;
  uint cols;        // a multiple of 32
  uint x_stride;    // floats between rows of x
  uint out_stride;  // words between rows of the output: cols / 4 + cols / 16
  float eps;        // NORM
} p;

#if NORM
#include "rms_tree.glsl"
shared float lane_sums[RMS_LANES];
#endif

// The sign (-1, 0 or 1) of v - a d, exactly, for a of at most 12 significant bits
// (a = e +- 1/2, |e| <= 128): a d = a d_hi + a d_lo, d_hi the top 12 significant bits of
// d and d_lo the rest, each product exact; near a d, v - a d_hi is exact (the two are
// within a factor of 2 of each other), and elsewhere too large for a d_lo (< 2^-11 a d_hi)
// or its rounding to change the sign. Only correctly rounded products and differences,
// no fused multiply-add (which a Vulkan device may round twice: lavapipe does).
int sign_of_difference(float v, float a, float d) {
  const float d_hi = uintBitsToFloat(floatBitsToUint(d) & 0xfffff000u);
  precise float d_lo = d - d_hi;
  precise float p_hi = a * d_hi;
  precise float p_lo = a * d_lo;
  precise float r_hi = v - p_hi;
  precise float r = r_hi - p_lo;
  return r > 0.0 ? 1 : (r < 0.0 ? -1 : 0);
}

// The integer nearest to v / d (ties to even) for d >= 2^-100 finite and |v / d| < 129
// (below, a partial product may be subnormal, which a device may flush to zero): an
// estimate within one of it, moved by the exact signs of v - (e +- 1/2) d (cuda_backend's
// nearest_quotient, which takes them from fused multiply-adds: the same integers).
int nearest_quotient(float v, float d) {
  const float e = roundEven(v * (1.0 / d));
  const int n = int(e);
  const int above = sign_of_difference(v, e + 0.5, d);
  if (above > 0 || (above == 0 && (n & 1) != 0)) return n + 1;
  const int below = sign_of_difference(v, e - 0.5, d);
  if (below < 0 || (below == 0 && (n & 1) != 0)) return n - 1;
  return n;
}

// Rounds block b of row t, its values v(k) = x[base + k] (normalized with `scale`).
void round_block(uint t, uint b, float scale) {
  const uint blocks = p.cols / 32u;
  const uint base = t * p.x_stride + 32u * b;
  float v[32];
  float largest = 0.0;
  [[unroll]] for (uint k = 0u; k < 32u; ++k) {
#if NORM
    v[k] = rms_apply(x[base + k], scale, gain[32u * b + k]);
#else
    v[k] = x[base + k];
#endif
    const uint bits = floatBitsToUint(v[k]) & 0x7fffffffu;
    const float m = bits > 0x7f800000u ? uintBitsToFloat(0x7f800000u) : uintBitsToFloat(bits);
    largest = m > largest ? m : largest;
  }
  const float inv127 = uintBitsToFloat(0x3c010204u);  // RN(1 / 127)
  precise float d = largest * inv127;
  const bool usable = d > 0.0 && floatBitsToUint(d) < 0x7f800000u;
  int sum = 0;
  const uint row = t * p.out_stride;
  [[unroll]] for (uint w = 0u; w < 8u; ++w) {
    uint word = 0u;
    [[unroll]] for (uint k = 0u; k < 4u; ++k) {
      int q = usable ? nearest_quotient(v[4u * w + k], d) : 0;
      q = clamp(q, -127, 127);
      sum += q;
      word |= (uint(q) & 0xffu) << (8u * k);
    }
    xq[row + 8u * b + w] = word;
  }
  precise float s = d * float(sum);
  xq[row + p.cols / 4u + b] = floatBitsToUint(d);
  xq[row + p.cols / 4u + blocks + b] = floatBitsToUint(s);
}

void main() {
  const uint blocks = p.cols / 32u;
#if NORM
  // Workgroup-uniform loop (it has barriers): item = (row, group of 32 blocks).
  const uint groups = (blocks + 31u) / 32u;
  for (uint item = gl_WorkGroupID.x; item < p.T * groups; item += gl_NumWorkGroups.x) {
    const uint t = item / groups, b = (item % groups) * 32u + gl_LocalInvocationID.x;
    lane_sums[gl_LocalInvocationID.x] = rms_lane_sum(t * p.x_stride, p.cols, gl_LocalInvocationID.x);
    barrier();
    float sums[RMS_LANES];
    [[unroll]] for (uint l = 0u; l < RMS_LANES; ++l) sums[l] = lane_sums[l];
    const float scale = rms_scale(sums, p.cols, p.eps);
    if (b < blocks) round_block(t, b, scale);
    barrier();  // lane_sums is rewritten for the next item
  }
#else
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < p.T * blocks; i += step) round_block(i / blocks, i % blocks, 1.0);
#endif
}
