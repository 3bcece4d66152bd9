// The codebook ("grid") formats IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S against llama.cpp, bit
// for bit: tests/data/quant/<FORMAT>.json (tools/peer/quant_reference.cpp, ggml's own
// code; the file names the llama.cpp commit) holds blocks ggml quantized from rows of
// floats and blocks of random bytes, with the values ggml's to_float reads from them, and
// the hash of the values of a million random values' worth of blocks (every codebook entry
// many times over). fafo's dequantize_row must read the same bits, and its quantize_row
// write llama.cpp's blocks (IQ3_XXS, IQ3_S) or refuse (IQ2_XXS, IQ2_XS). Then the
// documented layouts on hand-made blocks, independent of that data.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fafo/quant_mix.h"
#include "fafo/tensor_type.h"
#include "hex_data.h"
#include "sha256.h"
#include "test_support.h"

namespace {
namespace grid_test {

using fafo::TensorType;

// The first position where the bits differ, and how many do.
std::string bit_differences(const std::vector<float>& got, const std::vector<uint8_t>& want_bytes) {
  size_t count = 0;
  std::string first;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t g, w;
    std::memcpy(&g, &got[i], 4);
    std::memcpy(&w, want_bytes.data() + 4 * i, 4);
    if (g == w) continue;
    if (count++ == 0) first = "value " + std::to_string(i) + ": bits " + std::to_string(g) + " against " + std::to_string(w);
  }
  return count == 0 ? std::string() : std::to_string(count) + " values differ; " + first;
}

// ggml's quant_reference bytes: each the top byte of the next splitmix64 output.
std::vector<uint8_t> splitmix_bytes(uint64_t state, size_t n) {
  std::vector<uint8_t> out(n);
  for (uint8_t& b : out) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    b = static_cast<uint8_t>((z ^ (z >> 31)) >> 56);
  }
  return out;
}

class GridFormats : public ::testing::TestWithParam<const char*> {
 protected:
  nlohmann::json data() const {
    return nlohmann::json::parse(
        fafo::test::read_text(fafo::test::source_path(std::string("tests/data/quant/") + GetParam() + ".json")));
  }
  TensorType type() const { return *fafo::tensor_type_from_name(GetParam()); }
};

TEST_P(GridFormats, DequantizeReadsLlamaCppsBits) {
  const nlohmann::json j = data();
  for (const auto& [blocks_key, values_key] :
       {std::pair{"blocks", "dequantized"}, std::pair{"random_blocks", "random_dequantized"}}) {
    const std::vector<uint8_t> blocks = fafo::test::from_hex(j[blocks_key]);
    const std::vector<uint8_t> want = fafo::test::from_hex(j[values_key]);
    ASSERT_FALSE(want.empty());
    std::vector<float> got(want.size() / 4);
    ASSERT_EQ(blocks.size(), fafo::tensor_row_bytes(type(), static_cast<int64_t>(got.size())));
    fafo::dequantize_row(type(), blocks.data(), got.data(), static_cast<int64_t>(got.size()));
    EXPECT_EQ(bit_differences(got, want), "") << GetParam() << ", " << blocks_key;
  }
}

TEST_P(GridFormats, EveryCodebookEntryReadsLlamaCppsBits) {
  const nlohmann::json many = data()["many_random"];
  const int64_t values = many["values"];
  const std::vector<uint8_t> blocks = splitmix_bytes(many["seed"].get<uint64_t>(), fafo::tensor_row_bytes(type(), values));
  std::vector<float> got(static_cast<size_t>(values));
  fafo::dequantize_row(type(), blocks.data(), got.data(), values);
  EXPECT_EQ(fafo::test::sha256_hex(got.data(), got.size() * 4), many["sha256"].get<std::string>()) << GetParam();
}

// llama.cpp d32676d7's IQ3_S blocks from fafo's, where a group of 32 values is all zeros:
// llama.cpp then does not move on its pointers to the indices and signs, so the later
// groups' bytes sit one group early for each zero group before them (the tail stays
// zero); fafo writes each group in its place (grid_quantize.cpp).
void llama_cpp_iq3_s_zero_groups(const float* x, int64_t cols, std::vector<uint8_t>& blocks) {
  constexpr size_t kBlock = 110, kQs = 2, kSigns = 74;
  for (int64_t b = 0; b < cols / 256; ++b) {
    uint8_t* block = blocks.data() + b * kBlock;
    const std::vector<uint8_t> own(block, block + kBlock);
    std::fill(block + kQs, block + kQs + 64, 0);
    std::fill(block + kSigns, block + kSigns + 32, 0);
    size_t at = 0;
    for (size_t g = 0; g < 8; ++g) {
      const float* xg = x + b * 256 + 32 * static_cast<int64_t>(g);
      if (std::all_of(xg, xg + 32, [](float v) { return v == 0.0f; })) continue;
      std::copy_n(own.begin() + static_cast<std::ptrdiff_t>(kQs + 8 * g), 8, block + kQs + 8 * at);
      std::copy_n(own.begin() + static_cast<std::ptrdiff_t>(kSigns + 4 * g), 4, block + kSigns + 4 * at);
      ++at;
    }
  }
}

// ggml quantizes to IQ3_XXS and IQ3_S without an importance matrix: fafo writes its
// blocks, byte for byte (for IQ3_S rows with a group of zeros, in its places: above). The IQ2 formats need one in llama.cpp: fafo refuses them, saying so.
TEST_P(GridFormats, QuantizeWritesLlamaCppsBlocksOrRefusesTheIq2Ones) {
  const fafo::TensorTypeInfo& info = fafo::tensor_type_info(type());
  const bool writes = type() == TensorType::IQ3_XXS || type() == TensorType::IQ3_S;
  EXPECT_TRUE(info.has_dequantize);
  ASSERT_EQ(info.has_quantize, writes);
  if (writes) {
    const nlohmann::json j = data();
    const int64_t rows = j["rows"], cols = j["cols"];
    const std::vector<uint8_t> input = fafo::test::from_hex(j["input"]);
    const std::vector<uint8_t> want = fafo::test::from_hex(j["blocks"]);
    const size_t row_bytes = fafo::tensor_row_bytes(type(), cols);
    ASSERT_EQ(input.size(), static_cast<size_t>(rows * cols) * 4);
    ASSERT_EQ(want.size(), static_cast<size_t>(rows) * row_bytes);
    std::vector<float> x(input.size() / 4);
    std::memcpy(x.data(), input.data(), input.size());
    std::vector<uint8_t> got(row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      fafo::quantize_row(type(), x.data() + r * cols, got.data(), cols);
      if (type() == TensorType::IQ3_S) llama_cpp_iq3_s_zero_groups(x.data() + r * cols, cols, got);
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin() + static_cast<std::ptrdiff_t>(r * row_bytes)))
          << GetParam() << ": row " << r << " quantizes to other blocks than llama.cpp's";
    }
    EXPECT_EQ(fafo::quant_type_for(GetParam(), "blk.0.attn_q.weight", 256, 4, false), type());
    return;
  }
  std::vector<float> x(256, 0.5f);
  std::vector<uint8_t> out(info.block_bytes);
  EXPECT_THROW(fafo::quantize_row(type(), x.data(), out.data(), 256), std::invalid_argument);
  try {
    fafo::quant_type_for(GetParam(), "blk.0.attn_q.weight", 256, 4, false);
    ADD_FAILURE() << "quantizing to " << GetParam() << " was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("does not write"), std::string::npos) << e.what();
  }
}

// Rows fafo quantizes come back near their values, a group of zeros inside a block
// included (the groups after it stay in their places). Independent of llama.cpp's data.
TEST(GridQuantize, Iq3RowsComeBackNearTheirValues) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const TensorType type : {TensorType::IQ3_XXS, TensorType::IQ3_S}) {
    const int64_t cols = 1024;
    std::vector<float> x(cols), back(cols);
    for (float& v : x) v = normal(rng) * 0.02f;
    std::fill(x.begin() + 288, x.begin() + 320, 0.0f);  // group 1 of block 1 all zeros
    std::vector<uint8_t> packed(fafo::tensor_row_bytes(type, cols));
    fafo::quantize_row(type, x.data(), packed.data(), cols);
    fafo::dequantize_row(type, packed.data(), back.data(), cols);
    double err2 = 0, x2 = 0;
    for (int64_t i = 0; i < cols; ++i) {
      err2 += (back[i] - x[i]) * static_cast<double>(back[i] - x[i]);
      x2 += x[i] * static_cast<double>(x[i]);
    }
    // 3 bits a value: llama.cpp's own relative RMS error on Gaussian rows is about 0.2.
    EXPECT_LT(std::sqrt(err2 / x2), 0.3) << fafo::tensor_type_name(type);
    // The groups after the zero group are in their own places: block 1's last group fits.
    double tail_err2 = 0, tail_x2 = 0;
    for (int64_t i = 480; i < 512; ++i) {
      tail_err2 += (back[i] - x[i]) * static_cast<double>(back[i] - x[i]);
      tail_x2 += x[i] * static_cast<double>(x[i]);
    }
    EXPECT_LT(std::sqrt(tail_err2 / tail_x2), 0.4) << fafo::tensor_type_name(type);
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, GridFormats, ::testing::Values("IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ3_S"),
                         [](const auto& p) { return std::string(p.param); });

// ---- the layouts, on hand-made blocks ----

void put_u16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(&b[at], &v, 2); }
void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(&b[at], &v, 4); }
constexpr uint16_t kHalfOne = 0x3c00;

std::vector<float> values_of(TensorType type, const std::vector<uint8_t>& block) {
  std::vector<float> y(256);
  fafo::dequantize_row(type, block.data(), y.data(), 256);
  return y;
}

// Group 1 of an IQ2_XXS block: indices 0 (all eight values the first level, 8) for its
// vectors, scale 3 (d * 3.5 * 0.25), vector 0's seven sign bits 0000011 (so the parity
// bit is clear), vector 1's 0000001 (the parity bit makes its value 7 negative too).
TEST(GridFormatLayout, Iq2XxsIndicesSignsAndScale) {
  std::vector<uint8_t> b(66, 0);
  put_u16(b, 0, kHalfOne);
  put_u32(b, 2 + 8, 0);                                     // group 1: indices 0, 0, 0, 0
  put_u32(b, 2 + 8 + 4, (3u << 28) | (1u << 7) | 3u);       // scale 3, signs
  const std::vector<float> y = values_of(TensorType::IQ2_XXS, b);
  const float v = 8 * 3.5f * 0.25f;
  EXPECT_EQ(y[32], -v);
  EXPECT_EQ(y[33], -v);
  EXPECT_EQ(y[34], v);
  EXPECT_EQ(y[39], v);
  EXPECT_EQ(y[40], -v);
  EXPECT_EQ(y[47], -v);  // the parity bit
  EXPECT_EQ(y[46], v);
  EXPECT_EQ(y[0], 8 * 0.5f * 0.25f);  // group 0: scale 0, no signs
}

// IQ2_XS: vector 2 of group 0 (the high scale nibble) with codebook entry 1, packed as
// level indices 2, 0, 0, ... (43, 8, 8, ...), and the 9th index bit reaching entry 256.
TEST(GridFormatLayout, Iq2XsNineBitIndexAndTwoScales) {
  std::vector<uint8_t> b(74, 0);
  put_u16(b, 0, kHalfOne);
  put_u16(b, 2 + 2 * 2, static_cast<uint16_t>(1u | (1u << 9)));  // vector 2: entry 1, sign of value 0
  put_u16(b, 2 + 2 * 4, static_cast<uint16_t>(256u));             // group 1, vector 0: entry 256
  b[2 + 64] = 0x52;                                              // scales 2 (vectors 0, 1), 5 (2, 3)
  const std::vector<float> y = values_of(TensorType::IQ2_XS, b);
  const float low = 2.5f * 0.25f, high = 5.5f * 0.25f;
  EXPECT_EQ(y[0], low * 8);
  EXPECT_EQ(y[8], low * 8);
  EXPECT_EQ(y[16], -(high * 43));
  EXPECT_EQ(y[17], high * 8);
  EXPECT_EQ(y[23], -(high * 8));  // the parity bit
  std::vector<float> ggml_entry(8);
  for (int j = 0; j < 8; ++j) ggml_entry[j] = y[32 + j] / (0.5f * 0.25f);
  EXPECT_NE(ggml_entry, std::vector<float>(8, 8.0f)) << "entry 256 read as entry 0";
}

// IQ3_XXS: two half-vector indices per vector (entries 1 and 2: levels 2, 0, 0, 0 and 4, 0,
// 0, 0 of 4, 12, 20, ... i.e. 20 and 36 first), then the group's word of signs and scale.
TEST(GridFormatLayout, Iq3XxsHalfVectorsAndScale) {
  std::vector<uint8_t> b(98, 0);
  put_u16(b, 0, kHalfOne);
  b[2 + 0] = 1;
  b[2 + 1] = 2;
  put_u32(b, 2 + 64, (6u << 28) | 0x10u);  // scale 6, sign of value 4 of vector 0 (and parity)
  const std::vector<float> y = values_of(TensorType::IQ3_XXS, b);
  const float db = 6.5f * 0.5f;
  EXPECT_EQ(y[0], db * 20);
  EXPECT_EQ(y[1], db * 4);
  EXPECT_EQ(y[4], -(db * 36));
  EXPECT_EQ(y[5], db * 4);
  EXPECT_EQ(y[7], -(db * 4));
  EXPECT_EQ(y[8], db * 4);
}

// IQ3_S: 9-bit half-vector indices (the 9th bit in qh), 8 stored sign bits, odd scales
// 1 + 2 s (the low nibble for the even group).
TEST(GridFormatLayout, Iq3SNinthBitSignsAndOddScales) {
  std::vector<uint8_t> b(110, 0);
  put_u16(b, 0, kHalfOne);
  b[2 + 0] = 1;              // half-vector 0: entry 1 (levels 1, 0, 0, 0: 3, 1, 1, 1)
  b[2 + 64] = 0x02;          // qh of group 0: half-vector 1's 9th bit: entry 256
  b[2 + 64 + 8] = 0x81;      // signs of vector 0: values 0 and 7
  b[2 + 64 + 8 + 32] = 0x43; // scales: group 0 3 (d * 7), group 1 4 (d * 9)
  const std::vector<float> y = values_of(TensorType::IQ3_S, b);
  EXPECT_EQ(y[0], -(7.0f * 3));
  EXPECT_EQ(y[1], 7.0f * 1);
  EXPECT_EQ(y[7], -std::abs(y[7]));
  EXPECT_GT(y[6], 0.0f);
  EXPECT_EQ(y[32], 9.0f * 1);  // group 1, entry 0
  EXPECT_NE(std::vector<float>(y.begin() + 4, y.begin() + 8), std::vector<float>(4, 7.0f)) << "entry 256 read as 0";
}

}  // namespace grid_test
}  // namespace
