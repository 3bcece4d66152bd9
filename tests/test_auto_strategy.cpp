// --strategy auto's cost model and controller (fafo/auto_strategy.h), driven by
// synthetic step-cost curves and streams of emitted tokens: a device where nothing
// pays, one where everything does, one in between, and yields that change.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "fafo/auto_state.h"
#include "fafo/auto_strategy.h"
#include "fafo/generator.h"
#include "model_fixtures.h"
#include "test_support.h"

namespace {

using namespace fafo;

StepCosts curve(const std::vector<std::pair<int32_t, double>>& points) {
  StepCosts c;
  for (const auto& [T, s] : points) {
    c.sizes.push_back(T);
    c.seconds.push_back(s);
  }
  return c;
}

// A candidate of strategy s, N = n, with a step of `tokens` tokens.
AutoCandidate candidate(Strategy s, int32_t n, int32_t tokens) {
  DecodingOptions o;
  o.strategy = s;
  o.ngram = n;
  return {o, tokens};
}

std::vector<AutoCandidate> grid() {
  return {candidate(Strategy::Ar, 1, 1), candidate(Strategy::Lookahead, 3, 5), candidate(Strategy::Fafo, 4, 17),
          candidate(Strategy::Fafo, 5, 65)};
}

TEST(StepCosts, LinearBetweenPointsAndAlongTheLastSlopeBeyond) {
  const StepCosts c = curve({{1, 1.0}, {2, 1.5}, {8, 2.0}, {64, 9.0}});
  EXPECT_DOUBLE_EQ(c.at(1), 1.0);
  EXPECT_DOUBLE_EQ(c.at(2), 1.5);
  EXPECT_DOUBLE_EQ(c.at(5), 1.75);
  EXPECT_DOUBLE_EQ(c.at(64), 9.0);
  EXPECT_DOUBLE_EQ(c.at(120), 16.0);
  EXPECT_DOUBLE_EQ(c.relative(8), 2.0);
  EXPECT_THROW(StepCosts{}.at(1), std::logic_error);
  // Beyond the last point, never below it (a noisy last segment may slope down).
  EXPECT_DOUBLE_EQ(curve({{1, 1.0}, {8, 3.0}, {64, 2.5}}).at(128), 2.5);
}

TEST(AutoController, WhereNothingPaysItIsPlainDecodingFromTheFirstStep) {
  // A CPU: a step costs about its token count (t(64)/t(1) = 45 measured on stories260K).
  AutoController auto_(curve({{1, 1.0}, {8, 6.0}, {64, 45.0}}), grid());
  for (int c = 1; c < 4; ++c) EXPECT_FALSE(auto_.viable(c)) << auto_.candidates()[static_cast<size_t>(c)].label();
  for (int step = 0; step < 200; ++step) {
    const AutoDecision d = auto_.choose();
    ASSERT_EQ(d.candidate, 0) << "step " << step;
    EXPECT_EQ(d.reason, "nothing pays");
    auto_.observe(d.candidate, 1);
  }
  EXPECT_NE(auto_.explain().find("no strategy can pay"), std::string::npos) << auto_.explain();
}

TEST(AutoController, WhereEverythingPaysItRunsTheBestYieldAndComesBackToTheOthers) {
  // A GPU: up to 128 tokens cost one step.
  AutoController auto_(curve({{1, 1.0}, {128, 1.0}, {256, 1.6}}), grid());
  // Yields per candidate: the large FAFO step emits the most.
  const std::map<int32_t, int32_t> emits = {{0, 1}, {1, 2}, {2, 2}, {3, 4}};
  std::map<int32_t, int> runs;
  std::map<std::string, int> reasons;
  for (int step = 0; step < 400; ++step) {
    const AutoDecision d = auto_.choose();
    ++runs[d.candidate];
    ++reasons[d.reason];
    auto_.observe(d.candidate, emits.at(d.candidate));
  }
  // Each viable candidate's trial, once: its window's warm-up (N - 1 steps), then the trial.
  EXPECT_EQ(reasons["trial"], (2 + 3 + 4) + 3 * AutoOptions{}.trial_steps);
  EXPECT_GT(runs[3], 300);
  EXPECT_GT(reasons["revisit"], 0);    // the others run again now and then
  EXPECT_EQ(runs[0], 0);               // plain decoding never: everything beats it
  EXPECT_NEAR(auto_.relative_speed(3), 4.0, 1e-9);
  EXPECT_NE(auto_.explain().find("fafo"), std::string::npos) << auto_.explain();
}

TEST(AutoController, ItFollowsYieldsThatChangeAndFallsBackToPlainDecoding) {
  // t(8)/t(1) = 1.5, t(64)/t(1) = 12: candidates are tried where they pay at half
  // their N tokens per step.
  AutoController auto_(curve({{1, 1.0}, {8, 1.5}, {64, 12.0}}), grid());
  EXPECT_TRUE(auto_.viable(1));   // 5 tokens: t(5)/t(1) = 1.29 < 3 / 2
  EXPECT_FALSE(auto_.viable(2));  // 17 tokens: 3.19 > 4 / 2
  EXPECT_FALSE(auto_.viable(3));  // 65 tokens: 12.2 > 5 / 2
  // Repetitive text first: the lookahead candidate emits 3 tokens a step.
  int last = -1;
  for (int step = 0; step < 100; ++step) {
    const AutoDecision d = auto_.choose();
    last = d.candidate;
    auto_.observe(d.candidate, d.candidate == 1 ? 3 : d.candidate == 2 ? 2 : 1);
  }
  EXPECT_EQ(last, 1);
  // Then nothing is accepted any more: after the running yields fall, plain decoding.
  for (int step = 0; step < 300; ++step) {
    const AutoDecision d = auto_.choose();
    last = d.candidate;
    auto_.observe(d.candidate, 1);
  }
  const AutoDecision d = auto_.choose();
  EXPECT_TRUE(d.candidate == 0 || d.reason == "revisit") << d.candidate << " " << d.reason;
  EXPECT_LT(auto_.relative_speed(1), 1.0);
}

// A candidate that runs again after others did starts its window afresh: the decision
// says so, and its next N - 1 steps are warm-up, not yield.
TEST(AutoController, ACandidateComingBackRestartsAndWarmsUpAgain) {
  AutoController auto_(curve({{1, 1.0}, {128, 1.0}, {256, 1.6}}), grid());
  const std::map<int32_t, int32_t> emits = {{0, 1}, {1, 2}, {2, 2}, {3, 4}};
  int previous = -1, restarts = 0;
  for (int step = 0; step < 300; ++step) {
    const AutoDecision d = auto_.choose();
    // Restarted exactly when a candidate that ran before comes back after another.
    if (d.restart) {
      ++restarts;
      EXPECT_NE(d.candidate, previous);
      EXPECT_GT(d.candidate, 0);
      // Its warm-up: steps that emit nothing beyond the input's successor do not lower its yield.
      const double before = auto_.relative_speed(d.candidate);
      const int32_t c = d.candidate;
      auto_.observe(c, 1);
      for (int w = 1; w < auto_.candidates()[static_cast<size_t>(c)].options.ngram - 1; ++w) {
        const AutoDecision next = auto_.choose();
        ASSERT_EQ(next.candidate, c) << "a revisit runs its warm-up and then its steps";
        EXPECT_FALSE(next.restart);
        auto_.observe(c, 1);
        ++step;
      }
      EXPECT_DOUBLE_EQ(auto_.relative_speed(c), before);
      previous = c;
      continue;
    }
    auto_.observe(d.candidate, emits.at(d.candidate));
    previous = d.candidate;
  }
  EXPECT_GT(restarts, 2);  // the revisits and the returns to the best after them
}

TEST(AutoController, RejectsACandidateListWithoutPlainDecodingFirst) {
  EXPECT_THROW(AutoController(curve({{1, 1.0}}), {candidate(Strategy::Fafo, 5, 65)}), std::invalid_argument);
  EXPECT_THROW(AutoController(StepCosts{}, grid()), std::invalid_argument);
  EXPECT_THROW(AutoController(curve({{1, 1.0}, {1, 2.0}}), grid()), std::invalid_argument);
  EXPECT_THROW(AutoController(curve({{1, 0.0}, {2, 2.0}}), grid()), std::invalid_argument);
  EXPECT_THROW(AutoController(curve({{2, 1.0}, {4, 2.0}}), grid()), std::invalid_argument);  // no t(1)
}

TEST(AutoCandidates, StepSizesAreWhatTheDecodingLoopRuns) {
  // FAFO pads its chains, so every step of a FAFO candidate has exactly its step size.
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  test::TestModel m = test::load_test_model(model_path.string(), 256);
  for (const AutoCandidate& c : default_auto_candidates(DecodingOptions{})) {
    if (c.options.strategy != Strategy::Fafo) continue;
    GenerationOptions o;
    o.n_predict = 12;
    o.sampling.temperature = 0;
    o.decoding = c.options;
    int32_t largest = 0;
    o.on_step = [&](const StepTrace& t) {
      if (t.step > 0) largest = std::max(largest, t.batch_size);
    };
    generate(*m.model, *m.tokenizer, m.tokenizer->encode("Once upon a time", true), o);
    EXPECT_EQ(largest, c.step_tokens) << c.label();
  }
}

}  // namespace

namespace {

TEST(AutoStrategy, GreedyIdsEqualPlainDecodingWhateverItChooses) {
  // On a device where every candidate pays (a flat synthetic curve: multi-token steps
  // run), when candidates switch at every step, and with the step costs measured here
  // (a CPU: plain decoding): the ids of plain decoding, every time.
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  test::TestModel m = test::load_test_model(model_path.string(), 512);
  const std::vector<int32_t> prompt =
      m.tokenizer->encode("Lily and Tom went to the park. Lily and Tom went to the park. Lily and", true);
  auto run = [&](Strategy s, bool flat, bool rotate) {
    GenerationOptions o;
    o.n_predict = 96;
    o.sampling.temperature = 0;
    o.decoding.strategy = s;
    if (flat) o.step_costs = curve({{1, 1.0}, {128, 1.0}});
    o.auto_options.rotate = rotate;
    return generate(*m.model, *m.tokenizer, prompt, o);
  };
  const GenerationResult ar = run(Strategy::Ar, false, false);
  const GenerationResult flat = run(Strategy::Auto, true, false);
  EXPECT_EQ(flat.ids, ar.ids);
  EXPECT_LT(flat.n_steps, ar.n_steps);  // multi-token steps ran and accepted
  EXPECT_GT(flat.auto_choices.size(), 1u);
  EXPECT_EQ(run(Strategy::Auto, true, true).ids, ar.ids);
  const GenerationResult measured = run(Strategy::Auto, false, false);
  EXPECT_EQ(measured.ids, ar.ids);
  ASSERT_FALSE(measured.step_costs.empty());
  EXPECT_FALSE(measured.auto_summary.empty());
}

TEST(AutoStrategy, ItsStateKeepsTheCurveAndWhatItLearnedBetweenGenerations) {
  // OpenedModel::auto_state, passed as GenerationOptions::auto_state: the curve measured
  // in one generation is the next one's (not measured again), and what the controller
  // learned is kept; without a state each generation measures its own.
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  test::TestModel m = test::load_test_model(model_path.string(), 512);
  const std::vector<int32_t> prompt = m.tokenizer->encode("Lily and Tom went to the park. Lily and", true);
  AutoState state;
  GenerationOptions o;
  o.n_predict = 24;
  o.sampling.temperature = 0;
  o.decoding.strategy = Strategy::Auto;
  o.auto_state = &state;
  const GenerationResult first = generate(*m.model, *m.tokenizer, prompt, o);
  ASSERT_FALSE(state.step_costs().empty());
  EXPECT_EQ(first.step_costs.sizes, state.step_costs().sizes);
  EXPECT_FALSE(state.memory().labels.empty());
  EXPECT_FALSE(state.memory().context.empty());
  StepCosts marked = state.step_costs();
  marked.source = "kept by the test";
  state.set_step_costs(marked);
  const GenerationResult second = generate(*m.model, *m.tokenizer, prompt, o);
  EXPECT_EQ(second.step_costs.source, "kept by the test");
  EXPECT_EQ(second.ids, first.ids);
  o.auto_state = nullptr;
  EXPECT_EQ(generate(*m.model, *m.tokenizer, prompt, o).step_costs.source, "measured");
  // open_model gives each opened model (and each sequence on its weights) a state.
  ASSERT_TRUE(m.auto_state);
  const OpenedModel seq = open_sequence(m);
  ASSERT_TRUE(seq.auto_state);
  EXPECT_NE(seq.auto_state.get(), m.auto_state.get());
}

}  // namespace
