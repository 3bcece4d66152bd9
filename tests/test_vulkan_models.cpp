// Whole models on the Vulkan backend: greedy ids equal the CPU's on stories260K's golden
// prompts and on random models in several formats, every decoding strategy stays
// token-identical to plain decoding, and each kernel variant gives the others' logits.
#include <gtest/gtest.h>

#if FAFO_HAVE_VULKAN

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <tuple>

#include <nlohmann/json.hpp>

#include "backend/vulkan/context.h"
#include "backend/vulkan/vulkan_backend.h"
#include "fafo/backend.h"
#include "fafo/generator.h"
#include "fafo/tensor_type.h"
#include "fafo/vulkan_devices.h"
#include "model_fixtures.h"
#include "progress_recorder.h"
#include "random_weights.h"
#include "test_support.h"
#include "vulkan_backend_suite.h"

using namespace fafo;

namespace {

using fafo::test::batch_of;
using fafo::test::join;
using fafo::test::random_values;
using fafo::test::VulkanBackend;

// --- whole models -------------------------------------------------------------------------

struct Loaded {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Sequence> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

Loaded load(const std::string& path, std::unique_ptr<Backend> be, int32_t n_ctx = 0,
            KvCacheType kv_type = KvCacheType::F32) {
  Loaded m;
  m.file = GgufFile::open(path);
  SequenceOptions o;
  o.n_ctx = n_ctx;
  o.kv_type = kv_type;
  m.model = std::make_unique<Sequence>(m.file, std::move(be), o);
  m.tokenizer = std::make_unique<Tokenizer>(Vocab::from_gguf(*m.file));
  return m;
}

// Greedy continuation with the logits of every step (teacher-forced: the step's token
// is the argmax of the previous step).
struct Greedy {
  std::vector<int32_t> ids;
  std::vector<float> margins;  // top-1 minus top-2 logit per step
};

Greedy greedy(Sequence& model, const std::vector<int32_t>& prompt, int32_t n) {
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
  Loaded cpu = load(model_path.string(), make_reference_backend(2));
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

// Making the backend and loading a model report their waits (fafo/progress.h): the
// kernels' pipelines, then the pipelines of every weight format of the file in one batch
// before any weight loads, then the bytes of every weight tensor; each count reaches its
// total. (The driver's own pipeline cache changes how long they take, not the counts.)
TEST_F(VulkanBackend, PipelinesAndWeightLoadingReportProgress) {
  synth::SyntheticConfig c;
  c.n_layer = 2, c.n_embd = 256, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 512, c.n_vocab = 300, c.n_ctx = 256;
  c.weight_type = "Q4_K_M";
  const std::string path = (test::temp_dir("vk-progress") / "m.gguf").string();
  synth::write_synthetic_model(c, path);
  test::ProgressRecorder rec;
  Loaded gpu = load(path, make_vulkan(), 128);
  const std::vector<std::string> labels = rec.labels();
  ASSERT_EQ(labels.size(), 3u) << join(labels);
  EXPECT_EQ(labels[0], "creating Vulkan pipelines");
  EXPECT_TRUE(labels[1] == "creating Vulkan pipelines for Q4_K, Q6_K weights" ||
              labels[1] == "creating Vulkan pipelines for Q6_K, Q4_K weights")
      << labels[1];
  EXPECT_EQ(labels[2], "loading weights (vulkan)");
  uint64_t weight_bytes = 0;
  for (const GgufTensor& t : gpu.file->tensors()) weight_bytes += t.n_bytes;
  for (const std::string& label : labels) {
    const auto reports = rec.of(label);
    ASSERT_FALSE(reports.empty());
    const auto& end = reports.back();
    EXPECT_TRUE(end.finished) << label;
    EXPECT_GT(end.total, 0u) << label;
    EXPECT_EQ(end.done, end.total) << label;
    EXPECT_EQ(std::count_if(reports.begin(), reports.end(), [](const auto& r) { return r.finished; }), 1) << label;
    if (label == labels[2]) {
      EXPECT_EQ(end.unit, ProgressUnit::Bytes);
      EXPECT_EQ(end.total, weight_bytes);
    }
  }
  // A step creates no pipeline: nothing more is reported.
  const size_t before = rec.reports().size();
  greedy(*gpu.model, {1, 2, 3}, 2);
  EXPECT_EQ(rec.reports().size(), before);
  // Without 16-bit storage there is no half-storage probe or variant: fewer pipelines,
  // still counted to their total.
  test::ProgressRecorder portable;
  auto be = make_vulkan_with("-storage16");
  const auto reports = portable.of("creating Vulkan pipelines");
  ASSERT_FALSE(reports.empty());
  EXPECT_TRUE(reports.back().finished);
  EXPECT_EQ(reports.back().done, reports.back().total);
  EXPECT_LT(reports.back().total, rec.of("creating Vulkan pipelines").back().total);
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
    Loaded cpu = load(path, make_reference_backend(2), 128);
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
  Loaded cpu = load(model_path.string(), make_reference_backend(2), 0, KvCacheType::F16);
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
  EXPECT_THROW(be32->create_kv_cache(KvCacheShape{1, 8192, 64, KvCacheType::F32}), std::runtime_error);  // 2 MiB per layer
  EXPECT_NO_THROW(be16->create_kv_cache(KvCacheShape{1, 8192, 64, KvCacheType::F16}));                  // 1 MiB
}

// Greedy ids of `prompt` with strategy s and KV policy `policy` (budget `budget`).
std::vector<int32_t> greedy_with(Loaded& m, const std::vector<int32_t>& prompt, int32_t n, Strategy s,
                                 const std::string& policy, int32_t budget) {
  GenerationOptions o;
  o.n_predict = n;
  o.sampling.temperature = 0;
  o.decoding.strategy = s;
  o.kv.name = policy;
  o.kv.budget = budget;
  return generate(*m.model, *m.tokenizer, prompt, o).ids;
}

// Jacobi, Lookahead and FAFO with each of `policies` give AR's n greedy ids.
void expect_every_strategy_equals_ar(Loaded& m, const std::vector<int32_t>& prompt, int32_t n, int32_t budget,
                                     const std::vector<std::string>& policies) {
  const auto ar = greedy_with(m, prompt, n, Strategy::Ar, "stream", budget);
  ASSERT_EQ(ar.size(), static_cast<size_t>(n));
  EXPECT_EQ(greedy_with(m, prompt, n, Strategy::Jacobi, "stream", budget), ar);
  EXPECT_EQ(greedy_with(m, prompt, n, Strategy::Lookahead, "stream", budget), ar);
  for (const std::string& policy : policies) EXPECT_EQ(greedy_with(m, prompt, n, Strategy::Fafo, policy, budget), ar) << policy;
}

TEST_F(VulkanBackend, EveryStrategyEqualsArOnVulkan) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  Loaded m = load(model_path.string(), make_vulkan(), 512);
  const std::vector<int32_t> prompt = m.tokenizer->encode("Once upon a time, there was a little girl named Lily.", true);
  expect_every_strategy_equals_ar(m, prompt, 80, 24, {"stream", "quest", "snapkv", "chunks"});
}

// With integer products (on by default on GPUs; forced here on lavapipe) every strategy
// still gives plain decoding's ids, on a Q4_K_M model (Q4_K and Q6_K weights, fused and
// separate projections, the gate with the up projection) and a Q8_0 one, whose products
// are then those of rounded activations (the description says so).
TEST_F(VulkanBackend, IntegerProductsKeepEveryStrategyEqualToAr) {
  for (const std::string type : {"Q4_K_M", "Q8_0"}) {
    SCOPED_TRACE(type);
    synth::SyntheticConfig c;
    c.n_layer = 2, c.n_embd = 256, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 512, c.n_vocab = 300, c.n_ctx = 256;
    c.weight_type = type;
    c.seed = 5;
    const std::string path = (test::temp_dir("vk-int8-" + type) / "m.gguf").string();
    synth::write_synthetic_model(c, path);
    vulkan::VulkanBackendOptions options;
    options.validation = true;
    options.validation_log = log_;
    options.int8_products = true;
    Loaded m = load(path, vulkan::make_backend(options), 256);
    EXPECT_NE(m.model->backend().description().find("integer products"), std::string::npos);
    EXPECT_GT(m.model->backend().numerics().rounded_matmul_tolerance, 0.0);
    expect_every_strategy_equals_ar(m, {1, 45, 99, 7, 250, 31, 45, 99, 7}, 40, 12, {"stream", "snapkv"});
  }
}

// The kernels of the steps profiled from now until the next call, by name.
std::map<std::string, uint64_t> calls_per_kernel(Backend& be) {
  std::map<std::string, uint64_t> calls;
  for (const KernelProfile::Kernel& k : be.profiler()->take_profile().kernels) calls[k.name] += k.calls;
  return calls;
}

// A 2-layer synthetic model with grouped-query attention (4 heads, 2 KV heads of 64) in
// `type`, written once under `name`.
std::string small_gqa_model(const std::string& name, const std::string& type, uint32_t seed) {
  synth::SyntheticConfig c;
  c.n_layer = 2, c.n_embd = 256, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 512, c.n_vocab = 300, c.n_ctx = 256;
  c.weight_type = type;
  c.seed = seed;
  const std::string path = (test::temp_dir(name) / "m.gguf").string();
  synth::write_synthetic_model(c, path);
  return path;
}

// The logits of a 40-token prefill (two 32-token tiles), one token after it and a
// 12-token tree step with random masks: steps of every kind a decoding runs.
std::vector<std::vector<float>> prefill_one_and_tree(Sequence& model, int32_t prompt_seed) {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 40; ++i) prompt.push_back((i * 37 + prompt_seed) % 300);
  model.truncate(0);
  StepBatch prefill = StepBatch::causal(prompt, 0);
  logits.push_back(model.forward(prefill));
  model.commit(prefill.size());
  StepBatch one = StepBatch::causal({21}, model.n_past());
  logits.push_back(model.forward(one));
  model.commit(1);
  StepBatch tree = batch_of(12, model.n_past(), 6, true);
  logits.push_back(model.forward(tree));
  return logits;
}

// Integer products of steps over 8 tokens in matrix tiles (their plain-loop form here;
// GPUs with cooperative matrices run the instructions): the logits of a 40-token prefill
// (two token tiles), a single token and a 12-token tree step are those of the backend
// without tiles bit for bit, the tiles ran only in the wide steps, and every strategy
// still gives plain decoding's ids.
TEST_F(VulkanBackend, MatrixTilesGiveTheLogitsOfTheOtherKernels) {
  const std::string path = small_gqa_model("vk-tiles", "Q4_K_M", 9);
  auto make = [&](vulkan::MatrixTilesUse tiles) {
    vulkan::VulkanBackendOptions options;
    options.validation = true;
    options.validation_log = log_;
    options.int8_products = true;
    options.matrix_tiles = tiles;
    return load(path, vulkan::make_backend(options), 256);
  };
  Loaded tiled = make(vulkan::MatrixTilesUse::Loops);
  Loaded plain = make(vulkan::MatrixTilesUse::Off);
  EXPECT_NE(tiled.model->backend().description().find("in matrix tiles (plain loops)"), std::string::npos)
      << tiled.model->backend().description();
  EXPECT_EQ(plain.model->backend().description().find("matrix tiles"), std::string::npos);
  auto steps = [&](Loaded& m) {
    Sequence& model = *m.model;
    // The tile kernels' calls: in a 40-token prefill, then in one-token steps.
    EXPECT_EQ(model.backend().profiler()->start_profile(), "");
    model.truncate(0);
    StepBatch prefill = StepBatch::causal(std::vector<int32_t>(40, 5), 0);
    model.forward(prefill);
    const auto wide = calls_per_kernel(model.backend());
    EXPECT_EQ(model.backend().profiler()->start_profile(), "");
    StepBatch one = StepBatch::causal({12}, 0);
    model.forward(one);
    const auto narrow = calls_per_kernel(model.backend());
    return std::make_tuple(prefill_one_and_tree(model, 5), wide, narrow);
  };
  const auto [want, plain_wide, plain_narrow] = steps(plain);
  const auto [got, tiled_wide, tiled_narrow] = steps(tiled);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].size(), want[i].size());
    EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0) << "step " << i;
  }
  auto tile_calls = [](const std::map<std::string, uint64_t>& calls) {
    uint64_t n = 0;
    for (const auto& [name, count] : calls)
      if (name.find("_tiles") != std::string::npos) n += count;
    return n;
  };
  EXPECT_GT(tile_calls(tiled_wide), 0u);
  EXPECT_EQ(tile_calls(tiled_narrow), 0u);
  EXPECT_EQ(tile_calls(plain_wide), 0u);
  expect_every_strategy_equals_ar(tiled, {1, 45, 99, 7, 250, 31, 45, 99, 7, 250, 31, 8}, 40, 12, {"stream", "snapkv"});
}

TEST_F(VulkanBackend, FusedProjectionsGiveTheBitsOfSeparateKernels) {
  // One product for q, k and v and one rope_store dispatch instead of three products,
  // two rotations and two stores, and each RMSNorm inside the product after it: the
  // logits of every step (a prefill, single tokens, a multi-token step with a tree mask,
  // and a step too large for a fused norm) are equal bit for bit, with fp32 and fp16
  // caches (and on llama q8_0 and q4_0 ones: blocks quantized in the rope_store dispatch),
  // GQA, and Qwen2's biases and NEOX rotation; a policy's captured queries too.
  for (const std::string arch : {"llama", "qwen2"}) {
    for (KvCacheType kv : {KvCacheType::F32, KvCacheType::F16, KvCacheType::Q8_0, KvCacheType::Q4_0}) {
      if (arch == "qwen2" && kv_cache_type_quantized(kv)) continue;
      SCOPED_TRACE(arch + " " + kv_cache_type_name(kv) + " cache");
      synth::SyntheticConfig c;
      c.arch = arch;
      c.n_layer = 2, c.n_embd = 128, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 256, c.n_vocab = 300, c.n_ctx = 256;
      c.weight_type = arch == "llama" ? "Q8_0" : "F16";
      const std::string path = (test::temp_dir("vk-fused-" + arch) / "m.gguf").string();
      synth::write_synthetic_model(c, path);
      vulkan::VulkanBackendOptions apart_options;
      apart_options.fuse_qkv = false;
      apart_options.fuse_norm = false;
      vulkan::VulkanBackendOptions fused_options;  // the norms fused on any device (CPU devices default to apart)
      fused_options.fuse_norm = true;
      Loaded fused = load(path, vulkan::make_backend(fused_options), 128, kv);
      Loaded apart = load(path, vulkan::make_backend(apart_options), 128, kv);
      auto steps = [&](Loaded& m) {
        Sequence& model = *m.model;
        model.truncate(0);
        std::vector<std::vector<float>> logits;
        EXPECT_EQ(model.backend().profiler()->start_profile(), "");
        StepBatch prefill = StepBatch::causal({1, 45, 99, 7, 250, 31, 8}, 0);
        logits.push_back(model.forward(prefill));
        model.commit(prefill.size());
        for (int32_t t : {12, 200}) {
          StepBatch one = StepBatch::causal({t}, model.n_past());
          logits.push_back(model.forward(one));
          model.commit(1);
        }
        StepBatch tree = batch_of(5, model.n_past(), 3, true);
        logits.push_back(model.forward(tree));
        const auto calls = calls_per_kernel(model.backend());
        StepBatch large = batch_of(12, model.n_past(), 4, true);  // past the fused norm's 8 tokens
        logits.push_back(model.forward(large));
        return std::make_pair(logits, calls);
      };
      const auto [want, apart_calls] = steps(apart);
      const auto [got, fused_calls] = steps(fused);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].size(), want[i].size());
        EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0) << "step " << i;
      }
      const std::string rope_store = kv == KvCacheType::F32 ? "rope_store" : std::string("rope_store_kv_") + kv_cache_type_name(kv);
      EXPECT_EQ(fused_calls.count("rope"), 0u);
      EXPECT_EQ(fused_calls.count(rope_store) ? fused_calls.at(rope_store) : 0u, 2u * 4u);  // 2 layers, 4 steps
      EXPECT_EQ(apart_calls.count(rope_store), 0u);
      EXPECT_EQ(apart_calls.count("rope") ? apart_calls.at("rope") : 0u, 2u * 2u * 4u);
      // Steps of up to 8 tokens: no RMSNorm dispatch (2 per layer and the output's apart).
      EXPECT_EQ(fused_calls.count("rms_norm"), 0u);
      EXPECT_EQ(apart_calls.count("rms_norm") ? apart_calls.at("rms_norm") : 0u, (2u * 2u + 1u) * 4u);

      // A policy that reads queries (snapkv) gets the same ones, and FAFO the same ids.
      const std::vector<int32_t> prompt = {1, 45, 99, 7, 250, 31, 8, 45, 99, 7, 250, 31};
      auto run = [&](Loaded& m) {
        GenerationOptions o;
        o.n_predict = 24;
        o.sampling.temperature = 0;
        o.decoding.strategy = Strategy::Fafo;
        o.kv.name = "snapkv";
        o.kv.budget = 8;
        std::vector<int32_t> ids = generate(*m.model, *m.tokenizer, prompt, o).ids;
        return std::make_pair(ids, m.model->kv_cache().captured_queries(1));
      };
      const auto [ids_apart, queries_apart] = run(apart);
      const auto [ids_fused, queries_fused] = run(fused);
      EXPECT_EQ(ids_fused, ids_apart);
      EXPECT_FALSE(queries_apart.empty());
      ASSERT_EQ(queries_fused.size(), queries_apart.size());
      EXPECT_EQ(std::memcmp(queries_fused.data(), queries_apart.data(), queries_fused.size() * sizeof(float)), 0);
    }
  }
  // A Q4_K_M mix (attn_v in Q6_K in layer 1 of 2) fuses the layers whose three
  // projections share a type, and the others run apart: the same logits.
  synth::SyntheticConfig c;
  c.n_layer = 2, c.n_embd = 256, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 512, c.n_vocab = 300;
  c.weight_type = "Q4_K_M";
  const std::string path = (test::temp_dir("vk-fused-mix") / "m.gguf").string();
  synth::write_synthetic_model(c, path);
  vulkan::VulkanBackendOptions apart_options;
  apart_options.fuse_qkv = false;
  Loaded mix = load(path, make_vulkan(), 64);
  Loaded apart = load(path, vulkan::make_backend(apart_options), 64);
  ASSERT_EQ(mix.model->backend().profiler()->start_profile(), "");
  StepBatch b = StepBatch::causal({1, 2, 3, 4}, 0);
  const std::vector<float> got = mix.model->forward(b), want = apart.model->forward(b);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
  const auto calls = calls_per_kernel(mix.model->backend());
  EXPECT_EQ(calls.count("rope_store") ? calls.at("rope_store") : 0u, 1u);  // layer 0
  EXPECT_EQ(calls.count("rope") ? calls.at("rope") : 0u, 2u);              // layer 1: queries and keys
}

// Integer products round their input once however many products read it one after
// another: a layer whose q, k and v projections run apart (a Q4_K_M mix: attn_v in Q6_K
// in layer 1 of 2; or fusing turned off) rounds its normalized rows once for the three,
// and attention rounds its output in the dispatch that writes it, so every layer has 3
// rounding dispatches (attention's input, feed-forward's, its hidden rows) and the
// output head one, in steps of one token and of twelve (matrix tiles).
TEST_F(VulkanBackend, IntegerProductsRoundEachInputOnce) {
  synth::SyntheticConfig c;
  c.n_layer = 2, c.n_embd = 256, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 512, c.n_vocab = 300;
  c.weight_type = "Q4_K_M";
  const std::string path = (test::temp_dir("vk-int8-once") / "m.gguf").string();
  synth::write_synthetic_model(c, path);
  std::vector<std::vector<float>> logits;
  for (const bool fuse_qkv : {true, false}) {
    SCOPED_TRACE(fuse_qkv ? "layer 0 fused" : "fusing off");
    vulkan::VulkanBackendOptions options;
    options.int8_products = true;
    options.fuse_qkv = fuse_qkv;
    options.matrix_tiles = vulkan::MatrixTilesUse::Loops;
    Loaded m = load(path, vulkan::make_backend(options), 64);
    for (const int32_t T : {1, 12}) {
      m.model->truncate(0);
      ASSERT_EQ(m.model->backend().profiler()->start_profile(), "");
      StepBatch b = batch_of(T, 0);
      logits.push_back(m.model->forward(b));
      uint64_t roundings = 0;
      const auto calls = calls_per_kernel(m.model->backend());
      for (const auto& [name, count] : calls)
        if (name.rfind("quantize", 0) == 0) roundings += count;
      EXPECT_EQ(roundings, 3u * 2u + 1u) << "T " << T;
      // The attention output is rounded where it is written (64-value heads).
      EXPECT_EQ(calls.count("attention_combine_q8") ? calls.at("attention_combine_q8") : 0u, 2u) << "T " << T;
    }
  }
  EXPECT_EQ(logits[0], logits[2]);  // T = 1, fused or not
  EXPECT_EQ(logits[1], logits[3]);
}

// Attention by KV-head groups and tiles of rows (GPUs' default for steps of several
// rows; forced here on lavapipe): the logits of a 40-token prefill, a single token and a
// 12-token tree step equal the default mapping's bit for bit, with fp32 and fp16 caches,
// and every strategy (FAFO with a policy's COMPRESSED rows among FULL ones) still gives
// plain decoding's ids.
TEST_F(VulkanBackend, GroupedAttentionGivesTheLogitsOfTheOtherMappings) {
  const std::string path = small_gqa_model("vk-grouped", "Q8_0", 13);
  for (const KvCacheType kv : {KvCacheType::F32, KvCacheType::F16}) {
    SCOPED_TRACE(kv == KvCacheType::F16 ? "f16 cache" : "f32 cache");
    auto make = [&](std::optional<vulkan::Kernels::AttentionArgs::Mapping> mapping) {
      vulkan::VulkanBackendOptions options;
      options.validation = true;
      options.validation_log = log_;
      options.attention = mapping;
      return load(path, vulkan::make_backend(options), 256, kv);
    };
    Loaded grouped = make(vulkan::Kernels::AttentionArgs::Mapping::Grouped);
    Loaded plain = make(std::nullopt);
    const auto want = prefill_one_and_tree(*plain.model, 11);
    const auto got = prefill_one_and_tree(*grouped.model, 11);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].size(), want[i].size());
      EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0) << "step " << i;
    }
    if (kv == KvCacheType::F32)
      expect_every_strategy_equals_ar(grouped, {1, 45, 99, 7, 250, 31, 45, 99, 7, 250, 31, 8}, 40, 12,
                                      {"stream", "snapkv"});
  }
}

TEST_F(VulkanBackend, RecordedStepsReplayWithTheBitsOfNewRecordings) {
  // Every AR step after the first has the commands of the one before (n_past is in the
  // step's header, not in the commands), so it is submitted from that step's command
  // buffer: the logits of every step equal a backend's that records every step, bit
  // for bit, with fp32 and fp16 caches.
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  for (KvCacheType kv : {KvCacheType::F32, KvCacheType::F16}) {
    vulkan::VulkanBackendOptions recording;
    recording.replay = false;
    Loaded replayed = load(model_path.string(), make_vulkan(), 256, kv);
    Loaded recorded = load(model_path.string(), vulkan::make_backend(recording), 256, kv);
    auto logits = [&](Loaded& m) {
      Sequence& model = *m.model;
      model.truncate(0);
      std::vector<std::vector<float>> out;
      StepBatch prefill = StepBatch::causal({1, 45, 99, 7, 250, 31}, 0);
      out.push_back(model.forward(prefill));
      model.commit(prefill.size());
      for (int s = 0; s < 20; ++s) {
        StepBatch one = StepBatch::causal({static_cast<int32_t>(30 + 7 * s)}, model.n_past());
        out.push_back(model.forward(one));
        model.commit(1);
      }
      return out;
    };
    const vulkan::ReplayCounts before = vulkan::replay_counts(replayed.model->backend());
    const auto want = logits(recorded), got = logits(replayed);
    const vulkan::ReplayCounts after = vulkan::replay_counts(replayed.model->backend());
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0) << "step " << i;
    EXPECT_EQ(after.steps - before.steps, 21u);
    EXPECT_EQ(after.replayed - before.replayed, 19u);  // all but the prefill and the first one-token step
    EXPECT_EQ(vulkan::replay_counts(recorded.model->backend()).replayed, 0u);

    // Greedy generation with every strategy still equals AR with replays.
    const std::vector<int32_t> prompt = replayed.tokenizer->encode("Once upon a time, there was a little girl", true);
    auto run = [&](Strategy strategy) {
      GenerationOptions o;
      o.n_predict = 40;
      o.sampling.temperature = 0;
      o.decoding.strategy = strategy;
      return generate(*replayed.model, *replayed.tokenizer, prompt, o).ids;
    };
    const uint64_t replays = vulkan::replay_counts(replayed.model->backend()).replayed;
    const auto ar = run(Strategy::Ar);
    EXPECT_EQ(run(Strategy::Lookahead), ar);
    EXPECT_EQ(run(Strategy::Fafo), ar);
    EXPECT_GT(vulkan::replay_counts(replayed.model->backend()).replayed, replays + 30);
  }
}

TEST_F(VulkanBackend, AStepNamingFreedBuffersIsRecordedAgain) {
  // Destroying a KV cache frees its buffers: a step recorded over them must not be
  // replayed (a new recording reads the new cache).
  std::unique_ptr<Backend> be = make_vulkan();
  const int32_t kv_dim = 8, T = 1;
  const std::vector<float> rows = random_values(kv_dim * 2, 5);
  const Weight table = be->upload_weight(TensorType::F32, 2, kv_dim, rows.data());
  Activation k = be->alloc_activation(T, kv_dim);
  std::unique_ptr<KvCache> kv;
  auto store_step = [&](int32_t n_past) {
    StepBatch b = StepBatch::causal({n_past % 2}, n_past);
    be->begin_step(b, *kv);
    be->embed(table, k);
    kv->store(0, k, k);
    be->finish_step();
  };
  kv = be->create_kv_cache(KvCacheShape{1, 4, kv_dim, KvCacheType::F32});
  store_step(0);
  store_step(1);
  EXPECT_EQ(vulkan::replay_counts(*be).replayed, 1u);
  kv.reset();
  kv = be->create_kv_cache(KvCacheShape{1, 4, kv_dim, KvCacheType::F32});
  store_step(0);
  store_step(1);
  EXPECT_EQ(vulkan::replay_counts(*be).replayed, 2u);  // the first step over the new cache was recorded
  const std::vector<float> keys = kv->read_keys(0, {0, 1});
  EXPECT_EQ(keys, rows);  // slot 0 holds row 0 and slot 1 row 1, in the new cache
}

TEST_F(VulkanBackend, ProfileTimesEveryKernelOfTheStepsProfiled) {
  // start_profile() then steps: every dispatch is counted under its shader's name with
  // device time, the matrix products carry the weight bytes they read, and the counts
  // per step do not depend on how many steps were profiled. take_profile() stops it.
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  Loaded gpu = load(model_path.string(), make_vulkan());
  Sequence& m = *gpu.model;
  m.truncate(0);
  std::vector<int32_t> prompt = {1, 45, 99, 7};
  StepBatch first = StepBatch::causal(prompt, 0, false);
  m.forward_argmax(first);
  KernelProfile once, twice;
  for (int steps : {1, 2}) {
    ASSERT_EQ(m.backend().profiler()->start_profile(), "");
    for (int s = 0; s < steps; ++s) {
      StepBatch b = StepBatch::causal({static_cast<int32_t>(10 + s)}, m.n_past(), true);
      m.forward_argmax(b);
    }
    (steps == 1 ? once : twice) = m.backend().profiler()->take_profile();
  }
  ASSERT_EQ(once.steps, 1u);
  ASSERT_EQ(twice.steps, 2u);
  EXPECT_EQ(twice.dispatches, 2 * once.dispatches);
  EXPECT_EQ(twice.barriers, 2 * once.barriers);
  EXPECT_GT(once.barriers, 0u);
  uint64_t calls = 0, matmul_calls = 0;
  double seconds = 0;
  for (const KernelProfile::Kernel& k : once.kernels) {
    EXPECT_GT(k.calls, 0u) << k.name;
    EXPECT_GE(k.seconds, 0.0) << k.name;
    calls += k.calls;
    seconds += k.seconds;
    if (k.name.rfind("weight_matmul_", 0) == 0) {
      matmul_calls += k.calls;
      EXPECT_GT(k.bytes, 0.0) << k.name;
    }
  }
  // stories260K: per layer the products qkv (one weight), o, down and the gate with up
  // (one fused dispatch on a CPU device such as lavapipe, two elsewhere), and the output.
  ASSERT_TRUE(fuses_qkv(m.backend(), TensorType::F32, 64, 64, 64));
  const bool fused_gate = fuses_gate_up(m.backend(), TensorType::F32, 1, 64);
  EXPECT_EQ(matmul_calls, (fused_gate ? 4u : 5u) * 5u + 1u);
  EXPECT_GE(calls, once.dispatches);  // dispatches and transfers
  EXPECT_GT(seconds, 0.0);
  EXPECT_NEAR(seconds, once.step_seconds, 1e-9 + 1e-6 * once.step_seconds);
  // Not collecting any more: a later step adds nothing.
  StepBatch b = StepBatch::causal({20}, m.n_past(), true);
  m.forward_argmax(b);
  EXPECT_EQ(m.backend().profiler()->take_profile().steps, 0u);
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
  // Attention splits long rows into as many parts as a 64 MiB scratch buffer holds, or
  // the buffer range if smaller: here 400 KiB, so fewer parts and other last bits.
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4 * (1.0 + std::fabs(b[i]))) << i;

  const std::vector<int32_t> prompt = small.tokenizer->encode("Once upon a time, there was a little girl named Lily.", true);
  auto run = [&](Sequence& model, Strategy s) {
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

#endif
