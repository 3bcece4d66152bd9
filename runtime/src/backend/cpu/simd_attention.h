// The `cpu` backend's attention inner loop: the query heads that share one KV head over
// part of their keys (each key and value read once for the group), each head as
// scalar::attend_head_part computes it (scores, their maximum, exp(score - max) summed in
// double in key order, the weighted sum of values), with vector dot products and a
// vector exp (Highway's, within 1 ulp of std::exp). The arithmetic depends only on the
// head's query and keys, never on the step's size or the group's, so it stays T-invariant.
#pragma once

#include <cstdint>

#include "backend/host/scalar_kernels.h"

namespace fafo::cpu {

// q: n_heads queries of keys.width floats, contiguous; scratch: n_heads * n_keys floats;
// parts[h] and accs[h * values.width ...] for each head (see HostKernels::attend_group_part).
void attend_group_part_simd(const float* q, int32_t n_heads, const scalar::KvRows& keys, const scalar::KvRows& values,
                            const int32_t* slots, int32_t n_keys, scalar::ScoreMap score, float* scratch, scalar::AttentionPart* parts,
                            float* accs);

}  // namespace fafo::cpu
