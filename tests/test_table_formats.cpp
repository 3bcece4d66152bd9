// IQ4_NL, IQ4_XS and MXFP4 against llama.cpp, bit for bit: tests/data/quant/<FORMAT>.json
// (made by tools/peer/quant_reference.cpp with ggml's own code; the file names the
// llama.cpp commit) holds rows of floats, the blocks ggml_quantize_chunk wrote for them,
// the values ggml's to_float reads back, and blocks of random bytes with their values.
// fafo's quantize_row must write the same blocks and dequantize_row read the same bits.
// Then a model: `fafo quantize` writes the tensors llama-quantize --pure writes, and the
// model's logits on every backend are llama.cpp's within the tolerance of the formats
// already checked (tests/data/quant/<FORMAT>.logits.json). Last, the documented layouts
// on hand-made blocks, independent of that data.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include <utility>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fafo/gguf.h"
#include "fafo/step_batch.h"
#include "fafo/tensor_type.h"
#include "hex_data.h"
#include "model_fixtures.h"
#include "sha256.h"
#include "test_support.h"

namespace {

using fafo::TensorType;

using fafo::test::floats_from_hex;
using fafo::test::from_hex;

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Positions where the bits differ, counted, with the first one described.
struct BitDiff {
  size_t count = 0;
  std::string first;
};
BitDiff compare_bits(const std::vector<float>& got, const std::vector<float>& want) {
  BitDiff d;
  for (size_t i = 0; i < want.size(); ++i) {
    if (bits_of(got[i]) == bits_of(want[i])) continue;
    if (d.count++ == 0)
      d.first = "value " + std::to_string(i) + ": " + std::to_string(got[i]) + " against " + std::to_string(want[i]);
  }
  return d;
}

class TableFormats : public ::testing::TestWithParam<const char*> {
 protected:
  nlohmann::json data() const {
    return nlohmann::json::parse(
        fafo::test::read_text(fafo::test::source_path(std::string("tests/data/quant/") + GetParam() + ".json")));
  }
  TensorType type() const { return *fafo::tensor_type_from_name(GetParam()); }
};

TEST_P(TableFormats, QuantizeWritesLlamaCppsBlocks) {
  const nlohmann::json j = data();
  const int64_t rows = j["rows"], cols = j["cols"];
  const std::vector<float> input = floats_from_hex(j["input"]);
  const std::vector<uint8_t> want = from_hex(j["blocks"]);
  const size_t row_bytes = fafo::tensor_row_bytes(type(), cols);
  ASSERT_EQ(want.size(), row_bytes * static_cast<size_t>(rows));
  std::vector<uint8_t> got(want.size());
  for (int64_t r = 0; r < rows; ++r)
    fafo::quantize_row(type(), input.data() + r * cols, got.data() + static_cast<size_t>(r) * row_bytes, cols);
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(0, std::memcmp(got.data() + r * row_bytes, want.data() + r * row_bytes, row_bytes))
        << GetParam() << ": row " << r << " quantizes to other blocks than llama.cpp's";
}

TEST_P(TableFormats, DequantizeReadsLlamaCppsBits) {
  const nlohmann::json j = data();
  for (const auto& [blocks_key, values_key] :
       {std::pair{"blocks", "dequantized"}, std::pair{"random_blocks", "random_dequantized"}}) {
    const std::vector<uint8_t> blocks = from_hex(j[blocks_key]);
    const std::vector<float> want = floats_from_hex(j[values_key]);
    ASSERT_FALSE(want.empty());
    std::vector<float> got(want.size());
    fafo::dequantize_row(type(), blocks.data(), got.data(), static_cast<int64_t>(want.size()));
    const BitDiff d = compare_bits(got, want);
    EXPECT_EQ(d.count, 0u) << GetParam() << ", " << blocks_key << ": " << d.count << " values differ; " << d.first;
  }
}

// The round trip's error on the Gaussian rows is near llama.cpp's (the same blocks give
// the same values, so this checks the data itself: a 4-bit format keeps about 10%).
TEST_P(TableFormats, RoundTripErrorIsThatOfAFourBitFormat) {
  const nlohmann::json j = data();
  const int64_t cols = j["cols"];
  const std::vector<float> input = floats_from_hex(j["input"]);
  std::vector<uint8_t> packed(fafo::tensor_row_bytes(type(), cols));
  std::vector<float> back(static_cast<size_t>(cols));
  for (int64_t r : {0, 1, 7}) {  // Gaussian rows of 0.05, 1 and 100
    const float* x = input.data() + r * cols;
    fafo::quantize_row(type(), x, packed.data(), cols);
    fafo::dequantize_row(type(), packed.data(), back.data(), cols);
    double err = 0, ref = 0;
    for (int64_t c = 0; c < cols; ++c) {
      err += (static_cast<double>(back[c]) - x[c]) * (static_cast<double>(back[c]) - x[c]);
      ref += static_cast<double>(x[c]) * x[c];
    }
    EXPECT_LT(std::sqrt(err / ref), 0.2) << GetParam() << ", row " << r;
    EXPECT_GT(std::sqrt(err / ref), 0.01) << GetParam() << ", row " << r;
  }
}

// synth-256 (../shared/golden/quant) quantized by `fafo quantize`: every tensor has the
// bytes of llama.cpp's llama-quantize --pure, and the logits of 8 tokens at every position
// are llama.cpp's within 0.15 (as for the other formats in test_model_golden.cpp:
// llama.cpp rounds the activations to 8 bits before these products, fafo's float
// products do not), with the same argmax at 7 of 8 positions, on every backend here.
TEST_P(TableFormats, AModelFafoQuantizesIsLlamaQuantizesAndGivesItsLogits) {
  FAFO_REQUIRE_SHARED(f32_model, "golden/quant/gguf/synth-256-f32.gguf");
  const nlohmann::json j = nlohmann::json::parse(fafo::test::read_text(
      fafo::test::source_path(std::string("tests/data/quant/") + GetParam() + ".logits.json")));
  const auto dir = fafo::test::temp_dir(std::string("table-format-model-") + GetParam());
  const std::string path = (dir / "model.gguf").string();
  const auto q = fafo::test::run_fafo("quantize " + fafo::test::shell_quote(f32_model) + " " +
                                      fafo::test::shell_quote(path) + " " + GetParam());
  ASSERT_EQ(q.exit_code, 0) << q.err;
  const auto file = fafo::GgufFile::open(path);
  ASSERT_EQ(file->tensors().size(), j["tensors"].size());
  for (const auto& t : file->tensors()) {
    const auto& want = j["tensors"].at(t.name);
    EXPECT_EQ(static_cast<uint32_t>(t.type), want["type"].get<uint32_t>()) << t.name;
    EXPECT_EQ(fafo::test::sha256_hex(t.data, t.n_bytes), want["sha256"].get<std::string>())
        << t.name << ": other bytes than llama-quantize's";
  }
  const auto tokens = j["tokens"].get<std::vector<int32_t>>();
  const int32_t n_vocab = j["n_vocab"];
  for (const std::string backend : {"reference", "cpu", "vulkan"}) {  // (cuda-emulated: the op table)
    std::unique_ptr<fafo::test::TestModel> m = fafo::test::load_on(path, backend);
    if (!m) continue;
    fafo::StepBatch batch = fafo::StepBatch::causal(tokens, 0, /*logits_for_all=*/true);
    const std::vector<float> logits = m->model->forward(batch);
    double worst = 0.0;
    int argmax_agree = 0;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const auto ref = j["logits"][i].get<std::vector<float>>();
      const float* row = logits.data() + i * static_cast<size_t>(n_vocab);
      for (int32_t v = 0; v < n_vocab; ++v)
        worst = std::max(worst, std::fabs(static_cast<double>(ref[static_cast<size_t>(v)]) - row[v]));
      argmax_agree += std::max_element(row, row + n_vocab) - row == std::max_element(ref.begin(), ref.end()) - ref.begin();
    }
    EXPECT_LT(worst, 0.15) << GetParam() << " on " << backend;
    EXPECT_GE(argmax_agree, 7) << GetParam() << " on " << backend;
    std::printf("  %s on %s: largest logit difference from llama.cpp %.3g, argmax equal at %d of 8\n", GetParam(),
                backend.c_str(), worst, argmax_agree);
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, TableFormats, ::testing::Values("IQ4_NL", "IQ4_XS", "MXFP4"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

TEST(TableFormatLayout, Iq4NlLooksUpEachNibble) {
  uint8_t block[18] = {};
  const uint16_t d = fafo::fp32_to_fp16(0.5f);
  std::memcpy(block, &d, 2);
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>(j | (15 - j) << 4);
  float y[32];
  fafo::dequantize_row(TensorType::IQ4_NL, block, y, 32);
  const int values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * static_cast<float>(values[j])) << j;
    EXPECT_EQ(y[16 + j], 0.5f * static_cast<float>(values[15 - j])) << j;
  }
}

TEST(TableFormatLayout, Iq4XsSubBlockScales) {
  std::vector<uint8_t> block(136, 0);
  const uint16_t d = fafo::fp32_to_fp16(0.25f);
  std::memcpy(block.data(), &d, 2);
  // Sub-block ib gets the biased scale 32 + ib - 4 + 16 * (ib == 7): low nibbles in
  // scales_l, high bits in scales_h.
  int biased[8];
  uint16_t scales_h = 0;
  for (int ib = 0; ib < 8; ++ib) {
    biased[ib] = 28 + ib + (ib == 7 ? 16 : 0);
    block[4 + ib / 2] = static_cast<uint8_t>(block[4 + ib / 2] | (biased[ib] & 15) << (4 * (ib % 2)));
    scales_h = static_cast<uint16_t>(scales_h | (biased[ib] >> 4) << (2 * ib));
  }
  std::memcpy(block.data() + 2, &scales_h, 2);
  for (int i = 0; i < 128; ++i) block[8 + i] = 0xf0;  // value 0..15 of a sub-block: code 0, 16..31: code 15
  std::vector<float> y(256);
  fafo::dequantize_row(TensorType::IQ4_XS, block.data(), y.data(), 256);
  for (int ib = 0; ib < 8; ++ib) {
    const float dl = 0.25f * static_cast<float>(biased[ib] - 32);
    EXPECT_EQ(y[32 * ib], dl * -127.0f) << ib;
    EXPECT_EQ(y[32 * ib + 16], dl * 113.0f) << ib;
  }
}

TEST(TableFormatLayout, Mxfp4ExponentsAndNegativeZero) {
  uint8_t block[17] = {};
  for (int j = 0; j < 16; ++j) block[1 + j] = static_cast<uint8_t>(j | j << 4);
  float y[32];
  block[0] = 127;  // 2^0: values are the fp4 numbers, half of the table's
  fafo::dequantize_row(TensorType::MXFP4, block, y, 32);
  const float fp4[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], fp4[j]) << j;
    EXPECT_EQ(y[16 + j], fp4[j]) << j;
  }
  EXPECT_FALSE(std::signbit(y[8]));  // the table's 0 times a positive scale: +0
  block[0] = 0;                       // the smallest exponent: 2^-127, a subnormal scale
  fafo::dequantize_row(TensorType::MXFP4, block, y, 32);
  EXPECT_EQ(y[1], std::ldexp(0.5f, -127));
  block[0] = 255;  // ggml reads 255 as 2^128 (not NaN)
  fafo::dequantize_row(TensorType::MXFP4, block, y, 32);
  EXPECT_EQ(y[1], std::ldexp(0.5f, 128));
}

}  // namespace
