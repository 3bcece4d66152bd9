// Vulkan kernels against the CPU reference (fafo::cpu), on whatever Vulkan device the
// machine has (lavapipe in CI), with the Khronos validation layer enabled when it is
// installed: every test also asserts that the layer reported no error. Skipped, with
// the reason, when fafo was built without Vulkan or no Vulkan device is found.
#include <gtest/gtest.h>

#if FAFO_HAVE_VULKAN

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/host/scalar_kernels.h"
#include "backend/vulkan/buffer.h"
#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/embedded_shaders.h"
#include "backend/vulkan/kernels.h"
#include "backend/vulkan/spirv_bindings.h"
#include "backend/vulkan/vulkan_error.h"
#include "fafo/tensor_type.h"
#include "fafo/top_k.h"
#include "random_weights.h"
#include "vulkan_test_support.h"

namespace {

using fafo::vulkan::Buffer;
using fafo::vulkan::CommandSequence;
using fafo::vulkan::Context;
using fafo::vulkan::ContextOptions;
using fafo::vulkan::Kernels;
using fafo::vulkan::ValidationLog;
using fafo::vulkan::VulkanError;
using fafo::test::make_buffer;
using fafo::test::random_values;

Buffer make_buffer(const Context& ctx, const std::vector<float>& values) {
  Buffer b(ctx, values.size() * sizeof(float));
  b.upload(values);
  return b;
}

std::vector<float> read(const Buffer& b, size_t n) {
  std::vector<float> out(n);
  b.download(out);
  return out;
}

// One validated context for the whole program: creating one per test would make the
// suite slow under the validation layer.
using VulkanKernels = fafo::test::ValidatedVulkanSuite<Kernels>;

TEST_F(VulkanKernels, ValidationLayerIsActiveWhenInstalled) {
  // Not a failure where the layer is not installed, but say so in the output.
  if (!context_->validation_enabled())
    GTEST_SKIP() << "VK_LAYER_KHRONOS_validation not installed: kernels ran without validation";
  SUCCEED() << "validating on " << context_->device_name();
}

struct NormShape {
  uint32_t rows, n;
};

TEST_F(VulkanKernels, RmsNormMatchesCpu) {
  const float eps = 1e-5f;
  for (const NormShape s : {NormShape{1, 7}, NormShape{5, 129}, NormShape{3, 4096}, NormShape{2, 1},
                            NormShape{17, 256}, NormShape{4, 1000}}) {
    SCOPED_TRACE(std::to_string(s.rows) + "x" + std::to_string(s.n));
    const std::vector<float> x = random_values(size_t{s.rows} * s.n, 11 + s.n, -3.0f, 3.0f);
    const std::vector<float> gain = random_values(s.n, 7 + s.rows, 0.5f, 1.5f);
    Buffer bx = make_buffer(*context_, x), bg = make_buffer(*context_, gain);
    Buffer bo(*context_, x.size() * sizeof(float));
    CommandSequence seq(*context_);
    kernels_->rms_norm(seq, bx, bg, bo, s.rows, s.n, eps);
    seq.submit_and_wait();
    const std::vector<float> got = read(bo, x.size());
    std::vector<float> want(x.size());
    for (uint32_t r = 0; r < s.rows; ++r)
      fafo::scalar::rms_norm_row(&x[size_t{r} * s.n], gain.data(), eps, &want[size_t{r} * s.n], s.n);
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-7) << "element " << i;
  }
}

struct MatShape {
  uint32_t T, rows, cols;
};

// out[t][r] against fafo::scalar::dot, within 1e-5 of the sum of |x*w| (the scale of the
// rounding error of any summation order).
void expect_matmul_close(const std::vector<float>& got, const std::vector<float>& x, const std::vector<float>& w,
                         const MatShape& s) {
  for (uint32_t t = 0; t < s.T; ++t) {
    for (uint32_t r = 0; r < s.rows; ++r) {
      const float* xr = &x[size_t{t} * s.cols];
      const float* wr = &w[size_t{r} * s.cols];
      const float want = fafo::scalar::dot(xr, wr, s.cols);
      double magnitude = 0.0;
      for (uint32_t c = 0; c < s.cols; ++c) magnitude += std::fabs(double{xr[c]} * wr[c]);
      ASSERT_NEAR(got[size_t{t} * s.rows + r], want, 1e-5 * magnitude + 1e-7) << "t " << t << " row " << r;
    }
  }
}

TEST_F(VulkanKernels, MatmulF32MatchesCpuForEveryVariant) {
  for (const MatShape s : {MatShape{1, 7, 7}, MatShape{1, 1, 7}, MatShape{5, 129, 129}, MatShape{3, 31, 4096},
                           MatShape{9, 17, 300}, MatShape{1, 3, 1}, MatShape{4, 64, 64}, MatShape{13, 5, 65}}) {
    const std::vector<float> x = random_values(size_t{s.T} * s.cols, 3 + s.cols);
    const std::vector<float> w = random_values(size_t{s.rows} * s.cols, 5 + s.rows);
    const Buffer bx = make_buffer(*context_, x), bw = make_buffer(*context_, w);
    for (const uint32_t tile : {0u, 1u, 4u}) {
      SCOPED_TRACE("T " + std::to_string(s.T) + " rows " + std::to_string(s.rows) + " cols " +
                   std::to_string(s.cols) + " tile " + std::to_string(tile));
      Buffer bo(*context_, size_t{s.T} * s.rows * sizeof(float));
      CommandSequence seq(*context_);
      kernels_->matmul_f32(seq, bx, bw, bo, s.T, s.rows, s.cols, tile);
      seq.submit_and_wait();
      expect_matmul_close(read(bo, size_t{s.T} * s.rows), x, w, s);
    }
  }
}

TEST_F(VulkanKernels, MatmulStridesOverMoreRowsThanTheWorkgroupLimit) {
  const uint32_t limit = context_->properties().limits.maxComputeWorkGroupCount[0];
  const MatShape s{2, limit + 37, 3};
  const std::vector<float> x = random_values(size_t{s.T} * s.cols, 21);
  const std::vector<float> w = random_values(size_t{s.rows} * s.cols, 22);
  const Buffer bx = make_buffer(*context_, x), bw = make_buffer(*context_, w);
  Buffer bo(*context_, size_t{s.T} * s.rows * sizeof(float));
  CommandSequence seq(*context_);
  kernels_->matmul_f32(seq, bx, bw, bo, s.T, s.rows, s.cols);
  seq.submit_and_wait();
  expect_matmul_close(read(bo, size_t{s.T} * s.rows), x, w, s);
}

TEST_F(VulkanKernels, ChainedDispatchesInOneSubmission) {
  // RMSNorm, then a matmul reading its output, then RMSNorm of that: one command
  // buffer, one fence; the barriers between dispatches make each see the last.
  const uint32_t T = 3, n = 129, rows = 65;
  const float eps = 1e-6f;
  const std::vector<float> x = random_values(size_t{T} * n, 31);
  const std::vector<float> g1 = random_values(n, 32, 0.5f, 1.5f);
  const std::vector<float> w = random_values(size_t{rows} * n, 33);
  const std::vector<float> g2 = random_values(rows, 34, 0.5f, 1.5f);
  Buffer bx = make_buffer(*context_, x), bg1 = make_buffer(*context_, g1), bw = make_buffer(*context_, w),
         bg2 = make_buffer(*context_, g2);
  Buffer normed(*context_, size_t{T} * n * sizeof(float)), projected(*context_, size_t{T} * rows * sizeof(float)),
      out(*context_, size_t{T} * rows * sizeof(float));
  CommandSequence seq(*context_);
  kernels_->rms_norm(seq, bx, bg1, normed, T, n, eps);
  kernels_->matmul_f32(seq, normed, bw, projected, T, rows, n);
  kernels_->rms_norm(seq, projected, bg2, out, T, rows, eps);
  EXPECT_EQ(seq.dispatch_count(), 3u);
  seq.submit_and_wait();

  std::vector<float> want_normed(size_t{T} * n), want_proj(size_t{T} * rows), want(size_t{T} * rows);
  for (uint32_t t = 0; t < T; ++t) {
    fafo::scalar::rms_norm_row(&x[t * n], g1.data(), eps, &want_normed[t * n], n);
    for (uint32_t r = 0; r < rows; ++r) want_proj[t * rows + r] = fafo::scalar::dot(&want_normed[t * n], &w[r * n], n);
    fafo::scalar::rms_norm_row(&want_proj[t * rows], g2.data(), eps, &want[t * rows], rows);
  }
  const std::vector<float> got = read(out, want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * std::fabs(want[i]) + 1e-5) << i;
}

TEST_F(VulkanKernels, RopeStoreGivesTheBitsOfRopeAndAStore) {
  // One dispatch over [queries | keys | values] rows against rope on the queries, rope
  // on the keys and kv_store: the same bits in the
  // queries and both caches, for GQA heads, a partial rotation (fewer pairs than
  // head_dim / 2), either pairing, and slots past the start of the cache.
  struct Case {
    uint32_t rows, n_head, n_head_kv, head_dim, n_pairs, first_slot;
    bool neox, f16;
  };
  for (const Case c : {Case{5, 4, 2, 16, 8, 3, false, false}, Case{5, 4, 2, 16, 8, 3, true, true},
                       Case{3, 2, 1, 12, 4, 0, true, false}, Case{3, 2, 1, 12, 4, 7, false, true},
                       Case{1, 6, 6, 8, 4, 11, true, true}}) {
    SCOPED_TRACE(::testing::Message() << c.rows << " rows, " << c.n_head << "/" << c.n_head_kv << " heads of "
                                      << c.head_dim << ", " << c.n_pairs << " pairs, slot " << c.first_slot
                                      << (c.neox ? ", neox" : "") << (c.f16 ? ", f16" : ""));
    const uint32_t q_cols = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim, stride = q_cols + 2 * kv_dim;
    const uint32_t slots = c.first_slot + c.rows + 2, cache_floats = c.f16 ? slots * kv_dim / 2 : slots * kv_dim;
    const std::vector<float> qkv = random_values(size_t{c.rows} * stride, 61, -2.0f, 2.0f);
    const std::vector<float> table = random_values(size_t{c.rows} * c.n_pairs * 2, 62);
    std::vector<float> q(size_t{c.rows} * q_cols), k(size_t{c.rows} * kv_dim), v(k.size());
    for (uint32_t r = 0; r < c.rows; ++r) {
      std::copy_n(&qkv[r * stride], q_cols, &q[r * q_cols]);
      std::copy_n(&qkv[r * stride + q_cols], kv_dim, &k[r * kv_dim]);
      std::copy_n(&qkv[r * stride + q_cols + kv_dim], kv_dim, &v[r * kv_dim]);
    }
    const std::vector<float> cache_init = random_values(cache_floats, 63);  // the slots not written keep these
    Buffer b_qkv = make_buffer(*context_, qkv), b_table = make_buffer(*context_, table);
    Buffer b_q = make_buffer(*context_, q), b_k = make_buffer(*context_, k), b_v = make_buffer(*context_, v);
    Buffer fused_k = make_buffer(*context_, cache_init), fused_v = make_buffer(*context_, cache_init);
    Buffer apart_k = make_buffer(*context_, cache_init), apart_v = make_buffer(*context_, cache_init);
    const std::vector<uint32_t> header = {c.first_slot, 0, 0, 0};  // the step's header: n_past
    Buffer step_info(*context_, header.size() * sizeof(uint32_t));
    step_info.upload(header.data(), header.size() * sizeof(uint32_t));
    CommandSequence seq(*context_);
    Kernels::RopeStoreArgs a{c.rows, c.n_head, c.n_head_kv, c.head_dim, c.n_pairs, stride, q_cols, q_cols + kv_dim,
                             c.first_slot, c.neox, c.f16};
    kernels_->rope_store(seq, b_qkv, b_table, fused_k, fused_v, step_info, a);
    kernels_->rope(seq, b_q, b_table, c.rows, c.n_head, c.head_dim, c.n_pairs, q_cols, c.neox);
    kernels_->rope(seq, b_k, b_table, c.rows, c.n_head_kv, c.head_dim, c.n_pairs, kv_dim, c.neox);
    kernels_->kv_store(seq, b_k, b_v, apart_k, apart_v, step_info, c.rows, kv_dim, kv_dim, c.first_slot, c.f16);
    EXPECT_EQ(seq.dispatch_count(), 4u);
    seq.submit_and_wait();
    auto same_bits = [](const std::vector<float>& got, const std::vector<float>& want, const char* what) {
      ASSERT_EQ(got.size(), want.size()) << what;
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << what;
    };
    same_bits(read(fused_k, cache_floats), read(apart_k, cache_floats), "keys");
    // Only the slots from the header's n_past on were written.
    const std::vector<float> keys = read(fused_k, cache_floats);
    const size_t units = c.f16 ? kv_dim / 2 : kv_dim, written = size_t{c.first_slot} * units;
    same_bits(std::vector<float>(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(written)),
              std::vector<float>(cache_init.begin(), cache_init.begin() + static_cast<std::ptrdiff_t>(written)),
              "slots before n_past");
    same_bits(std::vector<float>(keys.begin() + static_cast<std::ptrdiff_t>(written + c.rows * units), keys.end()),
              std::vector<float>(cache_init.begin() + static_cast<std::ptrdiff_t>(written + c.rows * units), cache_init.end()),
              "slots after the step");
    same_bits(read(fused_v, cache_floats), read(apart_v, cache_floats), "values");
    const std::vector<float> fused_rows = read(b_qkv, qkv.size()), apart_q = read(b_q, q.size());
    std::vector<float> fused_q(q.size());
    for (uint32_t r = 0; r < c.rows; ++r) std::copy_n(&fused_rows[r * stride], q_cols, &fused_q[r * q_cols]);
    same_bits(fused_q, apart_q, "queries");
    EXPECT_NE(fused_q, q);  // they were rotated
  }
  // Queries, keys and values that overlap or overrun the rows are refused.
  Buffer small(*context_, 64 * sizeof(float));
  CommandSequence seq(*context_);
  EXPECT_THROW(
      kernels_->rope_store(seq, small, small, small, small, small, Kernels::RopeStoreArgs{1, 2, 1, 8, 4, 32, 8, 24, 0}),
      std::invalid_argument);
  EXPECT_THROW(
      kernels_->rope_store(seq, small, small, small, small, small, Kernels::RopeStoreArgs{1, 2, 1, 8, 4, 31, 16, 24, 0}),
      std::invalid_argument);
}

TEST_F(VulkanKernels, AttentionGivesTheSameBitsWithEveryMapping) {
  // One invocation per (part, head, row) (CPU devices), a workgroup per (part, head,
  // row), or a workgroup per (part, KV head, tile of rows) reading each key and value
  // once for the tile's rows and heads (steps of several rows on GPUs): the same sums in
  // the same order, so the same bits; over FULL rows in a permuted logical order,
  // COMPRESSED rows reading the region (every third row, so a grouped tile mixes them
  // and reads the keys its first row does not see from memory), in-step masks, several
  // parts, a sliding window, groups of 1, 2 and 4 heads per KV head (tiles of 8, 4 and 2
  // rows; 37 rows end in a partial tile), and an fp32 and an fp16 cache.
  using Mapping = Kernels::AttentionArgs::Mapping;
  const uint32_t T = 37, n_past = 300, n_head = 4, head_dim = 24;
  const uint32_t region = 70, part_keys = 128, n_parts = (n_past + T + part_keys - 1) / part_keys;
  const uint32_t mask_words = (T + 31) / 32, q_stride = n_head * head_dim;
  std::mt19937 rng(77);
  // [header: n_past, part_keys, parts in use, first row][prefix flags][masks][order]
  // [positions][region entries]
  const uint32_t H = 4, order_at = H + T + T * mask_words, positions_at = order_at + n_past,
                 region_at = positions_at + T;
  std::vector<uint32_t> info(region_at + region, 0);
  info[0] = n_past;
  info[1] = part_keys;
  info[2] = n_parts;
  for (uint32_t r = 0; r < T; ++r) {
    info[H + r] = r % 3 == 1;  // every third row COMPRESSED
    for (uint32_t j = 0; j <= r; ++j)
      if (j == r || rng() % 2) info[H + T + r * mask_words + j / 32] |= 1u << (j % 32);
    info[positions_at + r] = n_past + r;
  }
  std::vector<uint32_t> order(n_past);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), rng);
  std::copy(order.begin(), order.end(), info.begin() + order_at);
  for (uint32_t l = 0; l < region; ++l) info[region_at + l] = l * 4;  // the region's logical indices
  Buffer step_info(*context_, info.size() * sizeof(uint32_t));
  step_info.upload(info.data(), info.size() * sizeof(uint32_t));
  Buffer q = make_buffer(*context_, random_values(size_t{T} * q_stride, 81, -1.5f, 1.5f));
  struct Case {
    uint32_t n_head_kv, window;
  };
  for (const Case c : {Case{2, 0}, Case{1, 0}, Case{4, 0}, Case{2, 60}}) {
    const uint32_t kv_dim = c.n_head_kv * head_dim;
    for (const bool f16 : {false, true}) {
      SCOPED_TRACE(std::to_string(n_head / c.n_head_kv) + " heads per KV head, window " + std::to_string(c.window) +
                   (f16 ? ", f16" : ", f32"));
      const size_t words = size_t{n_past + T} * kv_dim / (f16 ? 2 : 1);
      // Random words: as fp16 pairs they include subnormals, infinities and NaNs only
      // where the exponent bits say so; keep them finite by clearing the top exponent bit.
      std::vector<float> kf = random_values(words, 82, -1.5f, 1.5f), vf = random_values(words, 83);
      if (f16)
        for (float* p : {kf.data(), vf.data()})
          for (size_t i = 0; i < words; ++i) {
            uint32_t w;
            std::memcpy(&w, &p[i], 4);
            w &= ~0x40004000u;
            std::memcpy(&p[i], &w, 4);
          }
      Buffer keys = make_buffer(*context_, kf), values = make_buffer(*context_, vf);
      std::vector<std::vector<float>> got;
      for (const Mapping mapping : {Mapping::Workgroup, Mapping::Serial, Mapping::Grouped}) {
        // The grid and layout have n_parts + 2 parts, the header says n_parts are in use.
        Buffer partials(*context_, size_t{T} * n_head * (n_parts + 2) * (head_dim + 2) * sizeof(float));
        Buffer out(*context_, size_t{T} * q_stride * sizeof(float));
        Kernels::AttentionArgs a{T,        n_past, n_head, c.n_head_kv, head_dim,  kv_dim,      q_stride,
                                 q_stride, region, 0,      1,           part_keys, n_parts + 2, mask_words,
                                 H,        H + T,  order_at, 0.2f};
        a.kv_f16 = f16;
        a.window = c.window;
        a.positions_offset = positions_at;
        a.region_offset = region_at;
        a.mapping = mapping;
        EXPECT_EQ(kernels_->attention_mapping(a), mapping);
        CommandSequence seq(*context_);
        kernels_->attention(seq, q, keys, values, step_info, partials, out, a);
        seq.submit_and_wait();
        got.push_back(read(out, size_t{T} * q_stride));
      }
      size_t finite = 0;
      for (size_t i = 0; i < got[0].size(); ++i) {
        finite += std::isfinite(got[0][i]);
        for (size_t m = 1; m < got.size(); ++m)
          ASSERT_EQ(std::memcmp(&got[0][i], &got[m][i], 4), 0)
              << (m == 1 ? "serial" : "grouped") << ": row " << i / q_stride << " dim " << i % q_stride << ": "
              << got[0][i] << " vs " << got[m][i];
      }
      EXPECT_EQ(finite, got[0].size());
    }
  }
  // Grouped where it cannot run (more heads per KV head than a workgroup takes, or a
  // head over 128 dimensions): another mapping, the same bits.
  Kernels::AttentionArgs wide{T, n_past, 16, 1, 160, 160, 16 * 160, 16 * 160, region, 0, 1, part_keys, n_parts,
                              mask_words, H, H + T, order_at, 0.2f};
  wide.mapping = Mapping::Grouped;
  EXPECT_NE(kernels_->attention_mapping(wide), Mapping::Grouped);
}

// Attention over a block cache (Q8_0, Q4_0: shaders/kv_blocks.glsl) gives the bits of
// attention over an fp32 cache holding the blocks' values, with every mapping (GQA 4/2 x
// 64, FULL and COMPRESSED rows over a permuted order, random masks, parts of 128 keys);
// a width that is not whole pairs of blocks is refused.
TEST_F(VulkanKernels, AttentionOverBlocksGivesTheBitsOfTheirValuesWithEveryMapping) {
  using Mapping = Kernels::AttentionArgs::Mapping;
  const uint32_t T = 9, n_past = 200, n_head = 4, n_head_kv = 2, head_dim = 64, kv_dim = n_head_kv * head_dim;
  const uint32_t region = 50, part_keys = 128, n_parts = (n_past + T + part_keys - 1) / part_keys;
  const uint32_t q_stride = n_head * head_dim, H = 4, order_at = H + T + T, positions_at = order_at + n_past;
  std::mt19937 rng(78);
  std::vector<uint32_t> info(positions_at + T, 0);
  info[0] = n_past, info[1] = part_keys, info[2] = n_parts;
  for (uint32_t r = 0; r < T; ++r) {
    info[H + r] = r % 3 == 1;
    for (uint32_t j = 0; j <= r; ++j)
      if (j == r || rng() % 2) info[H + T + r] |= 1u << j;
    info[positions_at + r] = n_past + r;
  }
  std::vector<uint32_t> order(n_past);
  std::iota(order.begin(), order.end(), 0u);
  std::shuffle(order.begin(), order.end(), rng);
  std::copy(order.begin(), order.end(), info.begin() + order_at);
  Buffer step_info(*context_, info.size() * sizeof(uint32_t));
  step_info.upload(info.data(), info.size() * sizeof(uint32_t));
  Buffer q = make_buffer(*context_, random_values(size_t{T} * q_stride, 84, -1.5f, 1.5f));
  const size_t n = size_t{n_past + T} * kv_dim;
  for (const auto& [blocks, type] : {std::pair{Kernels::KvBlocks::Q8_0, fafo::TensorType::Q8_0},
                                     std::pair{Kernels::KvBlocks::Q4_0, fafo::TensorType::Q4_0}}) {
    SCOPED_TRACE(std::string(fafo::tensor_type_name(type)));
    // The blocks of random values, and the values they hold.
    std::vector<Buffer> block_buffers, value_buffers;
    for (const uint32_t seed : {85u, 86u}) {
      const std::vector<float> x = random_values(n, seed, -2.0f, 2.0f);
      std::vector<uint32_t> words(Kernels::block_words(blocks, n), 0);
      fafo::quantize_row(type, x.data(), words.data(), static_cast<int64_t>(n));
      std::vector<float> held(n);
      fafo::dequantize_row(type, words.data(), held.data(), static_cast<int64_t>(n));
      block_buffers.emplace_back(*context_, words.size() * sizeof(uint32_t));
      block_buffers.back().upload(words.data(), words.size() * sizeof(uint32_t));
      value_buffers.push_back(make_buffer(*context_, held));
    }
    for (const Mapping mapping : {Mapping::Workgroup, Mapping::Serial, Mapping::Grouped}) {
      SCOPED_TRACE(static_cast<int>(mapping));
      std::vector<std::vector<float>> got;
      for (const bool in_blocks : {false, true}) {
        Buffer partials(*context_, size_t{T} * n_head * n_parts * (head_dim + 2) * sizeof(float));
        Buffer out(*context_, size_t{T} * q_stride * sizeof(float));
        Kernels::AttentionArgs a{T, n_past, n_head, n_head_kv, head_dim, kv_dim, q_stride, q_stride, region, 0, 1,
                                 part_keys, n_parts, 1, H, H + T, order_at, 0.125f};
        a.kv_blocks = in_blocks ? blocks : Kernels::KvBlocks::None;
        a.mapping = mapping;
        const std::vector<Buffer>& kv = in_blocks ? block_buffers : value_buffers;
        CommandSequence seq(*context_);
        kernels_->attention(seq, q, kv[0], kv[1], step_info, partials, out, a);
        seq.submit_and_wait();
        got.push_back(read(out, size_t{T} * q_stride));
      }
      ASSERT_EQ(got[0].size(), got[1].size());
      EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)), 0);
      EXPECT_TRUE(std::all_of(got[1].begin(), got[1].end(), [](float v) { return std::isfinite(v); }));
    }
    Kernels::AttentionArgs narrow{T, n_past, 4, 4, 24, 96, 96, 96, 0, 0, 0, part_keys, n_parts, 1, H, H + T, 0, 0.2f};
    narrow.kv_blocks = blocks;
    CommandSequence seq(*context_);
    Buffer partials(*context_, size_t{T} * 4 * n_parts * 26 * sizeof(float)), out(*context_, size_t{T} * 96 * sizeof(float));
    EXPECT_THROW(kernels_->attention(seq, q, block_buffers[0], block_buffers[1], step_info, partials, out, narrow),
                 std::invalid_argument);
  }
}

// kv_store into a block cache writes the bytes fafo::quantize_row writes (shaders/
// kv_blocks.glsl: the scale's quotient and reciprocal by integer long division), for
// rows of every magnitude: scales that are fp16 subnormals, scales near fp16's largest,
// blocks of zeros, codes on halves (rounded away from zero), a step's rows at slots after
// the first.
TEST_F(VulkanKernels, KvStoreWritesTheHostQuantizersBlocks) {
  const uint32_t width = 128, rows = 40, first_slot = 3;
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<float> x(size_t{rows} * width);
  for (uint32_t b = 0; b < rows * width / 32; ++b) {
    float* block = &x[size_t{b} * 32];
    const float scale = std::ldexp(1.0f, static_cast<int>(b % 48) - 32);  // d from fp16 subnormal to 2^15
    for (int j = 0; j < 32; ++j) block[j] = unit(rng) * scale;
    if (b % 17 == 5) std::fill(block, block + 32, 0.0f);
    if (b % 17 == 9)
      for (int j = 0; j < 32; ++j) block[j] = j == 0 ? (b % 2 ? -8.0f : 127.0f) : static_cast<float>(j % 13 - 6) + 0.5f;
    if (b % 17 == 13) block[b % 32] = 60000.0f * (b % 2 ? 1.0f : -1.0f);
  }
  const Buffer src = make_buffer(*context_, x);
  std::vector<uint32_t> info = {first_slot, 0, 0, 0};
  Buffer step_info(*context_, info.size() * sizeof(uint32_t));
  step_info.upload(info.data(), info.size() * sizeof(uint32_t));
  for (const auto& [blocks, type] : {std::pair{Kernels::KvBlocks::Q8_0, fafo::TensorType::Q8_0},
                                     std::pair{Kernels::KvBlocks::Q4_0, fafo::TensorType::Q4_0}}) {
    SCOPED_TRACE(std::string(fafo::tensor_type_name(type)));
    const uint64_t entry = Kernels::block_words(blocks, width), words = (first_slot + rows) * entry;
    Buffer cache_k(*context_, words * sizeof(uint32_t)), cache_v(*context_, words * sizeof(uint32_t));
    CommandSequence seq(*context_);
    kernels_->kv_store(seq, src, src, cache_k, cache_v, step_info, rows, width, width, first_slot, false, 0, blocks);
    seq.submit_and_wait();
    std::vector<uint32_t> got(words), got_v(words), want(size_t{rows} * entry);
    cache_k.download(got.data(), words * sizeof(uint32_t));
    cache_v.download(got_v.data(), words * sizeof(uint32_t));
    fafo::quantize_row(type, x.data(), want.data(), static_cast<int64_t>(x.size()));
    const uint32_t block_bytes = type == fafo::TensorType::Q8_0 ? 34 : 18;
    for (uint32_t b = 0; b < rows * width / 32; ++b) {
      const uint8_t* w = reinterpret_cast<const uint8_t*>(want.data()) + size_t{b} * block_bytes;
      const uint8_t* g = reinterpret_cast<const uint8_t*>(got.data() + first_slot * entry) + size_t{b} * block_bytes;
      ASSERT_EQ(std::memcmp(g, w, block_bytes), 0) << "block " << b;
    }
    EXPECT_EQ(std::vector<uint32_t>(got.begin() + first_slot * entry, got.end()),
              std::vector<uint32_t>(got_v.begin() + first_slot * entry, got_v.end()));
  }
  // A width that is not whole pairs of blocks is refused.
  Buffer small(*context_, 4096);
  CommandSequence seq(*context_);
  EXPECT_THROW(kernels_->kv_store(seq, src, src, small, small, step_info, 1, 96, 96, 0, false, 0, Kernels::KvBlocks::Q8_0),
               std::invalid_argument);
}

// Attention's output rounded where it is written (AttentionArgs::rounded, for the integer
// product after it): the words Kernels::quantize_rows gives for the same output, bit for
// bit, for every head and row (heads of 64 values: two blocks each), and the output itself
// unchanged; a head that is not whole blocks of 32 is refused.
TEST_F(VulkanKernels, AttentionRoundsItsOutputAsQuantizeRowsDoes) {
  const uint32_t T = 5, n_past = 40, n_head = 4, n_head_kv = 2, head_dim = 64, kv_dim = n_head_kv * head_dim;
  const uint32_t cols = n_head * head_dim, mask_words = 1, H = 4, part_keys = 128, n_parts = 1;
  std::vector<uint32_t> info(H + T + T * mask_words + T, 0);
  info[0] = n_past;
  info[1] = part_keys;
  info[2] = n_parts;
  for (uint32_t r = 0; r < T; ++r) info[H + T + r] = (2u << r) - 1;  // causal
  Buffer step_info(*context_, info.size() * sizeof(uint32_t));
  step_info.upload(info.data(), info.size() * sizeof(uint32_t));
  Buffer q = make_buffer(*context_, random_values(size_t{T} * cols, 91, -1.5f, 1.5f));
  Buffer keys = make_buffer(*context_, random_values(size_t{n_past + T} * kv_dim, 92, -1.5f, 1.5f));
  Buffer values = make_buffer(*context_, random_values(size_t{n_past + T} * kv_dim, 93, -3.0f, 3.0f));
  const uint32_t words = Kernels::q8_row_words(cols);
  Buffer partials(*context_, size_t{T} * n_head * n_parts * (head_dim + 2) * sizeof(float));
  Buffer out(*context_, size_t{T} * cols * sizeof(float)), plain_out(*context_, size_t{T} * cols * sizeof(float));
  Buffer rounded(*context_, size_t{T} * words * 4), want(*context_, size_t{T} * words * 4);
  Kernels::AttentionArgs a{T, n_past, n_head, n_head_kv, head_dim, kv_dim, cols, cols, 0, 0, 0, part_keys, n_parts,
                           mask_words, H, H + T, H + T + T * mask_words, 0.125f};
  {
    CommandSequence seq(*context_);
    kernels_->attention(seq, q, keys, values, step_info, partials, plain_out, a);
    Kernels::AttentionArgs with = a;
    with.rounded = &rounded;
    with.rounded_stride = words;
    kernels_->attention(seq, q, keys, values, step_info, partials, out, with);
    kernels_->quantize_rows(seq, out, want, T, cols, cols);
    seq.submit_and_wait();
  }
  std::vector<uint32_t> got(size_t{T} * words), expected(got.size());
  rounded.download(got.data(), got.size() * 4);
  want.download(expected.data(), expected.size() * 4);
  EXPECT_EQ(got, expected);
  EXPECT_EQ(read(out, size_t{T} * cols), read(plain_out, size_t{T} * cols));
  Kernels::AttentionArgs odd = a;
  odd.head_dim = 48;
  odd.q_stride = odd.out_stride = n_head * 48;
  odd.rounded = &rounded;
  odd.rounded_stride = Kernels::q8_row_words(n_head * 48);
  CommandSequence seq(*context_);
  EXPECT_THROW(kernels_->attention(seq, q, keys, values, step_info, partials, out, odd), std::invalid_argument);
}

TEST_F(VulkanKernels, OnlyDependentCommandsAreSeparatedByABarrier) {
  // Two RMSNorms of the same input into different outputs are independent; a product
  // reading one of them depends on it (read after write); an RMSNorm writing the
  // buffer the product read must wait for it (write after read); a copy of the
  // product's output depends on it. Results must be those of the chain.
  const uint32_t T = 2, n = 64, rows = 16;
  const float eps = 1e-6f;
  const std::vector<float> x = random_values(size_t{T} * n, 41), g = random_values(n, 42, 0.5f, 1.5f);
  const std::vector<float> w = random_values(size_t{rows} * n, 43), x2 = random_values(size_t{T} * n, 44);
  Buffer bx = make_buffer(*context_, x), bg = make_buffer(*context_, g), bw = make_buffer(*context_, w),
         bx2 = make_buffer(*context_, x2);
  Buffer a(*context_, size_t{T} * n * sizeof(float)), b(*context_, size_t{T} * n * sizeof(float)),
      c(*context_, size_t{T} * rows * sizeof(float)), d(*context_, size_t{T} * rows * sizeof(float));
  CommandSequence seq(*context_);
  kernels_->rms_norm(seq, bx, bg, a, T, n, eps);
  kernels_->rms_norm(seq, bx, bg, b, T, n, eps);
  EXPECT_EQ(seq.barrier_count(), 0u) << "two independent commands";
  kernels_->matmul_f32(seq, a, bw, c, T, rows, n);
  EXPECT_EQ(seq.barrier_count(), 1u) << "read after write";
  kernels_->rms_norm(seq, bx2, bg, a, T, n, eps);
  EXPECT_EQ(seq.barrier_count(), 2u) << "write after read";
  seq.copy(c, 0, d, 0, size_t{T} * rows * sizeof(float));
  EXPECT_EQ(seq.barrier_count(), 2u) << "c was written before the last barrier";
  seq.copy(a, 0, d, 0, sizeof(float));
  EXPECT_EQ(seq.barrier_count(), 3u) << "read after write (a) and write after write (d)";
  seq.submit_and_wait();
  EXPECT_EQ(seq.barrier_count(), 4u) << "and one to the host";

  std::vector<float> na(size_t{T} * n), na2(size_t{T} * n), want_c(size_t{T} * rows);
  for (uint32_t t = 0; t < T; ++t) {
    fafo::scalar::rms_norm_row(&x[t * n], g.data(), eps, &na[t * n], n);
    fafo::scalar::rms_norm_row(&x2[t * n], g.data(), eps, &na2[t * n], n);
    for (uint32_t r = 0; r < rows; ++r) want_c[t * rows + r] = fafo::scalar::dot(&na[t * n], &w[r * n], n);
  }
  const std::vector<float> got_b = read(b, na.size()), got_a = read(a, na.size()), got_d = read(d, want_c.size());
  for (size_t i = 0; i < na.size(); ++i) {
    EXPECT_NEAR(got_b[i], na[i], 1e-5) << i;
    EXPECT_NEAR(got_a[i], na2[i], 1e-5) << i;
  }
  EXPECT_NEAR(got_d[0], na2[0], 1e-5);
  for (size_t i = 1; i < want_c.size(); ++i) EXPECT_NEAR(got_d[i], want_c[i], 1e-4 * std::fabs(want_c[i]) + 1e-5) << i;
}

TEST(VulkanSpirv, ReadOnlyBindingsAreReadFromTheShader) {
  namespace shaders = fafo::vulkan::shaders;
  using fafo::vulkan::spirv_written_bindings;
  EXPECT_EQ(spirv_written_bindings(shaders::rms_norm.words, shaders::rms_norm.word_count, 3),
            (std::vector<bool>{false, false, true}));
  // elementwise.comp declares none readonly (its output may alias an input).
  EXPECT_EQ(spirv_written_bindings(shaders::elementwise.words, shaders::elementwise.word_count, 3),
            (std::vector<bool>{true, true, true}));
  EXPECT_EQ(spirv_written_bindings(shaders::attention.words, shaders::attention.word_count, 5),
            (std::vector<bool>{false, false, false, false, true}));
  // Bindings past the shader's are not touched; what cannot be parsed counts as written.
  EXPECT_EQ(spirv_written_bindings(shaders::rms_norm.words, shaders::rms_norm.word_count, 4),
            (std::vector<bool>{false, false, true, false}));
  const uint32_t junk[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(spirv_written_bindings(junk, 8, 2), (std::vector<bool>{true, true}));
  std::vector<uint32_t> cut(shaders::rms_norm.words, shaders::rms_norm.words + shaders::rms_norm.word_count);
  cut[5] = 0xffff0000u | (cut[5] & 0xffffu);  // an instruction running past the end
  EXPECT_EQ(spirv_written_bindings(cut.data(), cut.size(), 3), (std::vector<bool>{true, true, true}));
}

// Rows for the top-k tests: plain random values, heavy ties (-0.0 and +0.0 among them),
// mostly -inf, and +inf among finite values.
std::vector<float> top_k_rows(uint32_t rows, uint32_t n, uint32_t seed) {
  std::vector<float> x = random_values(size_t{rows} * n, seed, -8.0f, 8.0f);
  std::mt19937 rng(seed + 1);
  const float inf = std::numeric_limits<float>::infinity();
  const float ties[] = {-1.0f, -0.0f, 0.0f, 2.0f, 2.0f};
  for (uint32_t r = 0; r < rows; ++r) {
    float* row = &x[size_t{r} * n];
    switch (r % 4) {
      case 1:
        for (uint32_t i = 0; i < n; ++i) row[i] = ties[rng() % 5];
        break;
      case 2:
        for (uint32_t i = 0; i < n; ++i)
          if (rng() % 8 != 0) row[i] = -inf;
        break;
      case 3:
        for (uint32_t i = 0; i < n; i += 97) row[i] = inf;
        break;
      default: break;
    }
  }
  return x;
}

// Runs the kernel and checks every row against fafo::top_k_row, ids and value bits.
void expect_top_k_matches_host(const Context& ctx, const Kernels& kernels, const std::vector<float>& x, uint32_t rows,
                               uint32_t n, uint32_t k, const std::vector<bool>& nan_rows = {}) {
  Buffer bx = make_buffer(ctx, x);
  Buffer result(ctx, Kernels::top_k_words(rows, k) * sizeof(uint32_t));
  CommandSequence seq(ctx);
  kernels.top_k(seq, bx, result, rows, n, k);
  seq.submit_and_wait();
  std::vector<uint32_t> words(Kernels::top_k_words(rows, k));
  result.download(words.data(), words.size() * sizeof(uint32_t));
  std::vector<int32_t> ids(k);
  std::vector<float> values(k);
  for (uint32_t r = 0; r < rows; ++r) {
    const uint32_t* w = &words[size_t{r} * (1 + 2 * k)];
    const bool host_ok = fafo::top_k_row(&x[size_t{r} * n], static_cast<int32_t>(n), static_cast<int32_t>(k), ids.data(),
                                         values.data());
    ASSERT_EQ(w[0], host_ok ? 0u : 1u) << "row " << r << " status";
    if (!nan_rows.empty()) {
      EXPECT_EQ(!host_ok, bool(nan_rows[r])) << r;
    }
    if (!host_ok) continue;
    for (uint32_t j = 0; j < k; ++j) {
      ASSERT_EQ(static_cast<int32_t>(w[1 + j]), ids[j]) << "rows " << rows << " n " << n << " k " << k << ": row " << r
                                                        << " place " << j;
      uint32_t bits;
      std::memcpy(&bits, &values[j], sizeof bits);
      ASSERT_EQ(w[1 + k + j], bits) << "row " << r << " place " << j;
    }
  }
}

TEST_F(VulkanKernels, TopKMatchesTheHostReferenceExactly) {
  struct Shape {
    uint32_t rows, n, k;
  };
  // Odd sizes; n below, at and above the workgroup size; k = 1, = n, the sampler's
  // default 40 and the maximum; heavy ties straddle the threshold.
  for (const Shape s : {Shape{1, 1, 1}, Shape{3, 7, 7}, Shape{4, 255, 40}, Shape{5, 257, 1}, Shape{8, 513, 40},
                        Shape{4, 4099, 1024}, Shape{2, 32003, 40}, Shape{9, 1000, 999}}) {
    SCOPED_TRACE("rows " + std::to_string(s.rows) + " n " + std::to_string(s.n) + " k " + std::to_string(s.k));
    expect_top_k_matches_host(*context_, *kernels_, top_k_rows(s.rows, s.n, s.n + s.k), s.rows, s.n, s.k);
  }
}

TEST_F(VulkanKernels, TopKFlagsRowsHoldingNaN) {
  const uint32_t rows = 3, n = 300, k = 10;
  std::vector<float> x = random_values(size_t{rows} * n, 91);
  x[1 * n + 299] = std::numeric_limits<float>::quiet_NaN();
  expect_top_k_matches_host(*context_, *kernels_, x, rows, n, k, {false, true, false});
}

TEST_F(VulkanKernels, MisuseIsAClearErrorNotACrash) {
  Buffer small(*context_, 4 * sizeof(float));
  Buffer gain(*context_, 8 * sizeof(float));
  CommandSequence seq(*context_);
  EXPECT_THROW(kernels_->rms_norm(seq, small, gain, small, 2, 8, 1e-5f), std::invalid_argument);
  EXPECT_THROW(kernels_->matmul_f32(seq, small, small, small, 1, 2, 2, 3), std::invalid_argument);
  EXPECT_THROW(kernels_->top_k(seq, small, gain, 1, 4, 0), std::invalid_argument);     // k = 0
  EXPECT_THROW(kernels_->top_k(seq, small, gain, 1, 4, 5), std::invalid_argument);     // k > n
  EXPECT_THROW(kernels_->top_k(seq, small, gain, 2, 2, 2), std::invalid_argument);     // result too small
  seq.submit_and_wait();
  EXPECT_THROW(seq.submit_and_wait(), std::logic_error);
  EXPECT_THROW(small.upload(std::vector<float>(5).data(), 5 * sizeof(float)), std::out_of_range);
  const uint64_t too_big = uint64_t{context_->properties().limits.maxStorageBufferRange} + 4;
  try {
    Buffer huge(*context_, too_big);
    ADD_FAILURE() << "a buffer over maxStorageBufferRange was created";
  } catch (const VulkanError& e) {
    EXPECT_NE(std::string(e.what()).find("maxStorageBufferRange"), std::string::npos) << e.what();
  }
}

TEST(VulkanValidation, TheMessengerRecordsLayerErrors) {
  // The check above means something only if an invalid call is seen: create a fence
  // with an undefined flag bit (harmless to the driver) and expect an error logged.
  auto log = std::make_shared<ValidationLog>();
  ContextOptions options;
  options.validation = true;
  options.validation_log = log;
  std::unique_ptr<Context> ctx;
  try {
    ctx = std::make_unique<Context>(options);
  } catch (const VulkanError& e) {
    GTEST_SKIP() << "no Vulkan device: " << e.what();
  }
  if (!ctx->validation_enabled()) GTEST_SKIP() << "VK_LAYER_KHRONOS_validation not installed";
  VkFenceCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
  info.flags = 0x100;  // not a VkFenceCreateFlagBits value
  VkFence fence = VK_NULL_HANDLE;
  if (vkCreateFence(ctx->device(), &info, nullptr, &fence) == VK_SUCCESS) vkDestroyFence(ctx->device(), fence, nullptr);
  EXPECT_FALSE(log->errors().empty()) << "the validation layer reported nothing for an invalid VkFenceCreateInfo";
}

TEST(VulkanErrors, NameTheCallAndTheResult) {
  try {
    fafo::vulkan::check(VK_ERROR_INITIALIZATION_FAILED, "vkCreateInstance");
    FAIL() << "no exception";
  } catch (const VulkanError& e) {
    EXPECT_STREQ(e.what(), "vkCreateInstance failed: VK_ERROR_INITIALIZATION_FAILED");
    EXPECT_EQ(e.result(), VK_ERROR_INITIALIZATION_FAILED);
  }
  // What a caller can recover from is a fafo::DeviceError of its kind.
  const std::pair<VkResult, fafo::DeviceError::Kind> device_errors[] = {
      {VK_ERROR_OUT_OF_DEVICE_MEMORY, fafo::DeviceError::Kind::OutOfMemory},
      {VK_ERROR_OUT_OF_HOST_MEMORY, fafo::DeviceError::Kind::OutOfMemory},
      {VK_ERROR_DEVICE_LOST, fafo::DeviceError::Kind::Lost}};
  for (const auto& [result, kind] : device_errors) {
    try {
      fafo::vulkan::check(result, "vkQueueSubmit");
      ADD_FAILURE() << "no exception for " << fafo::vulkan::result_name(result);
    } catch (const fafo::DeviceError& e) {
      EXPECT_EQ(e.kind(), kind);
      EXPECT_EQ(std::string(e.what()), "vkQueueSubmit failed: " + fafo::vulkan::result_name(result));
    }
  }
  EXPECT_NO_THROW(fafo::vulkan::check(VK_SUCCESS, "vkQueueSubmit"));
  EXPECT_NO_THROW(fafo::vulkan::check(VK_INCOMPLETE, "vkEnumeratePhysicalDevices"));
}

TEST(VulkanErrors, AMissingDeviceIndexIsAClearError) {
  ContextOptions options;
  options.device_index = 1000;
  try {
    Context ctx(options);
    FAIL() << "device 1000 was opened";
  } catch (const VulkanError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("device 1000 does not exist") != std::string::npos ||
                what.find("no Vulkan devices found") != std::string::npos)
        << what;
  }
}

}  // namespace

#else  // !FAFO_HAVE_VULKAN

TEST(VulkanKernels, Skipped) { GTEST_SKIP() << "fafo was built without Vulkan (FAFO_VULKAN=OFF or not found)"; }

#endif
