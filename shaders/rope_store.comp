#version 450
// RoPE and the KV store in one dispatch, over the fused projections of a step: each
// row of qkv is [queries (n_head heads) | keys (n_head_kv heads) | values], head_dim
// per head. The queries are rotated in place; the keys are rotated and written, with
// the values, to slots n_past.. of the layer's cache (n_past: step_info[0], the step's
// header, so a recorded step replays at any n_past) (fp32, or fp16 words with
// KV_F16: two values per 32-bit word, low half first, rounded as shaders/half.glsl;
// KV_Q8_0 / KV_Q4_0: blocks, shaders/kv_blocks.glsl, quantized as kv_store.comp does).
// The rotation is shaders/rope.comp's expression, and the rounding kv_store.comp's, so
// the results are bit for bit those of rope + rope + store. The keys in qkv are left
// unrotated (attention reads them from the cache).
//
// In a joined step the dispatch covers one part: rows step_info[3].. of qkv and of the
// table (the header of the part's step_info), stored at the part's n_past.
//
// The items of the grid-stride loop: rows x n_head x n_pairs query pairs, then
// rows x units key units, then rows x units value units, where a unit is one value
// (fp32), one word of two (fp16) or a pair of blocks (64 values).
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

layout(std430, binding = 0) buffer Qkv { float x[]; };              // [rows x stride]
layout(std430, binding = 1) readonly buffer Table { float cs[]; };  // [rows x n_pairs x 2]
#if defined(KV_F16) || defined(KV_BLOCKS)
layout(std430, binding = 2) writeonly buffer CacheK { uint cache_k[]; };
layout(std430, binding = 3) writeonly buffer CacheV { uint cache_v[]; };
#else
layout(std430, binding = 2) writeonly buffer CacheK { float cache_k[]; };
layout(std430, binding = 3) writeonly buffer CacheV { float cache_v[]; };
#endif
layout(std430, binding = 4) readonly buffer Step { uint step_info[]; };

layout(push_constant) uniform Params {
  uint rows;
  uint n_head;
  uint n_head_kv;
  uint head_dim;
  uint n_pairs;  // rotated dimensions / 2
  uint stride;   // floats per row of qkv
  uint k_offset; // the first key column
  uint v_offset; // the first value column
  uint neox;
  uint ring;     // > 0: a ring layer (KvCacheShape::ring): row r's entry at slot (n_past + r) mod ring
} p;

// Key e (0 <= e < kv_dim) of `row`, rotated.
float rotated_key(uint row, uint e) {
  const uint base = (step_info[3] + row) * p.stride + p.k_offset;
  const uint d = e % p.head_dim;
  if (d >= 2u * p.n_pairs) return x[base + e];
  const uint head_base = base + e - d;
  const uint i = p.neox != 0u ? d % p.n_pairs : d / 2u;
  const bool second = p.neox != 0u ? d >= p.n_pairs : (d & 1u) != 0u;
  const uint a = head_base + (p.neox != 0u ? i : 2u * i);
  const uint b = head_base + (p.neox != 0u ? i + p.n_pairs : 2u * i + 1u);
  const float c = cs[((step_info[3] + row) * p.n_pairs + i) * 2u];
  const float s = cs[((step_info[3] + row) * p.n_pairs + i) * 2u + 1u];
  const float x0 = x[a], x1 = x[b];
  precise float r0 = x0 * c - x1 * s;
  precise float r1 = x0 * s + x1 * c;
  return second ? r1 : r0;
}

#ifdef KV_BLOCKS
// The words of the pair of blocks `pair` of `row`'s keys (rotated) or values.
void quantize_pair(bool keys, uint row, uint pair, out uint w[KV_PAIR_WORDS]) {
  for (uint k = 0u; k < KV_PAIR_WORDS; ++k) w[k] = 0u;
  for (uint half_ = 0u; half_ < 2u; ++half_) {
    float v[32];
    const uint e = 64u * pair + 32u * half_;
    const uint at = (step_info[3] + row) * p.stride + p.v_offset + e;
    for (uint j = 0u; j < 32u; ++j) v[j] = keys ? rotated_key(row, e + j) : x[at + j];
    kv_quantize_block(v, w, half_ * KV_BLOCK_BYTES);
  }
}
#endif

void main() {
  const uint kv_dim = p.n_head_kv * p.head_dim;
#ifdef KV_BLOCKS
  const uint units = kv_dim / 64u;
#elif defined(KV_F16)
  const uint units = kv_dim / 2u;
#else
  const uint units = kv_dim;
#endif
  const uint q_items = p.rows * p.n_head * p.n_pairs;
  const uint kv_items = p.rows * units;
  const uint total = q_items + 2u * kv_items;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint id = gl_GlobalInvocationID.x; id < total; id += step) {
    if (id < q_items) {
      const uint i = id % p.n_pairs;
      const uint head = (id / p.n_pairs) % p.n_head;
      const uint row = step_info[3] + id / (p.n_pairs * p.n_head);  // of qkv and the table
      const uint base = row * p.stride + head * p.head_dim;
      const uint a = base + (p.neox != 0u ? i : 2u * i);
      const uint b = base + (p.neox != 0u ? i + p.n_pairs : 2u * i + 1u);
      const float c = cs[(row * p.n_pairs + i) * 2u];
      const float s = cs[(row * p.n_pairs + i) * 2u + 1u];
      const float x0 = x[a], x1 = x[b];
      precise float r0 = x0 * c - x1 * s;
      precise float r1 = x0 * s + x1 * c;
      x[a] = r0;
      x[b] = r1;
      continue;
    }
    const bool keys = id < q_items + kv_items;
    const uint unit = id - q_items - (keys ? 0u : kv_items);
    const uint row = unit / units;
    const uint u = unit % units;
    const uint slot = p.ring > 0u ? (step_info[0] + row) % p.ring : step_info[0] + row;
    const uint out_at = slot * units + u;
#ifdef KV_BLOCKS
    uint w[KV_PAIR_WORDS];
    quantize_pair(keys, row, u, w);
    for (uint k = 0u; k < KV_PAIR_WORDS; ++k) {
      if (keys) cache_k[out_at * KV_PAIR_WORDS + k] = w[k];
      else cache_v[out_at * KV_PAIR_WORDS + k] = w[k];
    }
#elif defined(KV_F16)
    if (keys) {
      cache_k[out_at] = float_to_half(rotated_key(row, 2u * u)) | (float_to_half(rotated_key(row, 2u * u + 1u)) << 16);
    } else {
      const uint at = (step_info[3] + row) * p.stride + p.v_offset + 2u * u;
      cache_v[out_at] = float_to_half(x[at]) | (float_to_half(x[at + 1u]) << 16);
    }
#else
    if (keys) {
      cache_k[out_at] = rotated_key(row, u);
    } else {
      cache_v[out_at] = x[(step_info[3] + row) * p.stride + p.v_offset + u];
    }
#endif
  }
}
