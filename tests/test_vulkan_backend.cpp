// The Vulkan backend against the CPU reference backend, through the Backend interface
// the model uses: every op on odd shapes (inputs are written with embed() from an F32
// table, so any activation can be set up), attention with in-step masks, FULL and
// COMPRESSED prefixes, a permuted logical order, dense layers and contexts long
// enough to be split; the KV operations; and whole models: greedy ids equal the CPU's
// on stories260K's golden prompts and on random models in several formats, and every
// decoding strategy stays token-identical to plain decoding on Vulkan.
// The Khronos validation layer is on (when installed) and must report no error.
// Skipped, with the reason, without a Vulkan build or device.
#include <gtest/gtest.h>

#if FAFO_HAVE_VULKAN

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "backend/vulkan/context.h"
#include "backend/vulkan/vulkan_backend.h"
#include "fafo/backend.h"
#include "fafo/generator.h"
#include "fafo/tensor_type.h"
#include "fafo/vulkan_devices.h"
#include "model_fixtures.h"
#include "test_support.h"

using namespace fafo;

namespace {

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

std::vector<float> random_values(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << ", element " << i;
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

// The same weights, activations and cache on the CPU and the Vulkan backend; `fill`
// writes rows into an activation of both with embed() from an F32 table.
struct Pair {
  std::unique_ptr<Backend> cpu, gpu;
  std::vector<std::vector<float>> tables;  // kept alive: the CPU backend uses weights in place

  Pair(std::unique_ptr<Backend> vk) : cpu(make_cpu_backend(1)), gpu(std::move(vk)) {}

  std::pair<Weight, Weight> weight(std::vector<float> values, int64_t rows, int64_t cols) {
    tables.push_back(std::move(values));
    const float* data = tables.back().data();
    return {cpu->upload_weight(TensorType::F32, rows, cols, data), gpu->upload_weight(TensorType::F32, rows, cols, data)};
  }
  std::pair<Activation, Activation> activation(int64_t rows, int64_t cols) {
    return {cpu->alloc_activation(rows, cols), gpu->alloc_activation(rows, cols)};
  }
  void kv(int32_t n_layer, int32_t n_ctx, int32_t kv_dim, KvCacheType kv_type = KvCacheType::F32) {
    cpu->alloc_kv_cache(n_layer, n_ctx, kv_dim, kv_type);
    gpu->alloc_kv_cache(n_layer, n_ctx, kv_dim, kv_type);
  }
  template <class F>
  void both(F&& f) {
    f(*cpu, 0);
    f(*gpu, 1);
  }
};

// A batch of T tokens 0..T-1 (the rows of an embed table) at the given positions.
StepBatch batch_of(int32_t T, int32_t n_past, uint32_t seed = 0, bool random_masks = false, bool compressed = false) {
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

TEST_F(VulkanBackend, ElementwiseOpsMatmulAndGatherMatchCpu) {
  Pair p(make_vulkan());
  const int32_t T = 7, n = 45, rows = 33;
  p.kv(1, 16, 4);
  auto [tin_c, tin_g] = p.weight(random_values(T * n, 1, -2, 2), T, n);
  auto [tin2_c, tin2_g] = p.weight(random_values(T * n, 2, -2, 2), T, n);
  auto [gain_c, gain_g] = p.weight(random_values(n, 3, 0.5f, 1.5f), 1, n);
  auto [bias_c, bias_g] = p.weight(random_values(n, 4), 1, n);
  auto [w_c, w_g] = p.weight(random_values(rows * n, 5), rows, n);
  auto [x_c, x_g] = p.activation(16, n);
  auto [y_c, y_g] = p.activation(16, n);
  auto [z_c, z_g] = p.activation(16, n);
  auto [m_c, m_g] = p.activation(16, rows);
  auto [g_c, g_g] = p.activation(16, n);
  auto [gm_c, gm_g] = p.activation(16, rows);
  StepBatch b = batch_of(T, 0);
  std::vector<float> results[2][6];
  p.both([&](Backend& be, int k) {
    Activation x = k ? x_g : x_c, y = k ? y_g : y_c, z = k ? z_g : z_c, m = k ? m_g : m_c, g = k ? g_g : g_c,
               gm = k ? gm_g : gm_c;
    be.begin_step(b, KvView{});
    be.embed(k ? tin_g : tin_c, x);
    be.embed(k ? tin2_g : tin2_c, y);
    be.rms_norm(x, k ? gain_g : gain_c, 1e-5f, z);
    be.add_bias(k ? bias_g : bias_c, z);
    be.add(z, y);
    be.swiglu(z, y, z);
    be.matmul(k ? w_g : w_c, z, m);
    be.gather_rows(z, {5, 0, 3}, g);
    be.rms_norm(g, k ? gain_g : gain_c, 1e-5f, g);
    be.matmul(k ? w_g : w_c, g, gm);
    be.finish_step();
    results[k][0] = be.read_rows(z, T);
    results[k][1] = be.read_rows(m, T);
    results[k][2] = be.read_rows(g, 3);
    results[k][3] = be.read_rows(gm, 3);
  });
  expect_close(results[1][0], results[0][0], 1e-5, "rms_norm + bias + add + swiglu");
  expect_close(results[1][1], results[0][1], 1e-5, "matmul");
  expect_close(results[1][2], results[0][2], 1e-5, "gather + rms_norm of the gathered rows");
  expect_close(results[1][3], results[0][3], 1e-5, "matmul of the gathered rows");
}

TEST_F(VulkanBackend, RopeMatchesCpu) {
  struct Case {
    int32_t n_heads, head_dim, n_dims;
    bool neox;
    float scale;
    bool factors;
  };
  for (const Case c : {Case{3, 16, 16, false, 1.0f, false}, Case{2, 20, 12, true, 0.25f, false},
                       Case{5, 64, 64, false, 1.0f, true}, Case{1, 128, 128, true, 1.0f, true}}) {
    SCOPED_TRACE("heads " + std::to_string(c.n_heads) + " dim " + std::to_string(c.head_dim));
    Pair p(make_vulkan());
    p.kv(1, 64, 4);
    const int32_t T = 9, cols = c.n_heads * c.head_dim;
    auto [t_c, t_g] = p.weight(random_values(static_cast<size_t>(T * cols), 9), T, cols);
    auto [x_c, x_g] = p.activation(T, cols);
    RopeParams rp;
    rp.n_dims = c.n_dims;
    rp.freq_base = 500000.0f;
    rp.freq_scale = c.scale;
    rp.neox = c.neox;
    if (c.factors) rp.freq_factors = random_values(static_cast<size_t>(c.n_dims / 2), 4, 1.0f, 8.0f);
    StepBatch b = batch_of(T, 40, 3, true);
    std::vector<float> got[2];
    p.both([&](Backend& be, int k) {
      Activation x = k ? x_g : x_c;
      be.begin_step(b, KvView{});
      be.embed(k ? t_g : t_c, x);
      be.rope(x, c.n_heads, c.head_dim, rp);
      be.finish_step();
      got[k] = be.read_rows(x, T);
    });
    expect_close(got[1], got[0], 1e-6, "rope");
  }
}

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
    if (c.n_past > 0) p.both([&](Backend& be, int) { be.write_kv(layer, 0, c.n_past, k.data(), v.data()); });
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
  std::vector<int32_t> order(static_cast<size_t>(c.n_past));
  std::iota(order.begin(), order.end(), 0);
  if (c.permuted) std::shuffle(order.begin(), order.end(), std::mt19937(5));
  KvView view;
  view.full_order = c.permuted ? &order : nullptr;
  view.region_count = c.region;
  view.dense_layers = c.dense_layers;
  const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  std::vector<float> got[2][2];
  p.both([&](Backend& be, int i) {
    Activation q = i ? q_g : q_c, k = i ? k_g : k_c, v = i ? v_g : v_c, o = i ? o_g : o_c, o2 = i ? o2_g : o2_c;
    be.begin_step(b, view);
    be.embed(i ? tq_g : tq_c, q);
    be.embed(i ? tk_g : tk_c, k);
    be.embed(i ? tv_g : tv_c, v);
    be.store_kv(0, k, v);
    be.store_kv(1, k, v);
    be.attention(0, q, shape, o);
    be.attention(1, q, shape, o2);
    be.finish_step();
    got[i][0] = be.read_rows(o, c.T);
    got[i][1] = be.read_rows(o2, c.T);
  });
  expect_close(got[1][0], got[0][0], tol, "layer 0");
  expect_close(got[1][1], got[0][1], tol, "layer 1");
}

TEST_F(VulkanBackend, AttentionMatchesCpu) {
  const AttentionCase cases[] = {
      {0, 1, 4, 4, 16, false, false, false, 0, 0},       // first token
      {0, 13, 6, 2, 20, false, false, false, 0, 0},      // prefill, GQA, odd head size
      {37, 5, 6, 3, 8, true, false, false, 0, 0},        // random in-step masks
      {300, 64, 4, 1, 64, true, true, false, 68, 0},     // FAFO-like: compressed rows, region 68
      {300, 17, 4, 2, 32, true, true, true, 40, 1},      // permuted logical order, dense first layer
      {90, 9, 2, 2, 256, true, true, true, 200, 0},      // region larger than the prefix, head 256
      {2500, 3, 8, 2, 128, false, false, true, 0, 0},    // a long context split into parts
      {1200, 33, 3, 1, 24, true, true, false, 1, 2},     // tiny region; both layers dense
  };
  for (const AttentionCase& c : cases) {
    SCOPED_TRACE("n_past " + std::to_string(c.n_past) + " T " + std::to_string(c.T) + " heads " +
                 std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) + " x " + std::to_string(c.head_dim));
    Pair p(make_vulkan());
    check_attention(p, c);
  }
  // An fp16 cache (both backends compute with the same rounded keys and values).
  for (size_t i : {1u, 3u, 4u, 5u, 6u}) {
    SCOPED_TRACE("f16 cache, case " + std::to_string(i));
    Pair p(make_vulkan());
    check_attention(p, cases[i], KvCacheType::F16);
  }
}

// Writes, stores, query capture, swaps and moves on both backends; the caches must be equal.
void check_kv_operations(std::unique_ptr<Backend> vk, KvCacheType kv_type);

TEST_F(VulkanBackend, KvOperationsAndQueryCaptureMatchCpu) {
  for (const KvCacheType kv_type : {KvCacheType::F32, KvCacheType::F16}) {
    SCOPED_TRACE(kv_cache_type_name(kv_type));
    check_kv_operations(make_vulkan(), kv_type);
  }
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
    be.begin_step(b, KvView{});
    be.embed(i ? t_g : t_c, i ? k_g : k_c);
    be.store_kv(0, i ? k_g : k_c, i ? k_g : k_c);
    be.finish_step();
  });
  const std::vector<float> got = p.gpu->read_keys(0, {0, 1});
  ASSERT_EQ(got.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const float want = fp16_to_fp32(fp32_to_fp16(rows[i]));
    EXPECT_EQ(std::memcmp(&got[i], &want, sizeof(float)), 0) << i << ": " << rows[i] << " -> " << got[i] << ", want " << want;
  }
  EXPECT_EQ(got, p.cpu->read_keys(0, {0, 1}));
  EXPECT_NE(got[0], rows[0]);  // it was rounded
}

void check_kv_operations(std::unique_ptr<Backend> vk, KvCacheType kv_type) {
  Pair p(std::move(vk));
  const int32_t kv_dim = 12, n_ctx = 40, T = 6, q_dim = 24;
  p.kv(3, n_ctx, kv_dim, kv_type);
  for (int32_t layer = 0; layer < 3; ++layer) {
    const auto k = random_values(20u * kv_dim, 30 + layer), v = random_values(20u * kv_dim, 40 + layer);
    p.both([&](Backend& be, int) { be.write_kv(layer, 0, 20, k.data(), v.data()); });
  }
  auto [tk_c, tk_g] = p.weight(random_values(T * kv_dim, 1), T, kv_dim);
  auto [tq_c, tq_g] = p.weight(random_values(T * q_dim, 2), T, q_dim);
  auto [k_c, k_g] = p.activation(T, kv_dim);
  auto [q_c, q_g] = p.activation(T, q_dim);
  auto [o_c, o_g] = p.activation(T, q_dim);
  StepBatch b = batch_of(T, 20);
  const AttentionShape shape{2, 1, 12, 0.3f};
  p.both([&](Backend& be, int i) {
    be.set_query_capture({0, 2, 5, 9});  // row 9 is outside the batch: skipped
    be.begin_step(b, KvView{});
    be.embed(i ? tk_g : tk_c, i ? k_g : k_c);
    be.embed(i ? tq_g : tq_c, i ? q_g : q_c);
    be.store_kv(1, i ? k_g : k_c, i ? k_g : k_c);
    be.attention(1, i ? q_g : q_c, shape, i ? o_g : o_c);
    be.finish_step();
  });
  EXPECT_EQ(p.gpu->captured_queries(1), p.cpu->captured_queries(1));
  EXPECT_EQ(p.gpu->captured_queries(1).size(), 3u * q_dim);
  // Swaps and moves that chain through shared slots: order matters.
  const std::vector<std::pair<int32_t, int32_t>> swaps = {{0, 25}, {25, 3}, {3, 0}, {7, 19}};
  const std::vector<std::pair<int32_t, int32_t>> moves = {{21, 2}, {2, 30}, {30, 21}, {5, 5}};
  p.both([&](Backend& be, int) {
    be.swap_kv(swaps);
    be.move_kv(moves);
  });
  std::vector<int32_t> slots(n_ctx);
  std::iota(slots.begin(), slots.end(), 0);
  for (int32_t layer = 0; layer < 3; ++layer)
    EXPECT_EQ(p.gpu->read_keys(layer, slots), p.cpu->read_keys(layer, slots)) << "layer " << layer;
  EXPECT_EQ(p.gpu->read_keys(1, {26, 2, 2}), p.cpu->read_keys(1, {26, 2, 2}));
}

TEST_F(VulkanBackend, ArgmaxOnTheDeviceMatchesCpuWithTiesNanAndInfinity) {
  for (const int32_t n : {1, 7, 1000, 32003}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    Pair p(make_vulkan());
    p.kv(1, 8, 4);
    const int32_t T = 6;
    std::vector<float> rows = random_values(static_cast<size_t>(T) * n, static_cast<uint32_t>(n), -5, 5);
    auto at = [&](int32_t r, int32_t i) -> float& { return rows[static_cast<size_t>(r) * n + static_cast<size_t>(i)]; };
    at(1, n - 1) = 9.0f;                              // the last element wins
    at(2, n / 2) = 9.0f, at(2, n - 1) = 9.0f;          // a tie: the first index wins
    at(3, n / 3) = std::nanf("");                     // NaN: -1
    for (int32_t i = 0; i < n; ++i) at(4, i) = -INFINITY;  // only -inf: -2
    at(5, 0) = INFINITY;                              // +inf wins
    auto [t_c, t_g] = p.weight(rows, T, n);
    auto [x_c, x_g] = p.activation(T, n);
    auto [g_c, g_g] = p.activation(T, n);
    StepBatch b = batch_of(T, 0);
    std::vector<int32_t> all[2], gathered[2];
    p.both([&](Backend& be, int k) {
      be.begin_step(b, KvView{});
      be.embed(k ? t_g : t_c, k ? x_g : x_c);
      be.argmax_rows(k ? x_g : x_c);
      be.finish_step();
      all[k] = be.read_argmax(T);
      be.begin_step(b, KvView{});
      be.embed(k ? t_g : t_c, k ? x_g : x_c);
      be.gather_rows(k ? x_g : x_c, {2, 0}, k ? g_g : g_c);
      be.argmax_rows(k ? g_g : g_c);
      be.finish_step();
      gathered[k] = be.read_argmax(2);
    });
    EXPECT_EQ(all[1], all[0]);
    EXPECT_EQ(gathered[1], gathered[0]);
    ASSERT_EQ(all[0].size(), static_cast<size_t>(T));
    EXPECT_EQ(all[0][1], n - 1);
    if (n > 1) {
      EXPECT_EQ(all[0][2], n / 2);
    }
    EXPECT_EQ(all[0][3], -1);
    EXPECT_EQ(all[0][4], -2);
    EXPECT_EQ(all[0][5], 0);
    EXPECT_THROW(p.gpu->read_argmax(3), std::out_of_range);
  }
}

TEST_F(VulkanBackend, TopKOnTheDeviceEqualsCpuIncludingGatheredRows) {
  for (const int32_t n : {7, 1000, 32003}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    Pair p(make_vulkan());
    p.kv(1, 8, 4);
    const int32_t T = 5, k = std::min(n, 40);
    std::vector<float> rows = random_values(static_cast<size_t>(T) * n, static_cast<uint32_t>(n) + 5, -5, 5);
    for (int32_t i = 0; i < n; ++i) rows[static_cast<size_t>(n) + static_cast<size_t>(i)] = static_cast<float>(i % 3);  // ties
    rows[3 * static_cast<size_t>(n) + 2] = std::nanf("");
    auto [t_c, t_g] = p.weight(rows, T, n);
    auto [x_c, x_g] = p.activation(T, n);
    auto [g_c, g_g] = p.activation(T, n);
    StepBatch b = batch_of(T, 0);
    TopK all[2], gathered[2];
    p.both([&](Backend& be, int g) {
      be.begin_step(b, KvView{});
      be.embed(g ? t_g : t_c, g ? x_g : x_c);
      be.top_k_rows(g ? x_g : x_c, k);
      be.finish_step();
      all[g] = be.read_top_k(T);
      be.begin_step(b, KvView{});
      be.embed(g ? t_g : t_c, g ? x_g : x_c);
      be.gather_rows(g ? x_g : x_c, {1, 4}, g ? g_g : g_c);
      be.top_k_rows(g ? g_g : g_c, k);
      be.finish_step();
      gathered[g] = be.read_top_k(2);
    });
    EXPECT_EQ(all[1].has_nan, all[0].has_nan);
    EXPECT_EQ(all[0].has_nan, (std::vector<uint8_t>{0, 0, 0, 1, 0}));
    for (int r : {0, 1, 2, 4}) {
      EXPECT_EQ(std::vector<int32_t>(all[1].row_ids(r), all[1].row_ids(r) + k),
                std::vector<int32_t>(all[0].row_ids(r), all[0].row_ids(r) + k)) << "row " << r;
      EXPECT_EQ(std::vector<float>(all[1].row_values(r), all[1].row_values(r) + k),
                std::vector<float>(all[0].row_values(r), all[0].row_values(r) + k)) << "row " << r;
    }
    EXPECT_EQ(gathered[1].ids, gathered[0].ids);
    EXPECT_EQ(gathered[1].values, gathered[0].values);
    EXPECT_EQ(std::vector<int32_t>(gathered[0].row_ids(0), gathered[0].row_ids(0) + k),
              std::vector<int32_t>(all[0].row_ids(1), all[0].row_ids(1) + k));
    EXPECT_THROW(p.gpu->read_top_k(3), std::out_of_range);
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
  be->alloc_kv_cache(1, 8, 4, KvCacheType::F32);
  StepBatch b = StepBatch::causal({1, 2, 3}, 6);
  EXPECT_THROW(be->begin_step(b, KvView{}), std::length_error);  // 6 + 3 > 8 slots
  // A KV cache larger than the device's buffers or memory is refused with the sizes.
  try {
    be->alloc_kv_cache(4, 1 << 30, 1024, KvCacheType::F32);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("ctx-size"), std::string::npos) << e.what();
  }
}

// --- whole models -------------------------------------------------------------------------

struct Loaded {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

Loaded load(const std::string& path, std::unique_ptr<Backend> be, int32_t n_ctx = 0,
            KvCacheType kv_type = KvCacheType::F32) {
  Loaded m;
  m.file = GgufFile::open(path);
  ModelOptions o;
  o.n_ctx = n_ctx;
  o.kv_type = kv_type;
  m.model = std::make_unique<Model>(m.file, std::move(be), o);
  m.tokenizer = std::make_unique<Tokenizer>(Vocab::from_gguf(*m.file));
  return m;
}

// Greedy continuation with the logits of every step (teacher-forced: the step's token
// is the argmax of the previous step).
struct Greedy {
  std::vector<int32_t> ids;
  std::vector<float> margins;  // top-1 minus top-2 logit per step
};

Greedy greedy(Model& model, const std::vector<int32_t>& prompt, int32_t n) {
  Greedy g;
  model.truncate(0);
  StepBatch b = StepBatch::causal(prompt, 0);
  std::vector<float> logits = model.forward(b);
  model.commit(b.size());
  const int32_t V = model.config().n_vocab;
  for (int32_t s = 0; s < n; ++s) {
    const float* row = logits.data() + logits.size() - static_cast<size_t>(V);
    const int32_t best = static_cast<int32_t>(std::max_element(row, row + V) - row);
    float second = -INFINITY;
    for (int32_t v = 0; v < V; ++v)
      if (v != best) second = std::max(second, row[v]);
    g.ids.push_back(best);
    g.margins.push_back(row[best] - second);
    StepBatch next = StepBatch::causal({best}, model.n_past());
    logits = model.forward(next);
    model.commit(1);
  }
  return g;
}

// The Vulkan ids equal the CPU ids; they may part only at a step where the CPU's top
// two logits are within `tie` (a different summation order may then pick the other).
void expect_same_ids(const Greedy& cpu, const Greedy& gpu, float tie, const std::string& what, size_t min_agree) {
  size_t agree = 0;
  while (agree < cpu.ids.size() && cpu.ids[agree] == gpu.ids[agree]) ++agree;
  if (agree < cpu.ids.size()) {
    EXPECT_LT(cpu.margins[agree], tie) << what << ": ids part at step " << agree << " where the CPU margin is "
                                       << cpu.margins[agree];
  }
  EXPECT_GE(agree, std::min(min_agree, cpu.ids.size())) << what;
}

TEST_F(VulkanBackend, GreedyIdsEqualCpuOnStoriesGoldenPrompts) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  FAFO_REQUIRE_SHARED(golden_path, "golden/stories260K.greedy.jsonl");
  Loaded cpu = load(model_path.string(), make_cpu_backend(2));
  Loaded gpu = load(model_path.string(), make_vulkan());
  std::ifstream in(golden_path);
  int cases = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto prompt = nlohmann::json::parse(line)["prompt_ids"].get<std::vector<int32_t>>();
    const Greedy want = greedy(*cpu.model, prompt, 64), got = greedy(*gpu.model, prompt, 64);
    expect_same_ids(want, got, 1e-3f, "golden prompt " + std::to_string(cases), 32);
    ++cases;
  }
  EXPECT_GE(cases, 3);
}

TEST_F(VulkanBackend, GreedyIdsEqualCpuOnRandomModelsInSeveralFormats) {
  for (const std::string type : {"F32", "F16", "Q8_0", "Q4_0", "Q5_1", "Q4_K", "Q6_K", "Q4_K_M"}) {
    SCOPED_TRACE(type);
    synth::SyntheticConfig c;
    c.n_layer = 2, c.n_embd = 256, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 512, c.n_vocab = 300, c.n_ctx = 256;
    c.weight_type = type;
    c.seed = 3;
    const std::string path = (test::temp_dir("vk-e2e-" + type) / "m.gguf").string();
    synth::write_synthetic_model(c, path);
    Loaded cpu = load(path, make_cpu_backend(2), 128);
    Loaded gpu = load(path, make_vulkan(), 128);
    const std::vector<int32_t> prompt = {1, 45, 99, 7, 250, 31};
    expect_same_ids(greedy(*cpu.model, prompt, 24), greedy(*gpu.model, prompt, 24), 1e-3f, type, 12);
  }
}

TEST_F(VulkanBackend, AnF16CacheGivesCpuIdsAndHalvesTheCache) {
  // With an fp16 cache on both backends, greedy ids agree as with fp32; and every
  // strategy stays token-identical to AR on Vulkan.
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  FAFO_REQUIRE_SHARED(golden_path, "golden/stories260K.greedy.jsonl");
  Loaded cpu = load(model_path.string(), make_cpu_backend(2), 0, KvCacheType::F16);
  Loaded gpu = load(model_path.string(), make_vulkan(), 0, KvCacheType::F16);
  std::ifstream in(golden_path);
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const auto prompt = nlohmann::json::parse(line)["prompt_ids"].get<std::vector<int32_t>>();
  expect_same_ids(greedy(*cpu.model, prompt, 48), greedy(*gpu.model, prompt, 48), 1e-3f, "f16 cache", 24);

  const std::vector<int32_t> story = gpu.tokenizer->encode("Once upon a time, there was a little girl named Lily.", true);
  auto run = [&](Strategy s) {
    GenerationOptions o;
    o.n_predict = 48;
    o.sampling.temperature = 0;
    o.decoding.strategy = s;
    o.kv.name = "snapkv";
    o.kv.budget = 24;
    return generate(*gpu.model, *gpu.tokenizer, story, o).ids;
  };
  const auto ar = run(Strategy::Ar);
  EXPECT_EQ(run(Strategy::Lookahead), ar);
  EXPECT_EQ(run(Strategy::Fafo), ar);

  // Half the bytes: a context whose fp32 cache does not fit in a 1 MiB buffer fits as fp16.
  vulkan::VulkanBackendOptions small;
  small.max_buffer_bytes = 1 << 20;
  auto be32 = vulkan::make_backend(small), be16 = vulkan::make_backend(small);
  EXPECT_THROW(be32->alloc_kv_cache(1, 8192, 64, KvCacheType::F32), std::runtime_error);  // 2 MiB per layer
  EXPECT_NO_THROW(be16->alloc_kv_cache(1, 8192, 64, KvCacheType::F16));                  // 1 MiB
}

TEST_F(VulkanBackend, EveryStrategyEqualsArOnVulkan) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  Loaded m = load(model_path.string(), make_vulkan(), 512);
  const std::vector<int32_t> prompt = m.tokenizer->encode("Once upon a time, there was a little girl named Lily.", true);
  auto run = [&](Strategy s, const std::string& policy) {
    GenerationOptions o;
    o.n_predict = 80;
    o.sampling.temperature = 0;
    o.decoding.strategy = s;
    o.kv.name = policy;
    o.kv.budget = 24;
    return generate(*m.model, *m.tokenizer, prompt, o).ids;
  };
  const auto ar = run(Strategy::Ar, "stream");
  ASSERT_EQ(ar.size(), 80u);
  EXPECT_EQ(run(Strategy::Jacobi, "stream"), ar);
  EXPECT_EQ(run(Strategy::Lookahead, "stream"), ar);
  for (const std::string policy : {"stream", "quest", "snapkv", "chunks"}) EXPECT_EQ(run(Strategy::Fafo, policy), ar) << policy;
}

TEST_F(VulkanBackend, TopKSamplingOnTheDeviceEqualsWholeRows) {
  // Sampling steps read back each row's 40 best logits from the device; every strategy
  // must draw what it draws from whole rows of logits.
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  Loaded m = load(model_path.string(), make_vulkan(), 512);
  const std::vector<int32_t> prompt = m.tokenizer->encode("Once upon a time, there was a little girl named Lily.", true);
  for (Strategy s : {Strategy::Ar, Strategy::Lookahead, Strategy::Fafo}) {
    GenerationOptions o;
    o.n_predict = 48;
    o.stop_at_end_of_generation = false;
    o.sampling = SamplerOptions{0.8f, 40, 0.95f, 0.05f, 11};
    o.decoding.strategy = s;
    const auto top = generate(*m.model, *m.tokenizer, prompt, o);
    o.read_top_k_only = false;
    const auto whole = generate(*m.model, *m.tokenizer, prompt, o);
    EXPECT_EQ(top.ids, whole.ids) << strategy_name(s);
    EXPECT_EQ(top.ids.size(), 48u);
  }
}

TEST_F(VulkanBackend, LogitRowsAreCappedByTheDeviceBufferRange) {
  // A device whose buffers cannot hold 512 rows of logits (lavapipe with a 128k
  // vocabulary) limits the rows a step may want logits for; longer steps still run,
  // and decoding falls back to plain steps where a window would want more: the same ids.
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  vulkan::VulkanBackendOptions options;
  options.validation = true;
  options.validation_log = log_;
  options.max_buffer_bytes = 400 * 1024;  // 200 rows of 512 logits; every other buffer fits (weights split)
  Loaded small = load(model_path.string(), vulkan::make_backend(options), 512);
  Loaded full = load(model_path.string(), make_vulkan(), 512);
  const int32_t V = small.model->config().n_vocab;
  ASSERT_EQ(V, 512);
  EXPECT_EQ(small.model->max_logit_rows(), 200);
  EXPECT_EQ(full.model->max_logit_rows(), 512);

  std::vector<int32_t> tokens(256);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(1 + (i * 37) % 500);
  StepBatch too_many = StepBatch::causal(std::vector<int32_t>(tokens.begin(), tokens.begin() + 201), 0, true);
  try {
    small.model->forward(too_many);
    ADD_FAILURE() << "201 logit rows were accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("at most 200 rows"), std::string::npos) << e.what();
  }
  StepBatch long_step = StepBatch::causal(tokens, 0);  // 256 tokens, logits for the last
  StepBatch long_step_full = StepBatch::causal(tokens, 0);
  const std::vector<float> a = small.model->forward(long_step), b = full.model->forward(long_step_full);
  EXPECT_EQ(a, b);

  const std::vector<int32_t> prompt = small.tokenizer->encode("Once upon a time, there was a little girl named Lily.", true);
  auto run = [&](Model& model, Strategy s) {
    GenerationOptions o;
    o.n_predict = 24;
    o.sampling.temperature = 0;
    o.decoding.strategy = s;
    o.decoding.window = 20, o.decoding.ngram = 6, o.decoding.guesses = 20;  // 201+ rows per step
    return generate(model, *small.tokenizer, prompt, o);
  };
  const auto ar = run(*full.model, Strategy::Ar);
  const auto capped = run(*small.model, Strategy::Lookahead);
  EXPECT_EQ(capped.ids, ar.ids);
  EXPECT_EQ(run(*full.model, Strategy::Lookahead).ids, ar.ids);
}

}  // namespace

#else

TEST(VulkanBackend, Skipped) { GTEST_SKIP() << "fafo was built without Vulkan (FAFO_VULKAN=OFF or no Vulkan SDK)"; }

#endif
