#version 450
// Stores a step's K and V rows (fp32 activations: rows x k_width keys, rows x v_width
// values; the widths are equal except in a latent cache) into the layer's caches at
// slots n_past.. (n_past: step_info[0], the step's header, so a recorded step replays
// at any n_past). The rows are the part's of a joined step: rows step_info[3].. of k and v. A cache entry is `units` 32-bit words: with KV_F16 the cache is fp16
// and each invocation converts two adjacent values to half (round to nearest even,
// shaders/half.glsl) and writes them as one word, low half first ((width + 1) / 2
// words per entry; the high half of an odd width's last word is zero); otherwise each
// invocation copies one value's bits (width words per entry); with KV_Q8_0 or KV_Q4_0
// (shaders/kv_blocks.glsl; k_width = v_width, a multiple of 64) each invocation
// quantizes two blocks of a row and writes their words. The caller keeps
// n_past + rows within the cache (VulkanBackend::begin_step checks it). With ring > 0
// (a ring layer, KvCacheShape::ring: a window layer's last entries) row r goes to slot
// (n_past + r) mod ring.
#extension GL_GOOGLE_include_directive : require
#include "half.glsl"
#ifndef KV_Q8_0
#define KV_Q8_0 0
#endif
#ifndef KV_Q4_0
#define KV_Q4_0 0
#endif
#if KV_Q8_0 || KV_Q4_0
#define KV_BLOCKS 1
#include "kv_blocks.glsl"
#endif

layout(local_size_x = 64) in;

#if defined(KV_F16) || defined(KV_BLOCKS)
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
  uint k_width;  // floats per key row
  uint v_width;  // floats per value row
  uint ring;     // > 0: the slots of a ring layer
} p;

uint slot_of(uint index) { return p.ring > 0u ? index % p.ring : index; }

#ifdef KV_F16
// Word `u` of an entry: values 2u and 2u + 1 of the row starting at `at` (`width` wide).
uint pack_k(uint at, uint u) {
  const uint lo = float_to_half(src_k[at + 2u * u]);
  return 2u * u + 1u < p.k_width ? lo | (float_to_half(src_k[at + 2u * u + 1u]) << 16) : lo;
}
uint pack_v(uint at, uint u) {
  const uint lo = float_to_half(src_v[at + 2u * u]);
  return 2u * u + 1u < p.v_width ? lo | (float_to_half(src_v[at + 2u * u + 1u]) << 16) : lo;
}
#endif

#ifdef KV_BLOCKS
// The words of blocks 2 pair and 2 pair + 1 of source row `row` (k_width values).
void quantize_pair(bool keys, uint row, uint pair, out uint w[KV_PAIR_WORDS]) {
  for (uint k = 0u; k < KV_PAIR_WORDS; ++k) w[k] = 0u;
  for (uint half_ = 0u; half_ < 2u; ++half_) {
    float x[32];
    const uint at = row * p.k_width + 64u * pair + 32u * half_;
    for (uint j = 0u; j < 32u; ++j) x[j] = keys ? src_k[at + j] : src_v[at + j];
    kv_quantize_block(x, w, half_ * KV_BLOCK_BYTES);
  }
}
#endif

void main() {
#ifdef KV_BLOCKS
  const uint pairs = p.k_width / 64u;
  const uint first_slot = step_info[0], first_src = step_info[3];
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < p.rows * pairs; i += stride) {
    const uint row = i / pairs, pair = i % pairs;
    const uint out_at = (slot_of(first_slot + row) * pairs + pair) * KV_PAIR_WORDS;
    uint w[KV_PAIR_WORDS];
    quantize_pair(true, first_src + row, pair, w);
    for (uint k = 0u; k < KV_PAIR_WORDS; ++k) cache_k[out_at + k] = w[k];
    quantize_pair(false, first_src + row, pair, w);
    for (uint k = 0u; k < KV_PAIR_WORDS; ++k) cache_v[out_at + k] = w[k];
  }
#else
#ifdef KV_F16
  const uint k_units = (p.k_width + 1u) / 2u, v_units = (p.v_width + 1u) / 2u;
#else
  const uint k_units = p.k_width, v_units = p.v_width;
#endif
  const uint units = max(k_units, v_units);
  const uint n = p.rows * units;
  const uint first = step_info[0], first_row = step_info[3];
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < n; i += step) {
    const uint row = i / units, u = i % units;
#ifdef KV_F16
    if (u < k_units) cache_k[slot_of(first + row) * k_units + u] = pack_k((first_row + row) * p.k_width, u);
    if (u < v_units) cache_v[slot_of(first + row) * v_units + u] = pack_v((first_row + row) * p.v_width, u);
#else
    if (u < k_units) cache_k[slot_of(first + row) * k_units + u] = src_k[(first_row + row) * p.k_width + u];
    if (u < v_units) cache_v[slot_of(first + row) * v_units + u] = src_v[(first_row + row) * p.v_width + u];
#endif
  }
#endif
}
