#version 450
// RMSNorm of each row: out[r][i] = x[r][i] * (1 / sqrt(mean_i(x[r][i]^2) + eps)) * gain[i],
// with shaders/rms_tree.glsl's numerics (the NORM variants of matmul.comp give the same
// bits). One workgroup of 32 invocations per row, invocation l being lane l of the sum
// (grid-stride over rows when there are more rows than workgroups); the lane sums meet
// in shared memory.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require

layout(local_size_x = 32) in;

layout(std430, binding = 0) readonly buffer InX { float x[]; };       // [rows x n]
layout(std430, binding = 1) readonly buffer InGain { float gain[]; }; // [n]
layout(std430, binding = 2) writeonly buffer Out { float y[]; };      // [rows x n]

layout(push_constant) uniform Params {
  uint n;
  uint rows;
  float eps;
} p;

#include "rms_tree.glsl"

shared float lane_sums[RMS_LANES];

void main() {
  const uint lane = gl_LocalInvocationID.x;
  // The loop bound is the same for every invocation of a workgroup, so the barriers
  // inside are reached uniformly.
  for (uint row = gl_WorkGroupID.x; row < p.rows; row += gl_NumWorkGroups.x) {
    const uint base = row * p.n;
    lane_sums[lane] = rms_lane_sum(base, p.n, lane);
    barrier();
    float sums[RMS_LANES];
    [[unroll]] for (uint l = 0u; l < RMS_LANES; ++l) sums[l] = lane_sums[l];
    const float scale = rms_scale(sums, p.n, p.eps);
    for (uint i = lane; i < p.n; i += RMS_LANES) y[base + i] = rms_apply(x[base + i], scale, gain[i]);
    barrier();  // lane_sums is read above before the next row overwrites it
  }
}
