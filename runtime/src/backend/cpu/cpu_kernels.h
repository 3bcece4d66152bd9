// The CPU reference kernels: plain fp32 loops over one row (or one head) at a time.
// The CPU backend calls them in parallel; tests compare every GPU kernel with them.
#pragma once

#include <cstdint>

#include "fafo/backend.h"

namespace fafo::cpu {

float dot(const float* a, const float* b, int64_t n);
void rms_norm_row(const float* x, const float* gain, float eps, float* out, int64_t n);
// Rotates one head in place at position `pos`.
void rope_head(float* head, int32_t pos, const RopeParams& p);
float silu(float x);

// Attention of one query head over `n_keys` keys/values gathered by slot index.
// keys/values: base of the layer's cache; stride: floats per slot (kv_dim); offset: the
// head's first float inside a slot. scratch holds n_keys floats.
void attend_head(const float* q, const float* keys, const float* values, int64_t stride, int64_t offset,
                 const int32_t* slots, int32_t n_keys, int32_t head_dim, float scale, float* scratch, float* out);

}  // namespace fafo::cpu
