// The host backend's scalar kernels (the cpu backend's, where it has no SIMD version):
// plain fp32 loops over one row (or one head) at a time, called in parallel. Kernel
// tests of the cpu and Vulkan backends compare with them too. The reference backend
// (backend/reference/) has its own and shares none of these.
#pragma once

#include <cmath>
#include <cstdint>

#include "fafo/backend.h"
#include "util/fp32_loops.h"  // dot, rope_head, up_project, recover_key

namespace fafo::scalar {

void rms_norm_row(const float* x, const float* gain, float eps, float* out, int64_t n);
float silu(float x);
// GELU by its tanh approximation (tanh's argument clamped to [-10, 10]).
float gelu_tanh(float x);
// gpt-oss's clamped SwiGLU of one gate and up value (GatedActivation::SwigluOai).
float swiglu_oai(float gate, float up);
using fafo::GatedActivation;  // fafo/backend.h
// cap * tanh(x / cap), tanh's argument clamped to [-10, 10].
float soft_cap(float x, float cap);
// Index of the largest of n values, ties to the first; -1 when one is NaN, -2 when all are -inf.
int32_t argmax_row(const float* x, int64_t n);

// Where attention reads one KV head's keys or values: rows gathered by slot index from a
// layer's cache, `stride` floats per slot, the head's `width` floats from `offset`.
// Values are usually laid out as the keys are; an MLA layer that absorbs its value
// up-projection reads the latent values instead (width: the layer's value rank).
struct KvRows {
  const float* data = nullptr;
  int64_t stride = 0, offset = 0;
  int32_t width = 0;
  const float* row(int32_t slot) const { return data + slot * stride + offset; }
};

// Attention of one query head (keys.width floats) over part of its keys (flash-decoding
// style). Writes the unnormalised sum of exp(score - max) * value (values.width floats)
// to `acc` and returns max and the sum of exp(score - max), so parts computed by
// different threads combine exactly with combine_parts(). scratch holds n_keys floats.
struct AttentionPart {
  float max = -INFINITY;
  double sum = 0.0;
};
// A key's score from its dot product with the query: dot * scale, then soft-capped
// (soft_cap) where softcap > 0 (AttentionShape).
struct ScoreMap {
  float scale = 1.0f;
  float softcap = 0.0f;
  float operator()(float dot) const {
    const float s = dot * scale;
    return softcap > 0.0f ? soft_cap(s, softcap) : s;
  }
};
AttentionPart attend_head_part(const float* q, const KvRows& keys, const KvRows& values, const int32_t* slots,
                               int32_t n_keys, ScoreMap score, float* scratch, float* acc);
// out = the softmax-weighted values of all parts (accs: n_parts x width); a finite
// `sink` (AttentionShape::sinks) is one more logit of the softmax, with no value.
void combine_parts(const AttentionPart* parts, const float* accs, int32_t n_parts, int32_t width, float* out,
                   float sink = -INFINITY);

}  // namespace fafo::scalar
