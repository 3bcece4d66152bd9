// Rows of the codebook formats IQ2_XXS and IQ2_XS, which fafo reads but does not write
// (llama.cpp quantizes to them only with an importance matrix), at a row's magnitude:
// fafo-synth's weights in those formats and the backend tests' (tests/random_weights.h). Not a quantization: each 256-value super-block's
// codes, signs and scales are random bytes (seeded by the row's values), its fp16 d set so
// that its largest possible |value| (largest scale times largest level) is the largest |x|
// of those 256 values. Header-only so that every test binary can use it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

#include "fafo/tensor_type.h"

namespace fafo::synth {

// The largest |value| a super-block holds per unit of its d; 0 for the other formats.
inline float codebook_max_per_d(TensorType type) {
  switch (type) {
    case TensorType::IQ2_XXS:
    case TensorType::IQ2_XS: return 15.5f * 0.25f * 43.0f;
    default: return 0.0f;
  }
}

inline void codebook_row(TensorType type, const float* x, uint8_t* out, int64_t cols) {
  const TensorTypeInfo& info = tensor_type_info(type);
  const float per_d = codebook_max_per_d(type);
  if (per_d == 0.0f) throw std::invalid_argument("codebook_row: " + std::string(info.name) + " is not a codebook format");
  if (cols % info.block_size != 0)
    throw std::invalid_argument("codebook_row: " + std::to_string(cols) + " values is not a whole number of " +
                                std::string(info.name) + " blocks of " + std::to_string(info.block_size));
  uint32_t seed = 0x9e3779b9u;
  for (int64_t c = 0; c < cols; ++c) {
    uint32_t bits;
    std::memcpy(&bits, &x[c], 4);
    seed = (seed ^ bits) * 0x01000193u;
  }
  std::mt19937 rng(seed);
  for (int64_t b = 0; b < cols / info.block_size; ++b) {
    uint8_t* block = out + b * info.block_bytes;
    for (uint32_t i = 0; i < info.block_bytes; ++i) block[i] = static_cast<uint8_t>(rng());
    float amax = 0.0f;
    for (uint32_t i = 0; i < info.block_size; ++i) amax = std::max(amax, std::fabs(x[b * info.block_size + i]));
    const uint16_t d = fp32_to_fp16(amax / per_d);
    std::memcpy(block, &d, 2);
  }
}

// quantize_row for the formats fafo writes, codebook_row for the IQ2 ones.
inline void write_row(TensorType type, const float* x, void* out, int64_t cols) {
  if (tensor_type_info(type).has_quantize) quantize_row(type, x, out, cols);
  else codebook_row(type, x, static_cast<uint8_t*>(out), cols);
}

}  // namespace fafo::synth
