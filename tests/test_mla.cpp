// Multi-head latent attention (MLA) models, as fafo-care writes them: the model reads
// the fafo.mla.* keys and the latent projections, keeps latents in the KV cache and
// recovers keys (RoPE after the up-projection) and values in attention. An MLA file whose
// down-projection is the original key/value projection and whose up-projection is the
// identity is the original model, so its logits must equal the original's; a truncated
// one is a different model on which every strategy must still equal plain decoding,
// and every backend that runs MLA must agree with the reference.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "fafo/backend.h"
#include "fafo/generator.h"
#include "fafo/gguf.h"
#include "fafo/model.h"
#include "model_fixtures.h"
#include "test_support.h"

using namespace fafo;

namespace {

std::vector<uint8_t> float_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Writes `in` as an MLA file: each layer's latent key/value is the first ranks[l] outputs
// of its key/value projection (the whole projection at rank kv_dim) and the
// up-projection puts them back in place (zeros in the other dimensions).
void write_mla_copy(const std::string& in, const std::string& out, const std::vector<int32_t>& rank_k,
                    const std::vector<int32_t>& rank_v) {
  auto file = GgufFile::open(in);
  const ModelConfig c = ModelConfig::from_gguf(*file);
  GgufWriter w;
  for (const auto& [key, value] : file->metadata())
    if (key != "general.alignment") w.set(key, value);
  w.set_string("fafo.mla.method", "svd");
  w.set_i32_array("fafo.mla.rank_k", rank_k);
  w.set_i32_array("fafo.mla.rank_v", rank_v);
  const int64_t kv_dim = c.kv_dim(), n_embd = c.n_embd;
  for (const GgufTensor& t : file->tensors()) {
    const bool is_k = t.name.find(".attn_k.weight") != std::string::npos;
    const bool is_v = t.name.find(".attn_v.weight") != std::string::npos;
    if (!is_k && !is_v) {
      w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
      continue;
    }
    const int32_t layer = std::stoi(t.name.substr(4));
    const int64_t r = (is_k ? rank_k : rank_v)[static_cast<size_t>(layer)];
    std::vector<float> down(static_cast<size_t>(r * n_embd));
    for (int64_t row = 0; row < r; ++row)
      dequantize_row(t.type, t.data + static_cast<size_t>(row) * tensor_row_bytes(t.type, n_embd),
                     down.data() + row * n_embd, n_embd);
    std::vector<float> up(static_cast<size_t>(kv_dim * r), 0.0f);
    for (int64_t i = 0; i < r; ++i) up[static_cast<size_t>(i * r + i)] = 1.0f;
    const std::string base = t.name.substr(0, t.name.size() - std::string(".weight").size());
    w.add_tensor(base + "_a.weight", TensorType::F32, {n_embd, r}, float_bytes(down));
    w.add_tensor(base + "_b.weight", TensorType::F32, {r, kv_dim}, float_bytes(up));
  }
  w.write(out);
}

std::unique_ptr<Model> open_on(const std::string& path, const std::string& backend, int32_t n_ctx = 256) {
  std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  return std::make_unique<Model>(file, make_backend(BackendSpec{backend, "", 2}), ModelOptions{n_ctx});
}

std::vector<float> logits_of(Model& m, const std::vector<int32_t>& tokens) {
  m.truncate(0);
  StepBatch b = StepBatch::causal(tokens, 0, true);
  std::vector<float> out = m.forward(b);
  m.commit(b.size());
  return out;
}

const std::vector<int32_t> kPrompt = {1, 403, 261, 379, 285, 271, 266, 297, 263, 295, 260, 302, 414, 317, 270, 260};

std::string stories() { return test::shared_path("models/stories260K.gguf").string(); }

std::vector<int32_t> ranks(const ModelConfig& c, int32_t each) { return std::vector<int32_t>(static_cast<size_t>(c.n_layer), each); }

}  // namespace

TEST(Mla, FullRankIdentityFactorsGiveTheOriginalLogitsExactly) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-identity");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories()));
  const std::string mla = (dir / "mla.gguf").string();
  write_mla_copy(stories(), mla, ranks(c, c.kv_dim()), ranks(c, c.kv_dim()));
  for (const char* backend : {"reference", "cpu"}) {
    auto original = open_on(stories(), backend);
    auto latent = open_on(mla, backend);
    ASSERT_TRUE(latent->config().mla());
    EXPECT_EQ(latent->kv_cache().shape().floats_per_entry(), original->kv_cache().shape().floats_per_entry());
    EXPECT_EQ(logits_of(*latent, kPrompt), logits_of(*original, kPrompt)) << backend;
    // And the keys a policy reads are the original's, recovered from the latents.
    for (int32_t layer = 0; layer < c.n_layer; ++layer)
      EXPECT_EQ(latent->committed_keys(layer, 3, 9), original->committed_keys(layer, 3, 9)) << backend << " layer " << layer;
  }
}

TEST(Mla, LatentCacheHoldsOnlyTheRanks) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-ranks");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories()));
  std::vector<int32_t> rk, rv;
  for (int32_t l = 0; l < c.n_layer; ++l) {
    rk.push_back(1 + (l * 5) % c.kv_dim());
    rv.push_back(c.kv_dim() / 2 + l % 3);
  }
  const std::string mla = (dir / "mla.gguf").string();
  write_mla_copy(stories(), mla, rk, rv);
  auto m = open_on(mla, "reference");
  int64_t want = 0;
  for (int32_t l = 0; l < c.n_layer; ++l) want += rk[static_cast<size_t>(l)] + rv[static_cast<size_t>(l)];
  EXPECT_EQ(m->config().kv_floats_per_token(), want);
  EXPECT_EQ(m->kv_cache().shape().floats_per_entry(), want);
  EXPECT_LT(want, c.kv_floats_per_token());
  EXPECT_EQ(m->backend().memory_in_use() > 0, true);
}

// The reference is the oracle: the cpu backend computes an MLA model within its declared
// tolerance, and a row's logits do not depend on the step's size (T-invariance).
TEST(Mla, CpuMatchesTheReferenceAndIsTInvariant) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-conformance");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories()));
  const std::string mla = (dir / "mla.gguf").string();
  write_mla_copy(stories(), mla, ranks(c, c.kv_dim() / 2), ranks(c, c.kv_dim() / 4));
  auto ref = open_on(mla, "reference");
  auto cpu = open_on(mla, "cpu");
  const std::vector<float> want = logits_of(*ref, kPrompt);
  const std::vector<float> got = logits_of(*cpu, kPrompt);
  ASSERT_EQ(got.size(), want.size());
  const double tol = cpu->backend().numerics().tolerance_for(false);
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_LE(std::fabs(got[i] - want[i]), tol * std::max(1.0, std::fabs(static_cast<double>(want[i])))) << i;
  for (auto* m : {ref.get(), cpu.get()}) {
    // The last token's logits: computed in a step of 16 above, and alone after a 15-token prefix.
    const int32_t n_vocab = m->config().n_vocab;
    const std::vector<float> batched = logits_of(*m, kPrompt);
    m->truncate(0);
    StepBatch prefix = StepBatch::causal(std::vector<int32_t>(kPrompt.begin(), kPrompt.end() - 1), 0);
    m->forward(prefix);
    m->commit(prefix.size());
    StepBatch one = StepBatch::causal({kPrompt.back()}, m->n_past());
    const std::vector<float> alone = m->forward(one);
    EXPECT_EQ(alone, std::vector<float>(batched.end() - n_vocab, batched.end())) << m->backend().name();
  }
}

// Every strategy, with and without a compressed KV region, emits plain decoding's tokens
// on an MLA model.
TEST(Mla, EveryStrategyEqualsArOnAnMlaModel) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-lossless");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories()));
  const std::string mla = (dir / "mla.gguf").string();
  write_mla_copy(stories(), mla, ranks(c, c.kv_dim() - 8), ranks(c, c.kv_dim() - 4));
  auto m = test::load_test_model(mla, 512);
  const std::vector<int32_t> prompt(kPrompt.begin(), kPrompt.begin() + 6);
  auto run = [&](Strategy s, KvPolicyOptions kv) {
    GenerationOptions o;
    o.n_predict = 120;
    o.sampling.temperature = 0;
    o.kv = kv;
    o.decoding.strategy = s;
    return generate(*m.model, *m.tokenizer, prompt, o);
  };
  const GenerationResult ar = run(Strategy::Ar, {});
  ASSERT_EQ(ar.ids.size(), 120u);
  // FAFO's fumble rows read a region: stream's (positions only) and snapkv's (chosen by
  // the captured queries against the keys recovered from the latents).
  KvPolicyOptions snapkv;
  snapkv.name = "snapkv";
  snapkv.budget = 24;
  snapkv.recent = 8;
  snapkv.window = 4;
  for (const KvPolicyOptions& kv : {KvPolicyOptions{}, snapkv})
    for (Strategy s : {Strategy::Jacobi, Strategy::Lookahead, Strategy::Fafo}) {
      const GenerationResult r = run(s, kv);
      EXPECT_EQ(r.ids, ar.ids) << strategy_name(s) << " policy " << kv.name;
      if (s != Strategy::Jacobi) {
        EXPECT_LT(r.n_steps, ar.n_steps) << strategy_name(s);
      }
    }
}

TEST(Mla, BadMlaFilesAreClearErrors) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-errors");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories()));
  const std::string wrong_count = (dir / "count.gguf").string();
  std::vector<int32_t> few(static_cast<size_t>(c.n_layer - 1), 4);
  write_mla_copy(stories(), wrong_count, ranks(c, 4), ranks(c, 4));
  {
    // Ranks that disagree with the tensors' shapes.
    auto f = GgufFile::open(wrong_count);
    GgufWriter w;
    for (const auto& [key, value] : f->metadata())
      if (key != "general.alignment") w.set(key, value);
    w.set_i32_array("fafo.mla.rank_k", ranks(c, 5));
    for (const GgufTensor& t : f->tensors()) w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    const std::string bad = (dir / "shape.gguf").string();
    w.write(bad);
    try {
      open_on(bad, "reference");
      ADD_FAILURE() << "a rank that disagrees with the tensors loaded";
    } catch (const GgufError& e) {
      EXPECT_NE(std::string(e.what()).find("attn_k_a.weight"), std::string::npos) << e.what();
    }
    w.set_i32_array("fafo.mla.rank_k", few);
    w.write(bad);
    try {
      open_on(bad, "reference");
      ADD_FAILURE() << "too few ranks loaded";
    } catch (const GgufError& e) {
      EXPECT_NE(std::string(e.what()).find("ranks for"), std::string::npos) << e.what();
    }
  }
}
