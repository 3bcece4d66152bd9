// Joined steps (StepBatch::join, Sequence::forward_joined, StepJoiner): the steps of several
// sequences on one load of the weights run as one step, and every row gets the bits it
// gets when its sequence steps alone (T-invariance extended to sequences), on every
// backend.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fafo/backend_registry.h"
#include "fafo/generator.h"
#include "fafo/kv_policy.h"
#include "fafo/open_model.h"
#include "fafo/step_joiner.h"
#include "joined_steps_check.h"
#include "model_fixtures.h"
#include "test_support.h"

using namespace fafo;

TEST(StepBatchJoin, PartsKeepTheirRowsMasksAndNPast) {
  StepBatch a = StepBatch::causal({5, 6, 7}, 10, true);
  StepBatch b;
  b.add(8, 3, {}, false);
  b.add(9, 4, {0}, true, PrefixView::Compressed);
  b.set_n_past(3);
  StepBatch j = StepBatch::join({&a, &b});
  ASSERT_EQ(j.size(), 5);
  ASSERT_EQ(j.n_segments(), 2);
  EXPECT_EQ(j.segment(0).first, 0);
  EXPECT_EQ(j.segment(1).first, 3);
  EXPECT_EQ(j.segment(1).n_past, 3);
  EXPECT_EQ(j.segment_of(4), 1);
  EXPECT_EQ(j.slot_of(2), 12);
  EXPECT_EQ(j.slot_of(4), 4);
  EXPECT_TRUE(j.sees(2, 0));
  EXPECT_FALSE(j.sees(3, 2));  // a part never sees another part's rows
  EXPECT_TRUE(j.sees(4, 3));
  EXPECT_EQ(j.prefix(4), PrefixView::Compressed);
  EXPECT_EQ(j.logit_rows(), (std::vector<int32_t>{0, 1, 2, 4}));
  EXPECT_THROW((void)j.n_past(), std::logic_error);
  EXPECT_THROW(j.add(1, 0, {}, false), std::logic_error);
  EXPECT_THROW(StepBatch::join({}), std::invalid_argument);
  EXPECT_THROW(StepBatch::join({&a, &j}), std::invalid_argument);
  StepBatch empty;
  EXPECT_THROW(StepBatch::join({&a, &empty}), std::invalid_argument);
}

// The check of tests/joined_steps_check.h on the backends in this executable
// (cuda-emulated: tests/test_cuda_host.cpp; an MLA model: tests/test_mla.cpp). On Vulkan
// twice: with the fused attention projections (rope_store, one dispatch per part) and
// without them (FAFO_VULKAN_FUSE=0: the KV cache's kv_store per part).
TEST(JoinedSteps, EachPartGetsTheBitsOfItsStepAlone) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  for (const std::string backend : {"reference", "cpu", "vulkan", "vulkan unfused"}) {
    SCOPED_TRACE(backend);
    const bool unfused = backend == "vulkan unfused";
    if (unfused) ::setenv("FAFO_VULKAN_FUSE", "0", 1);
    const auto base = test::load_on(model_path.string(), unfused ? "vulkan" : backend);
    if (unfused) ::unsetenv("FAFO_VULKAN_FUSE");
    if (!base) continue;  // no Vulkan device
    EXPECT_GT(base->model->backend().capabilities().max_step_sequences, 3);
    test::check_joined_steps(base->model->runner(), *base->tokenizer);
  }
}

TEST(JoinedSteps, APartThatFailsItsChecksDoesNotStopTheOthers) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto base = test::load_on(model_path.string(), "cpu");
  OpenedModel other = open_sequence(*base);
  StepBatch ok = StepBatch::causal({5, 6}, 0);
  StepBatch too_long = StepBatch::causal(std::vector<int32_t>(300, 7), 0);  // the context holds 256
  StepRequest a{&ok, StepWant::Argmax}, b{&too_long, StepWant::Argmax};
  Sequence::forward_joined({{base->model.get(), &a}, {other.model.get(), &b}});
  EXPECT_FALSE(a.error);
  EXPECT_EQ(a.ids.size(), 1u);
  ASSERT_TRUE(b.error);
  EXPECT_THROW(std::rethrow_exception(b.error), std::length_error);
  // A sequence twice, or sequences on different weights, are refused.
  StepRequest c{&ok, StepWant::Argmax};
  EXPECT_THROW(Sequence::forward_joined({{base->model.get(), &a}, {base->model.get(), &c}}), std::invalid_argument);
  const auto separate = test::load_on(model_path.string(), "cpu");
  EXPECT_THROW(Sequence::forward_joined({{base->model.get(), &a}, {separate->model.get(), &c}}), std::invalid_argument);
}

// Sequences generating on threads through one StepJoiner: their steps are joined (more
// than one sequence per step) and every text equals its sequence's text alone, for
// plain, Lookahead and FAFO decoding side by side.
TEST(JoinedSteps, AJoinerJoinsConcurrentGenerationsWithoutChangingATokens) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  for (const std::string backend : {"cpu", "vulkan"}) {
    SCOPED_TRACE(backend);
    const auto base = test::load_on(model_path.string(), backend);
    if (!base) continue;
    const std::vector<std::string> prompts = {"Once upon a time there was a little dog",
                                              "Lily and Tom went to the park. Lily and Tom went to", "The sun was"};
    const Strategy strategies[] = {Strategy::Ar, Strategy::Lookahead, Strategy::Fafo};
    const auto options = [](Strategy s) {
      GenerationOptions o;
      o.n_predict = 40;
      o.sampling.temperature = 0;
      o.stop_at_end_of_generation = false;
      o.decoding.strategy = s;
      return o;
    };
    std::vector<std::vector<int32_t>> want;
    for (size_t i = 0; i < prompts.size(); ++i)
      want.push_back(generate(*base->model, *base->tokenizer, base->tokenizer->encode(prompts[i], true),
                              options(strategies[i])).ids);
    // Waits of 20 ms for each active sequence: the threads' steps meet even where they start apart.
    auto joiner = std::make_shared<StepJoiner>(std::chrono::milliseconds(20), std::chrono::milliseconds(20));
    std::vector<OpenedModel> seqs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      seqs.push_back(open_sequence(*base));
      seqs.back().model->set_step_joiner(joiner);
    }
    std::vector<std::vector<int32_t>> got(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) joiner->enter();
    std::vector<std::thread> threads;
    for (size_t i = 0; i < prompts.size(); ++i)
      threads.emplace_back([&, i] {
        got[i] = generate(*seqs[i].model, *seqs[i].tokenizer, seqs[i].tokenizer->encode(prompts[i], true),
                          options(strategies[i])).ids;
        joiner->leave();
      });
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], want[i]) << strategy_name(strategies[i]);
    const StepJoiner::Stats stats = joiner->stats();
    EXPECT_GT(stats.parts, stats.steps);
    EXPECT_EQ(stats.most_parts, 3);
  }
}

// While other sequences share the joiner, auto decodes plainly (its step costs were
// measured for one sequence alone): one token per step, plain decoding's ids, and its
// summary says why; alone on the joiner it chooses as usual.
TEST(JoinedSteps, AutoDecodesPlainlyWhileOtherSequencesShareTheStep) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto base = test::load_on(model_path.string(), "cpu");
  const std::vector<int32_t> prompt =
      base->tokenizer->encode("Lily and Tom went to the park. Lily and Tom went to the park. Lily and Tom went to", true);
  GenerationOptions o;
  o.n_predict = 40;
  o.sampling.temperature = 0;
  o.stop_at_end_of_generation = false;
  o.decoding.strategy = Strategy::Ar;
  const std::vector<int32_t> want = generate(*base->model, *base->tokenizer, prompt, o).ids;
  auto joiner = std::make_shared<StepJoiner>(std::chrono::milliseconds(0), std::chrono::milliseconds(0));
  OpenedModel seq = open_sequence(*base);
  seq.model->set_step_joiner(joiner);
  o.decoding.strategy = Strategy::Auto;
  joiner->enter();
  joiner->enter();  // another sequence, leased but not stepping
  const GenerationResult shared = generate(*seq.model, *seq.tokenizer, prompt, o);
  joiner->leave();
  EXPECT_EQ(shared.ids, want);
  EXPECT_EQ(shared.n_steps, static_cast<int32_t>(shared.ids.size()));
  EXPECT_NE(shared.auto_summary.find("plain decoding at 39 steps shared with other sequences"), std::string::npos)
      << shared.auto_summary;
  seq.model->truncate(0);
  const GenerationResult alone = generate(*seq.model, *seq.tokenizer, prompt, o);
  joiner->leave();
  EXPECT_EQ(alone.ids, want);
  EXPECT_EQ(alone.auto_summary.find("shared with other sequences"), std::string::npos) << alone.auto_summary;
}
