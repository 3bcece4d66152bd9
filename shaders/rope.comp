#version 450
// RoPE: rotates each head's dimension pairs of every row by an angle whose cos and
// sin the host computed for this step (table[(row * n_pairs + i) * 2 + {0, 1}]), with
// the same code as the CPU reference, so GPU and CPU rotate by identical angles.
// Pairs are (2i, 2i+1), or (i, i + n_pairs) for NEOX models. One invocation per
// (row, head, pair); a grid-stride loop covers any size.
layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer X { float x[]; };               // [rows x stride]
layout(std430, binding = 1) readonly buffer Table { float cs[]; };  // [rows x n_pairs x 2]

layout(push_constant) uniform Params {
  uint rows;
  uint n_heads;
  uint head_dim;
  uint n_pairs;  // rotated dimensions / 2
  uint stride;   // floats per row of x
  uint neox;
} p;

void main() {
  const uint total = p.rows * p.n_heads * p.n_pairs;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint id = gl_GlobalInvocationID.x; id < total; id += step) {
    const uint i = id % p.n_pairs;
    const uint head = (id / p.n_pairs) % p.n_heads;
    const uint row = id / (p.n_pairs * p.n_heads);
    const uint base = row * p.stride + head * p.head_dim;
    const uint a = base + (p.neox != 0 ? i : 2 * i);
    const uint b = base + (p.neox != 0 ? i + p.n_pairs : 2 * i + 1);
    const float c = cs[(row * p.n_pairs + i) * 2];
    const float s = cs[(row * p.n_pairs + i) * 2 + 1];
    const float x0 = x[a], x1 = x[b];
    precise float r0 = x0 * c - x1 * s;
    precise float r1 = x0 * s + x1 * c;
    x[a] = r0;
    x[b] = r1;
  }
}
