// The reference backend's arithmetic on one row or one head, in plain fp32 loops
// (compiled without contraction into fused multiply-adds): the definitions the other
// backends are checked against, written for this backend alone.
#pragma once

#include <cstdint>

#include "fafo/backend.h"

namespace fafo::reference {

// sum_i a[i] * b[i]: eight partial sums over i mod 8, then ((s0+s4)+(s1+s5))+((s2+s6)+(s3+s7)),
// then the tail past the last multiple of 8. The order every backend documents.
float dot(const float* a, const float* b, int64_t n);
// out = x * (1 / sqrt(mean(x^2) + eps)) * gain, the mean of squares summed in double.
void rms_norm_row(const float* x, const float* gain, float eps, float* out, int64_t n);
// One head rotated in place at `position` (pairs 2i, 2i+1, or i, i + n_dims/2 with NEOX).
void rope_head(float* head, int32_t position, const RopeParams& p);
// x * sigmoid(x), as x / (1 + exp(-x)).
float silu(float x);
// GELU by its tanh approximation (tanh's argument clamped to [-10, 10]).
float gelu_tanh(float x);
// gpt-oss's clamped SwiGLU of one gate and up value (GatedActivation::SwigluOai).
float swiglu_oai(float gate, float up);
// cap * tanh(x / cap), tanh's argument clamped to [-10, 10].
float soft_cap(float x, float cap);
// The index of the largest of n values, ties to the first; -1 when one is NaN, -2 when
// every value is -inf.
int32_t argmax_row(const float* x, int64_t n);

}  // namespace fafo::reference
