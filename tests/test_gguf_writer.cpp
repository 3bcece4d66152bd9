// GgufWriter: tensor shapes are checked before any size is computed (a zero or negative
// dimension used to divide by zero), rows must be whole blocks of the type, and valid
// tensors still round-trip through GgufFile.
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fafo/gguf.h"
#include "test_support.h"

namespace fafo {
namespace {

// Expects std::invalid_argument from f whose message contains every one of `parts`.
template <typename F>
void expect_invalid(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << parts.front();
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg;
  }
}

TEST(GgufWriter, NonPositiveDimensionsAreRejected) {
  const std::vector<std::vector<int64_t>> shapes = {{0}, {0, 4}, {-32, 2}, {32, 0}, {32, -1}, {32, 2, 0}, {32, 1, 1, -5}};
  for (const auto& shape : shapes) {
    for (const TensorType type : {TensorType::F32, TensorType::Q8_0}) {
      GgufWriter w;
      expect_invalid([&] { w.add_tensor_info("t", type, shape); }, {"tensor 't'", "dimension", "> 0"});
      expect_invalid([&] { w.add_tensor("t", type, shape, {}); }, {"tensor 't'", "dimension", "> 0"});
      EXPECT_EQ(w.tensor_count(), 0u);
    }
  }
}

TEST(GgufWriter, RowsMustBeWholeBlocks) {
  GgufWriter w;
  expect_invalid([&] { w.add_tensor_info("q", TensorType::Q4_0, {48, 2}); }, {"tensor 'q'", "48", "Q4_0", "32"});
  expect_invalid([&] { w.add_tensor_info("k", TensorType::Q4_K, {96, 1}); }, {"tensor 'k'", "96", "256"});
  expect_invalid([&] { w.add_tensor("k", TensorType::Q6_K, {100}, std::vector<uint8_t>(210)); }, {"tensor 'k'", "100"});
  EXPECT_EQ(w.tensor_count(), 0u);
}

TEST(GgufWriter, BadRankAndOverflowAreRejected) {
  GgufWriter w;
  expect_invalid([&] { w.add_tensor_info("t", TensorType::F32, {}); }, {"tensor 't'", "dimensions"});
  expect_invalid([&] { w.add_tensor_info("t", TensorType::F32, {1, 1, 1, 1, 1}); }, {"tensor 't'", "dimensions"});
  const int64_t big = int64_t{1} << 40;
  expect_invalid([&] { w.add_tensor_info("t", TensorType::F32, {32, big, big}); }, {"tensor 't'"});
  // A wrong byte count is still reported.
  expect_invalid([&] { w.add_tensor("t", TensorType::F32, {4, 2}, std::vector<uint8_t>(31)); }, {"31 bytes", "32"});
  EXPECT_EQ(w.tensor_count(), 0u);
}

TEST(GgufWriter, ValidTensorsRoundTrip) {
  const std::filesystem::path dir = test::temp_dir("gguf-writer");
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  std::vector<uint8_t> f32(4 * 3 * sizeof(float));
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<uint8_t>(i);
  w.add_tensor("a", TensorType::F32, {4, 3}, f32);
  w.add_tensor_info("b", TensorType::Q8_0, {64, 2, 3});
  w.add_tensor_info("c", TensorType::F32, {1});
  ASSERT_EQ(w.tensor_count(), 3u);
  const std::string path = (dir / "ok.gguf").string();
  w.write(path, [](size_t index, std::vector<uint8_t>& out) {
    for (uint8_t& b : out) b = static_cast<uint8_t>(index);
  });
  const std::unique_ptr<GgufFile> file = GgufFile::open(path);
  ASSERT_EQ(file->tensors().size(), 3u);
  const GgufTensor& a = file->require_tensor("a");
  EXPECT_EQ(a.shape, (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(std::vector<uint8_t>(a.data, a.data + a.n_bytes), f32);
  const GgufTensor& b = file->require_tensor("b");
  EXPECT_EQ(b.shape, (std::vector<int64_t>{64, 2, 3}));
  EXPECT_EQ(b.n_bytes, 2u * 34u * 6u);  // two Q8_0 blocks of 34 bytes per row, 6 rows
  EXPECT_EQ(file->require_tensor("c").n_bytes, 4u);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fafo
