// Layer splits (fafo/model_weights.h DevicePart, fafo/step_runner.h): a model's layers on
// two backends, each layer's weights and KV cache on its device, the residual stream
// crossing once a step. Two cpu devices give the bits of one; the cpu backend with the
// reference or lavapipe stays within the backends' tolerance at every boundary; every
// strategy and KV policy gives plain decoding's tokens on a split; joined steps too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fafo/backend_registry.h"
#include "fafo/generator.h"
#include "fafo/open_model.h"
#include "joined_steps_check.h"
#include "model_fixtures.h"
#include "synthetic_model.h"
#include "test_support.h"

namespace fafo {
namespace {

// The model's first `first_layers` layers on `first`, the rest on `second`.
std::shared_ptr<StepRunner> split_runner(const std::shared_ptr<const GgufFile>& file, const std::string& first,
                                         int32_t first_layers, const std::string& second) {
  std::vector<DevicePart> devices;
  devices.push_back(DevicePart{make_backend(BackendSpec{first, "", 2}), first_layers});
  devices.push_back(DevicePart{make_backend(BackendSpec{second, "", 2}), 0});
  return std::make_shared<StepRunner>(std::make_unique<ModelWeights>(file, std::move(devices)));
}

std::shared_ptr<StepRunner> one_device(const std::shared_ptr<const GgufFile>& file, const std::string& backend) {
  return std::make_shared<StepRunner>(file, make_backend(BackendSpec{backend, "", 2}));
}

const std::vector<int32_t> kSplitPrompt = {1, 403, 407, 261, 378, 429, 66, 275, 389, 271};

// The logits of a prefill of kSplitPrompt (every row), then of three steps of two tokens. With
// `policy`, in its lossy mode: once the prompt is in, every row reads only the region
// the policy picks (COMPRESSED rows; quest's dense layers read everything).
std::vector<float> step_logits(const std::shared_ptr<StepRunner>& runner, const KvPolicyOptions* policy = nullptr,
                               const std::vector<int32_t>& prompt = kSplitPrompt) {
  SequenceOptions options;
  options.n_ctx = 64;
  Sequence seq(runner, options);
  if (policy) seq.set_kv_policy(make_kv_policy(*policy), /*drop=*/true);
  StepBatch prefill = StepBatch::causal(prompt, 0, /*logits_for_all=*/true);
  std::vector<float> all = seq.forward(prefill);
  seq.commit(prefill.size());
  seq.end_prefill();
  for (int32_t token : {300, 301, 302}) {
    StepBatch two = StepBatch::causal({token, token + 10}, 0, /*logits_for_all=*/true);
    const std::vector<float> logits = seq.forward(two);
    all.insert(all.end(), logits.begin(), logits.end());
    seq.commit(1);
  }
  return all;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(double{a[i]} - double{b[i]}));
  return d;
}

double rms(const std::vector<float>& a) {
  double s = 0.0;
  for (float v : a) s += double{v} * v;
  return std::sqrt(s / static_cast<double>(std::max<size_t>(1, a.size())));
}

std::shared_ptr<const GgufFile> split_test_model() { return GgufFile::open(test::shared_path("models/stories260K.gguf").string()); }

// Whether a Vulkan device exists here ("" when one does: the reason otherwise).
std::string no_vulkan() {
  try {
    make_backend(BackendSpec{"vulkan", "", 2});
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

// Greedy generation with every strategy and a few KV policies on `runner`: each gives the
// tokens of plain decoding on the same runner.
void expect_every_strategy_equals_ar(const std::shared_ptr<StepRunner>& runner, const std::string& what) {
  SequenceOptions options;
  options.n_ctx = 256;
  const Tokenizer tokenizer(Vocab::from_gguf(runner->file()));
  const std::vector<int32_t> prompt = tokenizer.encode("Once upon a time, there was a little girl named Lily", true);
  int64_t swaps = 0;  // of the last run's sequence (its first device's cache)
  auto run = [&](Strategy s, const KvPolicyOptions& kv) {
    GenerationOptions o;
    o.n_predict = 80;
    o.sampling.temperature = 0;
    o.kv = kv;
    o.decoding.strategy = s;
    Sequence seq(runner, options);
    GenerationResult r = generate(seq, tokenizer, prompt, o);
    swaps = seq.kv_swaps();
    return r;
  };
  const GenerationResult ar = run(Strategy::Ar, {});
  EXPECT_EQ(ar.ids.size(), 80u) << what;
  KvPolicyOptions snapkv;
  snapkv.name = "snapkv";
  snapkv.budget = 24;
  snapkv.recent = 8;
  snapkv.window = 4;
  KvPolicyOptions quest = snapkv;  // dense layers on both sides of the boundary
  quest.name = "quest";
  quest.page = 4;
  quest.dense_layers = 3;
  quest.update_interval = 2;
  for (const KvPolicyOptions& kv : {KvPolicyOptions{}, snapkv, quest})
    for (Strategy s : {Strategy::Jacobi, Strategy::Lookahead, Strategy::Fafo}) {
      const GenerationResult r = run(s, kv);
      EXPECT_EQ(r.ids, ar.ids) << what << " " << strategy_name(s) << " policy " << kv.name;
      if (s == Strategy::Fafo && kv.name != "stream") {
        EXPECT_GT(swaps, 0) << what << " " << kv.name << ": the policy's region exchanged entries";
      }
    }
}

TEST(LayerSplit, TwoCpuDevicesGiveTheBitsOfOneAtEveryBoundary) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto file = split_test_model();
  const std::vector<float> whole = step_logits(one_device(file, "cpu"));
  const int32_t n_layer = ModelConfig::from_gguf(*file).n_layer;
  for (int32_t k = 1; k < n_layer; ++k) {
    const auto runner = split_runner(file, "cpu", k, "cpu");
    ASSERT_EQ(runner->weights().n_devices(), 2);
    EXPECT_EQ(runner->weights().first_layer(1), k);
    EXPECT_EQ(runner->weights().device_of(k - 1), 0);
    EXPECT_EQ(runner->weights().device_of(k), 1);
    EXPECT_EQ(step_logits(runner), whole) << "boundary after layer " << k;
  }
}

// The region on both sides of the boundary: a sequence whose rows read only the region a
// policy picked (its entries exchanged in every device's cache; quest's first three
// layers dense, so the boundary falls among and after them) gets one device's bits.
TEST(LayerSplit, TheRegionIsTheSameOnEveryDevice) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto file = split_test_model();
  KvPolicyOptions snapkv;
  snapkv.name = "snapkv";
  snapkv.budget = 6;
  snapkv.recent = 2;
  snapkv.window = 4;
  KvPolicyOptions quest = snapkv;
  quest.name = "quest";
  quest.page = 2;
  quest.dense_layers = 3;
  quest.update_interval = 1;
  for (const KvPolicyOptions& policy : {snapkv, quest}) {
    const std::vector<float> whole = step_logits(one_device(file, "cpu"), &policy);
    EXPECT_NE(whole, step_logits(one_device(file, "cpu"))) << policy.name << ": the region changes the logits";
    for (int32_t k = 1; k < 5; ++k)
      EXPECT_EQ(step_logits(split_runner(file, "cpu", k, "cpu"), &policy), whole)
          << policy.name << ", boundary after layer " << k;
  }
}

// The other families on two cpu devices, at every boundary: tied embeddings uploaded
// again for the head (Qwen3, Gemma), per-head Q/K norms (Qwen3, Gemma 3), fused tensors
// and LongRoPE (Phi-3), the embedding scale, soft-caps and sliding windows (Gemma 2, 3),
// a mixture of experts (Qwen3-MoE; gpt-oss's biases and sinks) give one device's bits.
TEST(LayerSplit, EveryFamilyOnTwoCpuDevicesGivesTheBitsOfOne) {
  const auto dir = test::temp_dir("layer-split-families");
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 24; ++i) prompt.push_back(3 + (i * 37) % 250);
  for (const char* name : {"qwen3-tiny", "phi3-tiny", "gemma2-tiny", "gemma3-tiny", "qwen3moe-tiny", "gpt-oss-tiny"}) {
    std::optional<synth::SyntheticConfig> c = synth::preset(name);
    ASSERT_TRUE(c.has_value()) << name;
    const std::string path = (dir / (std::string(name) + ".gguf")).string();
    synth::write_synthetic_model(*c, path);
    const std::shared_ptr<const GgufFile> file = GgufFile::open(path);
    const int32_t n_layer = ModelConfig::from_gguf(*file).n_layer;
    ASSERT_GE(n_layer, 2) << name;
    const std::vector<float> whole = step_logits(one_device(file, "cpu"), nullptr, prompt);
    for (int32_t k = 1; k < n_layer; ++k)
      EXPECT_EQ(step_logits(split_runner(file, "cpu", k, "cpu"), nullptr, prompt), whole)
          << name << ", boundary after layer " << k;
  }
}

TEST(LayerSplit, CpuAndReferenceStayWithinTheTolerance) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto file = split_test_model();
  const std::vector<float> reference = step_logits(one_device(file, "reference"));
  const int32_t n_layer = ModelConfig::from_gguf(*file).n_layer;
  for (int32_t k = 1; k < n_layer; ++k)
    for (const auto& [first, second] : {std::pair<std::string, std::string>{"cpu", "reference"}, {"reference", "cpu"}}) {
      const std::vector<float> split = step_logits(split_runner(file, first, k, second));
      EXPECT_LE(max_abs_diff(split, reference), 1e-4 * std::max(1.0, rms(reference)))
          << first << " then " << second << ", boundary after layer " << k;
    }
}

TEST(LayerSplit, EveryStrategyAndPolicyEqualsArOnASplit) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto file = split_test_model();
  expect_every_strategy_equals_ar(split_runner(file, "cpu", 2, "reference"), "cpu 2 + reference 3");
  expect_every_strategy_equals_ar(split_runner(file, "reference", 4, "cpu"), "reference 4 + cpu 1");
}

TEST(LayerSplit, JoinedStepsGiveEachPartTheBitsOfItsStepAlone) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto file = split_test_model();
  const Tokenizer tokenizer(Vocab::from_gguf(*file));
  test::check_joined_steps(split_runner(file, "cpu", 3, "reference"), tokenizer);
}

TEST(LayerSplit, LavapipeAndCpuAtEveryBoundary) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  if (const std::string why = no_vulkan(); !why.empty()) GTEST_SKIP() << why;
  const auto file = split_test_model();
  const std::vector<float> cpu = step_logits(one_device(file, "cpu"));
  const int32_t n_layer = ModelConfig::from_gguf(*file).n_layer;
  for (int32_t k = 1; k < n_layer; ++k)
    for (const auto& [first, second] : {std::pair<std::string, std::string>{"cpu", "vulkan"}, {"vulkan", "cpu"}}) {
      const std::vector<float> split = step_logits(split_runner(file, first, k, second));
      EXPECT_LE(max_abs_diff(split, cpu), 1e-3 * std::max(1.0, rms(cpu)))
          << first << " then " << second << ", boundary after layer " << k;
    }
  expect_every_strategy_equals_ar(split_runner(file, "cpu", 2, "vulkan"), "cpu 2 + vulkan 3");
  expect_every_strategy_equals_ar(split_runner(file, "vulkan", 3, "cpu"), "vulkan 3 + cpu 2");
}

TEST(LayerSplit, BadSplitsAreClearErrors) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto file = split_test_model();
  auto expect_refused = [&](int32_t first_layers, int32_t second_layers, const std::string& words) {
    std::vector<DevicePart> devices;
    devices.push_back(DevicePart{make_backend(BackendSpec{"cpu", "", 1}), first_layers});
    devices.push_back(DevicePart{make_backend(BackendSpec{"cpu", "", 1}), second_layers});
    try {
      ModelWeights weights(file, std::move(devices));
      ADD_FAILURE() << first_layers << "+" << second_layers << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_refused(0, 5, "at least one");
  expect_refused(5, 0, "at least one");  // the rest is none
  expect_refused(6, 1, "no more than the model has");
  expect_refused(2, 2, "places 4 of the 5 layers");
  EXPECT_THROW(ModelWeights(file, std::vector<DevicePart>{}), std::invalid_argument);
}

TEST(LayerSplit, OpenModelPutsTheLastGpuLayersOnTheBackend) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenOptions options;
  options.path = model_path.string();
  options.backend = BackendSpec{"reference", "", 2};
  options.n_ctx = 128;
  options.gpu_layers = 2;
  const OpenedModel split = open_model(options);
  const ModelWeights& w = split.model->runner()->weights();
  ASSERT_EQ(w.n_devices(), 2);
  EXPECT_EQ(w.backend(0).name(), "cpu");
  EXPECT_EQ(w.backend(1).name(), "reference");
  EXPECT_EQ(w.first_layer(1), 3);
  EXPECT_EQ(split.model->backend().name(), "reference");  // the output head's
  for (const int32_t n : {-1, 5, 99}) {
    options.gpu_layers = n;
    const OpenedModel m = open_model(options);
    EXPECT_EQ(m.model->runner()->weights().n_devices(), 1) << n;
    EXPECT_EQ(m.model->backend().name(), "reference") << n;
  }
  options.gpu_layers = 0;
  EXPECT_EQ(open_model(options).model->backend().name(), "cpu");
  // The split generates plain decoding's text of the cpu backend alone.
  options.gpu_layers = 2;
  OpenedModel again = open_model(options);
  options.backend = BackendSpec{"cpu", "", 2};
  options.gpu_layers = -1;
  OpenedModel cpu = open_model(options);
  const std::vector<int32_t> prompt = cpu.tokenizer->encode("Lily and Tom", true);
  GenerationOptions o;
  o.n_predict = 24;
  o.sampling.temperature = 0;
  EXPECT_EQ(generate(*again.model, *again.tokenizer, prompt, o).ids, generate(*cpu.model, *cpu.tokenizer, prompt, o).ids);
}

}  // namespace
}  // namespace fafo

namespace fafo {
namespace {

// `fafo run --gpu-layers N` says where the layers are and answers; FAFO on the split
// prints plain decoding's text; a negative count other than -1 is refused.
TEST(LayerSplit, RunWithGpuLayersSaysWhereTheLayersAre) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const std::string base = "run -m " + test::shell_quote(model_path) + " -p 'Once upon a time' -n 24 --temp 0 --backend reference";
  const test::CommandResult ar = test::run_fafo(base + " --gpu-layers 2 --strategy ar");
  ASSERT_EQ(ar.exit_code, 0) << ar.err;
  EXPECT_HAS(ar.err, "layers 0-2 on cpu, 3-4 on reference");
  const test::CommandResult fafo = test::run_fafo(base + " --gpu-layers 2 --strategy fafo");
  ASSERT_EQ(fafo.exit_code, 0) << fafo.err;
  EXPECT_EQ(fafo.out, ar.out);
  const test::CommandResult whole = test::run_fafo(base);
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(whole.err.find("layers 0-"), std::string::npos) << whole.err;
  const test::CommandResult bad = test::run_fafo(base + " --gpu-layers -2");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_HAS(bad.err, "--gpu-layers");
}

}  // namespace
}  // namespace fafo

namespace fafo {
namespace {

// --gpu-layers auto fits the layers to the backend's free memory (here the reference
// backend under a memory limit): all where they fit, some where only some fit (the model
// still loads under the limit and answers as the cpu backend alone does), none where not
// even the output head fits; the note says what it measured.
TEST(LayerSplit, AutoFitsTheLayersToTheBackendsFreeMemory) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto file = split_test_model();
  OpenOptions options;
  options.path = model_path.string();
  options.backend = BackendSpec{"reference", "", 2};
  options.n_ctx = 128;
  options.gpu_layers = OpenOptions::kGpuLayersAuto;
  const OpenedModel all = open_model(options);
  EXPECT_EQ(all.model->runner()->weights().n_devices(), 1);
  EXPECT_EQ(all.model->backend().name(), "reference");
  EXPECT_EQ(all.placement_note, "");

  const uint64_t two = device_bytes_for_layers(*file, 2, 128, KvCacheType::F32);
  const uint64_t three = device_bytes_for_layers(*file, 3, 128, KvCacheType::F32);
  ASSERT_LT(two, three);
  options.backend.memory_limit = (two + three) / 2;
  const OpenedModel split = open_model(options);
  const ModelWeights& w = split.model->runner()->weights();
  ASSERT_EQ(w.n_devices(), 2);
  EXPECT_EQ(w.backend(1).name(), "reference");
  EXPECT_EQ(w.layer_count(1), 2);
  EXPECT_LE(memory_in_use(w.backend(1)), options.backend.memory_limit);
  EXPECT_HAS(split.placement_note, "its last 2 of 5 layers there");
  OpenOptions cpu_options = options;
  cpu_options.backend = BackendSpec{"cpu", "", 2};
  cpu_options.gpu_layers = -1;
  const OpenedModel cpu = open_model(cpu_options);
  const std::vector<int32_t> prompt = cpu.tokenizer->encode("Lily and Tom", true);
  GenerationOptions o;
  o.n_predict = 16;
  o.sampling.temperature = 0;
  o.decoding.strategy = Strategy::Fafo;
  EXPECT_EQ(generate(*split.model, *split.tokenizer, prompt, o).ids, generate(*cpu.model, *cpu.tokenizer, prompt, o).ids);

  options.backend.memory_limit = device_bytes_for_layers(*file, 1, 128, KvCacheType::F32) - 1;
  const OpenedModel none = open_model(options);
  EXPECT_EQ(none.model->backend().name(), "cpu");
  EXPECT_HAS(none.placement_note, "every layer on the cpu backend");
}

}  // namespace
}  // namespace fafo
