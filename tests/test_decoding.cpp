// Multi-token decoding is lossless: Jacobi, Lookahead and FAFO emit exactly the ids
// of plain decoding (greedy) on stories260K and on random models of odd shapes, for
// random parameter combinations, when an end token lands inside an accepted n-gram
// and when the context fills up; with sampling, the output distribution is unchanged.
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <stdexcept>
#include <random>
#include <utility>

#include "fafo/generator.h"
#include "fafo/kv_policy.h"
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

// The one list of strategy names: Strategy(i) is named i-th, every name parses back to
// its strategy, and an unknown one is an error naming them all; the KV policies' list is
// what a policy's options accept, speckv (which needs a draft model) only with drafts.
TEST(Decoding, StrategyAndPolicyNamesAreOneListEach) {
  const std::span<const char* const> names = fafo::strategy_names();
  ASSERT_EQ(names.size(), 7u);
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_STREQ(fafo::strategy_name(static_cast<fafo::Strategy>(i)), names[i]);
    EXPECT_EQ(fafo::parse_strategy(names[i]), static_cast<fafo::Strategy>(i));
  }
  try {
    fafo::parse_strategy("greedy");
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    for (const char* n : names) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << n;
  }
  const std::vector<std::string> policies = fafo::kv_policy_names();
  EXPECT_EQ(policies.back(), "speckv");
  EXPECT_EQ(fafo::kv_policy_names(false).size(), policies.size() - 1);
  for (const std::string& p : policies) {
    fafo::KvPolicyOptions o;
    o.name = p;
    EXPECT_NO_THROW(o.validate()) << p;
  }
  fafo::KvPolicyOptions bad;
  bad.name = "h2o";
  EXPECT_THROW(bad.validate(), std::invalid_argument);
  fafo::DecodingOptions d;
  d.draft_kv_policy = "speckv";  // needs a draft model's predictions: not a draft's own cache
  EXPECT_THROW(d.validate(), std::invalid_argument);
  d.draft_kv_policy = "snapkv";
  EXPECT_NO_THROW(d.validate());
}

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

// What each source of guesses yielded adds up to what the steps accepted: every guess
// token accepted comes from one source, per key length.
TEST(Decoding, SourceYieldsAddUpToTheAcceptedGuesses) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string(), 256);
  const auto prompt = m.tokenizer->encode("Lily and Tom went to the park. Lily and Tom went to the park. Lily and", true);
  for (Strategy s : {Strategy::Ar, Strategy::Jacobi, Strategy::Lookahead, Strategy::Fafo}) {
    DecodingOptions d;
    d.pool_from_prompt = true;
    const GenerationResult r = run(m, prompt, s, 80, d);
    int64_t accepted = 0, won = 0;
    std::set<std::string> sources;
    for (const SourceYield& y : r.source_yields) {
      EXPECT_LE(y.won, y.verified) << y.source;
      EXPECT_LE(y.won, y.accepted) << y.source;
      accepted += y.accepted;
      won += y.won;
      sources.insert(y.source);
      if (s == Strategy::Lookahead) {
        EXPECT_EQ(y.key_length, 1);
      } else if (s == Strategy::Fafo) {
        EXPECT_TRUE(y.key_length >= 1 && y.key_length <= d.lookback) << y.key_length;
      }
    }
    // Every decoding step emits its own token plus the guesses it accepted (the last step
    // may stop at a guess, without its own token).
    EXPECT_GE(accepted, static_cast<int64_t>(r.ids.size()) - r.n_steps) << strategy_name(s);
    EXPECT_LE(accepted, static_cast<int64_t>(r.ids.size()) - r.n_steps + 1) << strategy_name(s);
    int64_t multi = 0;
    for (size_t k = 2; k < r.accepted_histogram.size(); ++k) multi += r.accepted_histogram[k];
    EXPECT_GE(won, multi) << strategy_name(s);
    EXPECT_LE(won, multi + 1) << strategy_name(s);
    if (s == Strategy::Ar) {
      EXPECT_TRUE(r.source_yields.empty());
    } else if (s == Strategy::Jacobi) {
      EXPECT_EQ(sources, std::set<std::string>{"jacobi"});
    } else {
      EXPECT_TRUE(sources.count("prompt")) << strategy_name(s);
      EXPECT_TRUE(sources.count("window")) << strategy_name(s);
      EXPECT_GT(accepted, 10) << strategy_name(s) << ": too few accepted guesses for the test to mean anything";
    }
  }
}

// A chat turn truncates the cache to the reused prefix and installs a policy again: the
// kept entries must stay where the layout says (their keys by logical index unchanged),
// and the next turn's output must equal plain decoding's.
TEST(Decoding, TruncatingARegionedCacheKeepsEveryEntryFindable) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string(), 256);
  const auto prompt = m.tokenizer->encode("Lily and Tom went to the park. Lily and Tom went to the park. Lily and", true);
  KvPolicyOptions kv;
  kv.budget = 20;
  kv.recent = 8;
  run(m, prompt, Strategy::Fafo, 80, {}, false, nullptr, kv);  // the region has moved entries about
  ASSERT_GT(m.model->kv_swaps(), 0);
  const int32_t keep = 50;
  const std::vector<float> before = m.model->committed_keys(0, 0, keep);
  m.model->truncate(keep);
  EXPECT_EQ(m.model->committed_keys(0, 0, keep), before);
  m.model->set_kv_policy(make_kv_policy(kv));  // resets the layout (ChatSession's next turn)
  EXPECT_EQ(m.model->committed_keys(0, 0, keep), before);
  m.model->set_kv_policy(nullptr);
  EXPECT_EQ(m.model->committed_keys(0, 0, keep), before);
}

TEST(Decoding, EveryStrategyEqualsArOnRandomModelsOfOddShapes) {
  for (const char* backend : {"cpu", "reference"})
    for (const char* type : {"F32", "Q8_0", "Q4_1"}) {
      auto m = test::load_test_model(odd_model(type, 11), 0, 2, backend);
      const std::vector<int32_t> prompt = {1, 100, 101, 102, 7, 8, 100, 101};
      const auto ar = run(m, prompt, Strategy::Ar, 120);
      for (Strategy s : kMultiToken)
        EXPECT_EQ(run(m, prompt, s, 120).ids, ar.ids) << strategy_name(s) << " " << type << " on " << backend;
    }
}

// On the oracle: every strategy's greedy text equals plain decoding's for every golden
// prompt (64 tokens: the reference is single-threaded) and plain decoding starts as
// llama.cpp's.
TEST(Decoding, EveryStrategyEqualsArOnTheReferenceBackend) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string(), 0, 1, "reference");
  for (const auto& c : golden_prompts()) {
    const auto prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto ar = run(m, prompt, Strategy::Ar, 64);
    EXPECT_EQ(std::vector<int32_t>(ar.ids.begin(), ar.ids.begin() + 20),
              std::vector<int32_t>(c["greedy_ids"].begin(), c["greedy_ids"].begin() + 20));
    for (Strategy s : kMultiToken) EXPECT_EQ(run(m, prompt, s, 64).ids, ar.ids) << strategy_name(s) << " on " << c["prompt"];
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
    if (t.step == 0) {
      EXPECT_EQ(t.n_past, 0);  // what the cache held before the prompt
      EXPECT_EQ(t.batch_size, static_cast<int32_t>(prompt.size()));
      continue;
    }
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

// The prefill's trace (step 0) says what the cache held before it (a chat's earlier
// turns), and a prompt longer than a decoding step's batch still makes a trace that
// reads back (fafo-studio --replay).
TEST(Decoding, ThePrefillTraceSaysWhatTheCacheHeldAndALongPromptReadsBack) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string());
  const auto first = m.tokenizer->encode("The little dog", true);
  GenerationOptions o;
  o.n_predict = 4;
  o.sampling.temperature = 0;
  const GenerationResult a = generate(*m.model, *m.tokenizer, first, o);
  const int32_t held = m.model->n_past();
  std::vector<int32_t> context = first;
  context.insert(context.end(), a.ids.begin(), a.ids.end());
  ASSERT_GE(static_cast<int32_t>(context.size()), held);
  context.resize(static_cast<size_t>(held));
  o.keep_context = true;
  o.context_ids = context;
  std::vector<StepTrace> traces;
  o.on_step = [&](const StepTrace& t) { traces.push_back(t); };
  const auto second = m.tokenizer->encode(" ran to the park", false);
  generate(*m.model, *m.tokenizer, second, o);
  ASSERT_FALSE(traces.empty());
  EXPECT_EQ(traces[0].step, 0);
  EXPECT_EQ(traces[0].n_past, held);
  EXPECT_EQ(traces[0].batch_size, static_cast<int32_t>(second.size()));
  StepTrace prefill;
  prefill.batch_size = 3000;
  EXPECT_EQ(step_trace_from_json(step_trace_to_json(prefill)).batch_size, 3000);
  StepTrace step = prefill;
  step.step = 1;
  EXPECT_THROW(step_trace_from_json(step_trace_to_json(step)), std::invalid_argument);
}

// With sampling, every strategy must emit plain sampling's text for the same seed (each
// position's token is drawn with a number from the seed and the position), while still
// accepting guesses; a verifier that accepted guesses without comparing them with the
// draw, or drew positions from a shared stream, would fail this for some seed.
TEST(Decoding, SampledTextEqualsPlainSamplingForEverySeed) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string(), 128, 1);
  const auto prompt = m.tokenizer->encode("Lily and Tom went to the park. Lily and Tom went to the park. Lily and", true);
  auto run = [&](Strategy s, uint64_t seed, int32_t top_k, double* tau) {
    GenerationOptions o;
    o.n_predict = 24;
    o.stop_at_end_of_generation = false;
    o.sampling = SamplerOptions{0.7f, top_k, 1.0f, 0.0f, seed};
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
    *tau = static_cast<double>(r.ids.size() - 1) / static_cast<double>(r.n_steps - 1);
    return r.ids;
  };
  double tau_sum[5] = {0, 0, 0, 0, 0};
  const Strategy strategies[5] = {Strategy::Ar, Strategy::Jacobi, Strategy::Lookahead, Strategy::Fafo, Strategy::Auto};
  const int seeds = 40;
  std::set<std::vector<int32_t>> distinct;
  for (int seed = 0; seed < seeds; ++seed) {
    const int32_t top_k = seed % 2 ? 0 : 8;  // whole rows and the backend's top-k
    double tau = 0;
    const auto plain = run(Strategy::Ar, static_cast<uint64_t>(seed) * 7919 + 1, top_k, &tau);
    distinct.insert(plain);
    for (int k = 1; k < 5; ++k) {
      EXPECT_EQ(run(strategies[k], static_cast<uint64_t>(seed) * 7919 + 1, top_k, &tau), plain)
          << strategy_name(strategies[k]) << ", seed " << seed;
      tau_sum[k] += tau;
    }
  }
  EXPECT_GT(distinct.size(), 30u) << "the seeds should give different texts";
  EXPECT_GT(tau_sum[2] / seeds, 1.1) << "lookahead accepted too few guesses for the test to mean anything";
  EXPECT_GT(tau_sum[3] / seeds, 1.1) << "fafo accepted too few guesses for the test to mean anything";
  std::printf("sampling: tau jacobi %.2f lookahead %.2f fafo %.2f auto %.2f\n", tau_sum[1] / seeds, tau_sum[2] / seeds,
              tau_sum[3] / seeds, tau_sum[4] / seeds);
}
