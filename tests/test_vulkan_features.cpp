// Optional Vulkan features (backend/vulkan/devices.h): FAFO_VULKAN_FEATURES parsing,
// what a Context enables with and without them, and the subgroup variant of the
// split-rows matmul, which must give the portable variant's bits for every weight
// format, shape and token count (both add the 32 lane sums by the same tree;
// shaders/matmul.comp). Runs on whatever Vulkan device the machine has (lavapipe in CI:
// 8-lane subgroups, so the tree's two largest steps go through shared memory and the
// other three through shuffles), with the Khronos validation layer on when installed;
// every Vulkan test asserts that the layer reported no error. Skipped, with the reason,
// without Vulkan.
#include <gtest/gtest.h>

#if FAFO_HAVE_VULKAN

#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/vulkan/buffer.h"
#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/devices.h"
#include "backend/vulkan/kernels.h"
#include "backend/vulkan/vulkan_error.h"
#include "backend/vulkan/weight_kernels.h"
#include "fafo/tensor_type.h"
#include "random_weights.h"
#include "test_support.h"
#include "vulkan_test_support.h"

namespace {

using fafo::TensorType;
using fafo::test::make_buffer;
using fafo::vulkan::Buffer;
using fafo::vulkan::CommandSequence;
using fafo::vulkan::Context;
using fafo::vulkan::ContextOptions;
using fafo::vulkan::DeviceFeatures;
using fafo::vulkan::FeatureSelection;
using fafo::vulkan::MatmulMapping;
using fafo::vulkan::MatmulReduction;
using fafo::vulkan::MatmulShape;
using fafo::vulkan::MatmulVariant;
using fafo::vulkan::ValidationLog;
using fafo::vulkan::VulkanError;
using fafo::vulkan::WeightKernels;


constexpr auto& kFeatureFormats = fafo::test::kAllWeightFormats;
using fafo::test::join_lines;
constexpr uint32_t kFeatureSentinel = 0xffc0dead;

bool all_on(const FeatureSelection& s) {
  return s.subgroup && s.fp16 && s.storage16 && s.storage8 && s.int8 && s.dot && s.matrix;
}
bool all_off(const FeatureSelection& s) {
  return !s.subgroup && !s.fp16 && !s.storage16 && !s.storage8 && !s.int8 && !s.dot && !s.matrix;
}

// ---- FAFO_VULKAN_FEATURES ----

TEST(VulkanFeatureSelection, AllPortableAndSingleFeatures) {
  using fafo::vulkan::parse_feature_selection;
  EXPECT_TRUE(all_on(parse_feature_selection("")));
  EXPECT_TRUE(all_on(parse_feature_selection("all")));
  EXPECT_TRUE(all_off(parse_feature_selection("portable")));
  EXPECT_TRUE(all_off(parse_feature_selection("none")));

  const FeatureSelection no_subgroup = parse_feature_selection("-subgroup");
  EXPECT_FALSE(no_subgroup.subgroup);
  EXPECT_TRUE(no_subgroup.fp16 && no_subgroup.storage16 && no_subgroup.storage8 && no_subgroup.int8 &&
              no_subgroup.dot);

  // Left to right, spaces around items ignored.
  const FeatureSelection only_subgroup = parse_feature_selection(" portable , subgroup ");
  EXPECT_TRUE(only_subgroup.subgroup);
  EXPECT_FALSE(only_subgroup.fp16 || only_subgroup.storage16 || only_subgroup.storage8 || only_subgroup.int8 ||
               only_subgroup.dot);
  const FeatureSelection some = parse_feature_selection("none,+fp16,+dot,-fp16");
  EXPECT_TRUE(some.dot);
  EXPECT_FALSE(some.fp16 || some.subgroup);
  EXPECT_TRUE(all_off(parse_feature_selection("-subgroup,-fp16,-storage16,-storage8,-int8,-dot,-matrix")));
  const FeatureSelection no_matrix = parse_feature_selection("-matrix");
  EXPECT_FALSE(no_matrix.matrix);
  EXPECT_TRUE(no_matrix.int8 && no_matrix.dot);
  EXPECT_TRUE(all_on(parse_feature_selection("portable,all")));
}

TEST(VulkanFeatureSelection, UnknownWordsAreAnErrorNamingTheAcceptedOnes) {
  for (const char* bad : {"subgroups", "-", "+", "all,-bogus", "-Subgroup", "portable;subgroup", "coopmat"}) {
    SCOPED_TRACE(bad);
    try {
      fafo::vulkan::parse_feature_selection(bad);
      ADD_FAILURE() << "no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_HAS(e.what(), "FAFO_VULKAN_FEATURES");
      for (const char* word : {"portable", "subgroup", "fp16", "storage16", "storage8", "int8", "dot", "matrix"})
        EXPECT_HAS(e.what(), word);
    }
  }
}

// The 8-bit cooperative matrix (a GPU's; lavapipe has none): enabled where detected and
// selected (and only with int8, which its shader needs), and the description says what
// uses it, that it was turned off, or why a device's cooperative matrix goes unused.
TEST(VulkanFeatureSelection, TheMatrixTilesTakeTheCooperativeMatrixWhereSelected) {
  DeviceFeatures gpu;
  gpu.shader_int8 = true;
  gpu.cooperative_matrix = true;
  gpu.int8_matrix = true;
  const DeviceFeatures on = fafo::vulkan::select_features(gpu, FeatureSelection{});
  EXPECT_TRUE(on.int8_matrix && on.cooperative_matrix);
  EXPECT_HAS(fafo::vulkan::describe_features(on, gpu), "cooperative matrix (NV, 16x8x32 8-bit");
  const DeviceFeatures off = fafo::vulkan::select_features(gpu, fafo::vulkan::parse_feature_selection("-matrix"));
  EXPECT_FALSE(off.int8_matrix || off.cooperative_matrix);
  EXPECT_HAS(fafo::vulkan::describe_features(off, gpu), "turned off: cooperative matrix");
  EXPECT_FALSE(fafo::vulkan::select_features(gpu, fafo::vulkan::parse_feature_selection("-int8")).int8_matrix);
  DeviceFeatures other = gpu;  // a KHR-only device, or an NV one without the 8-bit shape
  other.int8_matrix = false;
  EXPECT_FALSE(fafo::vulkan::select_features(other, FeatureSelection{}).cooperative_matrix);
  EXPECT_HAS(fafo::vulkan::describe_features(fafo::vulkan::select_features(other, FeatureSelection{}), other),
             "cooperative matrix present, not used (the matrix tiles need VK_NV_cooperative_matrix");
}

TEST(VulkanFeatureSelection, ABadValueFailsTheContextBeforeAnyVulkanCall) {
  ContextOptions options;
  options.features = "fast";
  EXPECT_THROW(Context{options}, std::runtime_error);
  // And from the environment.
  ::setenv("FAFO_VULKAN_FEATURES", "-subgroup,turbo", 1);
  EXPECT_THROW(Context{ContextOptions{}}, std::runtime_error);
  ::unsetenv("FAFO_VULKAN_FEATURES");
}

// ---- what a Context enables ----

// A Context with validation, or nullopt (and the reason) without a Vulkan device.
std::unique_ptr<Context> make_context(std::optional<std::string> features, const std::shared_ptr<ValidationLog>& log,
                                      std::string& skip_reason) {
  return fafo::test::make_validated_context(log, skip_reason, std::move(features));
}

bool is_lavapipe(const Context& ctx) { return ctx.device_name().find("llvmpipe") != std::string::npos; }

TEST(VulkanContextFeatures, AllUsesWhatTheDeviceHasAndPortableUsesNothing) {
  auto log = std::make_shared<ValidationLog>();
  std::string skip;
  {
    std::unique_ptr<Context> all = make_context("all", log, skip);
    if (!all) GTEST_SKIP() << "no Vulkan device: " << skip;
    const DeviceFeatures& d = all->detected_features();
    const DeviceFeatures& e = all->features();
    EXPECT_EQ(e.subgroup_matmul(), d.subgroup_matmul());
    EXPECT_EQ(e.storage_16bit, d.storage_16bit);
    EXPECT_EQ(e.storage_8bit, d.storage_8bit);
    EXPECT_EQ(e.shader_float16, d.shader_float16);
    EXPECT_EQ(e.shader_int8, d.shader_int8);
    EXPECT_EQ(e.integer_dot_product, d.integer_dot_product);
    EXPECT_EQ(e.int8_matrix, d.int8_matrix);
    EXPECT_EQ(e.cooperative_matrix, d.int8_matrix) << "enabled only for the 8-bit matrix tiles";
    const std::string text = fafo::vulkan::describe_features(e, d);
    if (d.integer_dot_product) {
      EXPECT_HAS(text, "integer dot product (enabled for the split-rows integer products' byte sums");
    }
    if (is_lavapipe(*all)) {
      // lavapipe: 8-lane subgroups with shuffles, full subgroups (Vulkan 1.3), every
      // storage/arithmetic feature and integer dot product; no cooperative matrix.
      EXPECT_EQ(d.subgroup_size, 8u);
      EXPECT_TRUE(e.subgroup_matmul());
      EXPECT_TRUE(e.subgroup_arithmetic);
      EXPECT_TRUE(e.storage_16bit && e.storage_8bit && e.shader_float16 && e.shader_int8 && e.integer_dot_product);
      EXPECT_FALSE(d.cooperative_matrix || d.int8_matrix);
      EXPECT_HAS(text, "optional features: subgroup shuffle (8 lanes");
      const WeightKernels kernels(*all);
      for (const uint32_t tile : WeightKernels::kTokenTiles) EXPECT_TRUE(kernels.has_subgroup_variant(tile)) << tile;
      EXPECT_HAS(kernels.describe(), "whole rows");
      // 16-bit storage reads of an fp16 KV cache: lavapipe widens every half exactly.
      const fafo::vulkan::Kernels activation_kernels(*all);
      EXPECT_TRUE(activation_kernels.half_storage_exact());
    }
  }
  {
    std::unique_ptr<Context> portable = make_context("portable", log, skip);
    ASSERT_TRUE(portable) << skip;
    const DeviceFeatures& e = portable->features();
    EXPECT_FALSE(e.subgroup_shuffle || e.subgroup_arithmetic || e.full_subgroups || e.subgroup_matmul());
    EXPECT_FALSE(e.storage_16bit || e.storage_8bit || e.shader_float16 || e.shader_int8 || e.integer_dot_product ||
                 e.cooperative_matrix);
    EXPECT_EQ(e.subgroup_size, portable->detected_features().subgroup_size);
    const std::string text = fafo::vulkan::describe_features(e, portable->detected_features());
    EXPECT_HAS(text, "optional features: none (portable path)");
    if (portable->detected_features().subgroup_matmul()) {
      EXPECT_HAS(text, "turned off: subgroup shuffle");
    }
    EXPECT_FALSE(fafo::vulkan::Kernels(*portable).half_storage_exact());
    const WeightKernels kernels(*portable);
    for (const uint32_t tile : WeightKernels::kTokenTiles) EXPECT_FALSE(kernels.has_subgroup_variant(tile)) << tile;
    // Asking for the subgroup variant is then a clear error; the portable one runs.
    const Buffer big(*portable, 1 << 16);
    CommandSequence seq(*portable);
    const MatmulShape shape{2, 4, 32, 32, 4, 0};
    MatmulVariant subgroup{0, MatmulMapping::SplitRows};
    subgroup.reduction = MatmulReduction::Subgroup;
    try {
      kernels.matmul(seq, TensorType::Q4_0, big, big, big, shape, subgroup);
      ADD_FAILURE() << "no exception";
    } catch (const std::invalid_argument& error) {
      EXPECT_HAS(error.what(), "FAFO_VULKAN_FEATURES");
    }
    MatmulVariant portable_variant{0, MatmulMapping::SplitRows};
    portable_variant.reduction = MatmulReduction::Portable;
    EXPECT_NO_THROW(kernels.matmul(seq, TensorType::Q4_0, big, big, big, shape, portable_variant));
    seq.submit_and_wait();
  }
  {
    // -subgroup from the environment (ContextOptions::features unset).
    ::setenv("FAFO_VULKAN_FEATURES", "-subgroup", 1);
    std::unique_ptr<Context> no_subgroup = make_context(std::nullopt, log, skip);
    ::unsetenv("FAFO_VULKAN_FEATURES");
    ASSERT_TRUE(no_subgroup) << skip;
    EXPECT_FALSE(no_subgroup->features().subgroup_matmul());
    EXPECT_EQ(no_subgroup->features().storage_16bit, no_subgroup->detected_features().storage_16bit);
  }
  EXPECT_TRUE(log->errors().empty()) << join_lines(log->errors());
}

// ---- the subgroup matmul against the portable one ----

// rows x cols weights in `type`, quantized by fafo's quantizers from random floats with
// rows of different scales (so that sums in another order round differently).
std::vector<uint8_t> random_weights(TensorType type, uint32_t rows, uint32_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.01f, 10.0f);
  const size_t row_bytes = fafo::tensor_row_bytes(type, cols);
  std::vector<uint8_t> bytes(WeightKernels::weight_bytes(type, rows, cols), 0);
  std::vector<float> row(cols);
  for (uint32_t r = 0; r < rows; ++r) {
    const float s = scale(rng);
    for (float& v : row) v = value(rng) * s;
    fafo::test::quantize_for_test(type, row.data(), bytes.data() + r * row_bytes, cols);
  }
  return bytes;
}

// One validated context with every feature the device has and one WeightKernels for the
// suite (pipeline creation under the validation layer is slow).
class VulkanSubgroupMatmul : public fafo::test::ValidatedVulkanSuite<WeightKernels> {
 protected:
  static void SetUpTestSuite() { open("all"); }
  void SetUp() override {
    ValidatedVulkanSuite::SetUp();
    if (!context_ || IsSkipped()) return;
    if (!context_->features().subgroup_matmul()) {
      // lavapipe has them: there a missing subgroup path is a failure, not a skip.
      ASSERT_FALSE(is_lavapipe(*context_)) << "lavapipe should have subgroup shuffle with full subgroups";
      GTEST_SKIP() << context_->device_name() << " has no subgroup shuffle with full subgroups";
    }
  }
};

TEST_F(VulkanSubgroupMatmul, SubgroupVariantGivesThePortableBitsForEveryFormatShapeAndTokenCount) {
  // Rows not a multiple of a workgroup's 2 or 4 rows; columns odd for the plain float
  // formats (a partial last chunk), and for the quantized ones from one block (some
  // lanes sum nothing) to more chunks than lanes (lanes sum several chunks).
  const uint32_t x_pad = 3;
  for (const TensorType type : kFeatureFormats) {
    const uint32_t block = fafo::tensor_type_info(type).block_size;
    const std::vector<uint32_t> col_counts =
        block == 1 ? std::vector<uint32_t>{1, 37, 301, 1031} : std::vector<uint32_t>{block, 3 * block, 1280 / block * block};
    for (const uint32_t rows : {1u, 7u, 33u}) {
      for (const uint32_t cols : col_counts) {
        SCOPED_TRACE(std::string(fafo::tensor_type_name(type)) + " rows " + std::to_string(rows) + " cols " +
                     std::to_string(cols));
        const std::vector<uint8_t> w = random_weights(type, rows, cols, rows * 7919 + cols);
        const uint32_t max_T = 33, x_stride = cols + x_pad;
        std::vector<float> x(size_t{max_T} * x_stride);
        std::mt19937 rng(cols + rows);
        std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
        for (float& v : x) v = dist(rng);
        const Buffer bw = make_buffer(*context_, w.data(), w.size());
        const Buffer bx = make_buffer(*context_, x.data(), x.size() * sizeof(float));
        const uint32_t out_stride = rows + 5, out_offset = 2;

        // Pairs of runs, portable then subgroup: the automatic tile for each T (but see
        // below), every tile for T = 33, and workgroups capped to 1 x 1 (each loops over
        // every row block and token tile: shared memory reused across blocks). The
        // subgroup variant at every tile runs for every format in VulkanEveryVariant.
        struct Run {
          std::string name;
          uint32_t T;
          MatmulVariant variant;
          uint32_t portable_tile = 0;  // the portable run's tile where it is not the variant's
        };
        // The portable reduction at every tile for kEveryTilePortableFormats. For the
        // others, T 1 and T 33 only, and T 33's subgroup variant (at the automatic tile,
        // 32) against the portable one at tile 1: the same bits, as the products are
        // T-invariant (VulkanEveryVariant), and a 32-token pipeline less to compile per
        // format (4 to 12 s each on lavapipe with a cold shader cache; the reduction does
        // not depend on the format beyond how many lanes hold a sum).
        const bool every_tile = fafo::test::every_tile_portable(type);
        std::vector<Run> runs;
        for (const uint32_t T : {1u, 3u, 9u, 32u, 33u})
          if (every_tile || T == 1 || T == 33)
            runs.push_back({"T " + std::to_string(T) + (every_tile || T == 1 ? "" : " (portable at tile 1)"), T,
                            MatmulVariant{0, MatmulMapping::SplitRows}, every_tile || T == 1 ? 0u : 1u});
        if (every_tile) {
          for (const uint32_t tile : WeightKernels::kTokenTiles)
            runs.push_back({"T 33 tile " + std::to_string(tile), 33, MatmulVariant{tile, MatmulMapping::SplitRows}});
          runs.push_back({"T 33, 1x1 workgroups", 33, MatmulVariant{8, MatmulMapping::SplitRows, 1, 1}});
        }

        const size_t words = size_t{max_T - 1} * out_stride + out_offset + rows + 3;
        const std::vector<uint32_t> fill(words, kFeatureSentinel);
        std::vector<Buffer> outs;
        CommandSequence seq(*context_);
        for (const Run& run : runs) {
          for (const MatmulReduction reduction : {MatmulReduction::Portable, MatmulReduction::Subgroup}) {
            MatmulVariant v = run.variant;
            v.reduction = reduction;
            if (reduction == MatmulReduction::Portable && run.portable_tile != 0) v.tile = run.portable_tile;
            outs.push_back(make_buffer(*context_, fill.data(), words * sizeof(uint32_t)));
            kernels_->matmul(seq, type, bw, bx, outs.back(),
                             MatmulShape{run.T, rows, cols, x_stride, out_stride, out_offset}, v);
          }
        }
        seq.submit_and_wait();
        for (size_t i = 0; i < runs.size(); ++i) {
          SCOPED_TRACE(runs[i].name);
          std::vector<uint32_t> portable(words), subgroup(words);
          outs[2 * i].download(portable.data(), words * sizeof(uint32_t));
          outs[2 * i + 1].download(subgroup.data(), words * sizeof(uint32_t));
          // Every word: the outputs bit for bit, and the sentinel left alone around them.
          size_t written = 0;
          for (size_t k = 0; k < words; ++k) {
            ASSERT_EQ(subgroup[k], portable[k]) << "out[" << k << "]";
            written += portable[k] != kFeatureSentinel;
          }
          EXPECT_EQ(written, size_t{runs[i].T} * rows);
        }
      }
    }
  }
}

TEST_F(VulkanSubgroupMatmul, AutomaticReductionPicksTheSubgroupVariant) {
  // The default reduction for SplitRows is the subgroup one where it exists: same bits
  // as asking for it, and asking for it on WholeRows is an error.
  const TensorType type = TensorType::Q4_K;
  const uint32_t rows = 9, cols = 512, T = 5;
  const std::vector<uint8_t> w = random_weights(type, rows, cols, 3);
  std::vector<float> x(size_t{T} * cols);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  const Buffer bw = make_buffer(*context_, w.data(), w.size());
  const Buffer bx = make_buffer(*context_, x.data(), x.size() * sizeof(float));
  const Buffer out_auto(*context_, size_t{T} * rows * sizeof(float));
  const Buffer out_subgroup(*context_, size_t{T} * rows * sizeof(float));
  const MatmulShape shape{T, rows, cols, cols, rows, 0};
  CommandSequence seq(*context_);
  kernels_->matmul(seq, type, bw, bx, out_auto, shape, MatmulVariant{0, MatmulMapping::SplitRows});
  MatmulVariant subgroup{0, MatmulMapping::SplitRows};
  subgroup.reduction = MatmulReduction::Subgroup;
  kernels_->matmul(seq, type, bw, bx, out_subgroup, shape, subgroup);
  seq.submit_and_wait();
  std::vector<uint32_t> a(size_t{T} * rows), b(size_t{T} * rows);
  out_auto.download(a.data(), a.size() * sizeof(uint32_t));
  out_subgroup.download(b.data(), b.size() * sizeof(uint32_t));
  EXPECT_EQ(a, b);
  MatmulVariant whole_subgroup{0, MatmulMapping::WholeRows};
  whole_subgroup.reduction = MatmulReduction::Subgroup;
  CommandSequence seq2(*context_);
  EXPECT_THROW(kernels_->matmul(seq2, type, bw, bx, out_auto, shape, whole_subgroup), std::invalid_argument);
}

}  // namespace

#else  // !FAFO_HAVE_VULKAN

TEST(VulkanFeatures, Skipped) { GTEST_SKIP() << "fafo was built without Vulkan (FAFO_VULKAN=OFF or not found)"; }

#endif
