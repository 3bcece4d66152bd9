// Multi-head latent attention (MLA) models, as fafo-care writes them: the model reads
// the fafo.mla.* keys and the latent projections, keeps latents in the KV cache and
// recovers keys (RoPE after the up-projection) and values in attention. An MLA file whose
// down-projection is the original key/value projection and whose up-projection is the
// identity is the original model, so its logits must equal the original's; a truncated
// one is a different model on which every strategy must still equal plain decoding,
// and every backend that runs MLA must agree with the reference (the Vulkan backend's
// tests run where a Vulkan device exists, else they are skipped).
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>

#include "fafo/backend.h"
#include "fafo/backend_registry.h"
#include "fafo/generator.h"
#include "fafo/gguf.h"
#include "fafo/sequence.h"
#include "fafo/open_model.h"
#include "faulty_backend.h"
#include "joined_steps_check.h"
#include "model_fixtures.h"
#include "test_support.h"
#if FAFO_HAVE_VULKAN
#include "backend/vulkan/vulkan_backend.h"
#endif

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

std::unique_ptr<Sequence> open_mla_on(const std::string& path, const std::string& backend, int32_t n_ctx = 256,
                               KvCacheType kv_type = KvCacheType::F32) {
  std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  SequenceOptions options{n_ctx};
  options.kv_type = kv_type;
  return std::make_unique<Sequence>(file, make_backend(BackendSpec{backend, "", 2}), options);
}

// Why the Vulkan tests cannot run here ("" when they can).
std::string no_vulkan_reason() {
  const BackendInfo* vulkan = find_backend("vulkan");
  if (!vulkan) return "this build has no Vulkan backend";
  if (vulkan->devices().empty()) return "no Vulkan device found";
  return "";
}

// How far a whole model's results on `backend` may be from the reference's: the backend's
// declared tolerance with an f32 cache. With an f16 cache, a stored value that differs
// from the reference's in its last bits may round to the neighbouring half (a relative
// step of 2^-10), which later layers carry on: stories260K's logits then differ by up
// to about 4e-3 on the plain model too, so 1e-2.
double model_tolerance(const Backend& backend, KvCacheType type) {
  return type == KvCacheType::F16 ? 1e-2 : backend.numerics().tolerance_for(false);
}

// Every value within `tol` of the reference's (relative to max(1, |want|)).
void expect_within_tolerance(double tol, const std::vector<float>& got, const std::vector<float>& want,
                             const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_LE(std::fabs(got[i] - want[i]), tol * std::max(1.0, std::fabs(static_cast<double>(want[i])))) << what << " logit " << i;
}

std::vector<float> logits_of(Sequence& m, const std::vector<int32_t>& tokens) {
  m.truncate(0);
  StepBatch b = StepBatch::causal(tokens, 0, true);
  std::vector<float> out = m.forward(b);
  m.commit(b.size());
  return out;
}

const std::vector<int32_t> kMlaPrompt = {1, 403, 261, 379, 285, 271, 266, 297, 263, 295, 260, 302, 414, 317, 270, 260};

std::string stories_path() { return test::shared_path("models/stories260K.gguf").string(); }

std::vector<int32_t> ranks(const ModelConfig& c, int32_t each) { return std::vector<int32_t>(static_cast<size_t>(c.n_layer), each); }

// The MLA copy of stories260K the lossless tests decode (ranks a little below kv_dim), in dir.
std::string lossless_mla_copy(const std::filesystem::path& dir) {
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories_path()));
  const std::string mla = (dir / "mla.gguf").string();
  write_mla_copy(stories_path(), mla, ranks(c, c.kv_dim() - 8), ranks(c, c.kv_dim() - 4));
  return mla;
}

// The last token's logits of kMlaPrompt: computed in one step (`batched`), and alone after
// a 15-token prefix, are the same bits (T-invariance).
void expect_t_invariant(Sequence& m, const std::vector<float>& batched) {
  const int32_t n_vocab = m.config().n_vocab;
  m.truncate(0);
  StepBatch prefix = StepBatch::causal(std::vector<int32_t>(kMlaPrompt.begin(), kMlaPrompt.end() - 1), 0);
  m.forward(prefix);
  m.commit(prefix.size());
  StepBatch one = StepBatch::causal({kMlaPrompt.back()}, m.n_past());
  const std::vector<float> alone = m.forward(one);
  EXPECT_EQ(alone, std::vector<float>(batched.end() - n_vocab, batched.end())) << m.backend().name();
}

// Greedy ids of plain decoding, then of every strategy with the default KV policy and
// with snapkv (FAFO's fumble rows read a region: stream's, by positions only, and
// snapkv's, chosen by the captured queries against the keys recovered from the
// latents) and, with every_policy, quest's (pages scored by the recovered keys) and
// chunks'; they must equal plain decoding's, which it returns. speckv needs a draft
// model and scores as snapkv does.
std::vector<int32_t> expect_every_strategy_equals_ar(const std::string& path, const std::string& backend,
                                                     bool every_policy = false) {
  OpenOptions options;
  options.path = path;
  options.backend = BackendSpec{backend, "", 2};
  if (backend.find(',') != std::string::npos) options.split = parse_split(backend);  // a layer split
  options.n_ctx = 512;
  test::TestModel m = open_model(options);
  const std::vector<int32_t> prompt(kMlaPrompt.begin(), kMlaPrompt.begin() + 6);
  auto run = [&](Strategy s, KvPolicyOptions kv) {
    GenerationOptions o;
    o.n_predict = 120;
    o.sampling.temperature = 0;
    o.kv = kv;
    o.decoding.strategy = s;
    return generate(*m.model, *m.tokenizer, prompt, o);
  };
  const GenerationResult ar = run(Strategy::Ar, {});
  EXPECT_EQ(ar.ids.size(), 120u) << backend;
  KvPolicyOptions snapkv;
  snapkv.name = "snapkv";
  snapkv.budget = 24;
  snapkv.recent = 8;
  snapkv.window = 4;
  std::vector<KvPolicyOptions> policies = {KvPolicyOptions{}, snapkv};
  if (every_policy)
    for (const char* name : {"quest", "chunks"}) {
      KvPolicyOptions kv = snapkv;
      kv.name = name;
      kv.page = 4;
      kv.chunk = 4;
      kv.dense_layers = 1;
      kv.update_interval = 2;
      policies.push_back(kv);
    }
  for (const KvPolicyOptions& kv : policies)
    for (Strategy s : {Strategy::Jacobi, Strategy::Lookahead, Strategy::Fafo}) {
      const GenerationResult r = run(s, kv);
      EXPECT_EQ(r.ids, ar.ids) << backend << " " << strategy_name(s) << " policy " << kv.name;
      if (s != Strategy::Jacobi) {
        EXPECT_LT(r.n_steps, ar.n_steps) << backend << " " << strategy_name(s);
      }
    }
  return ar.ids;
}

}  // namespace

TEST(Mla, FullRankIdentityFactorsGiveTheOriginalLogitsExactly) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-identity");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories_path()));
  const std::string mla = (dir / "mla.gguf").string();
  write_mla_copy(stories_path(), mla, ranks(c, c.kv_dim()), ranks(c, c.kv_dim()));
  for (const char* backend : {"reference", "cpu"}) {
    auto original = open_mla_on(stories_path(), backend);
    auto latent = open_mla_on(mla, backend);
    ASSERT_TRUE(latent->config().mla());
    EXPECT_EQ(latent->kv_cache().shape().floats_per_entry(), original->kv_cache().shape().floats_per_entry());
    EXPECT_EQ(logits_of(*latent, kMlaPrompt), logits_of(*original, kMlaPrompt)) << backend;
    // And the keys a policy reads are the original's, recovered from the latents.
    for (int32_t layer = 0; layer < c.n_layer; ++layer)
      EXPECT_EQ(latent->committed_keys(layer, 3, 9), original->committed_keys(layer, 3, 9)) << backend << " layer " << layer;
  }
}

TEST(Mla, LatentCacheHoldsOnlyTheRanks) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-ranks");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories_path()));
  std::vector<int32_t> rk, rv;
  for (int32_t l = 0; l < c.n_layer; ++l) {
    rk.push_back(1 + (l * 5) % c.kv_dim());
    rv.push_back(c.kv_dim() / 2 + l % 3);
  }
  const std::string mla = (dir / "mla.gguf").string();
  write_mla_copy(stories_path(), mla, rk, rv);
  auto m = open_mla_on(mla, "reference");
  int64_t want = 0;
  for (int32_t l = 0; l < c.n_layer; ++l) want += rk[static_cast<size_t>(l)] + rv[static_cast<size_t>(l)];
  EXPECT_EQ(m->config().kv_floats_per_token(), want);
  EXPECT_EQ(m->kv_cache().shape().floats_per_entry(), want);
  EXPECT_LT(want, c.kv_floats_per_token());
  // The cache's memory: latents plus one layer's recovered keys and values per entry.
  auto twice = open_mla_on(mla, "reference", 512);
  EXPECT_EQ(memory_in_use(twice->backend()) - memory_in_use(m->backend()),
            uint64_t{256} * sizeof(float) * static_cast<uint64_t>(want + 2 * c.kv_dim()));
}

// `fafo bench --attention` on an MLA file times the latent attention of its first layer
// (the plain file's table has no ranks).
TEST(Mla, BenchAttentionMeasuresTheLatentAttention) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-bench-attention");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories_path()));
  const std::string mla = (dir / "mla.gguf").string();
  write_mla_copy(stories_path(), mla, ranks(c, 5), ranks(c, 11));
  const std::string args = " --attention --contexts 64,200 --rows 3 -r 1 -t 1";
  const test::CommandResult latent = test::run_fafo("bench -m " + test::shell_quote(mla) + " --backend cpu" + args);
  ASSERT_EQ(latent.exit_code, 0) << latent.err;
  EXPECT_NE(latent.out.find("MLA latent ranks K 5 / V 11"), std::string::npos) << latent.out;
  EXPECT_NE(latent.out.find("| 64 |"), std::string::npos) << latent.out;
  EXPECT_NE(latent.out.find("| 200 |"), std::string::npos) << latent.out;
  const test::CommandResult plain = test::run_fafo("bench -m " + test::shell_quote(stories_path()) + " --backend cpu" + args);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out.find("MLA"), std::string::npos) << plain.out;
}

// The reference is the oracle: the cpu backend computes an MLA model within its declared
// tolerance, and a row's logits do not depend on the step's size (T-invariance).
TEST(Mla, CpuMatchesTheReferenceAndIsTInvariant) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-conformance");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories_path()));
  const std::string mla = (dir / "mla.gguf").string();
  write_mla_copy(stories_path(), mla, ranks(c, c.kv_dim() / 2), ranks(c, c.kv_dim() / 4));
  auto ref = open_mla_on(mla, "reference");
  auto cpu = open_mla_on(mla, "cpu");
  const std::vector<float> want = logits_of(*ref, kMlaPrompt);
  expect_within_tolerance(model_tolerance(cpu->backend(), KvCacheType::F32), logits_of(*cpu, kMlaPrompt), want, "cpu");
  for (auto* m : {ref.get(), cpu.get()}) expect_t_invariant(*m, logits_of(*m, kMlaPrompt));
}

// Every strategy, with and without a compressed KV region, emits plain decoding's tokens
// on an MLA model.
TEST(Mla, EveryStrategyEqualsArOnAnMlaModel) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-lossless");
  const std::string mla = lossless_mla_copy(dir);
  expect_every_strategy_equals_ar(mla, "cpu", /*every_policy=*/true);
}

// An MLA model's layers on two cpu devices (each device's latent cache, keys recovered
// from its own layers' latents): one device's logits, bit for bit, at every boundary,
// and every strategy and policy gives plain decoding's tokens on the split.
TEST(Mla, ALayerSplitGivesOneDevicesBitsAndEveryStrategyAr) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-split");
  const std::string mla = lossless_mla_copy(dir);
  OpenOptions options;
  options.path = mla;
  options.backend = BackendSpec{"cpu", "", 2};
  options.n_ctx = 512;
  test::TestModel whole = open_model(options);
  const std::vector<float> want = logits_of(*whole.model, kMlaPrompt);
  const int32_t n_layer = whole.model->config().n_layer;
  for (int32_t k = 1; k < n_layer; ++k) {
    options.split = {SplitPart{"cpu", "", k}, SplitPart{"cpu", "", -1}};
    test::TestModel split = open_model(options);
    ASSERT_EQ(split.model->runner()->weights().n_devices(), 2);
    EXPECT_EQ(logits_of(*split.model, kMlaPrompt), want) << "boundary after layer " << k;
  }
  const std::vector<int32_t> split_ar = expect_every_strategy_equals_ar(mla, "cpu=2,cpu", /*every_policy=*/true);
  options.split.clear();
  EXPECT_EQ(split_ar, expect_every_strategy_equals_ar(mla, "cpu"));
}

// Joined steps on an MLA model (latent attention part by part: each part recovers its
// own cache's keys and values): each part's results equal its step alone, bit for bit,
// on every backend here that has a device.
TEST(Mla, JoinedStepsGiveEachPartTheBitsOfItsStepAlone) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-joined");
  const std::string mla = lossless_mla_copy(dir);
  for (const std::string backend : {"reference", "cpu", "vulkan"}) {
    SCOPED_TRACE(backend);
    if (backend == "vulkan" && !no_vulkan_reason().empty()) continue;
    const test::TestModel base = test::load_test_model(mla, 256, 2, backend);
    ASSERT_TRUE(base.model->kv_cache().shape().latent());
    test::check_joined_steps(base.model->runner(), *base.tokenizer);
  }
}

// --- the Vulkan backend ------------------------------------------------------------------

namespace {

// Odd latent widths that differ between layers (an f16 cache pads each entry to whole words).
void write_odd_mla(const std::string& out, const ModelConfig& c) {
  std::vector<int32_t> rk, rv;
  for (int32_t l = 0; l < c.n_layer; ++l) {
    rk.push_back(c.kv_dim() / 2 + 1 + 2 * (l % 3));
    rv.push_back(c.kv_dim() / 4 - 1 + 2 * (l % 2));
  }
  write_mla_copy(stories_path(), out, rk, rv);
}

}  // namespace

// The Vulkan backend computes an MLA model within its tolerance of the reference
// (model_tolerance), with an f32 and an f16 cache of odd widths, and T-invariantly; at
// full rank with identity factors, within that tolerance of the original model's
// reference logits.
TEST(Mla, VulkanMatchesTheReferenceAndIsTInvariant) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  if (const std::string why = no_vulkan_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto dir = test::temp_dir("mla-vulkan");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories_path()));
  const std::string mla = (dir / "mla.gguf").string();
  write_odd_mla(mla, c);
  for (KvCacheType type : {KvCacheType::F32, KvCacheType::F16}) {
    auto ref = open_mla_on(mla, "reference", 256, type);
    auto vk = open_mla_on(mla, "vulkan", 256, type);
    ASSERT_TRUE(vk->kv_cache().shape().latent());
    const std::vector<float> got = logits_of(*vk, kMlaPrompt);
    const double tol = model_tolerance(vk->backend(), type);
    expect_within_tolerance(tol, got, logits_of(*ref, kMlaPrompt), std::string("vulkan, ") + kv_cache_type_name(type));
    expect_t_invariant(*vk, got);
    // The keys a policy reads, recovered from the latents the device stored.
    for (int32_t layer = 0; layer < c.n_layer; ++layer) {
      const std::vector<float> want = ref->committed_keys(layer, 2, 11), keys = vk->committed_keys(layer, 2, 11);
      expect_within_tolerance(tol, keys, want, "committed keys of layer " + std::to_string(layer));
    }
  }
  const std::string identity = (dir / "identity.gguf").string();
  write_mla_copy(stories_path(), identity, ranks(c, c.kv_dim()), ranks(c, c.kv_dim()));
  auto original = open_mla_on(stories_path(), "reference");
  auto vk = open_mla_on(identity, "vulkan");
  expect_within_tolerance(model_tolerance(vk->backend(), KvCacheType::F32), logits_of(*vk, kMlaPrompt),
                          logits_of(*original, kMlaPrompt), "identity factors");
}

#if FAFO_HAVE_VULKAN
// One-token steps are submitted from the command buffer recorded for an earlier step
// with the same commands (vulkan::VulkanBackendOptions::replay): n_past, the logical
// order and the positions the recovered keys are rotated by are read from what the host
// writes each step, so the logits equal, bit for bit, a backend's that records every
// step, before and after a region reorders the cache (FULL rows then read a permuted
// order), and stay within the tolerance of the reference's.
TEST(Mla, VulkanReplayedStepsUseTheCurrentPositions) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  if (const std::string why = no_vulkan_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto dir = test::temp_dir("mla-vulkan-replay");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories_path()));
  const std::string mla = (dir / "mla.gguf").string();
  write_odd_mla(mla, c);
  for (KvCacheType type : {KvCacheType::F32, KvCacheType::F16}) {
    auto open_vulkan = [&](bool replay) {
      vulkan::VulkanBackendOptions options;
      options.replay = replay;
      SequenceOptions model_options{256};
      model_options.kv_type = type;
      return std::make_unique<Sequence>(GgufFile::open(mla), vulkan::make_backend(options), model_options);
    };
    auto replayed = open_vulkan(true), recorded = open_vulkan(false);
    auto logits = [&](Sequence& m) {
      m.truncate(0);
      std::vector<std::vector<float>> out;
      StepBatch prefill = StepBatch::causal({1, 45, 99, 7, 250, 31}, 0);
      out.push_back(m.forward(prefill));
      m.commit(prefill.size());
      for (int s = 0; s < 24; ++s) {
        if (s == 12) {
          // A region of 8 entries, chosen out of order: the layout is no longer the identity.
          m.kv_cache().reset_layout(8, 0, m.n_past());
          m.kv_cache().select({16, 3, 11, 0, 9, 14, 5, 1});
        }
        StepBatch one = StepBatch::causal({static_cast<int32_t>(30 + 7 * s)}, m.n_past());
        out.push_back(m.forward(one));
        m.commit(1);
      }
      return out;
    };
    const vulkan::ReplayCounts before = vulkan::replay_counts(replayed->backend());
    const auto want = logits(*recorded), got = logits(*replayed);
    const vulkan::ReplayCounts after = vulkan::replay_counts(replayed->backend());
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0)
          << kv_cache_type_name(type) << " step " << i;
    EXPECT_GE(after.replayed - before.replayed, 20u) << kv_cache_type_name(type);
    EXPECT_EQ(vulkan::replay_counts(recorded->backend()).replayed, 0u);
    // And the reference agrees with the replayed steps within the tolerance.
    auto ref = open_mla_on(mla, "reference", 256, type);
    const auto ref_logits = logits(*ref);
    for (size_t i = 0; i < got.size(); ++i)
      expect_within_tolerance(model_tolerance(replayed->backend(), type), got[i], ref_logits[i],
                              std::string(kv_cache_type_name(type)) + " step " + std::to_string(i));
  }
}
#endif

// Every strategy equals plain decoding on the Vulkan backend too, whose plain decoding
// emits the cpu backend's tokens.
TEST(Mla, EveryStrategyEqualsArOnVulkan) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  if (const std::string why = no_vulkan_reason(); !why.empty()) GTEST_SKIP() << why;
  const auto dir = test::temp_dir("mla-vulkan-lossless");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories_path()));
  const std::string mla = (dir / "mla.gguf").string();
  write_mla_copy(stories_path(), mla, ranks(c, c.kv_dim() - 7), ranks(c, c.kv_dim() - 3));
  const std::vector<int32_t> vulkan_ar = expect_every_strategy_equals_ar(mla, "vulkan");
  OpenOptions options;
  options.path = mla;
  options.backend = BackendSpec{"cpu", "", 2};
  options.n_ctx = 512;
  test::TestModel cpu = open_model(options);
  GenerationOptions o;
  o.n_predict = 120;
  o.sampling.temperature = 0;
  EXPECT_EQ(generate(*cpu.model, *cpu.tokenizer, std::vector<int32_t>(kMlaPrompt.begin(), kMlaPrompt.begin() + 6), o).ids,
            vulkan_ar);
}

// --strategy draft on an MLA target: drafted by itself (an MLA drafter) and by the model
// it was converted from (a plain drafter), greedy and sampled, gives plain decoding's
// tokens; so does FAFO with the speckv region a draft model scores.
TEST(Mla, DraftModelsAndSpeckvKeepAnMlaModelsOutput) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-draft");
  const std::string mla = lossless_mla_copy(dir);
  OpenOptions options;
  options.path = mla;
  options.backend = BackendSpec{"cpu", "", 2};
  options.n_ctx = 512;
  test::TestModel m = open_model(options);
  const std::vector<int32_t> prompt(kMlaPrompt.begin(), kMlaPrompt.begin() + 6);
  auto run = [&](DecodingOptions d, float temperature, KvPolicyOptions kv = {}, std::shared_ptr<Sequence> draft = nullptr) {
    GenerationOptions o;
    o.n_predict = 80;
    o.sampling = SamplerOptions{temperature, 0, 1.0f, 0.0f, 7};
    o.decoding = std::move(d);
    o.resources.draft_model = std::move(draft);
    o.kv = kv;
    return generate(*m.model, *m.tokenizer, prompt, o);
  };
  for (const std::string& drafter : {std::string("self"), stories_path()}) {
    DecodingOptions d;
    d.strategy = Strategy::Draft;
    d.draft_model_path = drafter;
    std::shared_ptr<Sequence> d_draft = open_draft_model(d, options, *m.model, m.tokenizer->vocab());
    ASSERT_TRUE(d_draft);
    for (float temperature : {0.0f, 0.8f}) {
      DecodingOptions ar;
      const GenerationResult want = run(ar, temperature);
      const GenerationResult got = run(d, temperature, {}, d_draft);
      EXPECT_EQ(got.ids, want.ids) << drafter << " at temperature " << temperature;
      if (temperature == 0.0f) {
        EXPECT_LT(got.n_steps, want.n_steps) << drafter;
      }
    }
    if (drafter == "self") {
      DecodingOptions fafo = d;
      fafo.strategy = Strategy::Fafo;
      KvPolicyOptions speckv;
      speckv.name = "speckv";
      speckv.budget = 24;
      speckv.recent = 8;
      EXPECT_EQ(run(fafo, 0.0f, speckv, d_draft).ids, run(DecodingOptions{}, 0.0f).ids) << "fafo with a speckv region";
    }
  }
}

// A backend without latent attention refuses an MLA file before it uploads a weight.
TEST(Mla, BackendsWithoutLatentAttentionRefuseBeforeLoading) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-refused");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories_path()));
  const std::string mla = (dir / "mla.gguf").string();
  write_mla_copy(stories_path(), mla, ranks(c, 8), ranks(c, 8));
  auto backend = std::make_unique<test::FaultyBackend>(test::Fault::MatmulRowOffByOne);
  ASSERT_FALSE(backend->capabilities().latent_attention);
  try {
    Sequence m(GgufFile::open(mla), std::move(backend), SequenceOptions{64});
    ADD_FAILURE() << "an MLA model loaded on a backend without latent attention";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot run multi-head latent attention (MLA) models"), std::string::npos) << e.what();
  }
}

// `auto` picks only backends that run MLA models for an MLA file (the CUDA backend does
// not), and opening one with `auto` gives such a backend.
TEST(Mla, AutoPicksABackendThatRunsLatentAttention) {
  const BackendInfo* chosen = find_backend(default_backend_name(true));
  ASSERT_NE(chosen, nullptr);
  EXPECT_TRUE(chosen->runs_latent_attention) << chosen->name;
  if (const BackendInfo* cuda = find_backend("cuda")) {
    EXPECT_FALSE(cuda->runs_latent_attention);
  }
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-auto");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories_path()));
  const std::string mla = (dir / "mla.gguf").string();
  write_mla_copy(stories_path(), mla, ranks(c, 8), ranks(c, 8));
  OpenOptions options;
  options.path = mla;
  options.n_ctx = 64;
  options.cache_dir = "off";
  const OpenedModel m = fafo::open_model(options);
  EXPECT_TRUE(m.model->backend().capabilities().latent_attention) << m.model->backend().name();
}

TEST(Mla, BadMlaFilesAreClearErrors) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto dir = test::temp_dir("mla-errors");
  const ModelConfig c = ModelConfig::from_gguf(*GgufFile::open(stories_path()));
  const std::string wrong_count = (dir / "count.gguf").string();
  std::vector<int32_t> few(static_cast<size_t>(c.n_layer - 1), 4);
  write_mla_copy(stories_path(), wrong_count, ranks(c, 4), ranks(c, 4));
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
      open_mla_on(bad, "reference");
      ADD_FAILURE() << "a rank that disagrees with the tensors loaded";
    } catch (const GgufError& e) {
      EXPECT_NE(std::string(e.what()).find("attn_k_a.weight"), std::string::npos) << e.what();
    }
    w.set_i32_array("fafo.mla.rank_k", few);
    w.write(bad);
    try {
      open_mla_on(bad, "reference");
      ADD_FAILURE() << "too few ranks loaded";
    } catch (const GgufError& e) {
      EXPECT_NE(std::string(e.what()).find("ranks for"), std::string::npos) << e.what();
    }
  }
}
