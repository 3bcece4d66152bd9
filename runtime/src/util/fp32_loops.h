// Plain fp32 loops that the model and the host backend both run, so that their results
// are the same bits: a dot product in a fixed order, one head's RoPE, and multi-head
// latent attention's recovery of keys and values from latents (the model recovers keys
// on the host for KV policies and tests; the cpu backend in its attention). The host
// backend's other kernels are in backend/host/scalar_kernels.h.
#pragma once

#include <cstdint>

#include "fafo/backend.h"

namespace fafo::scalar {

// dst[i] += w * src[i]: the product rounded to float, then the sum (this file compiles
// with -ffp-contract=off), as the reference backend's scatter_add.
void add_scaled(float* dst, const float* src, float w, int64_t n);
// Eight partial sums in a fixed order.
float dot(const float* a, const float* b, int64_t n);
// Rotates one head in place at position `pos`.
void rope_head(float* head, int32_t pos, const RopeParams& p);
// out[r] = dot(W row r, latent) for the `rows` rows of W (row-major, `cols` wide): an MLA
// up-projection of one latent key or value.
void up_project(const float* w, const float* latent, int64_t rows, int64_t cols, float* out);
// An MLA key recovered from its latent: up_project by k_up (n_head_kv * head_dim rows,
// `rank` columns), then each head rotated at `position`.
void recover_key(const float* k_up, const float* latent, int64_t rank, int32_t n_head_kv, int32_t head_dim,
                 int32_t position, const RopeParams& rope, float* out);

}  // namespace fafo::scalar
