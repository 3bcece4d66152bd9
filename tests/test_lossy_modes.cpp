// SpecKV and SpecPC (seed 004) and KV dropping: --kv-policy speckv chooses FAFO's region
// and stays lossless; --kv-drop and --prompt-compress are lossy, labelled, and refused
// where they cannot be exact about what they are (multi-token strategies under
// dropping, no draft model).
#include <gtest/gtest.h>

#include <algorithm>

#include "fafo/generator.h"
#include "fafo/open_model.h"
#include "fafo/prompt_compression.h"
#include "test_support.h"

namespace {

using namespace fafo;

OpenOptions lossy_options(const std::string& path) {
  OpenOptions o;
  o.path = path;
  o.backend = BackendSpec{"cpu", "", 2};
  o.n_ctx = 256;
  o.cache_dir = "off";
  return o;
}

const char* kPrompt =
    "Lily and Tom went to the park. They saw a big red ball and a little dog. The dog ran to the ball and Lily "
    "laughed. Tom said, \"Let us play with the dog!\" They played all day, and when the sun went down they";

struct Fixture {
  OpenedModel m;
  std::shared_ptr<Sequence> draft;
  explicit Fixture(const std::string& path) : m(open_model(lossy_options(path))) {
    DecodingOptions d;
    d.draft_model_path = "self";
    std::shared_ptr<Sequence> d_draft = open_draft_model(d, lossy_options(path), *m.model, m.tokenizer->vocab());
    draft = d_draft;
  }
  GenerationResult run(GenerationOptions o, float temperature = 0.0f, uint64_t seed = 1) {
    o.n_predict = 48;
    o.stop_at_end_of_generation = false;
    o.sampling = SamplerOptions{temperature, 0, 1.0f, 0.0f, seed};
    if (!o.resources.draft_model) o.resources.draft_model = draft;
    return generate(*m.model, *m.tokenizer, m.tokenizer->encode(kPrompt, true), o);
  }
};

TEST(LossyModes, SpeckvPolicyScoresWithTheWindowAndTheLookaheadRows) {
  KvPolicyOptions o;
  o.name = "speckv";
  o.window = 4;
  o.lookahead = 3;
  const auto policy = make_kv_policy(o);
  EXPECT_EQ(policy->name(), "speckv");
  EXPECT_EQ(policy->wanted_query_rows(20), (std::vector<int32_t>{13, 14, 15, 16, 17, 18, 19}));
  o.lookahead = 0;
  EXPECT_THROW(make_kv_policy(o), std::invalid_argument);
  o.lookahead = 257;
  EXPECT_THROW(make_kv_policy(o), std::invalid_argument);
}

// Lossless: SpecKV choosing FAFO's region leaves the text plain decoding's, greedy and
// sampled, and its lookahead makes the region differ from SnapKV's.
TEST(LossyModes, SpeckvAsFafosRegionIsLossless) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  Fixture f(model_path.string());
  for (float temperature : {0.0f, 0.8f}) {
    GenerationOptions ar;
    const auto plain = f.run(ar, temperature);
    GenerationOptions o;
    o.decoding.strategy = Strategy::Fafo;
    o.kv.name = "speckv";
    o.kv.budget = 24;
    o.kv.recent = 4;
    std::vector<int32_t> speckv_region;
    o.on_step = [&](const StepTrace& t) {
      if (t.step == 1) speckv_region = t.kv_region;
    };
    const auto r = f.run(o, temperature);
    EXPECT_EQ(r.ids, plain.ids) << temperature;
    EXPECT_TRUE(r.lossy.empty());
    if (temperature == 0.0f) {
      o.kv.name = "snapkv";
      std::vector<int32_t> snapkv_region;
      o.on_step = [&](const StepTrace& t) {
        if (t.step == 1) snapkv_region = t.kv_region;
      };
      EXPECT_EQ(f.run(o).ids, plain.ids);
      ASSERT_FALSE(speckv_region.empty());
      std::sort(speckv_region.begin(), speckv_region.end());
      std::sort(snapkv_region.begin(), snapkv_region.end());
      EXPECT_NE(speckv_region, snapkv_region);
    }
  }
}

TEST(LossyModes, KvDropIsPlainDecodingOverWhatThePolicyKeeps) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  Fixture f(model_path.string());
  GenerationOptions ar;
  const auto plain = f.run(ar);
  for (const std::string policy : {"speckv", "snapkv", "stream"}) {
    GenerationOptions o;
    o.kv_drop = true;
    o.kv.name = policy;
    o.kv.budget = 256;  // the whole context: nothing is dropped
    const auto all = f.run(o);
    EXPECT_EQ(all.ids, plain.ids) << policy;
    ASSERT_EQ(all.lossy.size(), 1u);
    EXPECT_EQ(all.lossy[0], "kv-drop " + policy + " budget 256");
    o.kv.budget = 8;
    o.kv.recent = 4;
    const auto dropped = f.run(o);
    EXPECT_NE(dropped.ids, plain.ids) << policy;
    // auto runs plain decoding under dropping, with the same text.
    o.decoding.strategy = Strategy::Auto;
    const auto automatic = f.run(o);
    EXPECT_EQ(automatic.ids, dropped.ids) << policy;
    EXPECT_EQ(automatic.n_steps, static_cast<int32_t>(automatic.ids.size()));
  }
  // Dropping ends with its generation: the next one reads everything again.
  EXPECT_EQ(f.run(ar).ids, plain.ids);
  EXPECT_FALSE(f.m.model->kv_drop());
  GenerationOptions o;
  o.kv_drop = true;
  o.kv.name = "snapkv";
  GenerationOptions chat = o;
  chat.keep_context = true;
  EXPECT_THROW(f.run(chat), std::invalid_argument);
  for (Strategy s : {Strategy::Fafo, Strategy::Lookahead, Strategy::Jacobi, Strategy::Draft}) {
    o.decoding.strategy = s;
    try {
      f.run(o);
      ADD_FAILURE() << "no error for " << strategy_name(s);
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("plain decoding only"), std::string::npos) << e.what();
    }
  }
}

TEST(LossyModes, PromptCompressionKeepsTheBudgetInOrder) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  Fixture f(model_path.string());
  const std::vector<int32_t> prompt = f.m.tokenizer->encode(kPrompt, true);
  PromptCompressOptions pc;
  pc.method = "speckv";
  pc.budget = static_cast<int32_t>(prompt.size());
  EXPECT_EQ(compress_prompt(*f.draft, prompt, pc, 512), prompt);
  pc.budget = 20;
  pc.window = 6;
  const std::vector<int32_t> kept = compress_prompt(*f.draft, prompt, pc, 512);
  ASSERT_EQ(kept.size(), 20u);
  EXPECT_EQ(kept.front(), prompt.front());
  EXPECT_TRUE(std::equal(kept.end() - 6, kept.end(), prompt.end() - 6));
  // A subsequence of the prompt.
  size_t at = 0;
  for (int32_t t : kept) {
    while (at < prompt.size() && prompt[at] != t) ++at;
    ASSERT_LT(at, prompt.size());
    ++at;
  }
  EXPECT_EQ(f.draft->n_past(), 0);
  EXPECT_EQ(f.draft->kv_policy(), nullptr);

  GenerationOptions o;
  o.prompt_compress = pc;
  const auto r = f.run(o);
  EXPECT_EQ(r.prompt_ids, kept);
  EXPECT_EQ(r.prompt_tokens_given, static_cast<int32_t>(prompt.size()));
  ASSERT_EQ(r.lossy.size(), 1u);
  EXPECT_EQ(r.lossy[0], "prompt-compress speckv budget 20: 20 of " + std::to_string(prompt.size()) + " prompt tokens kept");
  // The speckv modes need a draft model.
  o.resources.draft_model = nullptr;
  GenerationOptions none = o;
  none.n_predict = 4;
  EXPECT_THROW(generate(*f.m.model, *f.m.tokenizer, prompt, none), std::invalid_argument);
  GenerationOptions drop;
  drop.kv_drop = true;
  drop.kv.name = "speckv";
  EXPECT_THROW(generate(*f.m.model, *f.m.tokenizer, prompt, drop), std::invalid_argument);
}

}  // namespace
