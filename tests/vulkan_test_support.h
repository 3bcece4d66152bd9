// Shared by the Vulkan kernel tests: the weight formats, and a test-suite base that
// opens one Vulkan context with the Khronos validation layer (when installed) for the
// whole suite, skips with the reason when there is no device, and fails any test
// during which the layer reported an error (and the suite, for errors at teardown, such
// as objects leaked at vkDestroyDevice).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/vulkan/buffer.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/vulkan_error.h"
#include "fafo/tensor_type.h"

namespace fafo::test {

inline constexpr TensorType kAllWeightFormats[] = {
    TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0,
    TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q2_K, TensorType::Q3_K,
    TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::IQ4_NL, TensorType::IQ4_XS,
    TensorType::MXFP4, TensorType::IQ2_XXS, TensorType::IQ2_XS, TensorType::IQ3_XXS, TensorType::IQ3_S};

// The formats whose products the tests run with the portable reduction (shared memory
// instead of subgroup shuffles) at every SplitRows tile the test runs (IQ3_S's decoder:
// tiles 1 and 8 in VulkanEveryVariant); the others take it at tile 1 only, there and in
// VulkanSubgroupMatmul (against the subgroup variant at the automatic tiles of T 1 and
// 33: 1 and 32).
// The reduction joins each lane's partial sums whatever the format: what differs between
// formats is how many lanes hold a sum, which follows the block (1, 32 or 256 values) and
// the decoder's chunk. One of each block size, and a codebook decoder. Each (format, tile)
// is a lavapipe pipeline to compile, a second or more on a cold shader cache.
inline constexpr TensorType kEveryTilePortableFormats[] = {TensorType::F32, TensorType::Q8_0, TensorType::Q4_K,
                                                           TensorType::IQ3_S};
inline bool every_tile_portable(TensorType type) {
  return std::ranges::find(kEveryTilePortableFormats, type) != std::end(kEveryTilePortableFormats);
}

// A device buffer holding a copy of `bytes` bytes at `data`.
inline vulkan::Buffer make_buffer(const vulkan::Context& ctx, const void* data, size_t bytes) {
  vulkan::Buffer b(ctx, bytes);
  b.upload(data, bytes);
  return b;
}

inline std::string join_lines(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

// A validated context or, when none can be made, the reason; `features` is
// ContextOptions::features (nullopt: FAFO_VULKAN_FEATURES or all).
inline std::unique_ptr<vulkan::Context> make_validated_context(const std::shared_ptr<vulkan::ValidationLog>& log,
                                                               std::string& skip_reason,
                                                               std::optional<std::string> features = std::nullopt) {
  vulkan::ContextOptions options;
  options.validation = true;
  options.validation_log = log;
  options.features = std::move(features);
  try {
    return std::make_unique<vulkan::Context>(options);
  } catch (const vulkan::VulkanError& e) {
    skip_reason = e.what();
    return nullptr;
  }
}

// For suites that need the context alone.
struct NoKernels {
  explicit NoKernels(vulkan::Context&) {}
};

// Base of a test suite on one validated context and one `KernelSet` (vulkan::Kernels,
// vulkan::WeightKernels or NoKernels) built on it. A derived suite may call open() with feature
// words in its own SetUpTestSuite instead.
template <class KernelSet>
class ValidatedVulkanSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { open(); }
  static void open(std::optional<std::string> features = std::nullopt) {
    log_ = std::make_shared<vulkan::ValidationLog>();
    context_ = make_validated_context(log_, skip_reason_, std::move(features));
    if (context_) kernels_ = std::make_unique<KernelSet>(*context_);
  }
  static void TearDownTestSuite() {
    kernels_.reset();
    context_.reset();
    if (log_) {
      EXPECT_TRUE(log_->errors().empty()) << join_lines(log_->errors());
    }
  }
  void SetUp() override {
    if (!context_) GTEST_SKIP() << "no Vulkan device: " << skip_reason_;
    errors_before_ = log_->errors().size();
  }
  void TearDown() override {
    if (!context_) return;
    const std::vector<std::string> errors = log_->errors();
    EXPECT_EQ(errors.size(), errors_before_) << "validation errors:\n" << join_lines(errors);
  }

  static inline std::shared_ptr<vulkan::ValidationLog> log_;
  static inline std::unique_ptr<vulkan::Context> context_;
  static inline std::unique_ptr<KernelSet> kernels_;
  static inline std::string skip_reason_;
  size_t errors_before_ = 0;
};

}  // namespace fafo::test
