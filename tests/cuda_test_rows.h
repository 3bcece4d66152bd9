// Weight rows for the CUDA backend's host-side tests (test_cuda_host.cpp) and the
// Vulkan-against-CUDA order tests (test_vulkan_cuda_order.cpp): every format fafo's
// CUDA kernels decode, rows quantized from random floats and rows of random bytes.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fafo/tensor_type.h"
#include "random_weights.h"

namespace fafo::test::cuda_rows {

using fafo::TensorType;

inline constexpr TensorType kFormats[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q8_0,
                                   TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                   TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                                   TensorType::Q6_K, TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::MXFP4, TensorType::IQ2_XXS, TensorType::IQ2_XS, TensorType::IQ3_XXS, TensorType::IQ3_S};

inline std::string name_of(TensorType t) { return std::string(fafo::tensor_type_name(t)); }

// Rows quantized by fafo's quantizers from random floats, then rows of random bytes.
inline std::vector<uint8_t> test_rows(TensorType type, uint32_t rows, uint32_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  const size_t row_bytes = fafo::tensor_row_bytes(type, cols);
  std::vector<uint8_t> bytes(size_t{rows} * row_bytes);
  std::vector<float> row(cols);
  for (uint32_t r = 0; r < rows; ++r) {
    for (float& v : row) v = value(rng) * static_cast<float>(r + 1);
    fafo::test::quantize_for_test(type, row.data(), bytes.data() + r * row_bytes, cols);
  }
  const std::vector<uint8_t> random = fafo::test::random_block_bytes(type, rows, cols, seed + 1);
  bytes.insert(bytes.end(), random.begin(), random.end());
  return bytes;
}

inline uint32_t cols_for(TensorType type) {
  const uint32_t block = fafo::tensor_type_info(type).block_size;
  return block == 1 ? 1007 : block == 32 ? 24 * block : 3 * block;  // plain floats end in a partial chunk
}

}  // namespace fafo::test::cuda_rows
