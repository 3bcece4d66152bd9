// Sequences on shared weights (one StepRunner, fafo/step_runner.h): the weights are loaded
// once, each sequence (fafo/sequence.h) has its own KV cache and context, and sequences used from different
// threads give, token for token, what each gives alone.
#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fafo/backend_registry.h"
#include "fafo/generator.h"
#include "fafo/open_model.h"
#include "model_fixtures.h"
#include "test_support.h"

using namespace fafo;

namespace {

GenerationOptions greedy(Strategy s, int32_t n) {
  GenerationOptions o;
  o.n_predict = n;
  o.sampling.temperature = 0;
  o.stop_at_end_of_generation = false;
  o.decoding.strategy = s;
  return o;
}


}  // namespace

TEST(SharedWeights, SequencesOnOneLoadGiveTheIdsOfSeparateModelsFromAnyThread) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  for (const std::string backend : {"cpu", "vulkan"}) {
    SCOPED_TRACE(backend);
    const auto base = test::load_on(model_path.string(), backend);
    if (!base) continue;
    const std::vector<int32_t> p1 = base->tokenizer->encode("Lily and Tom went to the park. Lily and Tom went to", true);
    const std::vector<int32_t> p2 = base->tokenizer->encode("Once upon a time there was a little dog", true);
    // Alone, on separately loaded models.
    const auto alone = test::load_on(model_path.string(), backend);
    const auto want1 = generate(*alone->model, *alone->tokenizer, p1, greedy(Strategy::Fafo, 32)).ids;
    const auto want2 = generate(*alone->model, *alone->tokenizer, p2, greedy(Strategy::Lookahead, 32)).ids;
    ASSERT_EQ(want1.size(), 32u);

    const OpenedModel seq = open_sequence(*base);
    EXPECT_EQ(seq.model->runner(), base->model->runner());
    EXPECT_EQ(&seq.model->backend(), &base->model->backend());
    EXPECT_NE(&seq.model->kv_cache(), &base->model->kv_cache());
    EXPECT_EQ(seq.model->n_ctx(), base->model->n_ctx());
    // Both sequences generate at once, twice each: their steps interleave on the one
    // backend.
    std::vector<std::vector<int32_t>> got1, got2;
    std::thread a([&] {
      for (int r = 0; r < 2; ++r) got1.push_back(generate(*base->model, *base->tokenizer, p1, greedy(Strategy::Fafo, 32)).ids);
    });
    std::thread b([&] {
      for (int r = 0; r < 2; ++r) got2.push_back(generate(*seq.model, *seq.tokenizer, p2, greedy(Strategy::Lookahead, 32)).ids);
    });
    a.join();
    b.join();
    for (const auto& ids : got1) EXPECT_EQ(ids, want1);
    for (const auto& ids : got2) EXPECT_EQ(ids, want2);
    // Each sequence's context is its own.
    EXPECT_EQ(base->model->n_past(), static_cast<int32_t>(p1.size()) + 31);
    EXPECT_EQ(seq.model->n_past(), static_cast<int32_t>(p2.size()) + 31);
  }
}

TEST(SharedWeights, ASequenceCostsItsKvCacheAndNoWeights) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto base = test::load_on(model_path.string(), "cpu");
  Backend& be = base->model->backend();
  const uint64_t loaded = memory_in_use(be);
  const uint64_t kv_bytes = static_cast<uint64_t>(base->model->n_ctx()) *
                            static_cast<uint64_t>(base->model->kv_cache().shape().floats_per_entry()) * sizeof(float);
  {
    const OpenedModel s1 = open_sequence(*base);
    const OpenedModel s2 = open_sequence(*base);
    EXPECT_EQ(memory_in_use(be), loaded + 2 * kv_bytes);
  }
  EXPECT_EQ(memory_in_use(be), loaded);  // a destroyed sequence gives its cache back
  // The weights outlive the first sequence while another runs on them.
  OpenedModel last = open_sequence(*base);
  std::shared_ptr<StepRunner> runner = base->model->runner();
  const std::vector<int32_t> prompt = base->tokenizer->encode("Once upon a time", true);
  const auto want = generate(*base->model, *base->tokenizer, prompt, greedy(Strategy::Ar, 16)).ids;
  base->model.reset();
  EXPECT_EQ(generate(*last.model, *last.tokenizer, prompt, greedy(Strategy::Ar, 16)).ids, want);
}

TEST(SharedWeights, AModelDraftingForItselfIsASecondSequence) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenOptions options;
  options.path = model_path.string();
  options.backend = BackendSpec{"cpu", "", 2};
  options.n_ctx = 256;
  OpenedModel m = open_model(options);
  GenerationOptions o = greedy(Strategy::Draft, 40);
  o.decoding.draft_model_path = "self";
  o.resources.draft_model = open_draft_model(o.decoding, options, *m.model, m.tokenizer->vocab());
  ASSERT_TRUE(o.resources.draft_model);
  EXPECT_EQ(o.resources.draft_model->runner(), m.model->runner());
  EXPECT_NE(&o.resources.draft_model->kv_cache(), &m.model->kv_cache());
  const std::vector<int32_t> prompt = m.tokenizer->encode("Lily and Tom went to the park. Lily and Tom", true);
  const auto drafted = generate(*m.model, *m.tokenizer, prompt, o).ids;
  EXPECT_EQ(drafted, generate(*m.model, *m.tokenizer, prompt, greedy(Strategy::Ar, 40)).ids);
  // Another backend for the draft loads the file again.
  o.decoding.draft_backend = "reference";
  o.resources.draft_model = open_draft_model(o.decoding, options, *m.model, m.tokenizer->vocab());
  EXPECT_NE(o.resources.draft_model->runner(), m.model->runner());
}

TEST(SharedWeights, AStepRefusesACacheAnotherBackendMade) {
  for (const std::string name : {"cpu", "reference"}) {
    SCOPED_TRACE(name);
    auto a = make_backend(BackendSpec{name, "", 1});
    auto b = make_backend(BackendSpec{name, "", 1});
    const auto theirs = b->create_kv_cache(KvCacheShape{1, 8, 4});
    const auto ours = a->create_kv_cache(KvCacheShape{1, 8, 4});
    StepBatch batch = StepBatch::causal({0}, 0);
    EXPECT_THROW(a->begin_step(batch, *theirs), std::invalid_argument);
    EXPECT_NO_THROW(a->begin_step(batch, *ours));
    a->finish_step();
  }
}
