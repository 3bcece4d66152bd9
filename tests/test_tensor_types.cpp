// The weight formats' type table (fafo/tensor_type.h): names, block sizes and row bytes of
// every type, unknown ids, and the errors for unsupported types and bad value counts.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fafo/tensor_type.h"

namespace {

using fafo::TensorType;

// ---------------------------------------------------------------------------------------------
// Type table and error paths.

TEST(TensorTypeTable, InfoNamesAndSizes) {
  struct Expected {
    TensorType type;
    const char* name;
    uint32_t block_size;
    uint32_t block_bytes;
  };
  const Expected expected[] = {
      {TensorType::F32, "F32", 1, 4},      {TensorType::F16, "F16", 1, 2},       {TensorType::BF16, "BF16", 1, 2},
      {TensorType::Q4_0, "Q4_0", 32, 18},  {TensorType::Q4_1, "Q4_1", 32, 20},   {TensorType::Q5_0, "Q5_0", 32, 22},
      {TensorType::Q5_1, "Q5_1", 32, 24},  {TensorType::Q8_0, "Q8_0", 32, 34},   {TensorType::Q8_1, "Q8_1", 32, 36},
      {TensorType::Q2_K, "Q2_K", 256, 84}, {TensorType::Q3_K, "Q3_K", 256, 110}, {TensorType::Q4_K, "Q4_K", 256, 144},
      {TensorType::Q5_K, "Q5_K", 256, 176}, {TensorType::Q6_K, "Q6_K", 256, 210}, {TensorType::Q8_K, "Q8_K", 256, 292},
      {TensorType::IQ4_NL, "IQ4_NL", 32, 18}, {TensorType::IQ4_XS, "IQ4_XS", 256, 136},
      {TensorType::MXFP4, "MXFP4", 32, 17},   {TensorType::IQ2_XXS, "IQ2_XXS", 256, 66},
      {TensorType::IQ2_XS, "IQ2_XS", 256, 74}, {TensorType::IQ3_XXS, "IQ3_XXS", 256, 98},
      {TensorType::IQ3_S, "IQ3_S", 256, 110},
  };
  for (const Expected& e : expected) {
    const fafo::TensorTypeInfo* info = fafo::tensor_type_info(static_cast<uint32_t>(e.type));
    ASSERT_NE(info, nullptr) << e.name;
    EXPECT_EQ(info->type, e.type);
    EXPECT_EQ(info->name, e.name);
    EXPECT_EQ(info->block_size, e.block_size) << e.name;
    EXPECT_EQ(info->block_bytes, e.block_bytes) << e.name;
    EXPECT_EQ(&fafo::tensor_type_info(e.type), info);
    EXPECT_EQ(fafo::tensor_type_name(e.type), e.name);
    EXPECT_EQ(fafo::tensor_row_bytes(e.type, 4096), 4096 / e.block_size * e.block_bytes) << e.name;
    EXPECT_EQ(fafo::tensor_type_from_name(e.name), e.type);
  }
  EXPECT_EQ(fafo::tensor_type_from_name("q4_k"), TensorType::Q4_K);
  EXPECT_EQ(fafo::tensor_type_from_name("bf16"), TensorType::BF16);
  EXPECT_EQ(fafo::tensor_type_from_name("f16"), TensorType::F16);
  EXPECT_EQ(fafo::tensor_type_from_name("Q4_K_M"), std::nullopt);
  EXPECT_EQ(fafo::tensor_type_from_name(""), std::nullopt);
  EXPECT_EQ(fafo::tensor_type_from_name("Q4"), std::nullopt);
  EXPECT_EQ(fafo::tensor_row_bytes(TensorType::Q4_K, 14336), 56u * 144u);
  EXPECT_EQ(fafo::tensor_row_bytes(TensorType::F32, 3), 12u);
}

TEST(TensorTypeTable, UnknownIdsAreNull) {
  for (uint32_t id : {4u, 5u, 19u, 22u, 29u, 31u, 40u, 1000u, 0xffffffffu}) {
    EXPECT_EQ(fafo::tensor_type_info(id), nullptr) << id;
  }
}

TEST(TensorTypeTable, UnsupportedTypesThrow) {
  const auto iq2_s = static_cast<TensorType>(22);  // IQ2_S
  std::vector<float> values(256);
  std::vector<uint8_t> bytes(1024);
  EXPECT_THROW(fafo::tensor_type_info(iq2_s), std::invalid_argument);
  EXPECT_THROW(fafo::tensor_type_name(iq2_s), std::invalid_argument);
  EXPECT_THROW(fafo::tensor_row_bytes(iq2_s, 256), std::invalid_argument);
  EXPECT_THROW(fafo::dequantize_row(iq2_s, bytes.data(), values.data(), 256), std::invalid_argument);
  EXPECT_THROW(fafo::quantize_row(iq2_s, values.data(), bytes.data(), 256), std::invalid_argument);
  try {
    fafo::dequantize_row(static_cast<TensorType>(4), bytes.data(), values.data(), 32);
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("4"), std::string::npos) << e.what();
  }
}

TEST(TensorTypeTable, BadValueCountsThrow) {
  std::vector<float> values(1024);
  std::vector<uint8_t> bytes(4096);
  for (TensorType type : {TensorType::Q4_0, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K}) {
    const int64_t block = fafo::tensor_type_info(type).block_size;
    for (int64_t n : {block + 1, block / 2, int64_t{-1} * block, int64_t{100}}) {
      EXPECT_THROW(fafo::dequantize_row(type, bytes.data(), values.data(), n), std::invalid_argument) << n;
      EXPECT_THROW(fafo::quantize_row(type, values.data(), bytes.data(), n), std::invalid_argument) << n;
      EXPECT_THROW(fafo::tensor_row_bytes(type, n), std::invalid_argument) << n;
    }
    EXPECT_NO_THROW(fafo::dequantize_row(type, bytes.data(), values.data(), 0));
  }
  EXPECT_THROW(fafo::tensor_row_bytes(TensorType::F16, -1), std::invalid_argument);
  EXPECT_NO_THROW(fafo::dequantize_row(TensorType::F16, bytes.data(), values.data(), 7));
}

}  // namespace
