#version 450
// The k best values of each row of x (rows x n), for sampling steps: a few KiB are read
// back per row instead of n floats. Order (fafo/top_k.h): larger first, equal values
// (-0.0 == +0.0) by lower index first. Output per row, at word row * (1 + 2k):
//     [status] [k ids] [k value bits]   status 0, or 1 when the row holds a NaN
// (ids and values are then unspecified). The values are copied from x, bit for bit.
//
// One workgroup per row (grid-stride over rows), exact radix selection on a key that
// orders floats as integers:
//   1. Four histogram passes over the row, one byte of the key each, most significant
//      first, counting only values whose key matches the bytes chosen so far, find the
//      key of the k-th largest value (the threshold) and how many values equal to it
//      belong to the top k (`remaining`: the lowest indices among them).
//   2. A collect pass over contiguous slices (invocation i owns the i-th slice, so slice
//      order is index order): counts per slice, an exclusive scan, then every value above
//      the threshold and the first `remaining` equal to it land in shared memory at
//      deterministic places.
//   3. A rank sort of those k entries by (key desc, index asc) writes them out in order.
// No value is compared approximately and nothing depends on the timing of invocations,
// so the result equals the host's fafo::top_k_row exactly.
#define WG_SIZE 256   // also the number of histogram bins (one byte)
#define MAX_K 1024    // fafo::kMaxTopK
layout(local_size_x = WG_SIZE) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { uint result[]; };

layout(push_constant) uniform Params {
  uint rows;
  uint n;
  uint k;  // 1 <= k <= min(n, MAX_K)
} p;

shared uint hist[WG_SIZE];
shared uint count_above[WG_SIZE];
shared uint count_equal[WG_SIZE];
shared uint chosen_key[MAX_K];
shared uint chosen_index[MAX_K];
shared uint threshold;  // the key bytes chosen so far, then the k-th largest key
shared uint remaining;  // values equal to the threshold still to take
shared uint saw_nan;

// Larger float <=> larger key; -0.0 gets +0.0's key so that the two tie.
uint order_key(float v) {
  uint b = floatBitsToUint(v);
  if (b == 0x80000000u) b = 0u;
  return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

void main() {
  const uint lid = gl_LocalInvocationID.x;
  for (uint row = gl_WorkGroupID.x; row < p.rows; row += gl_NumWorkGroups.x) {
    const uint base = row * p.n;
    const uint out_base = row * (1u + 2u * p.k);
    if (lid == 0u) {
      saw_nan = 0u;
      threshold = 0u;
      remaining = p.k;
    }

    // 1. Radix selection of the threshold key, one byte per pass.
    bool has_nan = false;
    for (int shift = 24; shift >= 0; shift -= 8) {
      hist[lid] = 0u;
      barrier();
      const uint chosen_mask = shift == 24 ? 0u : (0xffffffffu << uint(shift + 8));
      const uint chosen = threshold;
      for (uint i = lid; i < p.n; i += WG_SIZE) {
        const float v = x[base + i];
        if (isnan(v)) {
          has_nan = true;
          continue;
        }
        const uint key = order_key(v);
        if ((key & chosen_mask) == chosen) atomicAdd(hist[(key >> uint(shift)) & 0xffu], 1u);
      }
      if (has_nan) atomicOr(saw_nan, 1u);
      barrier();
      if (saw_nan != 0u) break;  // uniform: read by all after the barrier
      if (lid == 0u) {
        // The bin, from the top, where the count of values reaches `remaining`.
        uint need = remaining;
        uint bin = 255u;
        while (bin > 0u && hist[bin] < need) {
          need -= hist[bin];
          --bin;
        }
        threshold = chosen | (bin << uint(shift));
        remaining = need;
      }
      barrier();
    }

    if (saw_nan != 0u) {
      if (lid == 0u) result[out_base] = 1u;
    } else {
      // 2. Collect: the values above the threshold, then the first `remaining` equal.
      const uint key_k = threshold;
      const uint slice = (p.n + WG_SIZE - 1u) / WG_SIZE;
      const uint begin = min(p.n, lid * slice);
      const uint end = min(p.n, begin + slice);
      uint above = 0u, equal = 0u;
      for (uint i = begin; i < end; ++i) {
        const uint key = order_key(x[base + i]);
        if (key > key_k) ++above;
        else if (key == key_k) ++equal;
      }
      count_above[lid] = above;
      count_equal[lid] = equal;
      barrier();
      if (lid == 0u) {
        uint sum_above = 0u, sum_equal = 0u;
        for (uint s = 0u; s < WG_SIZE; ++s) {
          const uint a = count_above[s], e = count_equal[s];
          count_above[s] = sum_above;
          count_equal[s] = sum_equal;
          sum_above += a;
          sum_equal += e;
        }
      }
      barrier();
      const uint n_above = p.k - remaining;
      uint at_above = count_above[lid];
      uint rank_equal = count_equal[lid];
      for (uint i = begin; i < end; ++i) {
        const uint key = order_key(x[base + i]);
        if (key > key_k) {
          chosen_key[at_above] = key;
          chosen_index[at_above] = i;
          ++at_above;
        } else if (key == key_k) {
          if (rank_equal < remaining) {
            chosen_key[n_above + rank_equal] = key;
            chosen_index[n_above + rank_equal] = i;
          }
          ++rank_equal;
        }
      }
      barrier();

      // 3. Rank sort: an entry's place is the number of entries that come before it.
      for (uint e = lid; e < p.k; e += WG_SIZE) {
        const uint key = chosen_key[e];
        const uint index = chosen_index[e];
        uint place = 0u;
        for (uint j = 0u; j < p.k; ++j) {
          const uint kj = chosen_key[j];
          if (kj > key || (kj == key && chosen_index[j] < index)) ++place;
        }
        result[out_base + 1u + place] = index;
        result[out_base + 1u + p.k + place] = floatBitsToUint(x[base + index]);
      }
      if (lid == 0u) result[out_base] = 0u;
    }
    barrier();  // shared state is reset for the next row
  }
}
