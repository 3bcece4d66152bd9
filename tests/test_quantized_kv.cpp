// Quantized KV caches (--cache-type q8_0 / q4_0, fafo/kv_cache.h) on whole models: every
// strategy and KV policy gives plain decoding's tokens with one (the verifier reads the
// same cache) on every backend, each backend stays within the reference's tolerance (all
// hold the same blocks), and what cannot hold blocks says so (an MLA model, a width that
// is not whole blocks, on Vulkan not whole pairs of blocks). The ops one by one: the
// conformance table (test_backend_ops_table.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fafo/backend_registry.h"
#include "fafo/generator.h"
#include "fafo/open_model.h"
#include "fafo/sequence.h"
#include "model_fixtures.h"
#include "quantized_kv_check.h"
#include "test_support.h"

namespace fafo {
namespace {

OpenOptions stories_with(const std::string& backend, KvCacheType type) {
  OpenOptions o;
  o.path = test::shared_path("models/stories260K.gguf").string();
  o.backend = BackendSpec{backend, "", 2};
  o.n_ctx = 256;
  o.kv_type = type;
  return o;
}

std::vector<int32_t> greedy_ids(const OpenedModel& m, Strategy s, const KvPolicyOptions& kv = {}) {
  const OpenedModel seq = open_sequence(m);
  GenerationOptions o;
  o.n_predict = 64;
  o.sampling.temperature = 0;
  o.decoding.strategy = s;
  o.kv = kv;
  return generate(*seq.model, *seq.tokenizer, seq.tokenizer->encode("Once upon a time, there was a little girl", true), o).ids;
}

TEST(QuantizedKv, EveryStrategyAndPolicyGivesPlainDecodingsTokens) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  KvPolicyOptions snapkv;
  snapkv.name = "snapkv";
  snapkv.budget = 24;
  snapkv.recent = 8;
  snapkv.window = 4;
  for (const char* backend : {"cpu", "reference"})
    for (KvCacheType type : {KvCacheType::Q8_0, KvCacheType::Q4_0}) {
      const OpenedModel m = open_model(stories_with(backend, type));
      EXPECT_EQ(m.model->kv_type(), type);
      const std::vector<int32_t> ar = greedy_ids(m, Strategy::Ar);
      ASSERT_EQ(ar.size(), 64u);
      for (const KvPolicyOptions& kv : {KvPolicyOptions{}, snapkv})
        for (Strategy s : {Strategy::Jacobi, Strategy::Lookahead, Strategy::Fafo})
          EXPECT_EQ(greedy_ids(m, s, kv), ar) << backend << " " << kv_cache_type_name(type) << " " << strategy_name(s)
                                              << " policy " << kv.name;
    }
}

// The prompt's logits on the cpu backend and the reference with the same cache type: the
// caches hold the same blocks, so the two stay within the f32 cache's tolerance; and a
// block cache's logits differ from the f32 cache's (the blocks are what attention reads).
TEST(QuantizedKv, TheCpuBackendStaysWithinTheReferencesTolerance) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto logits = [](const std::string& backend, KvCacheType type) {
    const OpenedModel m = open_model(stories_with(backend, type));
    const std::vector<int32_t> prompt = m.tokenizer->encode("Lily and Tom went to the park to play", true);
    StepBatch prefill = StepBatch::causal(prompt, 0, /*logits_for_all=*/true);
    return m.model->forward(prefill);
  };
  for (KvCacheType type : {KvCacheType::Q8_0, KvCacheType::Q4_0}) {
    const std::vector<float> cpu = logits("cpu", type), ref = logits("reference", type);
    ASSERT_EQ(cpu.size(), ref.size());
    double worst = 0, scale = 1;
    for (size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, std::abs(double{cpu[i]} - ref[i]));
      scale = std::max(scale, std::abs(double{ref[i]}));
    }
    EXPECT_LE(worst, 1e-4 * scale) << kv_cache_type_name(type);
    EXPECT_NE(ref, logits("reference", KvCacheType::F32)) << kv_cache_type_name(type);
  }
}

TEST(QuantizedKv, WhatCannotHoldBlocksSaysSo) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  EXPECT_EQ(parse_kv_cache_type("q4_0"), KvCacheType::Q4_0);
  EXPECT_EQ(std::string(kv_cache_type_name(KvCacheType::Q8_0)), "q8_0");
  EXPECT_THROW(parse_kv_cache_type("q5_1"), std::invalid_argument);
  EXPECT_EQ(kv_row_bytes(KvCacheType::Q8_0, 128), 136u);
  EXPECT_EQ(kv_row_bytes(KvCacheType::Q4_0, 128), 72u);
  KvCacheShape odd{2, 16, 40, KvCacheType::Q8_0};
  try {
    odd.validate();
    ADD_FAILURE() << "a q8_0 cache of 40-value entries";
  } catch (const std::invalid_argument& e) {
    EXPECT_HAS(e.what(), "blocks of 32 values");
  }
  KvCacheShape latent{1, 16, 64, KvCacheType::Q4_0};
  latent.key_dims = {32};
  latent.value_dims = {32};
  EXPECT_THROW(latent.validate(), std::invalid_argument);
  // stories260K's entries are 32 values: one block, not a pair.
  if (const BackendInfo* vulkan = find_backend("vulkan"); vulkan && !vulkan->devices().empty()) {
    EXPECT_HAS(test::open_model_error(stories_with("vulkan", KvCacheType::Q8_0)), "a multiple of 64");
  }
  const test::CommandResult run = test::run_fafo("run -m " + test::shell_quote(model_path) +
                                                 " --backend cpu --cache-type q4_0 -p 'Once upon a time' -n 8 --temp 0");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_HAS(run.err, "q4_0 KV cache");
  const test::CommandResult bad = test::run_fafo("run -m " + test::shell_quote(model_path) + " --cache-type q3_k -p Hi");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_HAS(bad.err, "--cache-type");
}

// Vulkan (lavapipe here) with block caches over a model whose entries are whole pairs of
// blocks (the CUDA backend's kernels on the host: test_cuda_emulated.cpp).
TEST(QuantizedKv, VulkanHoldsTheBlocksAndEveryStrategyGivesPlainDecodingsTokens) {
  const BackendInfo* vulkan = find_backend("vulkan");
  if (!vulkan || vulkan->devices().empty()) GTEST_SKIP() << "no Vulkan device";
  test::check_block_caches(test::wide_heads_model(), [vulkan] { return vulkan->create(BackendSpec{"vulkan", "", 2}); });
}

}  // namespace
}  // namespace fafo
