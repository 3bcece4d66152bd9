// The CPU reference kernels: plain fp32 loops over one row (or one head) at a time.
// The CPU backend calls them in parallel; tests compare every GPU kernel with them.
#pragma once

#include <cmath>
#include <cstdint>

#include "fafo/backend.h"

namespace fafo::ref {

float dot(const float* a, const float* b, int64_t n);
void rms_norm_row(const float* x, const float* gain, float eps, float* out, int64_t n);
// Rotates one head in place at position `pos`.
void rope_head(float* head, int32_t pos, const RopeParams& p);
float silu(float x);
// out[r] = dot(W row r, latent) for the `rows` rows of W (row-major, `cols` wide): an MLA
// up-projection of one latent key or value.
void up_project(const float* w, const float* latent, int64_t rows, int64_t cols, float* out);
// An MLA key recovered from its latent: up_project by k_up (n_head_kv * head_dim rows,
// `rank` columns), then each head rotated at `position`.
void recover_key(const float* k_up, const float* latent, int64_t rank, int32_t n_head_kv, int32_t head_dim,
                 int32_t position, const RopeParams& rope, float* out);
// Index of the largest of n values, ties to the first; -1 when one is NaN, -2 when all are -inf.
int32_t argmax_row(const float* x, int64_t n);

// Attention of one query head over part of its keys (flash-decoding style): keys and
// values are gathered by slot index from the layer's cache (stride: floats per slot,
// offset: the head's first float in a slot). Writes the unnormalised sum of
// exp(score - max) * value to `acc` and returns max and the sum of exp(score - max),
// so parts computed by different threads combine exactly with combine_parts().
// scratch holds n_keys floats.
struct AttentionPart {
  float max = -INFINITY;
  double sum = 0.0;
};
AttentionPart attend_head_part(const float* q, const float* keys, const float* values, int64_t stride, int64_t offset,
                               const int32_t* slots, int32_t n_keys, int32_t head_dim, float scale, float* scratch,
                               float* acc);
// out = the softmax-weighted values of all parts (accs: n_parts x head_dim).
void combine_parts(const AttentionPart* parts, const float* accs, int32_t n_parts, int32_t head_dim, float* out);

}  // namespace fafo::ref
