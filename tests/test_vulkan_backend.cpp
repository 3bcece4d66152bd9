// The Vulkan backend beyond the op-conformance table (tests/test_backend_ops.cpp runs
// every op against the CPU reference on every device): an f16 cache read through
// 16-bit storage or 32-bit words gives the same bits, stored halves round to nearest
// even, a latent (MLA) cache of odd widths holds the reference's values through stores,
// writes, swaps and moves, and bad requests give clear errors. Whole models on Vulkan:
// test_vulkan_models.cpp (the suite's base: vulkan_backend_suite.h).
// The Khronos validation layer is on (when installed) and must report no error.
// Skipped, with the reason, without a Vulkan build or device.
#include <gtest/gtest.h>

#if FAFO_HAVE_VULKAN

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backend/vulkan/vulkan_backend.h"
#include "fafo/backend.h"
#include "fafo/tensor_type.h"
#include "random_weights.h"
#include "vulkan_backend_suite.h"

using namespace fafo;

namespace {

using fafo::test::batch_of;
using fafo::test::random_values;
using fafo::test::VulkanBackend;

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << ", element " << i;
}

// The same weights, activations and cache on the CPU and the Vulkan backend; `fill`
// writes rows into an activation of both with embed() from an F32 table.
struct Pair {
  std::unique_ptr<Backend> cpu, gpu;
  std::vector<std::vector<float>> tables;  // kept alive: the CPU backend uses weights in place

  Pair(std::unique_ptr<Backend> vk) : cpu(make_reference_backend(1)), gpu(std::move(vk)) {}

  std::pair<Weight, Weight> weight(std::vector<float> values, int64_t rows, int64_t cols) {
    tables.push_back(std::move(values));
    const float* data = tables.back().data();
    return {cpu->upload_weight(TensorType::F32, rows, cols, data), gpu->upload_weight(TensorType::F32, rows, cols, data)};
  }
  std::pair<Activation, Activation> activation(int64_t rows, int64_t cols) {
    return {cpu->alloc_activation(rows, cols), gpu->alloc_activation(rows, cols)};
  }
  void kv(int32_t n_layer, int32_t n_ctx, int32_t kv_dim, KvCacheType kv_type = KvCacheType::F32) {
    make_kv(KvCacheShape{n_layer, n_ctx, kv_dim, kv_type});
  }
  void make_kv(const KvCacheShape& shape) {
    cpu_kv = cpu->create_kv_cache(shape);
    gpu_kv = gpu->create_kv_cache(shape);
  }
  // The cache of `be` (cpu or gpu).
  KvCache& cache(const Backend& be) { return &be == cpu.get() ? *cpu_kv : *gpu_kv; }
  std::unique_ptr<KvCache> cpu_kv, gpu_kv;  // after the backends: destroyed before them
  template <class F>
  void both(F&& f) {
    f(*cpu, 0);
    f(*gpu, 1);
  }
};

struct AttentionCase {
  int32_t n_past, T, n_head, n_head_kv, head_dim;
  bool random_masks, compressed, permuted;
  int32_t region, dense_layers;
};

// Sets up a cache of n_past committed entries with write_kv, then one step whose
// batch rows write their own keys and attend; compares the outputs of both layers.
void check_attention(Pair& p, const AttentionCase& c, KvCacheType kv_type = KvCacheType::F32, double tol = 2e-5) {
  const int32_t kv_dim = c.n_head_kv * c.head_dim, q_dim = c.n_head * c.head_dim, n_ctx = c.n_past + c.T + 3;
  p.kv(2, n_ctx, kv_dim, kv_type);
  for (int32_t layer = 0; layer < 2; ++layer) {
    const auto k = random_values(static_cast<size_t>(c.n_past) * kv_dim, 100 + layer, -1.5f, 1.5f);
    const auto v = random_values(static_cast<size_t>(c.n_past) * kv_dim, 200 + layer);
    if (c.n_past > 0) p.both([&](Backend& be, int) { p.cache(be).write(layer, 0, c.n_past, k.data(), v.data()); });
  }
  auto [tq_c, tq_g] = p.weight(random_values(static_cast<size_t>(c.T) * q_dim, 7, -1.5f, 1.5f), c.T, q_dim);
  auto [tk_c, tk_g] = p.weight(random_values(static_cast<size_t>(c.T) * kv_dim, 8, -1.5f, 1.5f), c.T, kv_dim);
  auto [tv_c, tv_g] = p.weight(random_values(static_cast<size_t>(c.T) * kv_dim, 9), c.T, kv_dim);
  auto [q_c, q_g] = p.activation(c.T, q_dim);
  auto [k_c, k_g] = p.activation(c.T, kv_dim);
  auto [v_c, v_g] = p.activation(c.T, kv_dim);
  auto [o_c, o_g] = p.activation(c.T, q_dim);
  auto [o2_c, o2_g] = p.activation(c.T, q_dim);
  StepBatch b = batch_of(c.T, c.n_past, 17 + static_cast<uint32_t>(c.T), c.random_masks, c.compressed);
  // The region holds `region` entries; a permuted case selects a shuffled set into it,
  // which exchanges slots and makes the logical order differ from the physical one.
  std::vector<int32_t> chosen(static_cast<size_t>(c.n_past));
  std::iota(chosen.begin(), chosen.end(), 0);
  std::shuffle(chosen.begin(), chosen.end(), std::mt19937(5));
  chosen.resize(static_cast<size_t>(std::min(c.region, c.n_past)));
  p.both([&](Backend& be, int) {
    p.cache(be).reset_layout(c.region, c.dense_layers, c.n_past);
    if (c.permuted) p.cache(be).select(chosen);
  });
  const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  std::vector<float> got[2][2];
  p.both([&](Backend& be, int i) {
    Activation q = i ? q_g : q_c, k = i ? k_g : k_c, v = i ? v_g : v_c, o = i ? o_g : o_c, o2 = i ? o2_g : o2_c;
    be.begin_step(b, p.cache(be));
    be.embed(i ? tq_g : tq_c, q);
    be.embed(i ? tk_g : tk_c, k);
    be.embed(i ? tv_g : tv_c, v);
    p.cache(be).store(0, k, v);
    p.cache(be).store(1, k, v);
    be.attention(0, q, shape, o);
    be.attention(1, q, shape, o2);
    be.finish_step();
    got[i][0] = be.read_rows(o, c.T);
    got[i][1] = be.read_rows(o2, c.T);
  });
  expect_close(got[1][0], got[0][0], tol, "layer 0");
  expect_close(got[1][1], got[0][1], tol, "layer 1");
}

TEST_F(VulkanBackend, AnF16CacheReadThrough16BitStorageGivesTheSameBits) {
  // Where 16-bit storage is enabled and exact (lavapipe), attention reads the halves
  // directly; with it turned off, it unpacks 32-bit words: the outputs must be equal
  // bit for bit (keys of up to +-1.5 and values in [-1, 1] include fp16 subnormals).
  std::unique_ptr<Backend> words = make_vulkan_with("-storage16");
  std::unique_ptr<Backend> storage = make_vulkan_with("all");
  ASSERT_NE(words->description().find("turned off: 16-bit storage"), std::string::npos) << words->description();
  EXPECT_NE(words->description().find("f16 KV cache reads: 32-bit words"), std::string::npos);
  if (storage->description().find("f16 KV cache reads: 16-bit storage") == std::string::npos)
    GTEST_SKIP() << "no exact 16-bit storage reads: " << storage->description();
  Pair p(std::move(storage));
  p.cpu = std::move(words);  // the reference side is the words reader here
  check_attention(p, {300, 17, 4, 2, 32, true, true, true, 40, 1}, KvCacheType::F16, 0.0);
  Pair q(make_vulkan_with("all"));
  q.cpu = make_vulkan_with("-storage16");
  check_attention(q, {90, 9, 2, 2, 256, true, true, true, 200, 0}, KvCacheType::F16, 0.0);
}

TEST_F(VulkanBackend, AnF16CacheStoresValuesRoundedToNearestEven) {
  // Values chosen to round differently under truncation, ties-away and ties-to-even,
  // plus subnormal, overflowing and zero halves: the device's rounding must be the CPU's.
  Pair p(make_vulkan());
  const int32_t kv_dim = 8, T = 2;
  p.kv(1, 4, kv_dim, KvCacheType::F16);
  const std::vector<float> rows = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-12f, -2.0f - 0x1p-10f - 0x1p-11f,
                                   3.0e-7f, -6.0e-8f, 70000.0f, -0.0f,
                                   65504.0f, 65519.0f, 1e-9f, 0x1p-25f, 0x1.8p-25f, 123.456f, -7.77e-3f, 0.1f};
  auto [t_c, t_g] = p.weight(rows, T, kv_dim);
  auto [k_c, k_g] = p.activation(T, kv_dim);
  StepBatch b = batch_of(T, 0);
  p.both([&](Backend& be, int i) {
    be.begin_step(b, p.cache(be));
    be.embed(i ? t_g : t_c, i ? k_g : k_c);
    p.cache(be).store(0, i ? k_g : k_c, i ? k_g : k_c);
    be.finish_step();
  });
  const std::vector<float> got = p.cache(*p.gpu).read_keys(0, {0, 1});
  ASSERT_EQ(got.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const float want = fp16_to_fp32(fp32_to_fp16(rows[i]));
    EXPECT_EQ(std::memcmp(&got[i], &want, sizeof(float)), 0) << i << ": " << rows[i] << " -> " << got[i] << ", want " << want;
  }
  EXPECT_EQ(got, p.cache(*p.cpu).read_keys(0, {0, 1}));
  EXPECT_NE(got[0], rows[0]);  // it was rounded
}

TEST_F(VulkanBackend, ALatentCacheOfOddWidthsHoldsTheReferenceValues) {
  // A latent cache: per layer its own key and value widths, odd ones included (an f16
  // entry is padded to whole words). Written entries, a step's stores, swaps and moves
  // leave the reference's values in every slot (bit for bit: the same fp16 rounding),
  // latent_attention agrees with the reference, and the cache and its recovery buffers
  // are counted as device memory when it is made (the RoPE table of positions, capacity
  // x n_dims floats, is allocated and counted at the first latent step).
  for (KvCacheType type : {KvCacheType::F32, KvCacheType::F16}) {
    SCOPED_TRACE(kv_cache_type_name(type));
    Pair p(make_vulkan());
    const int32_t n_ctx = 12, T = 3, n_past = 6, kv_dim = 8;
    KvCacheShape shape{2, n_ctx, kv_dim, type};
    shape.key_dims = {5, 8};
    shape.value_dims = {3, 7};
    auto [up_k0_c, up_k0_g] = p.weight(random_values(size_t{kv_dim} * 5, 40), kv_dim, 5);
    auto [up_v0_c, up_v0_g] = p.weight(random_values(size_t{kv_dim} * 3, 41), kv_dim, 3);
    auto [tk_c, tk_g] = p.weight(random_values(size_t{T} * 5, 42, -70000.0f, 70000.0f), T, 5);  // overflows fp16 too
    auto [tv_c, tv_g] = p.weight(random_values(size_t{T} * 3, 43), T, 3);
    auto [tq_c, tq_g] = p.weight(random_values(size_t{T} * 16, 44), T, 16);
    auto [k_c, k_g] = p.activation(T, 5);
    auto [v_c, v_g] = p.activation(T, 3);
    auto [q_c, q_g] = p.activation(T, 16);
    auto [o_c, o_g] = p.activation(T, 16);
    const uint64_t before = memory_in_use(*p.gpu);
    p.make_kv(shape);
    const uint64_t words = type == KvCacheType::F16 ? 3 + 4 + 2 + 4 : 5 + 8 + 3 + 7;
    EXPECT_EQ(memory_in_use(*p.gpu) - before, uint64_t{n_ctx} * (words + 2 * kv_dim) * sizeof(float));
    for (int32_t layer = 0; layer < 2; ++layer) {
      const size_t rk = static_cast<size_t>(shape.key_dim(layer)), rv = static_cast<size_t>(shape.value_dim(layer));
      const auto k = random_values(n_past * rk, 50 + static_cast<uint32_t>(layer), -3.0f, 3.0f);
      const auto v = random_values(n_past * rv, 60 + static_cast<uint32_t>(layer));
      p.both([&](Backend& be, int) { p.cache(be).write(layer, 0, n_past, k.data(), v.data()); });
    }
    p.both([&](Backend& be, int) { p.cache(be).reset_layout(0, 0, n_past); });
    const StepBatch b = batch_of(T, n_past, 3, true);
    const AttentionShape attn{2, 2, 4, 0.5f};
    RopeParams rope;
    rope.n_dims = 4;
    std::vector<float> out[2];
    p.both([&](Backend& be, int i) {
      be.begin_step(b, p.cache(be));
      be.embed(i ? tk_g : tk_c, i ? k_g : k_c);
      be.embed(i ? tv_g : tv_c, i ? v_g : v_c);
      be.embed(i ? tq_g : tq_c, i ? q_g : q_c);
      p.cache(be).store(0, i ? k_g : k_c, i ? v_g : v_c);
      be.latent_attention(0, i ? q_g : q_c, attn, i ? up_k0_g : up_k0_c, i ? up_v0_g : up_v0_c, rope, i ? o_g : o_c);
      be.finish_step();
      out[i] = be.read_rows(i ? o_g : o_c, T);
      p.cache(be).swap_slots({{0, 7}, {7, 2}, {8, 1}});
      p.cache(be).move_slots({{3, 10}, {6, 3}});
    });
    expect_close(out[1], out[0], 2e-5, "latent_attention");
    std::vector<int32_t> slots(n_ctx);
    std::iota(slots.begin(), slots.end(), 0);
    for (int32_t layer = 0; layer < 2; ++layer) {
      const std::vector<float> got = p.cache(*p.gpu).read_keys(layer, slots), want = p.cache(*p.cpu).read_keys(layer, slots);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "layer " << layer;
    }
  }
}

TEST_F(VulkanBackend, LatentRequestsThatCannotWorkGiveClearErrors) {
  auto be = make_vulkan();
  const int32_t kv_dim = 4;
  const std::vector<float> up = random_values(kv_dim * 3, 1);
  const Weight k_up = be->upload_weight(TensorType::F32, kv_dim, 3, up.data());
  const Weight wide = be->upload_weight(TensorType::F32, kv_dim, 4, random_values(kv_dim * 4, 2).data());
  Activation q = be->alloc_activation(1, kv_dim), o = be->alloc_activation(1, kv_dim);
  const AttentionShape attn{1, 1, kv_dim, 0.5f};
  RopeParams rope;
  rope.n_dims = kv_dim;
  StepBatch b = StepBatch::causal({0}, 0);
  // attention() on a latent cache, and latent_attention() on a plain one or with
  // up-projections of other widths.
  KvCacheShape latent{1, 8, kv_dim, KvCacheType::F16};
  latent.key_dims = {3};
  latent.value_dims = {3};
  auto kv = be->create_kv_cache(latent);
  be->begin_step(b, *kv);
  EXPECT_THROW(be->attention(0, q, attn, o), std::invalid_argument);
  EXPECT_THROW(be->latent_attention(0, q, attn, wide, k_up, rope, o), std::invalid_argument);
  EXPECT_THROW(be->latent_attention(1, q, attn, k_up, k_up, rope, o), std::out_of_range);
  be->finish_step();
  kv = be->create_kv_cache(KvCacheShape{1, 8, kv_dim, KvCacheType::F32});
  be->begin_step(b, *kv);
  EXPECT_THROW(be->latent_attention(0, q, attn, k_up, k_up, rope, o), std::invalid_argument);
  be->finish_step();
  // Widths missing for a layer; a plain f16 cache of odd width (attention reads it unpadded).
  KvCacheShape missing{2, 8, kv_dim, KvCacheType::F32};
  missing.key_dims = {3};
  missing.value_dims = {3};
  EXPECT_THROW(be->create_kv_cache(missing), std::invalid_argument);
  EXPECT_THROW(be->create_kv_cache(KvCacheShape{1, 8, 5, KvCacheType::F16}), std::invalid_argument);
  // A latent cache larger than the device's memory is refused with the sizes.
  KvCacheShape huge{4, 1 << 24, 1024, KvCacheType::F32};
  huge.key_dims = huge.value_dims = {512, 512, 512, 512};
  try {
    be->create_kv_cache(huge);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("ctx-size"), std::string::npos) << e.what();
  }
}

TEST_F(VulkanBackend, BadRequestsGiveClearErrors) {
  try {
    vulkan::VulkanBackendOptions o;
    o.device = "no-such-gpu-xyz";
    vulkan::make_backend(o);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no-such-gpu-xyz"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the devices are"), std::string::npos) << e.what();
  }
  EXPECT_THROW(vulkan::resolve_device("99"), std::runtime_error);
  auto be = make_vulkan();
  auto kv = be->create_kv_cache(KvCacheShape{1, 8, 4, KvCacheType::F32});
  StepBatch b = StepBatch::causal({1, 2, 3}, 6);
  EXPECT_THROW(be->begin_step(b, *kv), std::length_error);  // 6 + 3 > 8 slots
  // A cache another backend made is refused.
  auto other = make_vulkan();
  auto foreign = other->create_kv_cache(KvCacheShape{1, 8, 4, KvCacheType::F32});
  StepBatch one = StepBatch::causal({1}, 0);
  EXPECT_THROW(be->begin_step(one, *foreign), std::invalid_argument);
  // A KV cache larger than the device's buffers or memory is refused with the sizes.
  try {
    be->create_kv_cache(KvCacheShape{4, 1 << 30, 1024, KvCacheType::F32});
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("ctx-size"), std::string::npos) << e.what();
  }
}

}  // namespace

#else

TEST(VulkanBackend, Skipped) { GTEST_SKIP() << "fafo was built without Vulkan (FAFO_VULKAN=OFF or no Vulkan SDK)"; }

#endif
