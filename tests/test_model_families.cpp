// The model families beyond llama, each against llama.cpp: a small synthetic model of
// each family with the family's real vocabulary (fafo-synth's preset, F32 weights unless
// the data names a type, written by the test exactly as when the reference was made) is
// fed the reference's
// token sequences, and the logits at
// every position are compared with the ones llama.cpp computed for the same file
// (tests/data/families/*.json, made by tools/peer/families_reference.py with
// tools/peer/llama_logits.cpp; the file names the llama.cpp commit). On the cpu,
// Vulkan and reference backends: the argmax wherever llama.cpp's top two logits are more than kMargin apart, and the
// logits of llama.cpp's top 8 tokens within kLogitTolerance; then, on the cpu backend,
// every strategy's greedy ids equal plain decoding's (on cuda-emulated:
// test_cuda_host.cpp).
#include <cmath>
#include <filesystem>
#include <optional>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "convert_tokenizer.h"
#include "fafo/generator.h"
#include "fafo/sequence.h"
#include "fafo/step_batch.h"
#include "model_fixtures.h"
#include "synthetic_model.h"
#include "test_support.h"

namespace {

using namespace fafo;

// F32 weights and an F32 cache on both sides: the logits differ only by the order of
// float additions (llama.cpp's SIMD dot products, fafo's tree and lanes).
constexpr double kLogitTolerance = 1e-3;
constexpr double kMargin = 1e-3;

struct Reference {
  std::string preset;
  // The vocabulary: a vocab GGUF in ../shared, or a tokenizer.json there converted by
  // fafo::convert (both empty: the preset's synthetic one).
  std::string vocab_shared, vocab_converted_from;
  int32_t n_ctx = 0;  // the context both sides ran with
  int32_t n_vocab = 0;
  // The largest logit difference allowed: kLogitTolerance unless the data states a
  // wider one and why (logit_tolerance, tolerance_reason).
  double logit_tolerance = kLogitTolerance;
  // fafo-synth's weight type (F32 unless the data says "weights"), and the top-2 margin
  // above which the argmax must agree (kMargin unless the data says "argmax_margin": for
  // weights whose products llama.cpp computes with activations rounded to 8 bits).
  std::string weights = "F32";
  double margin = kMargin;
  std::vector<std::vector<int32_t>> prompts;
  // Per prompt and position: llama.cpp's top tokens (best first) and their logits.
  std::vector<std::vector<std::vector<std::pair<int32_t, float>>>> top;
};

Reference read_reference(const std::string& name) {
  const std::string text = test::read_text(test::source_path("tests/data/families/" + name + ".json"));
  if (text.empty()) throw std::runtime_error("no reference data " + name);
  const nlohmann::json j = nlohmann::json::parse(text);
  Reference r;
  r.preset = j.at("preset");
  r.n_ctx = j.at("n_ctx");
  r.n_vocab = j.at("n_vocab");
  if (j.contains("logit_tolerance")) {
    r.logit_tolerance = j.at("logit_tolerance");
    if (j.value("tolerance_reason", "").empty()) throw std::runtime_error(name + ": a wider tolerance needs its reason");
  }
  r.weights = j.value("weights", "F32");
  r.margin = j.value("argmax_margin", kMargin);
  r.vocab_shared = j.at("vocab").value("shared", "");
  r.vocab_converted_from = j.at("vocab").value("converted_from", "");
  r.prompts = j.at("prompts").get<std::vector<std::vector<int32_t>>>();
  for (const auto& prompt : j.at("top")) {
    r.top.emplace_back();
    for (const auto& position : prompt) {
      r.top.back().emplace_back();
      for (const auto& entry : position) r.top.back().back().push_back({entry.at(0).get<int32_t>(), entry.at(1).get<float>()});
    }
  }
  return r;
}

// The preset's model as the reference was made from it (its weight type, seed 1, its
// vocabulary); "" when ../shared lacks the vocabulary.
std::string write_family_model(const Reference& ref) {
  std::optional<synth::SyntheticConfig> c = synth::preset(ref.preset);
  if (!c) throw std::runtime_error("no preset " + ref.preset);
  c->weight_type = ref.weights;
  const std::filesystem::path dir = test::temp_dir("family-" + ref.preset + "-" + ref.weights);
  if (!ref.vocab_shared.empty()) {
    c->vocab_from = test::shared_path(ref.vocab_shared).string();
    if (!std::filesystem::exists(c->vocab_from)) return "";
  } else if (!ref.vocab_converted_from.empty()) {
    const std::filesystem::path json = test::shared_path(ref.vocab_converted_from);
    if (!std::filesystem::exists(json)) return "";
    c->vocab_from = (dir / "vocab.gguf").string();
    convert::write_vocab_gguf(convert::from_hf_tokenizer(json, {}), c->vocab_from);
  }
  const std::string path = (dir / "m.gguf").string();
  synth::write_synthetic_model(*c, path);
  return path;
}

struct Agreement {
  int positions = 0, compared = 0, agreed = 0;
  double largest_difference = 0.0;
};

// Teacher-forced: each reference sequence in one causal step, logits for every position.
Agreement compare_with_llama_cpp(Sequence& model, const Reference& ref, size_t prompts) {
  Agreement a;
  const int32_t n_vocab = model.config().n_vocab;
  for (size_t p = 0; p < prompts; ++p) {
    model.truncate(0);
    StepBatch batch = StepBatch::causal(ref.prompts[p], 0, true);
    const std::vector<float> logits = model.forward(batch);
    for (size_t i = 0; i < ref.prompts[p].size(); ++i) {
      const float* row = logits.data() + i * static_cast<size_t>(n_vocab);
      const auto& top = ref.top[p][i];
      ++a.positions;
      for (const auto& [id, value] : top)
        a.largest_difference = std::max(a.largest_difference, std::fabs(double{row[id]} - value));
      if (top[0].second - top[1].second <= ref.margin) continue;
      ++a.compared;
      int32_t best = 0;
      for (int32_t v = 1; v < n_vocab; ++v)
        if (row[v] > row[best]) best = v;
      a.agreed += best == top[0].first;
    }
  }
  return a;
}

std::vector<int32_t> greedy(test::TestModel& m, const std::vector<int32_t>& prompt, Strategy s, const std::string& policy) {
  GenerationOptions o;
  o.n_predict = 16;
  o.sampling.temperature = 0;
  o.decoding.strategy = s;
  o.kv.name = policy;
  o.kv.budget = 12;
  o.stop_at_end_of_generation = false;  // a random model may well pick the end early
  m.model->truncate(0);
  return generate(*m.model, *m.tokenizer, prompt, o).ids;
}

// The reference data `name` (tests/data/families/<name>.json) on each backend.
void check_family(const std::string& name) {
  const Reference ref = read_reference(name);
  ASSERT_EQ(ref.prompts.size(), 5u);
  const std::string& preset = ref.preset;
  const std::string path = write_family_model(ref);
  if (path.empty())
    GTEST_SKIP() << "../shared lacks the vocabulary of " << name << " (tests read ../shared beside the checkout)";
  for (const std::string backend : {"cpu", "vulkan", "reference"}) {
    SCOPED_TRACE(backend);
    std::unique_ptr<test::TestModel> m;
    try {
      m = std::make_unique<test::TestModel>(test::load_test_model(path, ref.n_ctx, 2, backend));
    } catch (const std::exception& e) {
      if (backend != "vulkan") throw;
      std::printf("  %s: no Vulkan device (%s), skipped\n", backend.c_str(), e.what());
      continue;
    }
    Sequence& model = *m->model;
    // The reference backend (plain loops) on the first sequence only: the whole set
    // costs it minutes at Qwen3's 151,669 logits per position.
    const size_t prompts = backend == "reference" ? 1 : ref.prompts.size();
    const Agreement a = compare_with_llama_cpp(model, ref, prompts);
    std::printf("  %s (context %d) on %s: argmax = llama.cpp's at %d of %d positions compared (%d in all, top-2 margin > %g); "
                "largest logit difference %.3g\n",
                preset.c_str(), ref.n_ctx, backend.c_str(), a.agreed, a.compared, a.positions, ref.margin, a.largest_difference);
    EXPECT_EQ(model.config().n_vocab, ref.n_vocab);
    EXPECT_EQ(a.positions, static_cast<int>(prompts) * 64);
    EXPECT_GT(a.compared, a.positions * (ref.margin > kMargin ? 5 : 9) / 10);
    EXPECT_EQ(a.agreed, a.compared);
    EXPECT_LT(a.largest_difference, ref.logit_tolerance);

    if (backend != "cpu") continue;
    const std::vector<int32_t> prompt(ref.prompts[0].begin(), ref.prompts[0].begin() + 16);
    const std::vector<int32_t> ar = greedy(*m, prompt, Strategy::Ar, "stream");
    ASSERT_EQ(ar.size(), 16u);
    EXPECT_EQ(greedy(*m, prompt, Strategy::Jacobi, "stream"), ar);
    EXPECT_EQ(greedy(*m, prompt, Strategy::Lookahead, "stream"), ar);
    for (const std::string policy : {"stream", "snapkv"}) EXPECT_EQ(greedy(*m, prompt, Strategy::Fafo, policy), ar) << policy;
  }
}

// Phi-3: the query, key and value projections in one tensor and the gate's and up
// projection's in one (split where a backend does not fuse them), NEOX RoPE with
// LongRoPE's short factors (a context up to the original 256) or long ones (512), and
// its attention factor; Phi-4-mini's shape: 12 of each head's 16 dimensions rotated
// (the attention factor on those only), tied embeddings, the long factors (512).
TEST(ModelFamilies, Phi3MatchesLlamaCppOnEveryBackend) {
  check_family("phi3-tiny");
  check_family("phi3-tiny-long");
  check_family("phi4-mini-tiny");
}

TEST(ModelFamilies, Qwen3MatchesLlamaCppOnEveryBackend) {
  // Per-head Q and K RMSNorms before NEOX RoPE, heads wider than n_embd / n_head, tied
  // embeddings.
  check_family("qwen3-tiny");
}

// Qwen3-MoE: Qwen3's attention; each feed-forward block a mixture of 8 experts of 32
// hidden units, 2 per token (softmax over the router's logits, the best two, their
// weights divided by their sum), llama.cpp d32676d7. The strategies then run where a
// step's rows route to different experts.
TEST(ModelFamilies, Qwen3MoeMatchesLlamaCppOnEveryBackend) { check_family("qwen3moe-tiny"); }

// gpt-oss: biases on the query, key, value and output projections; a sink per head in
// each row's softmax; a sliding window of 16 on layer 0 (period 2); NEOX RoPE with YaRN
// (factor 32 from 4096, base 150,000: the ramp falls inside the 16 pairs); a router with
// a bias whose 4 largest of 8 logits are weighted by their softmax; experts with biases
// and the clamped SwiGLU (gates and ups wide enough to reach the clamps at 7),
// llama.cpp d32676d7.
TEST(ModelFamilies, GptOssMatchesLlamaCppOnEveryBackend) { check_family("gpt-oss-tiny"); }

// The codebook formats IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S (fafo reads them, fafo-synth
// writes random codes at the weights' magnitude) in a llama model whose rows are whole
// 256-value super-blocks, llama.cpp d32676d7. llama.cpp multiplies them with activations
// rounded to 8 bits and fafo's backends in floats: the data states the tolerance.
TEST(ModelFamilies, CodebookFormatsMatchLlamaCppOnEveryBackend) {
  for (const char* type : {"IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ3_S"}) {
    SCOPED_TRACE(type);
    check_family(std::string("grid-tiny-") + type);
  }
}

// Gemma 2: embeddings scaled by sqrt(n_embd), GeGLU, RMSNorms after the attention and
// the feed-forward blocks, soft-capped attention scores and logits (at 1 and 20 here,
// where this model's scores and logits reach about 1 and 35: both bend), tied
// embeddings, and a sliding window of 24 positions on layer 0 (of the two; period 2),
// which the 64 positions of each sequence pass: both sides mask the keys outside it.
TEST(ModelFamilies, Gemma2MatchesLlamaCppOnEveryBackend) { check_family("gemma2-tiny"); }

// Gemma 3: Gemma 2's blocks without soft-capping, Q and K head norms before RoPE, a
// sliding window of 16 on layer 0 (the file's pattern 2) rotating with base 10,000, and
// layer 1 global with base 1,000,000 and linear scaling by 8. Within 3e-3 (the data
// says why: llama.cpp's fp16 GELU table at logits up to 78; 1.5e-5 without it).
TEST(ModelFamilies, Gemma3MatchesLlamaCppOnEveryBackend) { check_family("gemma3-tiny"); }

// The window and RoPE of each layer as llama.cpp reads them: Gemma 3's default period 6
// (five local layers, then a global one) and base 10,000 on the local layers, Gemma 2's
// alternate layers rotating as the global ones.
TEST(ModelFamilies, SlidingWindowLayersAndTheirRoPE) {
  std::optional<synth::SyntheticConfig> c = synth::preset("gemma3-tiny");
  ASSERT_TRUE(c);
  c->n_layer = 12;
  c->swa_pattern = 0;  // not written: the default period
  const std::filesystem::path dir = test::temp_dir("family-windows");
  synth::write_synthetic_model(*c, (dir / "g3.gguf").string());
  const ModelConfig g3 = ModelConfig::from_gguf(*GgufFile::open((dir / "g3.gguf").string()));
  for (int32_t l = 0; l < 12; ++l) {
    const bool global = l % 6 == 5;
    EXPECT_EQ(g3.window_of(l), global ? 0 : 16) << l;
    EXPECT_EQ(g3.rope_of(l).freq_base, global ? 1000000.0f : 10000.0f) << l;
    EXPECT_EQ(g3.rope_of(l).freq_scale, global ? 0.125f : 1.0f) << l;
  }
  c = synth::preset("gemma2-tiny");
  c->n_layer = 4;
  c->rope_base = 20000.0f;
  synth::write_synthetic_model(*c, (dir / "g2.gguf").string());
  const ModelConfig g2 = ModelConfig::from_gguf(*GgufFile::open((dir / "g2.gguf").string()));
  for (int32_t l = 0; l < 4; ++l) {
    EXPECT_EQ(g2.window_of(l), l % 2 == 0 ? 24 : 0) << l;
    EXPECT_EQ(g2.rope_of(l).freq_base, 20000.0f) << l;
  }
}

}  // namespace
