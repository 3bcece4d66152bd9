#version 450
// Element-wise kernels over n floats (rows x cols), selected by p.op:
//   0 ADD     out[i] = a[i] + b[i]             (residual adds: out aliases a)
//   1 BIAS    out[i] = a[i] + b[i % cols]      (a bias row broadcast over rows)
//   2 SWIGLU  out[i] = silu(a[i]) * b[i]       (silu(x) = x / (1 + exp(-x)))
//   3 GEGLU   out[i] = gelu(a[i]) * b[i]       (GELU's tanh form, tanh's argument clamped to [-10, 10])
//   4 SCALE   out[i] = a[i] * p.value
//   5 SOFTCAP out[i] = p.value * tanh(a[i] / p.value)   (the argument clamped as GEGLU's)
//   6 SWIGLU_OAI out[i] = g / (1 + exp(-1.702 g)) * (u + 1), g = min(a[i], 7),
//                u = clamp(b[i], -7, 7)   (gpt-oss; GatedActivation::SwigluOai)
// Buffers are declared without readonly/writeonly because out may alias a.
layout(local_size_x = 256) in;

layout(std430, binding = 0) buffer A { float a[]; };
layout(std430, binding = 1) buffer B { float b[]; };
layout(std430, binding = 2) buffer Out { float y[]; };

layout(push_constant) uniform Params {
  uint n;
  uint cols;
  uint op;
  float value;
} p;

void main() {
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += step) {
    const float av = a[i];
    if (p.op == 0) {
      y[i] = av + b[i];
    } else if (p.op == 1) {
      y[i] = av + b[i % p.cols];
    } else if (p.op == 2) {
      // precise: the same expression in matmul.comp's GATED epilogue gives the same bits.
      precise float r = av / (1.0 + exp(-av)) * b[i];
      y[i] = r;
    } else if (p.op == 3) {
      const float inner = 0.7978845608028654 * (av + 0.044715 * av * av * av);
      y[i] = 0.5 * av * (1.0 + tanh(clamp(inner, -10.0, 10.0))) * b[i];
    } else if (p.op == 4) {
      y[i] = av * p.value;
    } else if (p.op == 6) {
      // (Comparisons as std::min and std::clamp make them, not min and clamp, whose result
      // for a NaN GLSL leaves undefined.)
      const float g = 7.0 < av ? 7.0 : av, bv = b[i];
      const float u = bv < -7.0 ? -7.0 : (7.0 < bv ? 7.0 : bv);
      y[i] = g / (1.0 + exp(-1.702 * g)) * (u + 1.0);
    } else {
      y[i] = p.value * tanh(clamp(av / p.value, -10.0, 10.0));
    }
  }
}
