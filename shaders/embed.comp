#version 450
// Embedding lookup from a weight table in any GGUF weight format (dequant.glsl):
//     out[t * cols + c] = table[tokens[t] - first_row][c]
// for every t < T whose token lies in [first_row, first_row + n_rows); the other
// tokens' rows of out are left untouched, so a table split over several buffers is
// looked up with one dispatch per part. Compiled once per format (-DFORMAT_*).
//
// One invocation decodes one 16-value chunk of one token's row (grid-stride, so any
// T x cols fits the workgroup-count limit). The values are written as their bits, so
// they are exactly dequantize_row's, whatever the device does with denormals.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require

#define WG_SIZE 64u

layout(local_size_x = WG_SIZE) in;

layout(std430, binding = 0) readonly buffer InTokens { uint tokens[]; };
layout(std430, binding = 1) readonly buffer InW { uint w_words[]; };
layout(std430, binding = 2) writeonly buffer Out { uint out_bits[]; };

layout(push_constant) uniform Params {
  uint T;
  uint cols;
  uint first_row;
  uint n_rows;
  uint row_bytes;  // tensor_row_bytes(type, cols)
} p;

#include "dequant.glsl"

void main() {
  const uint full_chunks = p.cols / 16u;
  const uint chunks = (p.cols + 15u) / 16u;  // a partial last chunk only for plain float formats
  const uint items = p.T * chunks;
  const uint stride = gl_NumWorkGroups.x * WG_SIZE;
  for (uint item = gl_GlobalInvocationID.x; item < items; item += stride) {
    const uint t = item / chunks;
    const uint chunk = item % chunks;
    const uint row = tokens[t] - p.first_row;  // wraps for tokens below first_row
    if (row >= p.n_rows) continue;
    const uint row_off = row * p.row_bytes;
    const uint out_base = t * p.cols + chunk * 16u;
    if (chunk < full_chunks) {
      float v[16];
      dq_row_chunk(row_off, chunk, v);
      [[unroll]] for (uint k = 0u; k < 16u; ++k) out_bits[out_base + k] = floatBitsToUint(v[k]);
    } else {
#if DQ_PLAIN_FLOAT
      for (uint c = chunk * 16u; c < p.cols; ++c) out_bits[t * p.cols + c] = floatBitsToUint(dq_row_value(row_off, c));
#endif
    }
  }
}
