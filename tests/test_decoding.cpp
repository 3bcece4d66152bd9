// Multi-token decoding is lossless: Jacobi, Lookahead and FAFO emit exactly the ids
// of plain decoding (greedy) on stories260K and on random models of odd shapes, for
// random parameter combinations, when an end token lands inside an accepted n-gram
// and when the context fills up; with sampling, the output distribution is unchanged.
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <utility>

#include "fafo/generator.h"
#include "fafo/step_trace_json.h"
#include "model_fixtures.h"
#include "test_support.h"

using namespace fafo;

namespace {

std::vector<nlohmann::json> golden_prompts() {
  std::vector<nlohmann::json> out;
  std::ifstream in(test::shared_path("golden/stories260K.greedy.jsonl"));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

GenerationResult run(test::TestModel& m, const std::vector<int32_t>& prompt, Strategy s, int32_t n,
                     DecodingOptions d = {}, bool stop_at_eog = false, std::vector<StepTrace>* traces = nullptr,
                     KvPolicyOptions kv = {}) {
  GenerationOptions o;
  o.kv = kv;
  o.n_predict = n;
  o.sampling.temperature = 0;
  o.stop_at_end_of_generation = stop_at_eog;
  d.strategy = s;
  o.decoding = d;
  if (traces) o.on_step = [traces](const StepTrace& t) { traces->push_back(t); };
  return generate(*m.model, *m.tokenizer, prompt, o);
}

const Strategy kMultiToken[] = {Strategy::Jacobi, Strategy::Lookahead, Strategy::Fafo};

std::string odd_model(const std::string& type, uint64_t seed) {
  synth::SyntheticConfig c;
  c.n_layer = 2, c.n_embd = 40, c.n_head = 5, c.n_head_kv = 1, c.n_ff = 72, c.n_vocab = 263, c.n_ctx = 256;
  c.weight_type = type;
  c.seed = seed;
  const auto path = (test::temp_dir("decoding-" + type + std::to_string(seed)) / "m.gguf").string();
  synth::write_synthetic_model(c, path);
  return path;
}

}  // namespace

TEST(Decoding, EveryStrategyEqualsArOnGoldenPrompts) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string());
  for (const auto& c : golden_prompts()) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto ar = run(m, prompt, Strategy::Ar, 200);
    // Sanity: the reference itself is llama.cpp's greedy output for the first steps.
    EXPECT_EQ(std::vector<int32_t>(ar.ids.begin(), ar.ids.begin() + 20),
              std::vector<int32_t>(c["greedy_ids"].begin(), c["greedy_ids"].begin() + 20));
    for (Strategy s : kMultiToken) {
      const auto r = run(m, prompt, s, 200);
      EXPECT_EQ(r.ids, ar.ids) << strategy_name(s) << " on " << c["prompt"];
      EXPECT_LE(r.n_steps, ar.n_steps);
      if (s != Strategy::Jacobi) {
        EXPECT_GT(r.tokens_per_step(), 1.2) << strategy_name(s) << " accepted no guesses";
      }
    }
  }
}

TEST(Decoding, EveryStrategyEqualsArOnRandomModelsOfOddShapes) {
  for (const char* type : {"F32", "Q8_0", "Q4_1"}) {
    auto m = test::load_test_model(odd_model(type, 11));
    const std::vector<int32_t> prompt = {1, 100, 101, 102, 7, 8, 100, 101};
    const auto ar = run(m, prompt, Strategy::Ar, 120);
    for (Strategy s : kMultiToken) EXPECT_EQ(run(m, prompt, s, 120).ids, ar.ids) << strategy_name(s) << " " << type;
  }
}

TEST(Decoding, RandomParameterCombinationsStayLossless) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string(), /*n_ctx=*/160);
  std::mt19937 rng(2024);
  const auto prompts = golden_prompts();
  for (int trial = 0; trial < 24; ++trial) {
    DecodingOptions d;
    d.window = std::uniform_int_distribution<int>(1, 12)(rng);
    d.ngram = std::uniform_int_distribution<int>(2, 7)(rng);
    d.guesses = std::uniform_int_distribution<int>(0, 12)(rng);
    d.lookback = std::uniform_int_distribution<int>(1, 8)(rng);
    KvPolicyOptions kv;
    const char* policies[] = {"stream", "quest", "snapkv", "chunks"};
    kv.name = policies[std::uniform_int_distribution<int>(0, 3)(rng)];
    kv.budget = std::uniform_int_distribution<int>(1, 96)(rng);
    kv.sinks = std::uniform_int_distribution<int>(0, std::min(8, kv.budget))(rng);
    kv.recent = std::uniform_int_distribution<int>(1, kv.budget)(rng);
    kv.update_interval = std::uniform_int_distribution<int>(1, 6)(rng);
    d.pool_from_prompt = trial % 2 == 0;
    d.seed = rng();
    const Strategy s = kMultiToken[trial % 3];
    const auto prompt = prompts[static_cast<size_t>(trial) % prompts.size()]["prompt_ids"].get<std::vector<int32_t>>();
    // -1 runs until the 160-token context is full: the last steps must shrink to fit.
    const int32_t n = trial % 4 == 0 ? -1 : std::uniform_int_distribution<int>(1, 150)(rng);
    const auto ar = run(m, prompt, Strategy::Ar, n);
    const auto r = run(m, prompt, s, n, d, false, nullptr, kv);
    EXPECT_EQ(r.ids, ar.ids) << strategy_name(s) << " W=" << d.window << " N=" << d.ngram << " G=" << d.guesses
                             << " k=" << d.lookback << " " << kv.name << " budget=" << kv.budget << " sinks=" << kv.sinks
                             << " recent=" << kv.recent << " n=" << n;
    EXPECT_EQ(r.stop, ar.stop);
    EXPECT_EQ(m.model->n_past(), static_cast<int32_t>(prompt.size() + r.ids.size() - 1));
  }
}

TEST(Decoding, EndTokenInsideAnAcceptedNgramStopsExactlyWhereArStops) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string());
  const auto prompt = m.tokenizer->encode("Once upon a time", true);
  for (Strategy s : {Strategy::Lookahead, Strategy::Fafo}) {
    std::vector<StepTrace> traces;
    const auto base = run(m, prompt, s, 200, {}, false, &traces);
    // Find a token that first appears in the middle of a multi-token step.
    int32_t end_token = -1;
    std::map<int32_t, int> seen;
    for (const StepTrace& t : traces) {
      for (size_t k = 0; k < t.accepted.size(); ++k) {
        if (end_token < 0 && k >= 1 && k + 1 < t.accepted.size() && !seen.count(t.accepted[k])) end_token = t.accepted[k];
        ++seen[t.accepted[k]];
      }
      if (end_token >= 0) break;
    }
    ASSERT_GE(end_token, 0) << "no multi-token step to test with";
    Vocab v = m.tokenizer->vocab();
    v.eos = end_token;
    std::unique_ptr<Tokenizer> original = std::exchange(m.tokenizer, std::make_unique<Tokenizer>(v));
    const auto ar = run(m, prompt, Strategy::Ar, 200, {}, true);
    const auto r = run(m, prompt, s, 200, {}, true);
    EXPECT_EQ(ar.stop, StopReason::EndOfGeneration);
    EXPECT_EQ(ar.ids.back(), end_token);
    EXPECT_EQ(r.ids, ar.ids) << strategy_name(s);
    EXPECT_EQ(r.stop, StopReason::EndOfGeneration);
    m.tokenizer = std::move(original);
  }
}

TEST(Decoding, TracesDescribeEveryStep) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string());
  const auto prompt = m.tokenizer->encode("The little dog", true);
  DecodingOptions d;
  d.window = 5, d.ngram = 4, d.guesses = 3;
  std::vector<StepTrace> traces;
  const auto r = run(m, prompt, Strategy::Fafo, 80, d, false, &traces);
  ASSERT_EQ(static_cast<int32_t>(traces.size()), r.n_steps);
  std::vector<int32_t> joined;
  for (const StepTrace& t : traces) {
    joined.insert(joined.end(), t.accepted.begin(), t.accepted.end());
    EXPECT_EQ(t.accepted.size(), t.accepted_sources.size());
    if (t.step == 0) continue;
    ASSERT_EQ(t.window_before.size(), 3u);      // N-1 rows
    ASSERT_EQ(t.window_before[0].size(), 5u);   // W columns
    EXPECT_EQ(t.new_guesses.size(), 5u);
    if (t.accepted.size() == 1) {
      EXPECT_EQ(t.window_after.back(), t.new_guesses);  // the newest guesses became the last row
      EXPECT_EQ(t.window_after[0], t.window_before[1]);  // and every row moved up by one
    }
    EXPECT_EQ(t.candidates.size(), 3u);         // padded to G
    int32_t best = 0;
    for (const auto& c : t.candidates) best = std::max(best, c.match_length);
    EXPECT_EQ(static_cast<int32_t>(t.accepted.size()), best + 1);
    // Round trip through the --trace JSON format.
    const StepTrace back = step_trace_from_json(step_trace_to_json(t));
    EXPECT_EQ(back.accepted, t.accepted);
    EXPECT_EQ(back.window_after, t.window_after);
    EXPECT_EQ(back.candidates.size(), t.candidates.size());
    EXPECT_EQ(back.kv_region, t.kv_region);
    EXPECT_EQ(static_cast<int32_t>(t.kv_region.size()), std::min(68, t.n_past + static_cast<int32_t>(t.accepted.size())));
  }
  EXPECT_EQ(joined, r.ids);
  EXPECT_GT(traces.back().pool_ngrams, 0);
}

// With sampling, the distribution of generated text must equal plain sampling's.
// Compare the distribution of the 4th generated token over many seeds (two-sample
// chi-square); a verifier that accepted guesses greedily would fail this.
TEST(Decoding, SamplingKeepsTheOutputDistribution) {
  // Lookahead, and auto switching candidates at every step, against plain decoding.
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string(), 64, 1);
  const auto prompt = m.tokenizer->encode("Lily and Tom went to the park. Lily and Tom went to the park. Lily and", true);
  auto histogram = [&](Strategy s, int runs, double* tau) {
    std::map<int32_t, int> counts;
    int64_t tokens = 0, steps = 0;
    for (int seed = 0; seed < runs; ++seed) {
      GenerationOptions o;
      o.n_predict = 4;
      o.stop_at_end_of_generation = false;
      o.sampling = SamplerOptions{0.7f, 0, 1.0f, 0.0f, static_cast<uint64_t>(seed) * 7919 + 1};
      o.decoding.strategy = s;
      o.decoding.pool_from_prompt = true;
      o.decoding.window = 4;
      o.decoding.ngram = 4;
      o.decoding.guesses = 6;
      if (s == Strategy::Auto) {
        o.auto_options.rotate = true;  // a different candidate (or plain decoding) every step
        o.step_costs.sizes = {1};
        o.step_costs.seconds = {1.0};
      }
      const auto r = generate(*m.model, *m.tokenizer, prompt, o);
      ++counts[r.ids[3]];
      tokens += static_cast<int64_t>(r.ids.size()) - 1;
      steps += r.n_steps - 1;
    }
    *tau = static_cast<double>(tokens) / static_cast<double>(steps);
    return counts;
  };
  // Two-sample chi-square over tokens seen at least 10 times in total (the rest pooled).
  auto check = [](const std::map<int32_t, int>& a, const std::map<int32_t, int>& b, const char* what) {
    std::map<int32_t, std::pair<int, int>> bins;
    for (auto [t, n] : a) bins[t].first += n;
    for (auto [t, n] : b) bins[t].second += n;
    std::pair<int, int> rare{0, 0};
    double chi2 = 0;
    int dof = -1;
    auto add_bin = [&](std::pair<int, int> ab) {
      const double total = ab.first + ab.second;
      const double ea = total / 2, eb = total / 2;  // equal sample sizes
      chi2 += (ab.first - ea) * (ab.first - ea) / ea + (ab.second - eb) * (ab.second - eb) / eb;
      ++dof;
    };
    for (auto& [t, ab] : bins) {
      if (ab.first + ab.second >= 10) {
        add_bin(ab);
      } else {
        rare.first += ab.first;
        rare.second += ab.second;
      }
    }
    if (rare.first + rare.second > 0) add_bin(rare);
    ASSERT_GT(dof, 2);
    // 99.9th percentile of chi-square ~ dof + 3.1 sqrt(2 dof) + 5 for moderate dof.
    const double limit = dof + 3.1 * std::sqrt(2.0 * dof) + 5.0;
    EXPECT_LT(chi2, limit) << what << ": dof " << dof;
    std::printf("sampling, %s: chi2 %.1f over %d dof (limit %.1f)\n", what, chi2, dof, limit);
  };
  const int runs = 1500;
  double tau_ar = 0, tau_la = 0, tau_auto = 0;
  const auto a = histogram(Strategy::Ar, runs, &tau_ar);
  const auto b = histogram(Strategy::Lookahead, runs, &tau_la);
  const auto c = histogram(Strategy::Auto, runs, &tau_auto);
  EXPECT_GT(tau_la, 1.1) << "lookahead accepted too few guesses for the test to mean anything";
  check(a, b, "lookahead");
  check(a, c, "auto switching every step");
  std::printf("sampling: tau ar %.2f lookahead %.2f auto %.2f\n", tau_ar, tau_la, tau_auto);
}
