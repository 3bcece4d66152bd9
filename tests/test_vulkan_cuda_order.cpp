// Vulkan's kernels against the CUDA backend's arithmetic (where a Vulkan device exists:
// lavapipe in CI): the row dot products, integer products, matrix tiles and RMSNorm of
// the Vulkan backend give the bits the CUDA kernels' host-side functions give, so that
// the two backends agree bit for bit on one GPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../cuda_backend/src/argmax_op.h"
#include "../cuda_backend/src/attention_ops.h"
#include "../cuda_backend/src/block_decode.h"
#include "../cuda_backend/src/dot_order.h"
#include "../cuda_backend/src/host_device.h"
#include "../cuda_backend/src/half_mma_ops.h"
#include "../cuda_backend/src/int_mma_block_op.h"
#include "../cuda_backend/src/int_ops.h"
#include "../cuda_backend/src/ops_backend.h"
#include "../cuda_backend/src/step_graphs.h"
#include "../cuda_backend/src/top_k_op.h"
#include "../cuda_backend/src/ops.h"
#include "../cuda_backend/src/warp_ops.h"
#include "fafo/cuda_backend.h"
#include "fafo/generator.h"
#include "fafo/tensor_type.h"
#include "fafo/top_k.h"
#include "random_weights.h"
#include "model_fixtures.h"
#include "joined_steps_check.h"
#include "test_support.h"
#include "cuda_test_rows.h"

#if FAFO_HAVE_VULKAN
#include "backend/vulkan/buffer.h"
#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/kernels.h"
#include "backend/vulkan/weight_kernels.h"
#include "vulkan_test_support.h"
#endif

namespace {

using fafo::TensorType;
using fafo::cuda::Format;
using namespace fafo::test::cuda_rows;  // NOLINT(google-build-using-namespace): the tests' rows

#if FAFO_HAVE_VULKAN

using fafo::vulkan::Buffer;
using fafo::vulkan::CommandSequence;
using VulkanOrder = fafo::test::ValidatedVulkanSuite<fafo::vulkan::WeightKernels>;

Buffer upload(const fafo::vulkan::Context& ctx, const void* data, size_t bytes) {
  Buffer b(ctx, bytes);
  b.upload(data, bytes);
  return b;
}

TEST_F(VulkanOrder, RowDotGivesTheVulkanMatmulBitsForEveryFormat) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const TensorType type : kFormats) {
    SCOPED_TRACE(name_of(type));
    const uint32_t cols = cols_for(type), rows = 6, T = 3;
    std::vector<uint8_t> bytes = test_rows(type, rows / 2, cols, 13);
    bytes.resize(fafo::vulkan::WeightKernels::weight_bytes(type, rows, cols), 0);
    std::vector<float> x(size_t{T} * cols);
    for (float& v : x) v = value(rng);
    const Buffer bw = upload(*context_, bytes.data(), bytes.size());
    const Buffer bx = upload(*context_, x.data(), x.size() * sizeof(float));
    const Buffer out(*context_, size_t{T} * rows * sizeof(float));
    CommandSequence seq(*context_);
    kernels_->matmul(seq, type, bw, bx, out, fafo::vulkan::MatmulShape{T, rows, cols, cols, rows, 0});
    seq.submit_and_wait();
    std::vector<float> device(size_t{T} * rows);
    out.download(device.data(), device.size() * sizeof(float));
    const size_t row_bytes = fafo::tensor_row_bytes(type, cols);
    // The device's multiply-add is fused or rounded (Vulkan allows both; lavapipe rounds):
    // every output must be the order's result in one of the two, the same one throughout.
    int fused = 0, rounded = 0;
    for (uint32_t t = 0; t < T; ++t)
      for (uint32_t r = 0; r < rows; ++r) {
        float with_fma = 0, without = 0;
        fafo::cuda::with_format(static_cast<uint32_t>(type), [&]<Format F>() {
          using fafo::cuda::MulAdd;
          with_fma = fafo::cuda::row_dot<F, MulAdd::Fused>(bytes.data() + r * row_bytes, &x[size_t{t} * cols], cols);
          without = fafo::cuda::row_dot<F, MulAdd::Rounded>(bytes.data() + r * row_bytes, &x[size_t{t} * cols], cols);
        });
        const uint32_t got = std::bit_cast<uint32_t>(device[size_t{t} * rows + r]);
        fused += got == std::bit_cast<uint32_t>(with_fma);
        rounded += got == std::bit_cast<uint32_t>(without);
        ASSERT_TRUE(got == std::bit_cast<uint32_t>(with_fma) || got == std::bit_cast<uint32_t>(without))
            << "token " << t << " row " << r << ": " << device[size_t{t} * rows + r] << " vs " << with_fma
            << " (fused) or " << without << " (rounded)";
      }
    EXPECT_TRUE(fused == static_cast<int>(T * rows) || rounded == static_cast<int>(T * rows))
        << fused << " outputs match the fused order, " << rounded << " the rounded one";
  }
}

// The check below for `types` at step sizes `steps`.
void integer_products_give_the_cuda_bits(const fafo::vulkan::Context& context, fafo::vulkan::WeightKernels& weight_kernels,
                                         std::initializer_list<TensorType> types, std::initializer_list<uint32_t> steps) {
  using fafo::vulkan::MatmulMapping;
  using fafo::vulkan::MatmulReduction;
  fafo::vulkan::Kernels kernels(context);
  fafo::cuda::HostDevice device;
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  const uint32_t cols = 2560, rows = 6, words = fafo::vulkan::Kernels::q8_row_words(cols), blocks = cols / 32;
  for (const TensorType type : types) {
    SCOPED_TRACE(name_of(type));
    ASSERT_TRUE(fafo::vulkan::WeightKernels::has_int8(type));
    std::vector<uint8_t> bytes = test_rows(type, rows, cols, 21);  // 2 x rows: gate, then up
    const size_t row_bytes = fafo::tensor_row_bytes(type, cols);
    bytes.resize(fafo::vulkan::WeightKernels::weight_bytes(type, 2 * rows, cols), 0);  // gated: 2 x rows
    const Buffer bw = upload(context, bytes.data(), bytes.size());
    for (const uint32_t T : steps) {
      SCOPED_TRACE("T " + std::to_string(T));
      std::vector<float> x(size_t{T} * cols);
      for (float& v : x) v = value(rng);
      const float halves[] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 126.5f, 1.5f, -2.5f};
      for (uint32_t k = 0; k < 8; ++k) {
        x[k] = halves[k];
        x[8 + k] = k == 0 ? -127.0f : std::nextafter(halves[k], 0.0f);
        x[16 + k] = std::nextafter(halves[k], halves[k] < 0 ? -200.0f : 200.0f);
      }
      if (T > 1)
        for (uint32_t k = 0; k < 32; ++k) x[cols + 64 + k] = 0.0f;  // row 1, block 2
      // The rounding: the Vulkan kernel's words against QuantizeRowsOp's q, d and d sum.
      const Buffer bx = upload(context, x.data(), x.size() * sizeof(float));
      const Buffer bq(context, size_t{T} * words * 4);
      {
        CommandSequence seq(context);
        kernels.quantize_rows(seq, bx, bq, T, cols, cols);
        seq.submit_and_wait();
      }
      std::vector<uint32_t> q8(size_t{T} * words);
      bq.download(q8.data(), q8.size() * 4);
      std::vector<int8_t> cq(size_t{T} * cols);
      std::vector<float> cd(size_t{T} * blocks), cs(size_t{T} * blocks);
      const fafo::cuda::Q8Rows rounded{cq.data(), cd.data(), cs.data(), cols};
      device.launch_warp_fn(fafo::cuda::QuantizeRowsOp{x.data(), cols, nullptr, 0.0f, rounded},
                            fafo::cuda::QuantizeRowsOp::warps(T, cols), "quantize");
      for (uint32_t t = 0; t < T; ++t) {
        const uint32_t* row = q8.data() + size_t{t} * words;
        ASSERT_EQ(std::memcmp(row, cq.data() + size_t{t} * cols, cols), 0) << "q of row " << t;
        ASSERT_EQ(std::memcmp(row + cols / 4, cd.data() + size_t{t} * blocks, blocks * 4), 0) << "d of row " << t;
        ASSERT_EQ(std::memcmp(row + cols / 4 + blocks, cs.data() + size_t{t} * blocks, blocks * 4), 0) << "sums of row " << t;
      }
      // Normalized first (a gain): the bits of rms_norm's rows rounded (Vulkan's division
      // and square root may differ from CUDA's in the last bit, so the scale is compared
      // with Vulkan's own rms_norm: on lavapipe one row of the 46 here differs from the
      // host's by an ulp of its scale).
      {
        std::vector<float> gain(cols);
        for (float& g : gain) g = value(rng);
        const Buffer bg = upload(context, gain.data(), gain.size() * sizeof(float));
        const Buffer fused(context, size_t{T} * words * 4), apart(context, size_t{T} * words * 4),
            normed(context, x.size() * sizeof(float));
        CommandSequence seq(context);
        kernels.quantize_rows(seq, bx, fused, T, cols, cols, &bg, 1e-5f);
        kernels.rms_norm(seq, bx, bg, normed, T, cols, 1e-5f);
        kernels.quantize_rows(seq, normed, apart, T, cols, cols);
        seq.submit_and_wait();
        std::vector<uint32_t> f8(size_t{T} * words), a8(f8.size());
        fused.download(f8.data(), f8.size() * 4);
        apart.download(a8.data(), a8.size() * 4);
        ASSERT_EQ(f8, a8);
        EXPECT_NE(f8, q8);  // the norm did something
      }
      EXPECT_EQ(cd[0], 1.0f);
      EXPECT_EQ(cq[1], 2);  // 2.5: to even
      EXPECT_EQ(cq[2], -4);
      EXPECT_EQ(cq[9], 2);  // just below 2.5
      EXPECT_EQ(cq[17], 3);  // just above
      EXPECT_EQ(cq[10], -3);
      EXPECT_EQ(cq[18], -4);
      // The products, each mapping.
      std::vector<std::pair<MatmulMapping, MatmulReduction>> mappings = {{MatmulMapping::WholeRows, MatmulReduction::Auto},
                                                                        {MatmulMapping::SplitRows, MatmulReduction::Portable}};
      if (weight_kernels.has_subgroup_variant(1)) mappings.push_back({MatmulMapping::SplitRows, MatmulReduction::Subgroup});
      mappings.push_back({MatmulMapping::MatrixTiles, MatmulReduction::Auto});  // plain loops here
      std::vector<std::pair<MatmulMapping, MatmulReduction>> with_dot;  // split rows: also by the dot instruction
      if (weight_kernels.uses_dot())
        for (const auto& m : mappings)
          if (m.first == MatmulMapping::SplitRows) with_dot.push_back(m);
      const size_t plain = mappings.size();
      mappings.insert(mappings.end(), with_dot.begin(), with_dot.end());
      for (size_t k = 0; k < mappings.size(); ++k) {
        const auto [mapping, reduction] = mappings[k];
        const bool dot = k >= plain;
        if (dot && T > 16) continue;  // lavapipe takes ~40 s to compile the 32-token tile's (the GPU run has it)
        SCOPED_TRACE(std::string(mapping == MatmulMapping::WholeRows     ? "whole rows"
                                 : mapping == MatmulMapping::MatrixTiles ? "matrix tiles, plain loops"
                                 : reduction == MatmulReduction::Subgroup ? "subgroups"
                                                                          : "split rows") +
                     (dot ? ", dot instruction" : ""));
        fafo::vulkan::MatmulVariant variant;
        variant.mapping = mapping;
        variant.reduction = reduction;
        variant.int8 = true;
        if (mapping == MatmulMapping::SplitRows) variant.dot = dot;
        if (mapping == MatmulMapping::MatrixTiles) variant.matrix = false;
        const fafo::vulkan::MatmulShape shape{T, rows, cols, words, rows, 0};
        const Buffer out(context, size_t{T} * rows * 4), up(context, size_t{T} * rows * 4),
            gated(context, size_t{T} * rows * 4), silu(context, size_t{T} * rows * 4);
        std::vector<float> base(size_t{T} * rows);
        for (float& v : base) v = value(rng);
        const Buffer sum = upload(context, base.data(), base.size() * 4);
        {
          CommandSequence seq(context);
          weight_kernels.matmul(seq, type, bw, bq, out, shape, variant);
          fafo::vulkan::MatmulShape add = shape;
          add.accumulate = true;
          weight_kernels.matmul(seq, type, bw, bq, sum, add, variant);
          seq.submit_and_wait();
        }
        {
          // The up projection's rows (rows .. 2 rows - 1 of the weight) alone, then the gated product.
          const Buffer bu = upload(context, bytes.data() + rows * row_bytes, bytes.size() - rows * row_bytes);
          CommandSequence seq(context);
          weight_kernels.matmul(seq, type, bu, bq, up, shape, variant);
          weight_kernels.matmul_gated(seq, type, bw, bq, gated, shape, variant);
          kernels.swiglu(seq, out, up, silu, T * rows);
          seq.submit_and_wait();
        }
        std::vector<float> got(size_t{T} * rows), with_sum(got.size()), got_gated(got.size()), want_gated(got.size());
        out.download(got.data(), got.size() * 4);
        sum.download(with_sum.data(), with_sum.size() * 4);
        gated.download(got_gated.data(), got_gated.size() * 4);
        silu.download(want_gated.data(), want_gated.size() * 4);
        int fused = 0, twice = 0;
        for (uint32_t t = 0; t < T; ++t)
          for (uint32_t r = 0; r < rows; ++r) {
            float with_fma = 0, without = 0;
            fafo::cuda::with_format(static_cast<uint32_t>(type), [&]<Format F>() {
              if constexpr (fafo::cuda::has_int_product<F>) {
                using fafo::cuda::MulAdd;
                with_fma = fafo::cuda::int_row_dot<F, MulAdd::Fused>(bytes.data() + r * row_bytes, rounded, t);
                without = fafo::cuda::int_row_dot<F, MulAdd::Rounded>(bytes.data() + r * row_bytes, rounded, t);
              }
            });
            const size_t i = size_t{t} * rows + r;
            const uint32_t g = std::bit_cast<uint32_t>(got[i]);
            fused += g == std::bit_cast<uint32_t>(with_fma);
            twice += g == std::bit_cast<uint32_t>(without);
            ASSERT_TRUE(g == std::bit_cast<uint32_t>(with_fma) || g == std::bit_cast<uint32_t>(without))
                << "token " << t << " row " << r << ": " << got[i] << " vs " << with_fma << " (fused) or " << without;
            ASSERT_EQ(std::bit_cast<uint32_t>(with_sum[i]), std::bit_cast<uint32_t>(base[i] + got[i])) << i;
            ASSERT_EQ(std::bit_cast<uint32_t>(got_gated[i]), std::bit_cast<uint32_t>(want_gated[i])) << i;
          }
        EXPECT_TRUE(fused == static_cast<int>(T * rows) || twice == static_cast<int>(T * rows))
            << fused << " outputs match the fused order, " << twice << " the rounded one";
      }
    }
  }
}

// The Vulkan integer products (Kernels::quantize_rows, WeightKernels::matmul with
// MatmulVariant::int8) are the CUDA backend's: the rounded activations bit for bit
// (normalized first, those of rms_norm's rows: 2,560 columns, three workgroups a row)
// (exact halves x = (n + 1/2) d and their neighbours included: d = 1 for a block whose
// largest magnitude is 127; a zero block), and each product int_row_dot's order, with
// the device's multiply-add fused or rounded (the same one throughout), for every
// mapping (split rows portable and with subgroups where the device has them, whole
// rows; split rows also by the integer dot product instruction where the device has it:
// lavapipe does) and step sizes across tiles (1, 3, 9, 33); the gated form is the plain
// products' SwiGLU (Kernels::swiglu) and an accumulating one adds the product. Rows of
// 80 units (Q8_0, Q6_K) or 40 (Q4_K, Q5_K): lanes of one and of two units.
TEST_F(VulkanOrder, IntegerProductsGiveTheCudaBits) {
#if FAFO_SPIRV_DOT4
  EXPECT_EQ(kernels_->uses_dot(), context_->features().integer_dot_product);  // lavapipe has the feature
#else
  EXPECT_FALSE(kernels_->uses_dot());  // built without spirv-tools or python3: no such variants
#endif
  integer_products_give_the_cuda_bits(*context_, *kernels_, {TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K},
                                      {1u, 3u, 9u, 33u});
}

// The same for the blocks of 4-bit codes (one scale each, a table or code - 8: units of
// 32 values as Q8_0's), at a one-token step and one over a 32-token tile (the matrix
// tiles' two token tiles): 80 units a row.
TEST_F(VulkanOrder, IntegerProductsOfFourBitCodesGiveTheCudaBits) {
  integer_products_give_the_cuda_bits(*context_, *kernels_,
                                      {TensorType::Q4_0, TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::MXFP4}, {1u, 33u});
}

// And for Q3_K (as Q6_K: two sub-blocks of 16 with integer scales), Q5_0 (a fifth bit
// from qh) and Q4_1/Q5_1 (a minimum times the activations' block sums).
TEST_F(VulkanOrder, IntegerProductsOfQ3KAndTheLegacyFormatsGiveTheCudaBits) {
  integer_products_give_the_cuda_bits(*context_, *kernels_,
                                      {TensorType::Q3_K, TensorType::Q5_0, TensorType::Q4_1, TensorType::Q5_1}, {1u, 33u});
}

// The matrix tiles (shaders/matmul_tiles.comp; here their plain-loop form, on a GPU with
// cooperative matrices also the instructions) give the whole-rows integer products' bits
// (IntegerProductsGiveTheCudaBits ties those to CUDA's) for every shape a tile meets:
// several row blocks and a last partial one, token tiles of 32 with a partial last one,
// a grid of one workgroup looping over all (max_groups_x/y = 1), rows with fewer units
// than lanes (Q4_K: 12 units) and with more (Q8_0, Q6_K: 40), gated products whose rows
// cross a block, and a product added to what out holds.
TEST_F(VulkanOrder, MatrixTilesGiveTheOtherMappingsBitsForEveryShape) {
  using fafo::vulkan::MatmulMapping;
  fafo::vulkan::Kernels kernels(*context_);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  std::vector<bool> forms = {false};  // plain loops
  if (context_->features().int8_matrix) forms.push_back(true);
  {
    // Misuse: a clear error naming what is missing.
    const Buffer b(*context_, 1 << 16);
    const fafo::vulkan::MatmulShape shape{9, 4, 256, fafo::vulkan::Kernels::q8_row_words(256), 4, 0};
    auto message = [&](fafo::vulkan::MatmulVariant v, TensorType type) {
      CommandSequence seq(*context_);
      try {
        kernels_->matmul(seq, type, b, b, b, shape, v);
      } catch (const std::invalid_argument& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    fafo::vulkan::MatmulVariant v;
    v.mapping = MatmulMapping::MatrixTiles;
    EXPECT_NE(message(v, TensorType::Q4_K).find("is for integer products"), std::string::npos);
    v.int8 = true;
    EXPECT_NE(message(v, TensorType::Q2_K).find("no integer products for Q2_K"), std::string::npos);
    v.tile = 16;
    EXPECT_NE(message(v, TensorType::Q4_K).find("tiles of 32 tokens, not 16"), std::string::npos);
    v.tile = 0;
    v.matrix = true;
    if (!context_->features().int8_matrix) {
      EXPECT_NE(message(v, TensorType::Q4_K).find("no 8-bit cooperative-matrix instructions"), std::string::npos);
    }
    v.mapping = MatmulMapping::SplitRows;
    EXPECT_NE(message(v, TensorType::Q4_K).find("MatmulVariant::matrix is for the MatrixTiles mapping"),
              std::string::npos);
  }
  for (const TensorType type : {TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    SCOPED_TRACE(name_of(type));
    const uint32_t cols = type == TensorType::Q8_0 || type == TensorType::Q6_K ? 1280 : 768;
    const uint32_t words = fafo::vulkan::Kernels::q8_row_words(cols), max_rows = 130, max_T = 70;
    std::vector<uint8_t> bytes = test_rows(type, max_rows / 2, cols, 31);
    bytes.resize(fafo::vulkan::WeightKernels::weight_bytes(type, max_rows, cols), 0);
    const Buffer bw = upload(*context_, bytes.data(), bytes.size());
    std::vector<float> x(size_t{max_T} * cols);
    for (float& v : x) v = value(rng);
    const Buffer bx = upload(*context_, x.data(), x.size() * sizeof(float));
    const Buffer bq(*context_, size_t{max_T} * words * 4);
    {
      CommandSequence seq(*context_);
      kernels.quantize_rows(seq, bx, bq, max_T, cols, cols);
      seq.submit_and_wait();
    }
    struct Case {
      uint32_t rows, T;
      bool gated, accumulate, one_group;
    };
    const Case cases[] = {{1, 9, false, false, false},   {65, 32, false, false, false}, {130, 70, false, false, false},
                          {130, 33, false, true, false}, {65, 70, false, false, true},  {33, 40, true, false, false},
                          {33, 70, true, false, true}};
    for (const Case& c : cases) {
      for (const bool matrix : forms) {
        SCOPED_TRACE("rows " + std::to_string(c.rows) + " T " + std::to_string(c.T) + (c.gated ? " gated" : "") +
                     (c.accumulate ? " accumulate" : "") + (c.one_group ? " one workgroup" : "") +
                     (matrix ? ", cooperative matrix" : ", plain loops"));
        const fafo::vulkan::MatmulShape shape{c.T, c.rows, cols, words, c.rows + 3, 1, c.accumulate};
        const size_t n = size_t{c.T} * (c.rows + 3) + 1;
        std::vector<float> base(n);
        for (float& v : base) v = value(rng);
        const Buffer want = upload(*context_, base.data(), n * 4), got = upload(*context_, base.data(), n * 4);
        fafo::vulkan::MatmulVariant whole;
        whole.mapping = MatmulMapping::WholeRows;
        whole.int8 = true;
        fafo::vulkan::MatmulVariant tiles;
        tiles.mapping = MatmulMapping::MatrixTiles;
        tiles.int8 = true;
        tiles.matrix = matrix;
        if (c.one_group) tiles.max_groups_x = tiles.max_groups_y = 1;
        CommandSequence seq(*context_);
        if (c.gated) {
          kernels_->matmul_gated(seq, type, bw, bq, want, shape, whole);
          kernels_->matmul_gated(seq, type, bw, bq, got, shape, tiles);
        } else {
          kernels_->matmul(seq, type, bw, bq, want, shape, whole);
          kernels_->matmul(seq, type, bw, bq, got, shape, tiles);
        }
        seq.submit_and_wait();
        std::vector<uint32_t> w(n), g(n);
        want.download(w.data(), n * 4);
        got.download(g.data(), n * 4);
        size_t written = 0;
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(g[i], w[i]) << "word " << i << ": " << std::bit_cast<float>(g[i]) << " vs "
                                << std::bit_cast<float>(w[i]);
          written += w[i] != std::bit_cast<uint32_t>(base[i]);
        }
        // Every output written (a product of a zero row may leave an accumulated one as it
        // was), and, above, nothing else.
        EXPECT_GE(written, size_t{c.T} * c.rows * 99 / 100);
      }
    }
  }
}

TEST_F(VulkanOrder, RmsNormGivesTheVulkanKernelsBits) {
  fafo::vulkan::Kernels kernels(*context_);
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  for (const uint32_t n : {64u, 1007u, 2048u}) {
    const uint32_t rows = 3;
    std::vector<float> x(size_t{rows} * n), gain(n);
    for (float& v : x) v = value(rng);
    for (float& v : gain) v = value(rng);
    const Buffer bx = upload(*context_, x.data(), x.size() * sizeof(float));
    const Buffer bg = upload(*context_, gain.data(), gain.size() * sizeof(float));
    const Buffer out(*context_, x.size() * sizeof(float));
    CommandSequence seq(*context_);
    kernels.rms_norm(seq, bx, bg, out, rows, n, 1e-5f);
    seq.submit_and_wait();
    std::vector<float> device(x.size());
    out.download(device.data(), device.size() * sizeof(float));
    for (uint32_t r = 0; r < rows; ++r) {
      const float* row = &x[size_t{r} * n];
      float sums[fafo::cuda::kLanes];
      for (uint32_t l = 0; l < fafo::cuda::kLanes; ++l) sums[l] = fafo::cuda::lane_sum_squares(row, n, l);
      const float scale = fafo::cuda::rms_scale(fafo::cuda::tree32(sums), n, 1e-5f);
      for (uint32_t c = 0; c < n; ++c) {
        const float host = fafo::cuda::rms_apply(row[c], scale, gain[c]);
        ASSERT_EQ(std::bit_cast<uint32_t>(host), std::bit_cast<uint32_t>(device[size_t{r} * n + c]))
            << "n " << n << " row " << r << " column " << c;
      }
    }
  }
}

#endif  // FAFO_HAVE_VULKAN

}  // namespace
