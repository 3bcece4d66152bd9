#version 450
// Merges the parts attention.comp wrote for each (row, head): with M the largest
// part max, out[d] = sum_p acc_p[d] * exp(m_p - M) / sum_p l_p * exp(m_p - M).
// Parts that saw no visible key have l = 0 and are skipped. With p.has_sinks, head h's
// sink (binding 3: AttentionShape::sinks) is one more logit with no value: M is taken
// over it too and exp(sink - M) joins the denominator. One workgroup per
// (head, row); invocations own head dimensions. The parts in use are step_info[2] (the
// step's header) of the n_parts the partials are laid out for; row r of the dispatch is
// row step_info[3] + r of the partials and of y (a joined step's part).
//
// QUANT=1: each head's values (head_dim a multiple of 32) are also rounded to 8 bits
// per block of 32, as shaders/quantize.comp rounds a row (shaders/quantize.glsl), into
// binding 4 in its layout (row t at word t * q8_stride; the blocks of head h are blocks
// h * head_dim / 32 ... of the row): the integer product after attention reads them,
// with no rounding dispatch of its own.
#ifndef QUANT
#define QUANT 0
#endif
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Partials { float partials[]; };
layout(std430, binding = 1) writeonly buffer Out { float y[]; };  // [T x out_stride]
layout(std430, binding = 2) readonly buffer Step { uint step_info[]; };
layout(std430, binding = 3) readonly buffer Sinks { float sinks[]; };  // [n_head], read with p.has_sinks
#if QUANT
layout(std430, binding = 4) writeonly buffer OutQ { uint xq[]; };
#define MAX_HEAD_DIM 256u  // Kernels::kMaxHeadDim (the host refuses larger heads)
shared float head_values[MAX_HEAD_DIM];
#include "quantize.glsl"
#endif

layout(push_constant) uniform Params {
  uint T;
  uint n_head;
  uint head_dim;
  uint n_parts;
  uint out_stride;
  uint q8_stride;  // QUANT: words per row of the rounded rows
  uint has_sinks;  // 1: binding 3 holds the heads' sinks
} p;

void main() {
  const uint head = gl_WorkGroupID.x;
  const uint row = step_info[3] + gl_WorkGroupID.y;
  const uint base = (row * p.n_head + head) * p.n_parts * (p.head_dim + 2);
  const uint stride = p.head_dim + 2;
  const uint used = step_info[2];
  const float sink = p.has_sinks != 0u ? sinks[head] : -1.0 / 0.0;
  float m = sink;
  for (uint part = 0; part < used; ++part)
    if (partials[base + part * stride + 1] > 0.0) m = max(m, partials[base + part * stride]);
  float total = p.has_sinks != 0u ? exp(sink - m) : 0.0;
  for (uint part = 0; part < used; ++part) {
    const float l = partials[base + part * stride + 1];
    if (l > 0.0) total += l * exp(partials[base + part * stride] - m);
  }
  const float inv = total > 0.0 ? 1.0 / total : 0.0;
  for (uint d = gl_LocalInvocationID.x; d < p.head_dim; d += gl_WorkGroupSize.x) {
    float sum = 0.0;
    for (uint part = 0; part < used; ++part) {
      const uint at = base + part * stride;
      const float l = partials[at + 1];
      if (l > 0.0) sum += partials[at + 2 + d] * exp(partials[at] - m);
    }
    const float value = sum * inv;
    y[row * p.out_stride + head * p.head_dim + d] = value;
#if QUANT
    head_values[d] = value;
#endif
  }
#if QUANT
  barrier();
  const uint b = gl_LocalInvocationID.x;
  if (b < p.head_dim / 32u) {
    float v[32];
    [[unroll]] for (uint k = 0u; k < 32u; ++k) v[k] = head_values[32u * b + k];
    uint words[8];
    float d, s;
    q8_block(v, words, d, s);
    const uint cols = p.n_head * p.head_dim, blocks = cols / 32u;
    const uint block = head * p.head_dim / 32u + b, at = row * p.q8_stride;
    [[unroll]] for (uint w = 0u; w < 8u; ++w) xq[at + 8u * block + w] = words[w];
    xq[at + cols / 4u + block] = floatBitsToUint(d);
    xq[at + cols / 4u + blocks + block] = floatBitsToUint(s);
  }
#endif
}
