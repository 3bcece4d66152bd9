#version 450
// Stores a step's K and V rows (fp32 activations, rows x kv_dim) into an fp16 KV cache
// at slots first_slot.. : each invocation converts two adjacent values to half (round
// to nearest even, shaders/half.glsl) and writes them as one 32-bit word, low half
// first (the cache is [n_ctx x kv_dim] halves, kv_dim even). An fp32 cache is written
// by plain buffer copies instead.
#extension GL_GOOGLE_include_directive : require
#include "half.glsl"

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer SrcK { float src_k[]; };
layout(std430, binding = 1) readonly buffer SrcV { float src_v[]; };
layout(std430, binding = 2) writeonly buffer CacheK { uint cache_k[]; };
layout(std430, binding = 3) writeonly buffer CacheV { uint cache_v[]; };

layout(push_constant) uniform Params {
  uint rows;
  uint kv_dim;
  uint first_slot;
} p;

void main() {
  const uint words_per_row = p.kv_dim / 2u;
  const uint n = p.rows * words_per_row;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += step) {
    const uint row = i / words_per_row;
    const uint at = row * p.kv_dim + 2u * (i % words_per_row);
    const uint out_at = p.first_slot * words_per_row + i;
    cache_k[out_at] = float_to_half(src_k[at]) | (float_to_half(src_k[at + 1u]) << 16);
    cache_v[out_at] = float_to_half(src_v[at]) | (float_to_half(src_v[at + 1u]) << 16);
  }
}
