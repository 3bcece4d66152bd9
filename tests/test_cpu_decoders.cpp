// The cpu backend's SIMD decoders (backend/cpu/simd_matmul*): every format with one
// decodes a row into exactly the floats of the scalar dequantization (src/quant), on
// every instruction set this build compiled that the machine runs, so the float
// products over them are the reference's arithmetic on the reference's values.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/simd_matmul.h"
#include "fafo/tensor_type.h"

namespace {

using fafo::TensorType;

// A row of `cols` values quantized to `type` from random floats (a few blocks with a
// negative scale and a few all zero, as real files have).
std::vector<uint8_t> random_row(TensorType type, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(cols));
  for (size_t i = 0; i < values.size(); ++i) values[i] = normal(rng) * (i % 97 == 0 ? 8.0f : 1.0f);
  for (size_t i = 0; i < 32 && i < values.size(); ++i) values[i] = 0.0f;
  std::vector<uint8_t> row(fafo::tensor_row_bytes(type, cols));
  fafo::quantize_row(type, values.data(), row.data(), cols);
  return row;
}

TEST(CpuDecoders, EveryFormatWithASimdDecoderGivesTheScalarDequantizationsBits) {
  const TensorType types[] = {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q8_0,
                              TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::F16,  TensorType::BF16};
  const int64_t cols = 1152;  // Gemma 3 1B's width: 36 legacy blocks, 4.5 super-blocks
  std::vector<std::string> targets = fafo::cpu::simd_targets();
  ASSERT_FALSE(targets.empty());
  int checked = 0;
  for (const TensorType type : types) {
    if (!fafo::cpu::has_simd_decoder(type)) continue;
    const int64_t n = fafo::tensor_type_info(type).block_size > 32 ? 1024 : cols;  // K-quants: whole super-blocks
    for (uint32_t seed = 1; seed <= 3; ++seed) {
      const std::vector<uint8_t> row = random_row(type, n, seed);
      std::vector<float> want(static_cast<size_t>(n));
      fafo::dequantize_row(type, row.data(), want.data(), n);
      for (const std::string& target : targets) {
        SCOPED_TRACE(std::string(fafo::tensor_type_name(type)) + " on " + target);
        fafo::cpu::use_simd_target(target);
        std::vector<float> got(static_cast<size_t>(n), -1.0f);
        fafo::cpu::dequantize_row_simd(type, row.data(), got.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          uint32_t a, b;
          std::memcpy(&a, &got[static_cast<size_t>(i)], 4);
          std::memcpy(&b, &want[static_cast<size_t>(i)], 4);
          ASSERT_EQ(a, b) << "value " << i << ": " << got[static_cast<size_t>(i)] << " vs " << want[static_cast<size_t>(i)];
        }
        ++checked;
      }
    }
  }
  fafo::cpu::use_simd_target("");
  // Q4_1, Q5_0 and Q5_1 (the fallbacks of llama.cpp's mixes for rows that are not whole
  // super-blocks, Gemma 3 1B's and Qwen2.5 0.5B's) have decoders too.
  for (const TensorType type : {TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1})
    EXPECT_TRUE(fafo::cpu::has_simd_decoder(type)) << fafo::tensor_type_name(type);
  EXPECT_GE(checked, 3 * static_cast<int>(targets.size()) * 8);
}

}  // namespace
