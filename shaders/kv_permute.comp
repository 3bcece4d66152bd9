#version 450
// Moves or exchanges whole KV entries (`words` 32-bit words each: the entry's floats,
// or its halves two per word in an fp16 cache) of one layer's K or V cache, applying
// the (first, second) slot pairs strictly in order: mode 0 swaps the
// two entries, mode 1 copies entry `first` over entry `second`. Each invocation owns
// one word column d of every entry and walks the list sequentially, so the result is
// the same as applying the pairs one after another. With ring > 0 (a ring layer,
// KvCacheShape::ring) each pair names cache indices, at slots index mod ring.
layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer Cache { uint cache[]; };     // [entries x words], moved bit for bit
layout(std430, binding = 1) readonly buffer Pairs { int pairs[]; };  // [n_pairs x 2]

layout(push_constant) uniform Params {
  uint n_pairs;
  uint words;
  uint mode;
  uint ring;
} p;

uint slot_of(int index) { return p.ring > 0u ? uint(index) % p.ring : uint(index); }

void main() {
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint d = gl_GlobalInvocationID.x; d < p.words; d += step) {
    for (uint k = 0; k < p.n_pairs; ++k) {
      const uint first = slot_of(pairs[2 * k]) * p.words + d;
      const uint second = slot_of(pairs[2 * k + 1]) * p.words + d;
      const uint v = cache[first];
      if (p.mode == 0) cache[first] = cache[second];
      cache[second] = v;
    }
  }
}
