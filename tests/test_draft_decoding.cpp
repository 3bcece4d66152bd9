// Strategy draft (speculative decoding with a draft model): greedy and sampled output
// token-identical to plain decoding whatever the drafter (the target itself, the same
// file on another backend, a model that guesses badly); a drafter that is the target
// has every draft accepted; a vocabulary that differs is refused naming the difference.
#include <gtest/gtest.h>

#include "fafo/generator.h"
#include "model_fixtures.h"
#include "test_support.h"

namespace {

using namespace fafo;

OpenOptions stories_options(const std::string& path, const std::string& backend = "cpu") {
  OpenOptions o;
  o.path = path;
  o.backend = BackendSpec{backend, "", 2};
  o.n_ctx = 256;
  o.cache_dir = "off";
  return o;
}

// A one-layer random model (its own vocabulary texts) written for a test; its path.
std::string random_model(const std::string& name, int32_t n_vocab, int32_t n_ctx, uint64_t seed = 1) {
  synth::SyntheticConfig c;
  c.n_layer = 1, c.n_embd = 32, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 64, c.n_vocab = n_vocab, c.n_ctx = n_ctx;
  c.seed = seed;
  const auto path = (test::temp_dir(name) / "m.gguf").string();
  synth::write_synthetic_model(c, path);
  return path;
}

GenerationResult run(OpenedModel& m, Strategy s, const std::shared_ptr<Sequence>& draft, float temperature, uint64_t seed,
                     int32_t draft_n = 4, std::vector<StepTrace>* traces = nullptr) {
  GenerationOptions o;
  o.n_predict = 60;
  o.stop_at_end_of_generation = false;
  o.sampling = SamplerOptions{temperature, 0, 1.0f, 0.0f, seed};
  o.decoding.strategy = s;
  o.resources.draft_model = draft;
  o.decoding.draft_n = draft_n;
  if (traces) o.on_step = [traces](const StepTrace& t) { traces->push_back(t); };
  return generate(*m.model, *m.tokenizer, m.tokenizer->encode("Lily and Tom went to the park. They", true), o);
}

TEST(DraftDecoding, OutputEqualsPlainDecodingWithEveryDrafter) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenedModel m = open_model(stories_options(model_path.string()));
  DecodingOptions self, other_backend;
  self.strategy = other_backend.strategy = Strategy::Draft;
  self.draft_model_path = "self";
  std::shared_ptr<Sequence> self_draft = open_draft_model(self, stories_options(model_path.string()), *m.model, m.tokenizer->vocab());
  other_backend.draft_model_path = model_path.string();
  other_backend.draft_backend = "reference";
  std::shared_ptr<Sequence> other_backend_draft = open_draft_model(other_backend, stories_options(model_path.string()), *m.model, m.tokenizer->vocab());
  ASSERT_TRUE(self_draft && other_backend_draft);
  EXPECT_EQ(other_backend_draft->backend().name(), "reference");
  for (float temperature : {0.0f, 0.8f}) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      if (temperature == 0.0f && seed > 1) continue;
      const auto plain = run(m, Strategy::Ar, nullptr, temperature, seed);
      for (int32_t n : {1, 4, 7}) {
        const auto a = run(m, Strategy::Draft, self_draft, temperature, seed, n);
        EXPECT_EQ(a.ids, plain.ids) << "self, n " << n << ", temperature " << temperature << ", seed " << seed;
        // The target drafting for itself: every draft token is accepted, n + 1 tokens a step
        // after the prefill's one (the last step may be cut short).
        const int32_t steps = 1 + (static_cast<int32_t>(a.ids.size()) - 1 + n) / (n + 1);
        EXPECT_EQ(a.n_steps, steps) << "n " << n << ", temperature " << temperature;
        const auto b = run(m, Strategy::Draft, other_backend_draft, temperature, seed, n);
        EXPECT_EQ(b.ids, plain.ids) << "reference drafter, n " << n << ", temperature " << temperature;
      }
    }
  }
}

// A sparse drafter (BudgetDraft): the target drafting for itself while reading only a
// budget of its cache. Output is plain decoding's; a budget that holds the whole context
// drafts as the full cache does, a small one accepts fewer.
// On the oracle: a target on the reference backend, drafted by itself, keeps plain
// decoding's greedy text.
TEST(DraftDecoding, EqualsPlainDecodingOnTheReferenceBackend) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenedModel m = open_model(stories_options(model_path.string(), "reference"));
  DecodingOptions self;
  self.strategy = Strategy::Draft;
  self.draft_model_path = "self";
  std::shared_ptr<Sequence> self_draft = open_draft_model(self, stories_options(model_path.string(), "reference"), *m.model, m.tokenizer->vocab());
  ASSERT_TRUE(self_draft);
  const auto plain = run(m, Strategy::Ar, nullptr, 0.0f, 1);
  const auto drafted = run(m, Strategy::Draft, self_draft, 0.0f, 1);
  EXPECT_EQ(drafted.ids, plain.ids);
  EXPECT_LT(drafted.n_steps, plain.n_steps);  // the drafter is the target: its guesses are accepted
}

TEST(DraftDecoding, ASparseDrafterKeepsTheOutputAndLosesAcceptanceWithTheBudget) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenedModel m = open_model(stories_options(model_path.string()));
  DecodingOptions self;
  self.strategy = Strategy::Draft;
  self.draft_model_path = "self";
  std::shared_ptr<Sequence> self_draft = open_draft_model(self, stories_options(model_path.string()), *m.model, m.tokenizer->vocab());
  auto sparse_run = [&](const std::string& policy, int32_t budget, float temperature, uint64_t seed) {
    GenerationOptions o;
    o.n_predict = 120;
    o.stop_at_end_of_generation = false;
    o.sampling = SamplerOptions{temperature, 0, 1.0f, 0.0f, seed};
    o.decoding.strategy = Strategy::Draft;
    o.resources.draft_model = self_draft;
    o.decoding.draft_kv_policy = policy;
    o.decoding.draft_kv_budget = budget;
    return generate(*m.model, *m.tokenizer, m.tokenizer->encode("Lily and Tom went to the park. They", true), o);
  };
  for (float temperature : {0.0f, 0.8f}) {
    GenerationOptions o;
    o.n_predict = 120;
    o.stop_at_end_of_generation = false;
    o.sampling = SamplerOptions{temperature, 0, 1.0f, 0.0f, 3};
    const auto plain = generate(*m.model, *m.tokenizer, m.tokenizer->encode("Lily and Tom went to the park. They", true), o);
    const auto whole = sparse_run("chunks", 256, temperature, 3);
    EXPECT_EQ(whole.ids, plain.ids);
    const auto full = sparse_run("", 256, temperature, 3);
    EXPECT_EQ(whole.n_steps, full.n_steps) << "a budget holding the whole context drafts as the full cache";
    // The recent entries of a stream cache predict most of what the whole one does (a
    // region lost when drafts are dropped from the cache would not).
    if (temperature == 0.0f) {
      EXPECT_GT(sparse_run("stream", 48, temperature, 3).tokens_per_step(), 0.7 * full.tokens_per_step());
    }
    for (const char* policy : {"chunks", "stream", "snapkv", "quest"}) {
      const auto r = sparse_run(policy, 16, temperature, 3);
      EXPECT_EQ(r.ids, plain.ids) << policy << ", temperature " << temperature;
      EXPECT_GT(r.n_steps, full.n_steps) << policy << ": a 16-entry cache should draft worse than the whole one";
    }
  }
}

TEST(DraftDecoding, ABadDrafterCostsStepsNotTokens) {
  // A random model with the target's vocabulary size guesses wrong: still plain decoding's
  // ids (each step keeps the target's own token).
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenedModel m = open_model(stories_options(model_path.string()));
  const std::string path = random_model("draft-random", m.model->config().n_vocab, 256, 9);
  OpenedModel r = open_model(stories_options(path));
  const std::shared_ptr<Sequence> drafter(std::move(r.model));
  std::vector<StepTrace> traces;
  for (float temperature : {0.0f, 0.8f}) {
    const auto plain = run(m, Strategy::Ar, nullptr, temperature, 5);
    traces.clear();
    const auto d = run(m, Strategy::Draft, drafter, temperature, 5, 4, &traces);
    EXPECT_EQ(d.ids, plain.ids) << "temperature " << temperature;
    for (const StepTrace& t : traces)
      for (const CandidateTrace& cand : t.candidates) EXPECT_EQ(cand.source, CandidateSource::Draft);
  }
  // Its vocabulary's texts differ from the target's: refused, naming the first difference.
  DecodingOptions d;
  d.strategy = Strategy::Draft;
  d.draft_model_path = path;
  try {
    open_draft_model(d, stories_options(model_path.string()), *m.model, m.tokenizer->vocab());
    ADD_FAILURE() << "a draft model of another vocabulary was opened";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("the draft model's vocabulary differs from the target's: token "), std::string::npos)
        << e.what();
  }
}

// A small tree (--draft-alternatives): the drafter's next most likely first tokens are
// verified beside its chain; the output stays plain decoding's, greedy and sampled, and
// some steps are won by an alternative the chain missed.
TEST(DraftDecoding, AlternativeFirstTokensKeepTheOutputAndWinSomeSteps) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenedModel m = open_model(stories_options(model_path.string()));
  DecodingOptions d;
  d.strategy = Strategy::Draft;
  d.draft_model_path = "self";
  std::shared_ptr<Sequence> d_draft = open_draft_model(d, stories_options(model_path.string()), *m.model, m.tokenizer->vocab());
  for (float temperature : {0.0f, 0.8f}) {
    GenerationOptions o;
    o.n_predict = 120;
    o.stop_at_end_of_generation = false;
    o.sampling = SamplerOptions{temperature, 0, 1.0f, 0.0f, 7};
    const auto prompt = m.tokenizer->encode("Lily and Tom went to the park. They", true);
    const auto plain = generate(*m.model, *m.tokenizer, prompt, o);
    o.decoding = d;
    o.resources.draft_model = d_draft;
    o.decoding.draft_kv_policy = "stream";  // a drafter that misses now and then
    o.decoding.draft_kv_budget = 6;
    o.decoding.draft_alternatives = 3;
    int alternative_wins = 0;
    o.on_step = [&](const StepTrace& t) {
      ASSERT_LE(t.candidates.size(), 4u);
      for (size_t c = 1; c < t.candidates.size(); ++c) {
        EXPECT_EQ(t.candidates[c].tokens.size(), 1u);
        EXPECT_NE(t.candidates[c].tokens[0], t.candidates[0].tokens[0]);
        alternative_wins += t.candidates[c].match_length == 1 && t.candidates[0].match_length == 0;
      }
    };
    const auto r = generate(*m.model, *m.tokenizer, prompt, o);
    EXPECT_EQ(r.ids, plain.ids) << "temperature " << temperature;
    EXPECT_GT(alternative_wins, 0) << "temperature " << temperature;
  }
}

// A prompt longer than one step holds: the drafter catches up in pieces.
TEST(DraftDecoding, ALongPromptIsFedInPieces) {
  const std::string path = random_model("draft-long", 300, 2048);
  OpenOptions o = stories_options(path);
  o.n_ctx = 1200;
  OpenedModel m = open_model(o);
  DecodingOptions d;
  d.strategy = Strategy::Draft;
  d.draft_model_path = "self";
  std::shared_ptr<Sequence> d_draft = open_draft_model(d, o, *m.model, m.tokenizer->vocab());
  std::vector<int32_t> prompt(1100);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(3 + (i * 7) % 290);
  GenerationOptions g;
  g.n_predict = 30;
  g.stop_at_end_of_generation = false;
  g.sampling.temperature = 0;
  const auto plain = generate(*m.model, *m.tokenizer, prompt, g);
  g.decoding = d;
  g.resources.draft_model = d_draft;
  const auto r = generate(*m.model, *m.tokenizer, prompt, g);
  EXPECT_EQ(r.ids, plain.ids);
  EXPECT_LT(r.n_steps, plain.n_steps);
}

// One call opens what the options name (open_decoding_resources) and keeps what an
// earlier call opened for the same file, backend and device; "self" names the target it
// drafts for; a draft model nothing uses is not opened.
TEST(DraftDecoding, OpeningTheResourcesKeepsTheDraftModelOfTheSameOptions) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const OpenOptions target = stories_options(model_path.string());
  OpenedModel m = open_model(target);
  const Vocab& vocab = m.tokenizer->vocab();
  DecodingOptions d;
  d.strategy = Strategy::Draft;
  d.draft_model_path = "self";
  const DecodingResources first = open_decoding_resources(d, target, *m.model, vocab);
  ASSERT_TRUE(first.draft_model);
  EXPECT_EQ(first.draft_model->runner(), m.model->runner());  // a second sequence on the target's weights
  EXPECT_FALSE(first.corpus);
  EXPECT_EQ(open_decoding_resources(d, target, *m.model, vocab, false, first).draft_model, first.draft_model);
  DecodingOptions other = d;
  other.draft_backend = "reference";
  const DecodingResources second = open_decoding_resources(other, target, *m.model, vocab, false, first);
  ASSERT_TRUE(second.draft_model);
  EXPECT_NE(second.draft_model, first.draft_model);
  EXPECT_EQ(second.draft_model->backend().name(), "reference");
  // "self" for another target is that target's own drafter, not the kept one.
  const OpenOptions small = stories_options(random_model("draft-keep", m.model->config().n_vocab, 256));
  OpenedModel s = open_model(small);
  const DecodingResources theirs = open_decoding_resources(d, small, *s.model, s.tokenizer->vocab(), false, first);
  ASSERT_TRUE(theirs.draft_model);
  EXPECT_EQ(theirs.draft_model->runner(), s.model->runner());
  // Plain decoding uses none, unless its scoring needs one (SpecKV, SpecPC).
  DecodingOptions ar = d;
  ar.strategy = Strategy::Ar;
  EXPECT_FALSE(open_decoding_resources(ar, target, *m.model, vocab, false, first).draft_model);
  EXPECT_EQ(open_decoding_resources(ar, target, *m.model, vocab, true, first).draft_model, first.draft_model);
}

TEST(DraftDecoding, YieldsAndErrors) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenedModel m = open_model(stories_options(model_path.string()));
  DecodingOptions self;
  self.strategy = Strategy::Draft;
  self.draft_model_path = "self";
  std::shared_ptr<Sequence> self_draft = open_draft_model(self, stories_options(model_path.string()), *m.model, m.tokenizer->vocab());
  const auto r = run(m, Strategy::Draft, self_draft, 0.0f, 1);
  ASSERT_EQ(r.source_yields.size(), 1u);
  EXPECT_EQ(r.source_yields[0].source, "draft");
  EXPECT_GE(r.source_yields[0].accepted, static_cast<int64_t>(r.ids.size()) - r.n_steps);
  // No draft model; the target as its own drafter (one KV cache for both).
  GenerationOptions o;
  o.decoding.strategy = Strategy::Draft;
  const auto prompt = m.tokenizer->encode("Once", true);
  EXPECT_THROW(generate(*m.model, *m.tokenizer, prompt, o), std::invalid_argument);
  o.resources.draft_model = std::shared_ptr<Sequence>(m.model.get(), [](Sequence*) {});
  EXPECT_THROW(generate(*m.model, *m.tokenizer, prompt, o), std::invalid_argument);
  // Another vocabulary size.
  const std::string odd = random_model("draft-odd", 263, 256);
  DecodingOptions d;
  d.strategy = Strategy::Draft;
  d.draft_model_path = odd;
  try {
    open_draft_model(d, stories_options(model_path.string()), *m.model, m.tokenizer->vocab());
    ADD_FAILURE() << "a draft model of another vocabulary size was opened";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("the target has 512 tokens, the draft model 263"), std::string::npos) << e.what();
  }
}

}  // namespace
