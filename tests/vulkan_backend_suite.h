// The VulkanBackend test suite's base, shared by test_vulkan_backend.cpp and
// test_vulkan_models.cpp: backends made with the Khronos validation layer on (when
// installed), which must report no error; skipped, with the reason, without a device.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/vulkan/context.h"
#include "backend/vulkan/vulkan_backend.h"
#include "fafo/backend.h"
#include "fafo/vulkan_devices.h"

namespace fafo::test {

inline std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

class VulkanBackend : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    log_ = std::make_shared<vulkan::ValidationLog>();
    if (list_vulkan_devices().empty()) skip_reason_ = "no Vulkan device found";
  }
  static void TearDownTestSuite() {
    if (log_) {
      EXPECT_TRUE(log_->errors().empty()) << join(log_->errors());
    }
  }
  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << skip_reason_;
    errors_before_ = log_->errors().size();
  }
  void TearDown() override {
    if (!skip_reason_.empty()) return;
    const std::vector<std::string> errors = log_->errors();
    EXPECT_EQ(errors.size(), errors_before_) << "validation errors:\n" << join(errors);
  }

  static std::unique_ptr<Backend> make_vulkan() {
    vulkan::VulkanBackendOptions options;
    options.validation = true;
    options.validation_log = log_;
    return vulkan::make_backend(options);
  }

  static std::unique_ptr<Backend> make_vulkan_with(const std::string& features) {
    vulkan::VulkanBackendOptions options;
    options.validation = true;
    options.validation_log = log_;
    options.features = features;
    return vulkan::make_backend(options);
  }

  static inline std::shared_ptr<vulkan::ValidationLog> log_;
  static inline std::string skip_reason_;
  size_t errors_before_ = 0;
};

// A batch of T tokens 0..T-1 (the rows of an embed table) at the given positions.
inline StepBatch batch_of(int32_t T, int32_t n_past, uint32_t seed = 0, bool random_masks = false, bool compressed = false) {
  std::mt19937 rng(seed);
  StepBatch b;
  for (int32_t i = 0; i < T; ++i) {
    std::vector<int32_t> sees;
    for (int32_t j = 0; j < i; ++j)
      if (!random_masks || rng() % 3 != 0) sees.push_back(j);
    const PrefixView view = compressed && rng() % 2 == 0 ? PrefixView::Compressed : PrefixView::Full;
    b.add(i, n_past + (random_masks ? static_cast<int32_t>(rng() % 7) + i / 2 : i), sees, true, view);
  }
  b.set_n_past(n_past);
  return b;
}

}  // namespace fafo::test
