// Tests of the weight formats (runtime/src/quant): exact dequantization against llama.cpp's
// output (golden/quant), quantizer error and idempotence, fp16/bf16 conversions (the type
// table and its error paths: test_tensor_types.cpp).
#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fafo/tensor_type.h"
#include "sha256.h"
#include "test_support.h"

namespace {

using fafo::TensorType;
using nlohmann::json;

using fafo::test::sha256_hex;

TEST(QuantSha256, KnownVectors) {
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  EXPECT_EQ(sha256_hex(two_blocks.data(), two_blocks.size()),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million(1000000, 'a');
  EXPECT_EQ(sha256_hex(million.data(), million.size()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// ---------------------------------------------------------------------------------------------
// Helpers.

uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
float float_of(uint32_t u) { return std::bit_cast<float>(u); }

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  return json::parse(in);
}

std::vector<uint8_t> read_bytes(const std::filesystem::path& path, uint64_t offset, uint64_t size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  in.seekg(static_cast<std::streamoff>(offset));
  std::vector<uint8_t> bytes(size);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (static_cast<uint64_t>(in.gcount()) != size) throw std::runtime_error("short read from " + path.string());
  return bytes;
}

// Golden JSON numbers are shortest round-trip decimals of float32 values: parse as double,
// round to float.
std::vector<float> json_floats(const json& array) {
  std::vector<float> out;
  out.reserve(array.size());
  for (const json& v : array) out.push_back(static_cast<float>(v.get<double>()));
  return out;
}

// Compares bit patterns (so -0.0 != +0.0 and NaNs compare by payload); describes the first
// mismatches.
::testing::AssertionResult same_bits(const float* actual, const std::vector<float>& expected, size_t count) {
  size_t mismatches = 0;
  std::string first;
  for (size_t i = 0; i < count; ++i) {
    if (bits_of(actual[i]) != bits_of(expected[i])) {
      if (++mismatches <= 5) {
        char line[160];
        std::snprintf(line, sizeof line, "\n  [%zu] got %.9g (0x%08x) want %.9g (0x%08x)", i, actual[i],
                      bits_of(actual[i]), expected[i], bits_of(expected[i]));
        first += line;
      }
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << mismatches << " of " << count << " values differ" << first;
}

// One tensor of a golden GGUF, as described by tensors/<label>.tensors.json.
struct GoldenTensor {
  json info;
  TensorType type;
  int64_t row_length;
  int64_t rows;
  std::vector<uint8_t> bytes;
};

// gguf_data_offset in tensors/*.json is relative to the GGUF data section (the first tensor is
// at 0). The data section ends the file: its size is the end of the last tensor rounded up to
// the file's alignment (32), so the section starts at file_size - that.
uint64_t data_section_start(const json& table) {
  uint64_t end = 0;
  for (const json& t : table["tensors"]) {
    end = std::max(end, t["gguf_data_offset"].get<uint64_t>() + t["nbytes"].get<uint64_t>());
  }
  constexpr uint64_t kAlignment = 32;
  end = (end + kAlignment - 1) / kAlignment * kAlignment;
  const auto file_size = table["file_size"].get<uint64_t>();
  if (end > file_size) throw std::runtime_error("tensor table does not fit the file");
  return file_size - end;
}

GoldenTensor load_golden_tensor(const std::filesystem::path& gguf, const json& table, const json& info) {
  GoldenTensor t;
  t.info = info;
  const auto id = info["ggml_type_id"].get<uint32_t>();
  const fafo::TensorTypeInfo* type_info = fafo::tensor_type_info(id);
  if (!type_info) throw std::runtime_error("unknown type id " + std::to_string(id));
  t.type = type_info->type;
  const auto& shape = info["shape"];
  t.row_length = shape[0].get<int64_t>();
  t.rows = 1;
  for (size_t i = 1; i < shape.size(); ++i) t.rows *= shape[i].get<int64_t>();
  const uint64_t offset = data_section_start(table) + info["gguf_data_offset"].get<uint64_t>();
  t.bytes = read_bytes(gguf, offset, info["nbytes"].get<uint64_t>());
  return t;
}

std::vector<float> dequantize_tensor(const GoldenTensor& t) {
  const size_t row_bytes = fafo::tensor_row_bytes(t.type, t.row_length);
  if (row_bytes * static_cast<size_t>(t.rows) != t.bytes.size()) {
    throw std::runtime_error("byte size does not match the shape");
  }
  std::vector<float> values(static_cast<size_t>(t.row_length * t.rows));
  for (int64_t r = 0; r < t.rows; ++r) {
    fafo::dequantize_row(t.type, t.bytes.data() + r * row_bytes, values.data() + r * t.row_length, t.row_length);
  }
  return values;
}

// The 14 golden files by label, and the two tensors dumped from each.
const std::vector<std::string> kGoldenLabels = {
    "F32",       "F16-pure",  "BF16-pure", "Q8_0-pure",   "Q4_0-pure",   "Q4_1-pure",   "Q5_0-pure",
    "Q5_1-pure", "Q2_K-pure", "Q3_K_M-pure", "Q4_K_M-pure", "Q5_K_M-pure", "Q6_K-pure", "Q4_K_M-mixed"};
const std::vector<std::string> kDumpedTensors = {"attn_q", "ffn_down"};

std::string test_name(std::string s) {
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// 1. Exact dequantization against ggml's output.

struct DumpCase {
  std::string label;
  std::string tensor;  // short name: attn_q / ffn_down
};

void PrintTo(const DumpCase& c, std::ostream* os) { *os << c.label << " blk.0." << c.tensor; }

class GoldenDequant : public ::testing::TestWithParam<DumpCase> {};

TEST_P(GoldenDequant, MatchesGgmlBitForBit) {
  const DumpCase& c = GetParam();
  FAFO_REQUIRE_SHARED(dump_path, "golden/quant/dequant/" + c.label + ".blk.0." + c.tensor + ".json");
  FAFO_REQUIRE_SHARED(table_path, "golden/quant/tensors/" + c.label + ".tensors.json");
  const json dump = read_json(dump_path);
  const json table = read_json(table_path);
  FAFO_REQUIRE_SHARED(gguf_path, "golden/quant/gguf/" + dump["file"].get<std::string>());

  const auto& tensors = table["tensors"];
  const auto it = std::find_if(tensors.begin(), tensors.end(),
                               [&](const json& t) { return t["tensor"] == dump["tensor"]; });
  ASSERT_NE(it, tensors.end()) << "tensor " << dump["tensor"] << " not in " << table_path;
  const GoldenTensor t = load_golden_tensor(gguf_path, table, *it);

  EXPECT_EQ(fafo::tensor_type_name(t.type), dump["type"].get<std::string>());
  EXPECT_EQ(static_cast<uint32_t>(t.type), dump["ggml_type_id"].get<uint32_t>());
  ASSERT_EQ(t.row_length, dump["shape"][0].get<int64_t>());
  ASSERT_EQ(t.row_length * t.rows, dump["n_values"].get<int64_t>());

  const std::vector<float> values = dequantize_tensor(t);
  const std::vector<float> first = json_floats(dump["values_first_4096"]);
  ASSERT_EQ(first.size(), 4096u);
  EXPECT_TRUE(same_bits(values.data(), first, first.size())) << "values_first_4096";
  if (dump.contains("values_all")) {
    const std::vector<float> all = json_floats(dump["values_all"]);
    ASSERT_EQ(all.size(), values.size());
    EXPECT_TRUE(same_bits(values.data(), all, all.size())) << "values_all";
  }
  EXPECT_EQ(sha256_hex(values.data(), values.size() * sizeof(float)),
            dump["sha256_of_all_values_f32_le"].get<std::string>());
}

std::vector<DumpCase> all_dump_cases() {
  std::vector<DumpCase> cases;
  for (const auto& label : kGoldenLabels) {
    for (const auto& tensor : kDumpedTensors) cases.push_back({label, tensor});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllDumps, GoldenDequant, ::testing::ValuesIn(all_dump_cases()),
                         [](const auto& p) { return test_name(p.param.label + "_" + p.param.tensor); });

// Every tensor of every golden file: sha256 of the dequantized values, sum and sum of squares.
class GoldenFile : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenFile, EveryTensorMatchesGgml) {
  const std::string& label = GetParam();
  FAFO_REQUIRE_SHARED(table_path, "golden/quant/tensors/" + label + ".tensors.json");
  const json table = read_json(table_path);
  FAFO_REQUIRE_SHARED(gguf_path, "golden/quant/gguf/" + table["file"].get<std::string>());
  ASSERT_EQ(std::filesystem::file_size(gguf_path), table["file_size"].get<uint64_t>());
  ASSERT_EQ(data_section_start(table) % 32, 0u);

  for (const json& info : table["tensors"]) {
    SCOPED_TRACE(info["tensor"].get<std::string>());
    const GoldenTensor t = load_golden_tensor(gguf_path, table, info);
    EXPECT_EQ(fafo::tensor_type_name(t.type), info["type"].get<std::string>());
    const std::vector<float> values = dequantize_tensor(t);
    double sum = 0.0;
    double sum_sq = 0.0;
    for (float v : values) {
      sum += v;
      sum_sq += static_cast<double>(v) * v;
    }
    const double want_sum = info["sum"].get<double>();
    const double want_sum_sq = info["sum_sq"].get<double>();
    EXPECT_NEAR(sum, want_sum, 1e-9 * (std::fabs(want_sum) + want_sum_sq + 1.0));
    EXPECT_NEAR(sum_sq, want_sum_sq, 1e-9 * want_sum_sq);
    EXPECT_EQ(sha256_hex(values.data(), values.size() * sizeof(float)),
              info["sha256_of_all_values_f32_le"].get<std::string>());
  }
}

INSTANTIATE_TEST_SUITE_P(AllFiles, GoldenFile, ::testing::ValuesIn(kGoldenLabels),
                         [](const auto& p) { return test_name(p.param); });

// Hand-made blocks: the documented layout, independent of the golden data.
TEST(QuantLayout, Q4_0NibblesAndNegativeZero) {
  uint8_t block[18] = {};
  const uint16_t d = fafo::fp32_to_fp16(-0.5f);
  std::memcpy(block, &d, 2);
  block[2] = 0x8f;   // value 0: 15 - 8 = 7; value 16: 8 - 8 = 0
  block[17] = 0x01;  // value 15: 1 - 8 = -7; value 31: 0 - 8 = -8
  float y[32];
  fafo::dequantize_row(TensorType::Q4_0, block, y, 32);
  EXPECT_EQ(y[0], -3.5f);
  EXPECT_EQ(bits_of(y[16]), bits_of(-0.0f));
  EXPECT_EQ(y[15], 3.5f);
  EXPECT_EQ(y[31], 4.0f);
  EXPECT_EQ(bits_of(y[1]), bits_of(4.0f));  // qs = 0 -> (0 - 8) * -0.5
}

TEST(QuantLayout, Q8_0AndQ5_0) {
  uint8_t q8[34];
  const uint16_t d = fafo::fp32_to_fp16(0.25f);
  std::memcpy(q8, &d, 2);
  for (int j = 0; j < 32; ++j) q8[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
  float y[32];
  fafo::dequantize_row(TensorType::Q8_0, q8, y, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.25f * static_cast<float>(j - 16));

  uint8_t q5[22] = {};
  std::memcpy(q5, &d, 2);
  q5[2 + 3] = 0x80;         // qh bit 31: value 31 gets bit 4
  q5[6] = 0xf3;             // value 0: 3, value 16: 15
  fafo::dequantize_row(TensorType::Q5_0, q5, y, 32);
  EXPECT_EQ(y[0], 0.25f * (3 - 16));
  EXPECT_EQ(y[16], 0.25f * (15 - 16));
  EXPECT_EQ(y[31], 0.25f * (16 - 16));
  EXPECT_EQ(y[30], 0.25f * -16);
}

// ---------------------------------------------------------------------------------------------
// 2. Quantizers: error on random data, idempotence on representable values.

std::vector<float> random_normal(size_t n, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

std::vector<uint8_t> quantize_rows(TensorType type, const std::vector<float>& x, int64_t row_length) {
  const size_t row_bytes = fafo::tensor_row_bytes(type, row_length);
  const int64_t rows = static_cast<int64_t>(x.size()) / row_length;
  std::vector<uint8_t> packed(row_bytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    fafo::quantize_row(type, x.data() + r * row_length, packed.data() + r * row_bytes, row_length);
  }
  return packed;
}

std::vector<float> dequantize_rows(TensorType type, const std::vector<uint8_t>& packed, int64_t row_length,
                                   int64_t rows) {
  const size_t row_bytes = fafo::tensor_row_bytes(type, row_length);
  std::vector<float> y(static_cast<size_t>(row_length * rows));
  for (int64_t r = 0; r < rows; ++r) {
    fafo::dequantize_row(type, packed.data() + r * row_bytes, y.data() + r * row_length, row_length);
  }
  return y;
}

double rel_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0.0;
  double ref = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = static_cast<double>(y[i]) - x[i];
    err += e * e;
    ref += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

struct RoundTripCase {
  TensorType type;
  double max_rel_rmse;  // llama.cpp's own error on N(0, 0.05) is in golden/quant/README.md
};

void PrintTo(const RoundTripCase& c, std::ostream* os) { *os << fafo::tensor_type_name(c.type); }

class QuantRoundTrip : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(QuantRoundTrip, RelativeErrorWithinBound) {
  const RoundTripCase& c = GetParam();
  constexpr int64_t kRowLength = 256 * 3;
  constexpr int64_t kRows = 7;
  for (const float stddev : {0.05f, 1.0f, 3e-3f}) {
    SCOPED_TRACE("stddev " + std::to_string(stddev));
    const std::vector<float> x = random_normal(kRowLength * kRows, stddev, 1234);
    const std::vector<uint8_t> packed = quantize_rows(c.type, x, kRowLength);
    const std::vector<float> y = dequantize_rows(c.type, packed, kRowLength, kRows);
    const double err = rel_rmse(x, y);
    std::printf("    %-5s stddev %-6g rel_rmse %.5f (bound %.4f)\n", std::string(fafo::tensor_type_name(c.type)).c_str(),
                static_cast<double>(stddev), err, c.max_rel_rmse);
    EXPECT_LT(err, c.max_rel_rmse);
    EXPECT_GT(err, c.type == TensorType::F32 ? -1.0 : 0.0);  // a lossy format cannot be exact on random data

    // Quantizing what we decoded gives values at least as close (usually the same blocks).
    const std::vector<uint8_t> packed2 = quantize_rows(c.type, y, kRowLength);
    const std::vector<float> y2 = dequantize_rows(c.type, packed2, kRowLength, kRows);
    EXPECT_LT(rel_rmse(y, y2), c.max_rel_rmse / 2);
  }
}

TEST_P(QuantRoundTrip, ZerosExactConstantsClose) {
  const TensorType type = GetParam().type;
  const int64_t n = 512;
  for (const float value : {0.0f, 0.5f, -2.0f, 1e-3f}) {
    const std::vector<float> x(n, value);
    const std::vector<float> y = dequantize_rows(type, quantize_rows(type, x, n), n, 1);
    for (int64_t i = 0; i < n; ++i) {
      if (value == 0.0f) {
        ASSERT_EQ(y[i], 0.0f) << "value " << i;
      } else {
        // A constant is one level of every format, up to the fp16 rounding of its scales
        // (coarser for 1e-3, where the K-quants' super-block scales are fp16 subnormals).
        ASSERT_NEAR(y[i], value, std::fabs(value) * (std::fabs(value) < 0.01f ? 5e-3 : 2e-3)) << "value " << i;
      }
    }
  }
}

TEST_P(QuantRoundTrip, UnalignedBuffersGiveTheSameBytes) {
  const TensorType type = GetParam().type;
  const int64_t n = 512;
  const std::vector<float> x = random_normal(n, 0.1f, 5);
  const size_t row_bytes = fafo::tensor_row_bytes(type, n);
  std::vector<uint8_t> aligned(row_bytes);
  fafo::quantize_row(type, x.data(), aligned.data(), n);
  std::vector<uint8_t> shifted(row_bytes + 1);
  fafo::quantize_row(type, x.data(), shifted.data() + 1, n);
  EXPECT_TRUE(std::equal(aligned.begin(), aligned.end(), shifted.begin() + 1));
  std::vector<float> y_aligned(n);
  std::vector<float> y_shifted(n);
  fafo::dequantize_row(type, aligned.data(), y_aligned.data(), n);
  fafo::dequantize_row(type, shifted.data() + 1, y_shifted.data(), n);
  EXPECT_TRUE(same_bits(y_shifted.data(), y_aligned, y_aligned.size()));
}

TEST_P(QuantRoundTrip, OutliersAndMixedScales) {
  // One huge value per block and tiny ones elsewhere: the quantizer must not produce
  // non-finite values or codes out of range.
  const TensorType type = GetParam().type;
  const int64_t n = 256 * 2;
  std::vector<float> x = random_normal(n, 0.01f, 99);
  for (int64_t i = 0; i < n; i += 37) x[i] = (i % 2 ? 40.0f : -40.0f);
  const std::vector<float> y = dequantize_rows(type, quantize_rows(type, x, n), n, 1);
  for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(y[i])) << i;
  EXPECT_LT(rel_rmse(x, y), std::max(GetParam().max_rel_rmse, 0.02));
}

INSTANTIATE_TEST_SUITE_P(
    AllFormats, QuantRoundTrip,
    ::testing::Values(RoundTripCase{TensorType::F32, 1e-9}, RoundTripCase{TensorType::F16, 4e-4},
                      RoundTripCase{TensorType::BF16, 2.5e-3}, RoundTripCase{TensorType::Q8_0, 0.008},
                      RoundTripCase{TensorType::Q8_1, 0.008}, RoundTripCase{TensorType::Q8_K, 0.009},
                      RoundTripCase{TensorType::Q4_0, 0.1}, RoundTripCase{TensorType::Q4_1, 0.09},
                      RoundTripCase{TensorType::Q5_0, 0.05}, RoundTripCase{TensorType::Q5_1, 0.045},
                      RoundTripCase{TensorType::Q2_K, 0.35}, RoundTripCase{TensorType::Q3_K, 0.175},
                      RoundTripCase{TensorType::Q4_K, 0.08}, RoundTripCase{TensorType::Q5_K, 0.042},
                      RoundTripCase{TensorType::Q6_K, 0.021}),
    [](const auto& p) { return std::string(fafo::tensor_type_name(p.param.type)); });

// Quantizing values ggml decoded from a real file (every quantized tensor of it) and decoding
// again gives them back.
//  * Exact for F16, BF16, the legacy formats and Q2_K: the legacy quantizers recover the
//    block scale exactly, and the K-quant search tries the step sizes llama.cpp's quantizer
//    picks from, so the least-squares refit lands on the original grid.
//  * Nearly exact for Q3_K..Q6_K: a few sub-blocks (< 0.5%) come back on a different grid.
//    When llama.cpp's codes skip the lowest level, "codes shifted down by one with a smaller
//    min" fits the floats equally well, but that min is not on the 6-bit grid of mins. Where a
//    symmetric scale's sign flips, some -0.0 come back as +0.0 (equal values).
struct IdempotenceCase {
  std::string label;
  bool exact;
};

void PrintTo(const IdempotenceCase& c, std::ostream* os) { *os << c.label << (c.exact ? " (exact)" : " (nearly exact)"); }

class GoldenIdempotence : public ::testing::TestWithParam<IdempotenceCase> {};

TEST_P(GoldenIdempotence, RequantizingDecodedValues) {
  const IdempotenceCase& c = GetParam();
  FAFO_REQUIRE_SHARED(table_path, "golden/quant/tensors/" + c.label + ".tensors.json");
  const json table = read_json(table_path);
  FAFO_REQUIRE_SHARED(gguf_path, "golden/quant/gguf/" + table["file"].get<std::string>());
  int checked = 0;
  for (const json& info : table["tensors"]) {
    if (info["type"] == "F32") continue;
    SCOPED_TRACE(info["tensor"].get<std::string>());
    const GoldenTensor t = load_golden_tensor(gguf_path, table, info);
    const std::vector<float> x = dequantize_tensor(t);
    const std::vector<float> y = dequantize_rows(t.type, quantize_rows(t.type, x, t.row_length), t.row_length, t.rows);
    size_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i) differ += y[i] != x[i];
    if (c.exact) {
      EXPECT_EQ(differ, 0u) << "of " << x.size() << " values (rel_rmse " << rel_rmse(x, y) << ")";
    } else {
      EXPECT_LT(static_cast<double>(differ), 0.01 * static_cast<double>(x.size()));
      EXPECT_LT(rel_rmse(x, y), 2e-3);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 16);
}

INSTANTIATE_TEST_SUITE_P(
    GoldenFormats, GoldenIdempotence,
    ::testing::Values(IdempotenceCase{"F16-pure", true}, IdempotenceCase{"BF16-pure", true},
                      IdempotenceCase{"Q8_0-pure", true}, IdempotenceCase{"Q4_0-pure", true},
                      IdempotenceCase{"Q4_1-pure", true}, IdempotenceCase{"Q5_0-pure", true},
                      IdempotenceCase{"Q5_1-pure", true}, IdempotenceCase{"Q2_K-pure", true},
                      IdempotenceCase{"Q3_K_M-pure", false}, IdempotenceCase{"Q4_K_M-pure", false},
                      IdempotenceCase{"Q5_K_M-pure", false}, IdempotenceCase{"Q6_K-pure", false},
                      IdempotenceCase{"Q4_K_M-mixed", false}),
    [](const auto& p) { return test_name(p.param.label); });

// Timing on a slice of a Llama-3-8B ffn matrix (rows of 14336); the full 4096-row tensor is
// DISABLED_ (run with --gtest_also_run_disabled_tests).
void time_quantize(TensorType type, int64_t rows) {
  constexpr int64_t kRowLength = 14336;
  const std::vector<float> x = random_normal(kRowLength * 16, 0.02f, 7);
  const size_t row_bytes = fafo::tensor_row_bytes(type, kRowLength);
  std::vector<uint8_t> packed(row_bytes);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t r = 0; r < rows; ++r) fafo::quantize_row(type, x.data() + (r % 16) * kRowLength, packed.data(), kRowLength);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("    %s: %lld x %lld in %.3f s (%.2f s per 4096 x 14336)\n",
              std::string(fafo::tensor_type_name(type)).c_str(), static_cast<long long>(rows),
              static_cast<long long>(kRowLength), seconds, seconds * 4096.0 / static_cast<double>(rows));
}

TEST(QuantSpeed, LlamaFfnSlice) {
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q8_0}) time_quantize(type, 64);
}

TEST(QuantSpeed, DISABLED_LlamaFfnFull) {
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K}) time_quantize(type, 4096);
}

// ---------------------------------------------------------------------------------------------
// 3. fp16 / bf16.

TEST(HalfFloat, Fp16KnownValues) {
  EXPECT_EQ(fafo::fp16_to_fp32(0x3c00), 1.0f);
  EXPECT_EQ(fafo::fp16_to_fp32(0xc000), -2.0f);
  EXPECT_EQ(fafo::fp16_to_fp32(0x3555), 0.333251953125f);
  EXPECT_EQ(fafo::fp16_to_fp32(0x7bff), 65504.0f);
  EXPECT_EQ(fafo::fp16_to_fp32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(fafo::fp16_to_fp32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fafo::fp16_to_fp32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(fafo::fp16_to_fp32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(bits_of(fafo::fp16_to_fp32(0x8000)), 0x80000000u);
  EXPECT_EQ(bits_of(fafo::fp16_to_fp32(0x0000)), 0u);
  EXPECT_EQ(fafo::fp16_to_fp32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fafo::fp16_to_fp32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fafo::fp16_to_fp32(0x7e00)));
  EXPECT_TRUE(std::isnan(fafo::fp16_to_fp32(0x7c01)));

  EXPECT_EQ(fafo::fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fafo::fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(fafo::fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(fafo::fp32_to_fp16(0.0f), 0x0000);
  EXPECT_EQ(fafo::fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fafo::fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(fafo::fp32_to_fp16(-std::numeric_limits<float>::infinity()), 0xfc00);
  const uint16_t nan = fafo::fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  const uint16_t snan = fafo::fp32_to_fp16(float_of(0x7f800001u));  // payload only in the dropped bits
  EXPECT_EQ(snan & 0x7e00, 0x7e00) << "signalling NaN must stay a (quiet) NaN";
  EXPECT_EQ(fafo::fp32_to_fp16(float_of(0xffc00000u)) & 0x8000, 0x8000);
}

TEST(HalfFloat, Fp16RoundsToNearestEven) {
  const float ulp1 = std::ldexp(1.0f, -10);  // spacing of fp16 in [1, 2)
  EXPECT_EQ(fafo::fp32_to_fp16(1.0f + ulp1 / 2), 0x3c00);                               // tie -> even
  EXPECT_EQ(fafo::fp32_to_fp16(1.0f + 3 * ulp1 / 2), 0x3c02);                           // tie -> even
  EXPECT_EQ(fafo::fp32_to_fp16(std::nextafter(1.0f + ulp1 / 2, 2.0f)), 0x3c01);         // above the tie
  EXPECT_EQ(fafo::fp32_to_fp16(std::nextafter(1.0f + 3 * ulp1 / 2, 0.0f)), 0x3c01);     // below the tie
  EXPECT_EQ(fafo::fp32_to_fp16(-(1.0f + ulp1 / 2)), 0xbc00);
  EXPECT_EQ(fafo::fp32_to_fp16(2047.0f / 1024.0f + ulp1 / 2), 0x4000);                 // carry into the exponent
  // Overflow: 65520 is the tie between 65504 and 65536 (inf), ties to even -> inf.
  EXPECT_EQ(fafo::fp32_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(fafo::fp32_to_fp16(65520.0f), 0x7c00);
  EXPECT_EQ(fafo::fp32_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(fafo::fp32_to_fp16(-1e10f), 0xfc00);
  // Subnormals (unit 2^-24).
  const float unit = std::ldexp(1.0f, -24);
  EXPECT_EQ(fafo::fp32_to_fp16(unit), 0x0001);
  EXPECT_EQ(fafo::fp32_to_fp16(unit / 2), 0x0000);                                      // tie -> even 0
  EXPECT_EQ(fafo::fp32_to_fp16(std::nextafter(unit / 2, 1.0f)), 0x0001);
  EXPECT_EQ(fafo::fp32_to_fp16(-unit / 2), 0x8000);
  EXPECT_EQ(fafo::fp32_to_fp16(1.5f * unit), 0x0002);                                   // tie -> even
  EXPECT_EQ(fafo::fp32_to_fp16(2.5f * unit), 0x0002);                                   // tie -> even
  EXPECT_EQ(fafo::fp32_to_fp16(1023.5f * unit), 0x0400);                                // into the normals
  EXPECT_EQ(fafo::fp32_to_fp16(1022.5f * unit), 0x03fe);
  EXPECT_EQ(fafo::fp32_to_fp16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(fafo::fp32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(HalfFloat, Fp16AllValuesRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fafo::fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(fafo::fp16_to_fp32(fafo::fp32_to_fp16(f)))) << h;
      continue;
    }
    ASSERT_EQ(fafo::fp32_to_fp16(f), h) << std::hex << h;
  }
}

// Against an independent reference: the nearest fp16 in double arithmetic, ties to even.
TEST(HalfFloat, Fp16MatchesNearestOnRandomFloats) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<uint32_t> any_bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = any_bits(rng);
    // Concentrate on the fp16 range: exponents 100..145.
    u = (u & 0x807fffffu) | ((100u + (u >> 23) % 46u) << 23);
    const float f = float_of(u);
    const uint16_t h = fafo::fp32_to_fp16(f);
    const double x = std::fabs(static_cast<double>(f));
    const uint16_t mag = h & 0x7fff;
    ASSERT_EQ(h & 0x8000, (u >> 16) & 0x8000);
    if (mag == 0x7c00) {  // infinity: x must be at least the overflow threshold 65520
      ASSERT_GE(x, 65520.0) << f;
      continue;
    }
    const double got = fafo::fp16_to_fp32(mag);
    const double below = mag > 0 ? static_cast<double>(fafo::fp16_to_fp32(static_cast<uint16_t>(mag - 1))) : -1.0;
    const double above = mag < 0x7bff ? static_cast<double>(fafo::fp16_to_fp32(static_cast<uint16_t>(mag + 1))) : 65536.0;
    const double err = std::fabs(got - x);
    ASSERT_LE(err, std::fabs(x - below)) << f;
    ASSERT_LE(err, std::fabs(above - x)) << f;
    if (err == std::fabs(x - below) || err == std::fabs(above - x)) {
      ASSERT_EQ(mag & 1, 0) << "tie not rounded to even: " << f;
    }
  }
}

TEST(HalfFloat, Bf16) {
  EXPECT_EQ(fafo::bf16_to_fp32(0x3f80), 1.0f);
  EXPECT_EQ(fafo::bf16_to_fp32(0xc040), -3.0f);
  EXPECT_EQ(bits_of(fafo::bf16_to_fp32(0x8000)), 0x80000000u);
  EXPECT_EQ(fafo::bf16_to_fp32(0x0001), float_of(0x00010000u));  // subnormal, exact
  EXPECT_EQ(fafo::fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fafo::fp32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(fafo::fp32_to_bf16(float_of(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(fafo::fp32_to_bf16(float_of(0x3f818000u)), 0x3f82);  // tie -> even
  EXPECT_EQ(fafo::fp32_to_bf16(float_of(0x3f808001u)), 0x3f81);
  EXPECT_EQ(fafo::fp32_to_bf16(float_of(0x3f807fffu)), 0x3f80);
  EXPECT_EQ(fafo::fp32_to_bf16(float_of(0x00008000u)), 0x0000);  // subnormal tie -> even 0
  EXPECT_EQ(fafo::fp32_to_bf16(float_of(0x00018000u)), 0x0002);
  EXPECT_EQ(fafo::fp32_to_bf16(float_of(0x00008001u)), 0x0001);
  EXPECT_EQ(fafo::fp32_to_bf16(float_of(0x007fffffu)), 0x0080);  // largest subnormal rounds up to min normal
  EXPECT_EQ(fafo::fp32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // overflow -> inf
  EXPECT_EQ(fafo::fp32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(fafo::fp32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  EXPECT_EQ(fafo::fp32_to_bf16(float_of(0x7fc00000u)), 0x7fc0);
  EXPECT_EQ(fafo::fp32_to_bf16(float_of(0x7f800001u)), 0x7fc0);  // signalling NaN -> quiet NaN
  EXPECT_EQ(fafo::fp32_to_bf16(float_of(0xffffffffu)), 0xffff);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fafo::bf16_to_fp32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) {
      ASSERT_EQ(fafo::fp32_to_bf16(f), h) << std::hex << h;
    }
  }
}

TEST(HalfFloat, RowFormatsUseTheScalarConversions) {
  const std::vector<float> x = {1.0f, -0.0f, 65504.0f, 1e-7f, 3.14159f, -70000.0f, 0.1f, 2.5e-8f};
  std::vector<uint8_t> f16(16);
  std::vector<uint8_t> bf16(16);
  fafo::quantize_row(TensorType::F16, x.data(), f16.data(), 8);
  fafo::quantize_row(TensorType::BF16, x.data(), bf16.data(), 8);
  std::vector<float> y(8);
  std::vector<float> z(8);
  fafo::dequantize_row(TensorType::F16, f16.data(), y.data(), 8);
  fafo::dequantize_row(TensorType::BF16, bf16.data(), z.data(), 8);
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, f16.data() + 2 * i, 2);
    EXPECT_EQ(h, fafo::fp32_to_fp16(x[i]));
    EXPECT_EQ(bits_of(y[i]), bits_of(fafo::fp16_to_fp32(fafo::fp32_to_fp16(x[i]))));
    std::memcpy(&h, bf16.data() + 2 * i, 2);
    EXPECT_EQ(h, fafo::fp32_to_bf16(x[i]));
    EXPECT_EQ(bits_of(z[i]), bits_of(fafo::bf16_to_fp32(fafo::fp32_to_bf16(x[i]))));
  }
}

}  // namespace
