#version 450
// Rounds activation rows to 8 bits per block of 32 values for the integer products
// (shaders/int_units.glsl; the rounding itself: shaders/quantize.glsl), as the CUDA
// backend's QuantizeRowsOp does
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

#include "quantize.glsl"

// Rounds block b of row t, its values v(k) = x[base + k] (normalized with `scale`).
void round_block(uint t, uint b, float scale) {
  const uint blocks = p.cols / 32u;
  const uint base = t * p.x_stride + 32u * b;
  float v[32];
  [[unroll]] for (uint k = 0u; k < 32u; ++k) {
#if NORM
    v[k] = rms_apply(x[base + k], scale, gain[32u * b + k]);
#else
    v[k] = x[base + k];
#endif
  }
  uint words[8];
  float d, s;
  q8_block(v, words, d, s);
  const uint row = t * p.out_stride;
  [[unroll]] for (uint w = 0u; w < 8u; ++w) xq[row + 8u * b + w] = words[w];
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
