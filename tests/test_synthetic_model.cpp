// The synthetic-model tool: files it writes load and run, in every format and in
// odd shapes; quantized files stay close to their F32 twin; batched and one-token
// steps agree; the Q4_K_M mix matches llama.cpp's recipe.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "fafo/generator.h"
#include "model_fixtures.h"
#include "test_support.h"

using namespace fafo;

namespace {

synth::SyntheticConfig odd_config(const std::string& type) {
  synth::SyntheticConfig c;
  c.n_layer = 3;
  c.n_embd = 96;  // not a multiple of 256: K-quants fall back like llama.cpp
  c.n_head = 6;
  c.n_head_kv = 2;
  c.n_ff = 160;
  c.n_vocab = 301;
  c.n_ctx = 64;
  c.weight_type = type;
  c.seed = 7;
  return c;
}

std::string write_model(const synth::SyntheticConfig& c, const std::string& name) {
  const auto path = (test::temp_dir("synth-" + name) / (name + ".gguf")).string();
  synth::write_synthetic_model(c, path);
  return path;
}

// Logits for every position of `tokens`, computed as one batch.
std::vector<float> batch_logits(Sequence& m, const std::vector<int32_t>& tokens) {
  m.truncate(0);
  StepBatch b = StepBatch::causal(tokens, 0, true);
  auto out = m.forward(b);
  m.commit(b.size());
  return out;
}

// The same, one token per step.
std::vector<float> stepwise_logits(Sequence& m, const std::vector<int32_t>& tokens) {
  m.truncate(0);
  std::vector<float> out;
  for (int32_t t : tokens) {
    StepBatch b = StepBatch::causal({t}, m.n_past());
    auto l = m.forward(b);
    m.commit(1);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

double rms(const std::vector<float>& a) {
  double s = 0.0;
  for (float x : a) s += static_cast<double>(x) * x;
  return std::sqrt(s / static_cast<double>(a.size()));
}

const std::vector<int32_t> kTokens = {1, 300, 17, 259, 42, 42, 120, 5, 260};

}  // namespace

class SyntheticFormats : public ::testing::TestWithParam<const char*> {};

static synth::SyntheticConfig aligned_config(const std::string& type) {
  synth::SyntheticConfig c = odd_config(type);
  c.n_layer = 2, c.n_embd = 256, c.n_head = 8, c.n_head_kv = 4, c.n_ff = 512;
  return c;
}

static void check_close_to_f32(const std::string& type, bool aligned) {
  const auto config = aligned ? aligned_config : odd_config;
  auto f32 = test::load_test_model(write_model(config("F32"), "f32"));
  auto q = test::load_test_model(write_model(config(type), "fmt"));
  EXPECT_EQ(q.model->config().n_layer, aligned ? 2 : 3);
  EXPECT_EQ(q.model->config().n_head_kv, aligned ? 4 : 2);
  const auto ref = batch_logits(*f32.model, kTokens);
  const auto got = batch_logits(*q.model, kTokens);
  ASSERT_EQ(got.size(), kTokens.size() * 301);
  for (float x : got) ASSERT_TRUE(std::isfinite(x));
  // Relative RMS error of the logits grows with the format's coarseness.
  std::vector<float> diff(ref.size());
  for (size_t i = 0; i < ref.size(); ++i) diff[i] = got[i] - ref[i];
  const double rel = rms(diff) / rms(ref);
  // Bounds at about twice the errors measured with fafo's quantizers (printed below).
  static const std::map<std::string, double> bounds = {
      {"F32", 0.0},  {"F16", 0.005}, {"BF16", 0.02}, {"Q8_0", 0.05}, {"Q6_K", 0.1},   {"Q5_0", 0.25},  {"Q5_1", 0.2},
      {"Q5_K", 0.2}, {"Q5_K_M", 0.2}, {"Q4_0", 0.45}, {"Q4_1", 0.4}, {"Q4_K", 0.4}, {"Q4_K_M", 0.35}, {"Q3_K", 0.75},
      {"Q2_K", 1.2}, {"IQ4_NL", 0.4}, {"IQ4_XS", 0.4}, {"MXFP4", 0.6}};
  const double bound = bounds.at(type) + 1e-12;
  EXPECT_LT(rel, bound) << type;
  std::printf("%s (%s rows): relative RMS logit error vs F32 %.4f\n", type.c_str(), aligned ? "256-aligned" : "odd", rel);
  if (type == "F32") {
    EXPECT_EQ(rel, 0.0);
  }
}

TEST_P(SyntheticFormats, OddShapesLoadRunAndStayCloseToF32) { check_close_to_f32(GetParam(), false); }
TEST_P(SyntheticFormats, AlignedShapesLoadRunAndStayCloseToF32) { check_close_to_f32(GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(EveryFormat, SyntheticFormats,
                         ::testing::Values("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K",
                                           "Q4_K", "Q5_K", "Q6_K", "Q4_K_M", "Q5_K_M", "IQ4_NL", "IQ4_XS", "MXFP4"));

TEST(SyntheticModel, KQuantsAtBlockAlignedShapes) {
  // Rows of 256: K-quant blocks are used as such (no fallback).
  synth::SyntheticConfig c = odd_config("Q4_K_M");
  c.n_embd = 256, c.n_head = 8, c.n_head_kv = 4, c.n_ff = 512, c.n_layer = 2;
  auto m = test::load_test_model(write_model(c, "kq"));
  EXPECT_EQ(m.file->require_tensor("blk.0.attn_q.weight").type, TensorType::Q4_K);
  EXPECT_EQ(m.file->require_tensor("blk.0.ffn_down.weight").type, TensorType::Q4_K);
  // llama.cpp's Q4_K_M recipe on 2 layers (see golden/quant/README.md): output,
  // blk.1.attn_v and blk.1.ffn_down get Q6_K.
  EXPECT_EQ(m.file->require_tensor("output.weight").type, TensorType::Q6_K);
  EXPECT_EQ(m.file->require_tensor("blk.1.attn_v.weight").type, TensorType::Q6_K);
  EXPECT_EQ(m.file->require_tensor("blk.1.ffn_down.weight").type, TensorType::Q6_K);
  EXPECT_EQ(m.file->require_tensor("blk.0.attn_v.weight").type, TensorType::Q4_K);
  EXPECT_EQ(m.file->require_tensor("blk.0.attn_norm.weight").type, TensorType::F32);
  const auto logits = batch_logits(*m.model, kTokens);
  for (float x : logits) ASSERT_TRUE(std::isfinite(x));
}

TEST(SyntheticModel, OddRowsFallBackLikeLlamaCpp) {
  const auto c = odd_config("Q4_K");
  EXPECT_EQ(synth::tensor_type_for(c, "blk.0.attn_q.weight", 96), TensorType::Q5_0);
  EXPECT_EQ(synth::tensor_type_for(c, "blk.0.attn_q.weight", 256), TensorType::Q4_K);
  EXPECT_EQ(synth::tensor_type_for(odd_config("Q6_K"), "x.weight", 96), TensorType::Q8_0);
  EXPECT_EQ(synth::tensor_type_for(odd_config("Q8_0"), "x.weight", 100), TensorType::F16);
  EXPECT_THROW(synth::tensor_type_for(odd_config("Q7_X"), "x.weight", 256), std::invalid_argument);
}

TEST(SyntheticModel, Llama3_8bPresetHasTheRealShapesAndMix) {
  const auto c = synth::preset("llama3-8b");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->n_embd, 4096);
  EXPECT_EQ(c->n_ff, 14336);
  EXPECT_EQ(c->n_head_kv, 8);
  EXPECT_EQ(c->n_vocab, 128256);
  EXPECT_EQ(c->weight_type, "Q4_K_M");
  // The layers llama.cpp gives Q6_K in Llama-3-8B Q4_K_M files (use_more_bits over 32 layers).
  std::vector<int> q6;
  for (int l = 0; l < 32; ++l)
    if (synth::tensor_type_for(*c, "blk." + std::to_string(l) + ".ffn_down.weight", 14336) == TensorType::Q6_K) q6.push_back(l);
  EXPECT_EQ(q6, (std::vector<int>{0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}));
  EXPECT_EQ(synth::tensor_type_for(*c, "output.weight", 4096), TensorType::Q6_K);
  EXPECT_EQ(synth::tensor_type_for(*c, "token_embd.weight", 4096), TensorType::Q4_K);
  // Phi-3's fused attn_qkv: Q5_K in Q4_K_M files, Q6_K in Q5_K_M ones (llama.cpp's mix).
  const auto phi = synth::preset("phi3-mini");
  ASSERT_TRUE(phi.has_value());
  EXPECT_EQ(synth::tensor_type_for(*phi, "blk.3.attn_qkv.weight", 3072), TensorType::Q5_K);
  synth::SyntheticConfig phi5 = *phi;
  phi5.weight_type = "Q5_K_M";
  EXPECT_EQ(synth::tensor_type_for(phi5, "blk.3.attn_qkv.weight", 3072), TensorType::Q6_K);
}

TEST(SyntheticModel, BatchedStepEqualsOneTokenSteps) {
  auto m = test::load_test_model(write_model(odd_config("Q8_0"), "steps"));
  const auto a = batch_logits(*m.model, kTokens);
  const auto b = stepwise_logits(*m.model, kTokens);
  EXPECT_LT(max_abs_diff(a, b), 1e-4 * std::max(1.0, rms(a)));
}

TEST(SyntheticModel, Qwen2WithBiasTiedEmbeddingsAndNeoxRope) {
  synth::SyntheticConfig c = odd_config("F16");
  c.arch = "qwen2";
  c.tied_embeddings = true;
  auto m = test::load_test_model(write_model(c, "qwen2"));
  EXPECT_EQ(m.model->config().arch, "qwen2");
  EXPECT_TRUE(m.model->config().qkv_bias);
  EXPECT_TRUE(m.model->config().tied_embeddings);
  EXPECT_TRUE(m.model->config().rope.neox);
  EXPECT_EQ(m.file->find_tensor("output.weight"), nullptr);
  const auto a = batch_logits(*m.model, kTokens);
  const auto b = stepwise_logits(*m.model, kTokens);
  EXPECT_LT(max_abs_diff(a, b), 1e-4 * std::max(1.0, rms(a)));
}

TEST(SyntheticModel, Qwen3WithHeadNormsAndHeadsWiderThanDimOverHeads) {
  std::optional<synth::SyntheticConfig> c = synth::preset("qwen3-tiny");
  ASSERT_TRUE(c);
  auto m = test::load_test_model(write_model(*c, "qwen3"));
  const ModelConfig& config = m.model->config();
  EXPECT_EQ(config.arch, "qwen3");
  EXPECT_TRUE(config.qk_norm);
  EXPECT_FALSE(config.qkv_bias);
  EXPECT_TRUE(config.rope.neox);
  EXPECT_EQ(config.head_dim, 32);  // attention.key_length, not 64 / 4
  EXPECT_NE(m.file->find_tensor("blk.1.attn_q_norm.weight"), nullptr);
  const auto a = batch_logits(*m.model, kTokens);
  const auto b = stepwise_logits(*m.model, kTokens);
  EXPECT_LT(max_abs_diff(a, b), 1e-4 * std::max(1.0, rms(a)));
  c->head_dim = 33;
  EXPECT_THROW(synth::validate(*c), std::invalid_argument);
}

TEST(SyntheticModel, Phi3WithFusedTensorsAndLongRopeFactorsChosenByTheContext) {
  std::optional<synth::SyntheticConfig> c = synth::preset("phi3-tiny");
  ASSERT_TRUE(c);
  const std::string path = write_model(*c, "phi3");
  auto m = test::load_test_model(path, 256);
  const ModelConfig& config = m.model->config();
  EXPECT_EQ(config.arch, "phi3");
  EXPECT_TRUE(config.fused_tensors());
  EXPECT_TRUE(config.rope.neox);
  EXPECT_EQ(config.rope_original_ctx, 256);
  EXPECT_NEAR(config.rope_attn_factor, std::sqrt(1.0 + std::log(4.0) / std::log(256.0)), 1e-6);
  EXPECT_EQ(m.model->runner()->rope_of(0).freq_factors, config.rope_factors_short);  // a context of 256: the short factors
  EXPECT_TRUE(config.rope.freq_factors.empty());  // the weights' own RoPE holds neither set
  EXPECT_NE(m.file->find_tensor("blk.0.attn_qkv.weight"), nullptr);
  EXPECT_EQ(m.file->find_tensor("blk.0.ffn_gate.weight"), nullptr);
  const auto a = batch_logits(*m.model, kTokens);
  const auto b = stepwise_logits(*m.model, kTokens);
  EXPECT_LT(max_abs_diff(a, b), 1e-4 * std::max(1.0, rms(a)));
  // A second sequence on the same weights with a context past 256 would need the long
  // factors while the first uses the short ones: a clear error, and the first goes on.
  SequenceOptions longer;
  longer.n_ctx = 512;
  EXPECT_THROW(Sequence(m.model->runner(), longer), std::invalid_argument);
  EXPECT_EQ(batch_logits(*m.model, kTokens), a);
  {
    SequenceOptions shorter;
    shorter.n_ctx = 200;  // short factors too (200 rounds up to 256)
    Sequence second(m.model->runner(), shorter);
    EXPECT_EQ(batch_logits(second, kTokens), a);
  }
  // Once no sequence uses the short factors, a long context may open on the same weights.
  const std::shared_ptr<StepRunner> runner = m.model->runner();
  m.model.reset();
  Sequence long_on_same(runner, longer);
  EXPECT_EQ(runner->rope_of(0).freq_factors, long_on_same.config().rope_factors_long);
  auto long_context = test::load_test_model(path, 512);
  EXPECT_EQ(long_context.model->runner()->rope_of(0).freq_factors, long_context.model->config().rope_factors_long);
  EXPECT_GT(max_abs_diff(batch_logits(*long_context.model, kTokens), a), 1e-3);
}

TEST(SyntheticModel, Llama3RopeScalingChangesLongPositionsOnly) {
  // Like the Hub's Llama 3.1/3.2 GGUFs: the scaling is a rope_freqs.weight tensor of
  // per-pair divisors, with no rope.scaling.* metadata.
  synth::SyntheticConfig plain = odd_config("F32");
  synth::SyntheticConfig scaled = plain;
  scaled.rope_scaling = "llama3";
  auto a = test::load_test_model(write_model(plain, "rope-plain"));
  auto b = test::load_test_model(write_model(scaled, "rope-llama3"));
  EXPECT_EQ(a.file->find_tensor("rope_freqs.weight"), nullptr);
  for (const auto& [key, value] : b.file->metadata())
    EXPECT_EQ(key.find("rope.scaling"), std::string::npos) << key << " should not be written for llama3 scaling";

  // The divisors llama.cpp's converter computes (factor 8, low/high frequency factors 1
  // and 4, original context 8192), for head_dim 16 and base 10000.
  std::vector<float> expected;
  for (int i = 0; i < 16; i += 2) {
    const double wavelen = 2.0 * M_PI * std::pow(10000.0, i / 16.0);
    double d = 1.0;
    if (wavelen > 8192.0) {
      d = 8.0;
    } else if (wavelen >= 8192.0 / 4.0) {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      d = 1.0 / ((1.0 - smooth) / 8.0 + smooth);
    }
    expected.push_back(static_cast<float>(d));
  }
  const GgufTensor* rf = b.file->find_tensor("rope_freqs.weight");
  ASSERT_NE(rf, nullptr);
  EXPECT_EQ(rf->type, TensorType::F32);
  ASSERT_EQ(rf->shape, (std::vector<int64_t>{8}));  // head_dim 16 -> 8 pairs
  std::vector<float> stored(8);
  std::memcpy(stored.data(), rf->data, sizeof(float) * 8);
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(stored[i], expected[i], 1e-5 * expected[i]) << "pair " << i;
  EXPECT_EQ(synth::llama3_rope_freqs(scaled), stored);
  // Some pair lies between the two wavelength bounds, so the interpolation is exercised.
  EXPECT_TRUE(std::any_of(stored.begin(), stored.end(), [](float v) { return v > 1.0f && v < 8.0f; }));

  const auto& f = b.model->config().rope.freq_factors;
  EXPECT_EQ(f, stored);
  EXPECT_TRUE(a.model->config().rope.freq_factors.empty());
  EXPECT_FLOAT_EQ(f.front(), 1.0f);  // highest frequency kept
  EXPECT_FLOAT_EQ(f.back(), 8.0f);   // lowest frequency slowed by the factor
  const auto la = batch_logits(*a.model, kTokens), lb = batch_logits(*b.model, kTokens);
  // Position 0 is not rotated, so the first row is identical; later rows differ.
  EXPECT_EQ(std::vector<float>(la.begin(), la.begin() + 301), std::vector<float>(lb.begin(), lb.begin() + 301));
  EXPECT_GT(max_abs_diff(la, lb), 1e-4);
}

TEST(SyntheticModel, LinearRopeScalingIsMetadata) {
  synth::SyntheticConfig c = odd_config("F32");
  c.rope_scaling = "linear";
  c.rope_scaling_factor = 4.0f;
  auto m = test::load_test_model(write_model(c, "rope-linear"));
  EXPECT_EQ(m.file->get_string("llama.rope.scaling.type", ""), "linear");
  EXPECT_EQ(m.file->get_float("llama.rope.scaling.factor", 0.0), 4.0);
  EXPECT_EQ(m.file->find_tensor("rope_freqs.weight"), nullptr);
  EXPECT_FLOAT_EQ(m.model->config().rope.freq_scale, 0.25f);
  EXPECT_TRUE(m.model->config().rope.freq_factors.empty());
}

TEST(SyntheticModel, TiedEmbeddingsGetTheOutputTypeInKQuantMixes) {
  // llama.cpp: without output.weight, token_embd is quantized like output (Q6_K, or
  // Q8_0 when its rows are not a multiple of 256).
  for (const char* mix : {"Q4_K_M", "Q5_K_M"}) {
    synth::SyntheticConfig c = aligned_config(mix);
    c.tied_embeddings = true;
    EXPECT_EQ(synth::tensor_type_for(c, "token_embd.weight", 256), TensorType::Q6_K) << mix;
    EXPECT_EQ(synth::tensor_type_for(c, "token_embd.weight", 96), TensorType::Q8_0) << mix;
    c.tied_embeddings = false;
    EXPECT_EQ(synth::tensor_type_for(c, "token_embd.weight", 256), mix == std::string("Q4_K_M") ? TensorType::Q4_K
                                                                                                 : TensorType::Q5_K);
  }
  // Pure single-type files keep token_embd in their type.
  synth::SyntheticConfig pure = aligned_config("Q4_K");
  pure.tied_embeddings = true;
  EXPECT_EQ(synth::tensor_type_for(pure, "token_embd.weight", 256), TensorType::Q4_K);

  synth::SyntheticConfig c = aligned_config("Q4_K_M");
  c.tied_embeddings = true;
  auto m = test::load_test_model(write_model(c, "tied-q4km"));
  EXPECT_EQ(m.file->find_tensor("output.weight"), nullptr);
  EXPECT_EQ(m.file->require_tensor("token_embd.weight").type, TensorType::Q6_K);
  EXPECT_TRUE(m.model->config().tied_embeddings);
  synth::SyntheticConfig odd = odd_config("Q5_K_M");
  odd.tied_embeddings = true;
  auto n = test::load_test_model(write_model(odd, "tied-q5km-odd"));
  EXPECT_EQ(n.file->require_tensor("token_embd.weight").type, TensorType::Q8_0);
  for (float x : batch_logits(*n.model, kTokens)) ASSERT_TRUE(std::isfinite(x));
}

TEST(SyntheticModel, FileTypeIdsFollowLlamaCpp) {
  const std::map<std::string, uint32_t> ids = {
      {"F32", 0},   {"F16", 1},   {"Q4_0", 2},  {"Q4_1", 3},  {"Q8_0", 7},    {"Q5_0", 8},    {"Q5_1", 9},
      {"Q2_K", 10}, {"Q3_K", 11}, {"Q4_K", 14}, {"Q5_K", 16}, {"Q6_K", 18}, {"Q4_K_M", 15}, {"Q5_K_M", 17}, {"BF16", 32},
      {"IQ4_NL", 25}, {"IQ4_XS", 30}, {"MXFP4", 38}, {"MXFP4_MOE", 38}};
  for (const auto& [type, id] : ids) EXPECT_EQ(synth::file_type_id(type), id) << type;
  EXPECT_EQ(synth::file_type_id("q4_k_m"), 15u);
  EXPECT_THROW(synth::file_type_id("Q7_X"), std::invalid_argument);
  for (const auto& [type, id] : std::map<std::string, uint32_t>{{"Q4_K", 14}, {"Q5_K_M", 17}, {"Q3_K", 11}}) {
    synth::SyntheticConfig c = odd_config(type);
    c.n_layer = 1;
    const auto file = GgufFile::open(write_model(c, "ftype-" + type));
    EXPECT_EQ(file->get_int("general.file_type", -1), static_cast<int64_t>(id)) << type;
  }
}

TEST(SyntheticModel, VocabularyTokenizesAndRoundTrips) {
  auto c = odd_config("F32");
  c.n_vocab = 2000;
  auto m = test::load_test_model(write_model(c, "vocab"));
  const Tokenizer& t = *m.tokenizer;
  EXPECT_EQ(t.vocab().size(), 2000);
  const std::string text = "Once upon a time the little girl said: \"héllo\" 42!";
  const auto ids = t.encode(text, true);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_LT(ids.size(), text.size() / 2);  // whole-word tokens were used
  EXPECT_EQ(t.decode(std::vector<int32_t>(ids.begin() + 1, ids.end())), text);
}

TEST(SyntheticModel, InvalidConfigurationsAreRejected) {
  auto c = odd_config("F32");
  c.n_head = 5;  // 96 % 5 != 0
  EXPECT_THROW(synth::validate(c), std::invalid_argument);
  c = odd_config("F32");
  c.n_vocab = 100;
  EXPECT_THROW(synth::validate(c), std::invalid_argument);
  c = odd_config("F32");
  c.arch = "gpt2";
  EXPECT_THROW(synth::validate(c), std::invalid_argument);
  c = odd_config("F32");
  c.rope_scaling = "llama3";
  c.rope_scaling_factor = 0.0f;
  EXPECT_THROW(synth::validate(c), std::invalid_argument);
}
