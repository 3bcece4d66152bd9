#version 450
// RMSNorm of each row: out[r][i] = x[r][i] * (1 / sqrt(mean_i(x[r][i]^2) + eps)) * gain[i].
// One workgroup per row (grid-stride over rows when there are more rows than
// workgroups); the sum of squares is a tree reduction in shared memory.
#ifndef WG_SIZE
#define WG_SIZE 256
#endif

layout(local_size_x = WG_SIZE) in;

layout(std430, binding = 0) readonly buffer InX { float x[]; };       // [rows x n]
layout(std430, binding = 1) readonly buffer InGain { float gain[]; }; // [n]
layout(std430, binding = 2) writeonly buffer Out { float y[]; };      // [rows x n]

layout(push_constant) uniform Params {
  uint n;
  uint rows;
  float eps;
} p;

shared float partial[WG_SIZE];

void main() {
  const uint lid = gl_LocalInvocationID.x;
  // The loop bound is the same for every invocation of a workgroup, so the
  // barriers inside are reached uniformly.
  for (uint row = gl_WorkGroupID.x; row < p.rows; row += gl_NumWorkGroups.x) {
    const uint base = row * p.n;
    float sum_sq = 0.0;
    for (uint i = lid; i < p.n; i += WG_SIZE) {
      const float v = x[base + i];
      sum_sq += v * v;
    }
    partial[lid] = sum_sq;
    barrier();
    for (uint stride = WG_SIZE / 2; stride > 0; stride >>= 1) {
      if (lid < stride) partial[lid] += partial[lid + stride];
      barrier();
    }
    const float scale = 1.0 / sqrt(partial[0] / float(p.n) + p.eps);
    for (uint i = lid; i < p.n; i += WG_SIZE) y[base + i] = x[base + i] * scale * gain[i];
    barrier();  // partial[0] is read above before the next row overwrites it
  }
}
