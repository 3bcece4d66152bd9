#version 450
// F32 skinny matmul: out[t][r] = sum_c x[t][c] * w[r][c]  (out = x * W^T), for
// T tokens of `cols` values against a weight matrix of `rows` x `cols`.
//
// One workgroup computes one weight row for a tile of TILE_T tokens: each weight
// value is read once and used TILE_T times, so the weight traffic per step falls as
// the tile grows. Variants are compiled with -DTILE_T=1 (mat-vec) and -DTILE_T=4.
// Workgroups stride over rows (x) and token tiles (y) when the grid is smaller.
#ifndef TILE_T
#define TILE_T 1
#endif
#ifndef WG_SIZE
#define WG_SIZE 64
#endif

layout(local_size_x = WG_SIZE) in;

layout(std430, binding = 0) readonly buffer InX { float x[]; };   // [T x cols]
layout(std430, binding = 1) readonly buffer InW { float w[]; };   // [rows x cols]
layout(std430, binding = 2) writeonly buffer Out { float y[]; };  // [T x rows]

layout(push_constant) uniform Params {
  uint T;
  uint rows;
  uint cols;
} p;

shared float partial[TILE_T][WG_SIZE];

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint n_tiles = (p.T + TILE_T - 1) / TILE_T;
  for (uint tile = gl_WorkGroupID.y; tile < n_tiles; tile += gl_NumWorkGroups.y) {
    const uint t0 = tile * TILE_T;
    for (uint row = gl_WorkGroupID.x; row < p.rows; row += gl_NumWorkGroups.x) {
      float acc[TILE_T];
      for (uint k = 0; k < TILE_T; ++k) acc[k] = 0.0;
      const uint w_base = row * p.cols;
      for (uint c = lid; c < p.cols; c += WG_SIZE) {
        const float wv = w[w_base + c];
        for (uint k = 0; k < TILE_T; ++k) {
          if (t0 + k < p.T) acc[k] += x[(t0 + k) * p.cols + c] * wv;
        }
      }
      for (uint k = 0; k < TILE_T; ++k) partial[k][lid] = acc[k];
      barrier();
      for (uint stride = WG_SIZE / 2; stride > 0; stride >>= 1) {
        if (lid < stride) {
          for (uint k = 0; k < TILE_T; ++k) partial[k][lid] += partial[k][lid + stride];
        }
        barrier();
      }
      if (lid == 0) {
        for (uint k = 0; k < TILE_T; ++k) {
          if (t0 + k < p.T) y[(t0 + k) * p.rows + row] = partial[k][0];
        }
      }
      barrier();  // partial is reused by the next row
    }
  }
}
