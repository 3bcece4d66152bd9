#version 450
// Moves or exchanges whole KV entries (kv_dim floats each) of one layer's K or V
// cache, applying the (first, second) slot pairs strictly in order: mode 0 swaps the
// two entries, mode 1 copies entry `first` over entry `second`. Each invocation owns
// one float column d of every entry and walks the list sequentially, so the result is
// the same as applying the pairs one after another.
layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer Cache { float cache[]; };     // [n_ctx x kv_dim]
layout(std430, binding = 1) readonly buffer Pairs { int pairs[]; };  // [n_pairs x 2]

layout(push_constant) uniform Params {
  uint n_pairs;
  uint kv_dim;
  uint mode;
} p;

void main() {
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint d = gl_GlobalInvocationID.x; d < p.kv_dim; d += step) {
    for (uint k = 0; k < p.n_pairs; ++k) {
      const uint first = uint(pairs[2 * k]) * p.kv_dim + d;
      const uint second = uint(pairs[2 * k + 1]) * p.kv_dim + d;
      const float v = cache[first];
      if (p.mode == 0) cache[first] = cache[second];
      cache[second] = v;
    }
  }
}
