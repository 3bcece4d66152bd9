// --strategy auto's cost model and controller (fafo/auto_strategy.h), driven by
// synthetic step-cost curves and streams of emitted tokens: a device where nothing
// pays, one where everything does, one in between, and yields that change.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "fafo/auto_state.h"
#include "fafo/auto_strategy.h"
#include "fafo/step_cost_cache.h"
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

TEST(StepCosts, LinearBetweenPointsAndNeverExtrapolated) {
  const StepCosts c = curve({{1, 1.0}, {2, 1.5}, {8, 2.0}, {64, 9.0}});
  EXPECT_DOUBLE_EQ(c.at(1), 1.0);
  EXPECT_DOUBLE_EQ(c.at(2), 1.5);
  EXPECT_DOUBLE_EQ(c.at(5), 1.75);
  EXPECT_DOUBLE_EQ(c.at(64), 9.0);
  EXPECT_DOUBLE_EQ(c.relative(8), 2.0);
  EXPECT_TRUE(c.measured(8));
  EXPECT_FALSE(c.measured(5));
  EXPECT_THROW(StepCosts{}.at(1), std::logic_error);
  // Beyond the last point: the last point, a lower bound, whatever the last slope; one
  // point is not a line either.
  EXPECT_DOUBLE_EQ(c.at(120), 9.0);
  EXPECT_DOUBLE_EQ(curve({{1, 1.0}, {2, 56.0}}).at(4), 56.0);
  EXPECT_DOUBLE_EQ(curve({{1, 1.0}}).at(4), 1.0);
}

TEST(StepCosts, ACurveNoDeviceCouldHaveIsNamedAndBounded) {
  // The cache file: t(2) = 56 t(1), timed while the machine was busy.
  StepCosts busy = curve({{1, 1.0}, {2, 56.09}});
  EXPECT_NE(busy.implausible_reason().find("more than the 2 steps of 1 tokens"), std::string::npos) << busy.implausible_reason();
  busy.make_plausible();
  EXPECT_EQ(busy.implausible_reason(0), "");
  EXPECT_DOUBLE_EQ(busy.relative(2), 2.0);
  EXPECT_EQ(busy.bounded, 1);
  StepCosts cheaper = curve({{1, 1.0}, {4, 2.0}, {8, 1.5}, {16, 1.9}});
  EXPECT_NE(cheaper.implausible_reason().find("t(8) is 0.75 t(4): a larger step cannot cost less"), std::string::npos)
      << cheaper.implausible_reason();
  // Noise only slows a step: the point above a later one comes down to it.
  cheaper.make_plausible();
  EXPECT_EQ(cheaper.seconds, (std::vector<double>{1.0, 1.5, 1.5, 1.9}));
  EXPECT_EQ(cheaper.bounded, 1);
  // Moves within the tolerance are made but not counted: a flat GPU curve's noise.
  StepCosts flat = curve({{1, 1.0}, {4, 1.05}, {8, 1.02}});
  flat.make_plausible();
  EXPECT_EQ(flat.seconds, (std::vector<double>{1.0, 1.02, 1.02}));
  EXPECT_EQ(flat.bounded, 0);
  // Within the tolerance: plausible (timing noise), and left as measured.
  EXPECT_EQ(curve({{1, 1.0}, {2, 0.95}, {4, 2.05}}).implausible_reason(0.1), "");
  EXPECT_NE(curve({{1, 1.0}, {2, 0.95}}).implausible_reason(0.0), "");
  // describe() prints the measured points with their spread, nothing extrapolated.
  StepCosts spread = curve({{1, 0.001}, {4, 0.002}});
  spread.spread = {0.01, 0.03};
  spread.source = "measured";
  EXPECT_EQ(spread.describe(), "t(T)/t(1): 4 2.00 +-4% (measured)");
}

// A timer that lies now and then, as a busy machine does: a step's time is its cost on
// an idle machine (`truth`), a little jitter, and with probability `spikes` many times
// more (another program took the cores).
struct NoisyTimer {
  std::function<double(int32_t)> truth;
  double spikes = 0.2;
  uint64_t state = 1;
  int calls = 0;
  double uniform() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) / 9007199254740992.0;
  }
  double operator()(int32_t T) {
    ++calls;
    const double t = truth(T) * (1 + 0.03 * uniform());
    return uniform() < spikes ? t * (2 + 60 * uniform()) : t;
  }
};

TEST(StepCosts, ANoisyTimerCannotProduceARatioThePhysicsRulesOut) {
  const std::vector<int32_t> sizes = {1, 2, 4, 5, 8, 16, 17, 32, 64, 65};
  auto gpu = [](int32_t T) { return 1e-3 * (1 + 0.01 * T); };
  auto cpu = [](int32_t T) { return 1e-4 * (0.3 + 0.7 * T); };
  for (const auto& truth : {std::function<double(int32_t)>(gpu), std::function<double(int32_t)>(cpu)})
    for (double spikes : {0.0, 0.1, 0.3, 0.6})
      for (uint64_t seed = 1; seed <= 40; ++seed) {
        NoisyTimer timer{truth, spikes, seed};
        const StepCosts c = time_step_costs(sizes, std::ref(timer), 1000);
        SCOPED_TRACE("spikes " + std::to_string(spikes) + " seed " + std::to_string(seed));
        ASSERT_EQ(c.invalid_reason(), "");
        // Whatever the timer said: t(1) <= t(T) <= T t(1), and the same between neighbours.
        EXPECT_EQ(c.implausible_reason(0), "");
        for (size_t i = 0; i < c.sizes.size(); ++i) {
          EXPECT_GE(c.relative(c.sizes[i]), 1.0);
          EXPECT_LE(c.relative(c.sizes[i]), c.sizes[i] * (1 + 1e-12));
        }
        ASSERT_EQ(c.spread.size(), c.sizes.size());
        // With a few spikes the medians find the idle machine's ratios.
        if (spikes <= 0.1)
          for (int32_t T : {8, 65}) {
            const double truth_ratio = truth(T) / truth(1);
            EXPECT_NEAR(c.relative(T), truth_ratio, 0.1 * truth_ratio) << "T " << T;
          }
      }
}

TEST(StepCosts, APointImplausibleAgainstItsNeighbourIsTimedAgain) {
  // The second step of 2 tokens takes 56 times what it should; the others are true.
  int twos = 0, calls = 0;
  auto timer = [&](int32_t T) {
    ++calls;
    if (T == 2 && ++twos <= 3) return 56e-3;  // the untimed one, then two of five: still a median of 1.1
    return 1e-3 * (1 + 0.1 * (T - 1));
  };
  const StepCosts c = time_step_costs({1, 2, 4}, timer, 100);
  EXPECT_NEAR(c.relative(2), 1.1, 1e-9);
  EXPECT_EQ(c.bounded, 0);
  // Every step that always lies: timed again (once), then bounded.
  calls = 0;
  auto liar = [&](int32_t T) {
    ++calls;
    return T == 2 ? 0.056 : 1e-3;
  };
  const StepCosts bounded = time_step_costs({1, 2}, liar, 100);
  EXPECT_DOUBLE_EQ(bounded.relative(2), 2.0);
  EXPECT_EQ(bounded.bounded, 1);
  // t(1): one untimed step, then 5 (a millisecond fits 100 times in the 0.1 s a size
  // gets); t(2): one untimed (56 ms: 3 rounds fit, the least), 3 rounds with a step of 1
  // each, then once again.
  EXPECT_EQ(calls, 1 + 5 + 1 + 3 * 2 + 3 * 2);
  // It stops after a size no candidate can pay at.
  const StepCosts linear = time_step_costs({1, 2, 4, 8, 16}, [](int32_t T) { return 1e-3 * T; }, 3);
  EXPECT_EQ(linear.sizes, (std::vector<int32_t>{1, 2, 4}));
  // ... judged on the bounded curve: a raw t(4) = 7 t(1) is held to 4 t(1), under 5, so
  // the measurement goes on to 8 (bounded to 8 t(1), over 5).
  const StepCosts superlinear = time_step_costs({1, 2, 4, 8, 16}, [](int32_t T) { return 1e-3 * (T < 4 ? T : 1.75 * T); }, 5);
  EXPECT_EQ(superlinear.sizes, (std::vector<int32_t>{1, 2, 4, 8}));
  EXPECT_DOUBLE_EQ(superlinear.relative(8), 8.0);
  EXPECT_THROW(time_step_costs({2, 4}, liar, 100), std::invalid_argument);
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

// A controller driven by a simulated machine: each step runs the chosen candidate, takes
// the machine's time for its step size and emits the candidate's tokens.
struct Simulated {
  AutoController controller;
  std::function<double(int32_t)> machine;
  std::map<int32_t, int32_t> emits = {{0, 1}, {1, 2}, {2, 3}, {3, 4}};
  // Runs `steps` steps; returns how many of the last `tail` ran each candidate.
  std::map<int32_t, int> run(int steps, int tail) {
    std::map<int32_t, int> last;
    for (int step = 0; step < steps; ++step) {
      const AutoDecision d = controller.choose();
      const int32_t T = controller.candidates()[static_cast<size_t>(d.candidate)].step_tokens;
      controller.time_step(d.candidate, T, machine(T));
      controller.observe(d.candidate, emits.at(d.candidate));
      if (step >= steps - tail) ++last[d.candidate];
    }
    return last;
  }
};

// The machine changes under a generation: a GPU-like device (a step of up to 128
// tokens costs one), then a CPU-like one (a step costs its tokens), then the GPU again.
// The controller, told each step's time, follows: the large FAFO step, then plain
// decoding, then a multi-token step again, found by its probes.
TEST(AutoController, TheChoiceConvergesOnAMachineWhoseCostsChangeMidway) {
  auto gpu = [](int32_t) { return 1e-3; };
  auto cpu = [](int32_t T) { return 1e-3 * T; };
  Simulated sim{AutoController(curve({{1, 1e-3}, {128, 1e-3}}), grid()), gpu};
  const AutoController& auto_ = sim.controller;
  std::map<int32_t, int> last = sim.run(600, 300);
  EXPECT_GE(last[3], 270) << "the GPU: the large FAFO step";
  sim.machine = cpu;
  last = sim.run(1500, 500);
  EXPECT_GE(last[0], 480) << "the CPU: plain decoding, but for probes";
  EXPECT_FALSE(auto_.viable(3));
  EXPECT_NEAR(auto_.step_seconds(0), 1e-3, 1e-9);
  EXPECT_NE(auto_.explain().find("no strategy can pay here"), std::string::npos) << auto_.explain();
  EXPECT_NE(auto_.explain().find("of its steps timed"), std::string::npos) << auto_.explain();
  sim.machine = gpu;
  last = sim.run(3000, 500);
  EXPECT_GE(last[3], 450) << "the GPU again, found by a probe";
  EXPECT_TRUE(auto_.viable(1) && auto_.viable(2) && auto_.viable(3));
}

// A machine that slows down as a whole (another program on it) changes no choice; one
// whose one-token steps alone get faster makes plain decoding best, which its revisits
// (every other one while another candidate is best) notice.
TEST(AutoController, AUniformSlowdownKeepsTheChoiceAndAFasterPlainStepIsNoticed) {
  double scale = 1, plain = 1e-3;
  Simulated sim{AutoController(curve({{1, 1e-3}, {128, 1e-3}}), grid()),
                [&](int32_t T) { return scale * (T == 1 ? plain : 1e-3); }};
  const AutoController& auto_ = sim.controller;
  auto run = [&](int steps, int tail) { return sim.run(steps, tail); };
  EXPECT_GE(run(600, 300)[3], 270);
  scale = 3;
  EXPECT_GE(run(1500, 500)[3], 450) << "3x slower everywhere: the same choice";
  EXPECT_NEAR(auto_.step_seconds(3) / auto_.step_seconds(0), 1.0, 0.05);
  plain = 0.2e-3;  // a one-token step 5x cheaper: FAFO's 4 tokens a step are 0.8x plain decoding
  EXPECT_GE(run(1500, 500)[0], 450) << "plain decoding, timed again by its revisits";
  EXPECT_NEAR(auto_.step_seconds(0), 3 * 0.2e-3, 0.1 * 3 * 0.2e-3);
  EXPECT_NEAR(auto_.plain_step_median(), 3 * 0.2e-3, 1e-12);
}

// On a CPU where nothing pays, the probes of the ruled-out shapes take a small share of
// the steps, whatever their number, and only the one nearest to paying is probed.
TEST(AutoController, ProbesStayUnderTheirOverheadInAll) {
  std::vector<AutoCandidate> many = {candidate(Strategy::Ar, 1, 1)};
  for (int i = 0; i < 10; ++i) many.push_back(candidate(Strategy::Lookahead, 3, 4 + i));
  AutoController auto_(curve({{1, 1e-3}, {64, 64e-3}}), many);
  int probes = 0;
  std::map<int32_t, int> probed;
  for (int step = 0; step < 20000; ++step) {
    const AutoDecision d = auto_.choose();
    const int32_t T = auto_.candidates()[static_cast<size_t>(d.candidate)].step_tokens;
    auto_.time_step(d.candidate, T, 1e-3 * T);
    auto_.observe(d.candidate, 1);
    if (d.reason == "probe") {
      ++probes;
      ++probed[d.candidate];
    }
  }
  EXPECT_GT(probes, 0);
  EXPECT_LE(probes, 20000 * AutoOptions{}.probe_steps / AutoOptions{}.probe_every + AutoOptions{}.probe_steps);
  EXPECT_EQ(probed.size(), 1u) << "the nearest to paying, the 4-token step";
  EXPECT_EQ(probed.begin()->first, 1);
}

// An excluded candidate never runs, whatever its costs; a memory carries the timed costs
// into the next generation's controller.
TEST(AutoController, ExcludedCandidatesNeverRunAndTimedCostsAreRecalled) {
  AutoController first(curve({{1, 1e-3}, {128, 1e-3}}), grid());
  first.exclude(3);
  EXPECT_FALSE(first.viable(3));
  EXPECT_THROW(first.exclude(0), std::out_of_range);
  for (int step = 0; step < 500; ++step) {
    const AutoDecision d = first.choose();
    ASSERT_NE(d.candidate, 3);
    const int32_t T = first.candidates()[static_cast<size_t>(d.candidate)].step_tokens;
    first.time_step(d.candidate, T, T == 1 ? 1e-3 : 2e-3);
    first.observe(d.candidate, d.candidate + 1);
  }
  const AutoMemory memory = first.memory();
  AutoController second(curve({{1, 1e-3}, {128, 1e-3}}), grid());
  second.recall(memory);
  EXPECT_NEAR(second.step_seconds(2), first.step_seconds(2), 1e-15);
  EXPECT_EQ(second.timed_steps(2), first.timed_steps(2));
  EXPECT_NEAR(second.step_seconds(2), 2e-3, 0.2e-3) << "timed at 2 ms, not the curve's 1 ms";
}

// A candidate none of whose steps were timed keeps the curve's ratio to plain
// decoding's timed cost: one-token steps after a longer context (slower on any machine)
// do not make it look cheap, and no trial runs for that.
TEST(AutoController, AnUntimedCandidateKeepsTheCurvesRatioToPlainDecoding) {
  // The lookahead step (5 tokens, N = 3) costs 2 one-token steps: over the 1.5 it may.
  AutoController auto_(curve({{1, 1e-3}, {5, 2e-3}, {17, 6.8e-3}, {65, 25e-3}}), grid());
  for (int step = 0; step < 200; ++step) {
    const AutoDecision d = auto_.choose();
    ASSERT_EQ(d.candidate, 0) << "step " << step << ": " << d.reason;
    auto_.time_step(0, 1, 3e-3, 500);  // 3x the curve's t(1), far past its context
    auto_.observe(0, 1);
  }
  EXPECT_NEAR(auto_.step_seconds(0), 3e-3, 1e-4);
  EXPECT_NEAR(auto_.step_seconds(1) / auto_.step_seconds(0), 2.0, 1e-9);
  EXPECT_FALSE(auto_.viable(1));
}

TEST(AutoController, OneSlowStepMovesACostByAFewPerCent) {
  AutoController auto_(curve({{1, 1e-3}, {128, 1e-3}}), grid());
  auto_.time_step(0, 1, 50e-3);  // 50x: another program took the core for a moment
  EXPECT_NEAR(auto_.step_seconds(0), 1e-3 * std::exp(0.05), 1e-12);
  auto_.time_step(0, 1, 0.5e-3);  // faster than its work can be unless the machine changed
  EXPECT_LT(auto_.step_seconds(0), 0.75e-3);
  // A lookahead step smaller than its full size counts at its size along the curve.
  AutoController scaled(curve({{1, 1.0}, {5, 2.0}}), grid());
  scaled.time_step(1, 3, 1.5);  // t(3) on the curve is 1.5: the full step, 2.0, as expected
  EXPECT_DOUBLE_EQ(scaled.step_seconds(1), 2.0);
  EXPECT_EQ(scaled.timed_steps(1), 1);
  scaled.time_step(1, 3, 0.0);  // not a time: ignored
  EXPECT_EQ(scaled.timed_steps(1), 1);
}

// A one-token step after a long context costs more on any machine: only plain steps near
// the context the curve was timed after count toward the median that judges it stale.
TEST(AutoController, OnlyPlainStepsNearTheCurvesContextJudgeIt) {
  StepCosts c = curve({{1, 1e-3}, {8, 2e-3}});
  c.context = 100;
  AutoController auto_(c, grid());
  auto_.time_step(0, 1, 5e-3, 400);  // 300 tokens later: not counted
  auto_.time_step(0, 1, 5e-3, 117);  // 17: not counted either
  EXPECT_EQ(auto_.plain_steps_timed(), 0);
  EXPECT_EQ(auto_.plain_step_median(), 0.0);
  auto_.time_step(0, 1, 1e-3, 100);
  auto_.time_step(0, 1, 3e-3, 116);
  auto_.time_step(0, 1, 2e-3, -1);  // unknown: counted
  EXPECT_EQ(auto_.plain_steps_timed(), 3);
  EXPECT_DOUBLE_EQ(auto_.plain_step_median(), 2e-3);
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

// A kept curve no device could have (the t(2) = 56 t(1)) is measured again by
// the next generation and rewritten; so is one whose one-token steps no longer take
// what it says.
TEST(AutoStrategy, AKeptCurveThatIsImplausibleOrStaleIsMeasuredAgain) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  test::TestModel m = test::load_test_model(model_path.string(), 512);
  const std::vector<int32_t> prompt = m.tokenizer->encode("Lily and Tom went to the park. Lily and", true);
  const auto dir = test::temp_dir("auto-implausible-cache");
  const StepCostCache cache(dir, "stories260K | cpu | f32");
  std::ofstream(cache.file(), std::ios::trunc) << "fafo step costs 2\nkey " << cache.key() << "\nbounded 0\ncontext 0\n1 0.0001 0\n2 0.005609 0\n";
  AutoState state;
  state.set_step_cost_cache(cache);
  EXPECT_TRUE(state.step_costs().empty());
  EXPECT_NE(state.remeasure_reason().find("implausible"), std::string::npos) << state.remeasure_reason();
  GenerationOptions o;
  o.n_predict = 16;
  o.sampling.temperature = 0;
  o.decoding.strategy = Strategy::Auto;
  o.auto_state = &state;
  const GenerationResult first = generate(*m.model, *m.tokenizer, prompt, o);
  ASSERT_FALSE(state.step_costs().empty());
  EXPECT_EQ(state.step_costs().implausible_reason(0), "");
  EXPECT_NE(first.step_costs.source.find("measured again: the kept curve was implausible"), std::string::npos) << first.step_costs.source;
  EXPECT_NE(first.step_costs.source.find("kept in " + cache.file().string()), std::string::npos) << first.step_costs.source;
  ASSERT_TRUE(cache.load());  // rewritten, plausible
  EXPECT_EQ(cache.load()->sizes, state.step_costs().sizes);
  // The candidates' step sizes are measured, not interpolated, where the curve reaches them.
  for (const AutoCandidate& c : default_auto_candidates(DecodingOptions{})) {
    if (c.step_tokens <= state.step_costs().sizes.back()) {
      EXPECT_TRUE(state.step_costs().measured(c.step_tokens)) << c.label();
    }
  }
  // Plain steps that took 3x the kept t(1) over 40 steps: measured again next time; 10 steps are too few to say.
  state.follow_plain_steps(3 * state.step_costs().at(1), 10);
  EXPECT_FALSE(state.step_costs().empty());
  state.follow_plain_steps(1.8 * state.step_costs().at(1), 40);  // within 2x: t(1) grows with the context too
  EXPECT_FALSE(state.step_costs().empty());
  state.follow_plain_steps(3 * state.step_costs().at(1), 40);
  EXPECT_TRUE(state.step_costs().empty());
  EXPECT_FALSE(std::filesystem::exists(cache.file())) << "a one-off run measures again too";
  const GenerationResult second = generate(*m.model, *m.tokenizer, prompt, o);
  EXPECT_NE(second.step_costs.source.find("measured again: one-token steps took 3.00x the kept t(1) over 40 steps"), std::string::npos)
      << second.step_costs.source;
  EXPECT_EQ(second.ids, first.ids);
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
