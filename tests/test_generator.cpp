// Generation: continuing a kept context (multi-turn chat) gives the same tokens as
// generating from the whole history at once, and prefill chunking does not change
// the result.
#include "fafo/generator.h"
#include "model_fixtures.h"
#include "test_support.h"

using namespace fafo;

TEST(Generator, ContinuingAKeptContextEqualsStartingOver) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string());
  GenerationOptions o;
  o.n_predict = 20;
  o.sampling.temperature = 0;
  o.stop_at_end_of_generation = false;
  const std::vector<int32_t> turn1 = m.tokenizer->encode("Once upon a time", true);
  const auto r1 = generate(*m.model, *m.tokenizer, turn1, o);
  ASSERT_EQ(r1.ids.size(), 20u);
  EXPECT_EQ(m.model->n_past(), static_cast<int32_t>(turn1.size() + 19));

  // Second turn: the unfed last token, then new text.
  std::vector<int32_t> turn2 = {r1.ids.back()};
  const auto more = m.tokenizer->encode(" The dog", false);
  turn2.insert(turn2.end(), more.begin(), more.end());
  GenerationOptions keep = o;
  keep.keep_context = true;
  const auto r2 = generate(*m.model, *m.tokenizer, turn2, keep);

  std::vector<int32_t> history = turn1;
  history.insert(history.end(), r1.ids.begin(), r1.ids.end());
  history.insert(history.end(), more.begin(), more.end());
  const auto fresh = generate(*m.model, *m.tokenizer, history, o);
  EXPECT_EQ(r2.ids, fresh.ids);
}

TEST(Generator, PrefillChunkSizeDoesNotChangeTheOutput) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string());
  GenerationOptions o;
  o.n_predict = 30;
  o.sampling.temperature = 0;
  const auto prompt = m.tokenizer->encode("Lily and Tom went to the park. They saw a big dog and a small cat.", true);
  const auto whole = generate(*m.model, *m.tokenizer, prompt, o);
  o.prefill_chunk = 3;
  const auto chunked = generate(*m.model, *m.tokenizer, prompt, o);
  EXPECT_EQ(whole.ids, chunked.ids);
}

TEST(Generator, TopKSamplingFromTheBackendsCandidatesEqualsWholeRows) {
  // Sampling steps read back only each row's k best logits (Sequence::forward_top_k); the
  // tokens drawn must be those drawn from whole rows, for every strategy (lookahead's
  // and FAFO's verification draws from several rows per step).
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string());
  const auto prompt = m.tokenizer->encode("Lily and Tom went to the park. Lily and Tom went to the park. Lily", true);
  for (Strategy s : {Strategy::Ar, Strategy::Jacobi, Strategy::Lookahead, Strategy::Fafo}) {
    for (uint64_t seed : {1u, 2u}) {
      GenerationOptions o;
      o.n_predict = 40;
      o.stop_at_end_of_generation = false;
      o.sampling = SamplerOptions{0.9f, 10, 0.95f, 0.02f, seed};
      o.decoding.strategy = s;
      o.decoding.pool_from_prompt = true;
      const auto top = generate(*m.model, *m.tokenizer, prompt, o);
      o.read_top_k_only = false;
      const auto whole = generate(*m.model, *m.tokenizer, prompt, o);
      EXPECT_EQ(top.ids, whole.ids) << strategy_name(s) << " seed " << seed;
      EXPECT_EQ(top.n_steps, whole.n_steps) << strategy_name(s);
    }
  }
}
