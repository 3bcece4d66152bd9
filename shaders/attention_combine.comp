#version 450
// Merges the parts attention.comp wrote for each (row, head): with M the largest
// part max, out[d] = sum_p acc_p[d] * exp(m_p - M) / sum_p l_p * exp(m_p - M).
// Parts that saw no visible key have l = 0 and are skipped. One workgroup per
// (head, row); invocations own head dimensions. The parts in use are step_info[2] (the
// step's header) of the n_parts the partials are laid out for; row r of the dispatch is
// row step_info[3] + r of the partials and of y (a joined step's part).
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Partials { float partials[]; };
layout(std430, binding = 1) writeonly buffer Out { float y[]; };  // [T x out_stride]
layout(std430, binding = 2) readonly buffer Step { uint step_info[]; };

layout(push_constant) uniform Params {
  uint T;
  uint n_head;
  uint head_dim;
  uint n_parts;
  uint out_stride;
} p;

void main() {
  const uint head = gl_WorkGroupID.x;
  const uint row = step_info[3] + gl_WorkGroupID.y;
  const uint base = (row * p.n_head + head) * p.n_parts * (p.head_dim + 2);
  const uint stride = p.head_dim + 2;
  const uint used = step_info[2];
  float m = -1.0 / 0.0;
  for (uint part = 0; part < used; ++part)
    if (partials[base + part * stride + 1] > 0.0) m = max(m, partials[base + part * stride]);
  float total = 0.0;
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
    y[row * p.out_stride + head * p.head_dim + d] = sum * inv;
  }
}
