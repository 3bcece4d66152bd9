// The `cpu` backend's gated activations out = act(gate) * up (SwiGLU's SiLU, GeGLU's
// tanh-approximated GELU) in vector lanes, with Highway's exp and tanh (within 1 and 4
// ulp of std::exp and std::tanh), in place of one libm call per value. Every value goes
// through the vector code (a range's last values in a padded vector), and a lane's
// result depends only on its inputs: the results do not depend on how the values are
// split over threads or steps.
#pragma once

#include <cstdint>

#include "backend/host/scalar_kernels.h"

namespace fafo::cpu {

using scalar::GatedActivation;

// out[i] = act(gate[i]) * up[i] for i < n, with the reference's formulas
// (scalar::silu, scalar::gelu_tanh): silu(x) = x / (1 + exp(-x)); gelu_tanh(x) =
// 0.5 x (1 + tanh(clamp(0.79788456 (x + 0.044715 x^3), -10, 10))).
void gated_simd(GatedActivation act, const float* gate, const float* up, float* out, int64_t n);

}  // namespace fafo::cpu
