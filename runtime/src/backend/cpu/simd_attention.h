// The `cpu` backend's attention inner loop: one query head over part of its keys, as
// ref::attend_head_part computes it (scores, their maximum, exp(score - max) summed in
// double in key order, the weighted sum of values), with vector dot products and a
// vector exp (Highway's, within 1 ulp of std::exp). The arithmetic depends only on the
// head's query and keys, never on the step's size, so it stays T-invariant.
#pragma once

#include <cstdint>

#include "backend/reference/reference_kernels.h"

namespace fafo::cpu {

ref::AttentionPart attend_head_part_simd(const float* q, const float* keys, const float* values, int64_t stride,
                                         int64_t offset, const int32_t* slots, int32_t n_keys, int32_t head_dim,
                                         float scale, float* scratch, float* acc);

}  // namespace fafo::cpu
