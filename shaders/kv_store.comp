#version 450
// Stores a step's K and V rows (fp32 activations, rows x kv_dim) into the layer's cache
// at slots n_past.. (n_past: step_info[0], the step's header, so a recorded step
// replays at any n_past). With KV_F16 the cache is fp16: each invocation converts two
// adjacent values to half (round to nearest even, shaders/half.glsl) and writes them
// as one 32-bit word, low half first (the cache is [n_ctx x kv_dim] halves, kv_dim
// even); otherwise each invocation copies one value's bits. The caller keeps
// n_past + rows within the cache (VulkanBackend::begin_step checks it).
#extension GL_GOOGLE_include_directive : require
#include "half.glsl"

layout(local_size_x = 64) in;

#ifdef KV_F16
layout(std430, binding = 0) readonly buffer SrcK { float src_k[]; };
layout(std430, binding = 1) readonly buffer SrcV { float src_v[]; };
#else  // moved as words: every bit pattern kept
layout(std430, binding = 0) readonly buffer SrcK { uint src_k[]; };
layout(std430, binding = 1) readonly buffer SrcV { uint src_v[]; };
#endif
layout(std430, binding = 2) writeonly buffer CacheK { uint cache_k[]; };
layout(std430, binding = 3) writeonly buffer CacheV { uint cache_v[]; };
layout(std430, binding = 4) readonly buffer Step { uint step_info[]; };

layout(push_constant) uniform Params {
  uint rows;
  uint kv_dim;
} p;

void main() {
#ifdef KV_F16
  const uint units = p.kv_dim / 2u;
#else
  const uint units = p.kv_dim;
#endif
  const uint n = p.rows * units;
  const uint first = step_info[0] * units;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += step) {
#ifdef KV_F16
    const uint at = (i / units) * p.kv_dim + 2u * (i % units);
    cache_k[first + i] = float_to_half(src_k[at]) | (float_to_half(src_k[at + 1u]) << 16);
    cache_v[first + i] = float_to_half(src_v[at]) | (float_to_half(src_v[at + 1u]) << 16);
#else
    cache_k[first + i] = src_k[i];
    cache_v[first + i] = src_v[i];
#endif
  }
}
