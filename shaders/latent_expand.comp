#version 450
// Multi-head latent attention's recovery (VulkanBackend::latent_attention): for every
// entry a step's attention reads, slots [0, n_past + T) of one layer, the key or value
// up * latent (up: the F32 up-projection, kv_dim x rank, row-major; latent: the entry's
// rank floats in the latent cache), written to the same slot of `recovered` (kv_dim
// floats per slot, the fp32 layout shaders/attention.comp reads). Variants: ROPE=1
// recovers keys and rotates each head's first n_pairs pairs (RoPE after the
// up-projection) by the entry's position; without it, values (n_pairs = 0). KV_F16=1
// reads an fp16 latent cache: (rank + 1) / 2 words per entry, two halves per word,
// low half first; otherwise rank floats per entry.
//
// The entries, in this order: the committed ones by logical index k < n_past (at slot
// step_info[order_offset + k] with use_order, else slot k; position k, whose cos and
// sin are row k of `positions`, the host's table of every position of the cache),
// then the step's own: slot n_past + j at batch row j's position (row j of `rows`, the
// step's RoPE table; in a joined step, row step_info[3] + j). n_past is step_info[0], the step's header, so a recorded step
// replays at any n_past: the grid is fixed and strides over the entries in use.
//
// Each invocation computes one output value, or for a rotated pair both values of the
// pair: dot products of rank terms in the reference backend's order (eight partial sums,
// fafo::reference::dot), `precise` so no compiler fuses them, then the rotation of
// shaders/rope.comp.
#ifndef KV_F16
#define KV_F16 0
#endif
#ifndef ROPE
#define ROPE 0
#endif
#extension GL_GOOGLE_include_directive : require
#include "half.glsl"

layout(local_size_x = 64) in;

#if KV_F16
layout(std430, binding = 0) readonly buffer Latent { uint latent[]; };    // [capacity x words]
#else
layout(std430, binding = 0) readonly buffer Latent { float latent[]; };   // [capacity x words]
#endif
layout(std430, binding = 1) readonly buffer Up { float up[]; };           // [kv_dim x rank]
layout(std430, binding = 2) readonly buffer Step { uint step_info[]; };
layout(std430, binding = 3) writeonly buffer Recovered { float recovered[]; };  // [capacity x kv_dim]
#if ROPE
layout(std430, binding = 4) readonly buffer Positions { float positions[]; };  // [capacity x n_pairs x 2]
layout(std430, binding = 5) readonly buffer Rows { float rows[]; };            // [T x n_pairs x 2]
#endif

layout(push_constant) uniform Params {
  uint T;
  uint rank;       // latent floats per entry
  uint words;      // 32-bit words per latent entry
  uint n_head_kv;
  uint head_dim;
  uint n_pairs;    // rotated pairs per head (0: values)
  uint neox;       // pairs (i, i + n_pairs) instead of (2i, 2i + 1)
  uint use_order;  // 1: committed entry k is at slot step_info[order_offset + k]
  uint order_offset;
} p;

// Latent value c of the entry at `slot`.
float latent_at(uint slot, uint c) {
#if KV_F16
  return half_to_float((latent[slot * p.words + (c >> 1)] >> ((c & 1u) << 4)) & 0xffffu);
#else
  return latent[slot * p.words + c];
#endif
}

// dot(up row `row`, latent of `slot`), summed as fafo::reference::dot: partial sums of the
// terms i % 8 (lo: 0..3, hi: 4..7), the tail apart, then ((0+4) + (1+5)) + ((2+6) +
// (3+7)) + tail.
float up_dot(uint row, uint slot) {
  const uint w = row * p.rank;
  precise vec4 lo = vec4(0.0), hi = vec4(0.0);
  uint c = 0u;
  for (; c + 8u <= p.rank; c += 8u) {
    lo += vec4(up[w + c], up[w + c + 1u], up[w + c + 2u], up[w + c + 3u]) *
          vec4(latent_at(slot, c), latent_at(slot, c + 1u), latent_at(slot, c + 2u), latent_at(slot, c + 3u));
    hi += vec4(up[w + c + 4u], up[w + c + 5u], up[w + c + 6u], up[w + c + 7u]) *
          vec4(latent_at(slot, c + 4u), latent_at(slot, c + 5u), latent_at(slot, c + 6u), latent_at(slot, c + 7u));
  }
  precise float tail = 0.0;
  for (; c < p.rank; ++c) tail += up[w + c] * latent_at(slot, c);
  precise float sum = ((lo.x + hi.x) + (lo.y + hi.y)) + ((lo.z + hi.z) + (lo.w + hi.w)) + tail;
  return sum;
}

void main() {
  const uint n_past = step_info[0];  // the step's header
  const uint per_head = p.head_dim - p.n_pairs;  // a rotated pair is one item
  const uint per_entry = p.n_head_kv * per_head;
  const uint kv_dim = p.n_head_kv * p.head_dim;
  const uint total = (n_past + p.T) * per_entry;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint id = gl_GlobalInvocationID.x; id < total; id += step) {
    const uint k = id / per_entry;
    const uint head = (id % per_entry) / per_head;
    const uint u = (id % per_entry) % per_head;
    const bool committed = k < n_past;
    const uint slot = committed && p.use_order != 0u ? step_info[p.order_offset + k] : k;
    const uint first_row = head * p.head_dim;  // of `up`, and of the slot's kv_dim floats
    const uint out_at = slot * kv_dim + first_row;
#if ROPE
    if (u < p.n_pairs) {
      const uint a = p.neox != 0u ? u : 2u * u;
      const uint b = p.neox != 0u ? u + p.n_pairs : 2u * u + 1u;
      const float x0 = up_dot(first_row + a, slot), x1 = up_dot(first_row + b, slot);
      const uint at = ((committed ? k : step_info[3] + k - n_past) * p.n_pairs + u) * 2u;
      const float c = committed ? positions[at] : rows[at];
      const float s = committed ? positions[at + 1u] : rows[at + 1u];
      precise float r0 = x0 * c - x1 * s;
      precise float r1 = x0 * s + x1 * c;
      recovered[out_at + a] = r0;
      recovered[out_at + b] = r1;
      continue;
    }
#endif
    const uint d = 2u * p.n_pairs + (u - p.n_pairs);
    recovered[out_at + d] = up_dot(first_row + d, slot);
  }
}
