// fafo-studio's view models: the data each panel shows, derived from StepTraces.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>
#include <utility>

#include <stb/stb_image.h>

#include "fafo/generator.h"
#include "fafo/step_trace_json.h"
#include "model_fixtures.h"
#include "test_support.h"
#include "app_options.h"
#include "file_browser.h"
#include "bench_chart.h"
#include "layout.h"
#include "png_text.h"
#include "recent_files.h"
#include "settings.h"
#include "step_gate.h"
#include "playback.h"
#include "trace_io.h"
#include "view_models.h"

using namespace fafo;
using namespace fafo::studio;

namespace {

// Step 3 of a made-up FAFO run: window 2 rows x 3 columns, two candidates and one
// padding, two tokens accepted (a plain one after a candidate token).
StepTrace hand_step() {
  StepTrace t;
  t.step = 3;
  t.strategy = Strategy::Fafo;
  t.n_past = 10;
  t.window_before = {{1, 2, 3}, {4, 5, 6}};
  t.window_after = {{4, 5, 6}, {7, 8, 9}};
  t.new_guesses = {7, 8, 9};
  CandidateTrace a;
  a.tokens = {20, 21};
  a.key_length = 2, a.match_length = 1, a.origin_step = 1, a.origin_column = 2;
  CandidateTrace b;
  b.tokens = {30, 31};
  b.key_length = 1, b.match_length = 0, b.origin_step = 2, b.origin_column = 0;
  CandidateTrace pad;
  pad.padding = true;
  pad.match_length = 5;  // never counts
  t.candidates = {b, a, pad};
  t.accepted = {20, 40};
  t.accepted_sources = {{TokenSource::Candidate, 1, 2}, {}};
  t.kv_region = {0, 1, 5, 11};
  t.kv_swaps = 1;
  t.build_ms = 1.0, t.forward_ms = 2.0, t.verify_ms = 0.5;
  return t;
}

StepTrace plain_step(int32_t step, int32_t token, int32_t n_past) {
  StepTrace t;
  t.step = step;
  t.n_past = n_past;
  t.accepted = {token};
  t.accepted_sources = {{}};
  t.kv_region = {0, 1, 2};
  t.build_ms = 0.25, t.forward_ms = 4.0, t.verify_ms = 0.125;
  return t;
}

}  // namespace

TEST(StudioViews, WindowMarksTheLastRowAsNew) {
  const WindowView v = window_view(hand_step());
  EXPECT_EQ(v.step, 3);
  ASSERT_EQ(v.rows, 2);
  ASSERT_EQ(v.columns, 3);
  EXPECT_EQ(v.cells[0][1].token, 5);
  EXPECT_FALSE(v.cells[0][1].is_new);
  EXPECT_EQ(v.cells[1][2].token, 9);
  EXPECT_TRUE(v.cells[1][2].is_new);
  EXPECT_EQ(window_view(plain_step(0, 1, 3)).rows, 0);
}

TEST(StudioViews, CandidatesSkipPaddingAndMarkTheAcceptedOne) {
  const CandidateView v = candidate_view(hand_step());
  ASSERT_EQ(v.rows.size(), 2u);
  EXPECT_EQ(v.best_match, 1);
  EXPECT_FALSE(v.rows[0].accepted);
  EXPECT_EQ(v.rows[0].tokens, (std::vector<int32_t>{30, 31}));
  EXPECT_TRUE(v.rows[1].accepted);
  EXPECT_EQ(v.rows[1].key_length, 2);
  EXPECT_EQ(v.rows[1].origin_step, 1);
  EXPECT_EQ(v.rows[1].origin_column, 2);
  // No match: nothing is marked accepted.
  StepTrace t = hand_step();
  for (auto& c : t.candidates) c.match_length = 0;
  for (const auto& row : candidate_view(t).rows) EXPECT_FALSE(row.accepted);
}

TEST(StudioViews, TranscriptKeepsStepsSourcesAndText) {
  const std::vector<StepTrace> traces = {plain_step(0, 9, 0), hand_step(), plain_step(4, 50, 12)};
  const TokenText text = [](int32_t id) { return std::string("t").append(std::to_string(id)); };
  const TranscriptView v = transcript_view(traces, text);
  ASSERT_EQ(v.tokens.size(), 4u);
  EXPECT_EQ(v.accepted_per_step, (std::vector<int32_t>{1, 2, 1}));
  EXPECT_EQ(v.from_candidates, 1);
  EXPECT_EQ(v.tokens[1].token, 20);
  EXPECT_EQ(v.tokens[1].step, 3);
  EXPECT_EQ(v.tokens[1].step_index, 1);
  EXPECT_EQ(v.tokens[1].source.kind, TokenSource::Candidate);
  EXPECT_EQ(v.tokens[1].source.origin_column, 2);
  EXPECT_EQ(v.tokens[2].source.kind, TokenSource::Plain);
  EXPECT_EQ(v.tokens[3].text, "t50");
  EXPECT_TRUE(transcript_view(traces).tokens[0].text.empty());
  EXPECT_EQ(token_label({}, 7), "#7");
}

TEST(StudioViews, KvMapShowsTheRegionAndWhatEntered) {
  const StepTrace prev = plain_step(2, 1, 9);
  const KvMapView v = kv_map_view(hand_step(), &prev);
  EXPECT_EQ(v.context, 12);
  ASSERT_EQ(v.in_region.size(), 12u);
  EXPECT_EQ(v.in_region[5], 1);
  EXPECT_EQ(v.in_region[2], 0);
  EXPECT_EQ(v.in_region[11], 1);
  EXPECT_EQ(v.entered, (std::vector<int32_t>{5, 11}));
  EXPECT_EQ(v.swaps, 1);
  EXPECT_EQ(kv_map_view(hand_step(), nullptr).entered.size(), 4u);
  // The prefill step: the prompt is in the cache (BOS and "Once upon a time"), its
  // first token not yet (the next step's input).
  StepTrace prefill = plain_step(0, 9, 0);
  prefill.batch_size = 5;
  EXPECT_EQ(kv_map_view(prefill, nullptr).context, 5);
  EXPECT_EQ(kv_layers_view(prefill, nullptr).context, 5);
  prefill.batch_size = 0;  // a trace that does not say: as a decoding step
  EXPECT_EQ(kv_map_view(prefill, nullptr).context, 1);
}

TEST(StudioViews, ChartSeriesPerStep) {
  const std::vector<StepTrace> traces = {plain_step(0, 9, 0), hand_step(), plain_step(4, 50, 12)};
  const ChartSeries c = chart_series(traces);
  ASSERT_EQ(c.tau.size(), 3u);
  EXPECT_FLOAT_EQ(c.tau[0], 1.0f);
  EXPECT_FLOAT_EQ(c.tau[1], 1.5f);
  EXPECT_FLOAT_EQ(c.tau[2], 4.0f / 3.0f);
  EXPECT_EQ(c.tokens_per_step, (std::vector<float>{1, 2, 1}));
  EXPECT_FLOAT_EQ(c.forward_ms[1], 2.0f);
  EXPECT_FLOAT_EQ(c.total_ms[1], 3.5f);
  EXPECT_FLOAT_EQ(c.verify_ms[2], 0.125f);
}

TEST(StudioViews, ChartSeriesFollowAutosChoice) {
  std::vector<StepTrace> traces = {plain_step(0, 9, 0), hand_step(), plain_step(4, 50, 12), plain_step(5, 51, 13)};
  traces[1].auto_choice = "fafo W8 N5 G8 (trial): 2.00 tokens/step at t(44)/t(1) = 1.10 -> 1.82x plain decoding";
  traces[2].auto_choice = "ar: no strategy can pay here";
  traces[3].auto_choice = "fafo W8 N5 G8 (best): 2.10 tokens/step";
  const ChartSeries c = chart_series(traces);
  EXPECT_EQ(c.choice, (std::vector<int32_t>{-1, 0, 1, 0}));
  EXPECT_EQ(c.choice_labels, (std::vector<std::string>{"fafo W8 N5 G8", "ar"}));
  EXPECT_EQ(auto_choice_label("ar (best): no tried strategy beats plain decoding"), "ar");
  // Without auto: no choice series.
  EXPECT_TRUE(chart_series(std::vector<StepTrace>{plain_step(0, 9, 0)}).choice.empty());
}

TEST(StudioViews, PlaybackPausesStepsAndFollows) {
  Playback p;
  p.set_speed(2.0);
  p.update(1.0, 10);
  EXPECT_EQ(p.shown(), 2u);
  p.pause();
  p.update(5.0, 10);
  EXPECT_EQ(p.shown(), 2u);
  p.step_once(10);
  EXPECT_EQ(p.shown(), 3u);
  p.step_back();
  EXPECT_EQ(p.shown(), 2u);
  p.resume();
  p.set_speed(0.0);
  p.update(0.01, 10);
  EXPECT_EQ(p.shown(), 10u);
  p.step_once(10);  // nothing more to show
  EXPECT_EQ(p.shown(), 10u);
  p.seek(4, 10);
  EXPECT_EQ(p.shown(), 5u);
}

// The Debugger runs fafo until the user picks a strategy; the chat keeps auto; a picked
// strategy (even auto) is what both run.
TEST(StudioViews, TheDebuggerRunsFafoUntilAStrategyIsPicked) {
  const StudioSettings plain = settings_from_options(parse_app_options({"-m", "m"}));
  EXPECT_EQ(plain.generation.decoding.strategy, Strategy::Auto);
  EXPECT_EQ(debugger_generation(plain).decoding.strategy, Strategy::Fafo);
  EXPECT_EQ(debugger_generation(settings_from_options(parse_app_options({"-m", "m", "--strategy", "lookahead"})))
                .decoding.strategy,
            Strategy::Lookahead);
  EXPECT_EQ(debugger_generation(settings_from_options(parse_app_options({"-m", "m", "--strategy", "auto"})))
                .decoding.strategy,
            Strategy::Auto);
  // The shipped model opens when no -m is given; a replay's model is main's choice
  // (replay_model: the trace's, else the default).
  EXPECT_EQ(parse_app_options({}, "shipped.gguf").open.path, "shipped.gguf");
  EXPECT_EQ(parse_app_options({"-m", "mine.gguf"}, "shipped.gguf").open.path, "mine.gguf");
  EXPECT_TRUE(parse_app_options({"--replay", "t.jsonl"}, "shipped.gguf").open.path.empty());
}

TEST(StudioViews, OptionsParseAndReject) {
  const auto o = parse_app_options({"--model", "m.gguf", "--prompt", "p", "--steps", "12", "--strategy", "lookahead",
                                    "--screenshot", "x.png", "--backend", "cpu", "--kv-policy", "quest", "--temp", "0.5"});
  EXPECT_EQ(o.open.path, "m.gguf");
  EXPECT_EQ(o.steps, 12);
  EXPECT_EQ(o.decoding.strategy, Strategy::Lookahead);
  EXPECT_EQ(o.screenshot, "x.png");
  EXPECT_EQ(o.view, View::Debugger);  // a raw prompt opens the debugger
  EXPECT_EQ(o.open.backend.name, "cpu");
  EXPECT_EQ(o.kv.name, "quest");
  EXPECT_FLOAT_EQ(o.sampling.temperature, 0.5f);
  // No arguments: the chat view, no model yet.
  const auto empty = parse_app_options({});
  EXPECT_EQ(empty.view, View::Chat);
  EXPECT_EQ(empty.decoding.strategy, Strategy::Auto);
  const auto chat = parse_app_options({"-m", "m", "--chat", "hi", "--chat", "more", "--system", "s"});
  EXPECT_EQ(chat.chat, (std::vector<std::string>{"hi", "more"}));
  EXPECT_EQ(chat.view, View::Chat);
  EXPECT_EQ(parse_app_options({"--replay", "t.jsonl"}).view, View::Debugger);
  const auto steps = parse_app_options({"-m", "m", "--steps", "60"});  // the debugger on the default prompt
  EXPECT_EQ(steps.view, View::Debugger);
  EXPECT_EQ(steps.prompt, "Once upon a time");
  EXPECT_FALSE(steps.start_paused) << "--steps says how far to run";
  EXPECT_EQ(parse_app_options({"-m", "m"}).prompt, "Once upon a time");  // the first start: below
  EXPECT_EQ(parse_app_options({"--replay", "t.jsonl", "--view", "chat"}).view, View::Chat);
  EXPECT_THROW(parse_app_options({"--model", "m", "--bogus"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--model", "m", "--steps", "x"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--chat", "hi"}), std::invalid_argument);  // needs a model
  EXPECT_THROW(parse_app_options({"-m", "m", "--chat", "hi", "--prompt", "p"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--replay", "t", "--prompt", "p"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--view", "both"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--layout-json", "x.json"}), std::invalid_argument);  // needs --screenshot
  EXPECT_THROW(parse_app_options({"--kv-policy", "nosuch"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--temp", "warm"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--cache-type", "f8"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--steps", "-1"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"-c", "-5"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--width", "100"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--backend", "tpu"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--threads", "many"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--strategy", "medusa"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"-m", "m", "--chat", "hi", "there"}), std::invalid_argument);  // one message per --chat
  EXPECT_THROW(parse_app_options({"--model"}), std::invalid_argument);                          // missing value
  EXPECT_EQ(settings_from_options(parse_app_options({"-m", "m", "--cache-type", "f16"})).open.kv_type, KvCacheType::F16);

  const StudioSettings st = settings_from_options(chat);
  EXPECT_EQ(st.open.path, "m");
  EXPECT_EQ(st.open.backend.name, "auto");
  EXPECT_EQ(st.open.kv_type, KvCacheType::F32);
  EXPECT_EQ(chat_setup(st).system, "s");
  EXPECT_TRUE(settings_problem(st).empty());
  StudioSettings bad = st;
  bad.generation.decoding.ngram = 1;
  EXPECT_NE(settings_problem(bad).find("--ngram"), std::string::npos);
  bad = st;
  bad.generation.n_predict = 0;
  EXPECT_FALSE(settings_problem(bad).empty());
}

TEST(StudioViews, OptionsReachTheirFields) {
  const auto o = parse_app_options({"-m", "m.gguf", "--backend", "cpu", "--device", "1", "-t", "3", "-c", "128",
                                    "--cache-type", "f16", "--chat-template", "llama3", "--system", "s", "-n", "-1",
                                    "--seed", "5", "--top-k", "7", "--window", "6", "--sinks", "2", "--pool-from-prompt",
                                    "--chat", "a", "--chat", "b", "--width", "800", "--height", "600"});
  EXPECT_EQ(o.open.path, "m.gguf");
  EXPECT_EQ(o.open.backend.name, "cpu");
  EXPECT_EQ(o.open.backend.device, "1");
  EXPECT_EQ(o.open.backend.threads, 3);
  EXPECT_EQ(o.open.n_ctx, 128);
  EXPECT_EQ(o.open.kv_type, KvCacheType::F16);
  EXPECT_EQ(o.open.chat_template, "llama3");
  EXPECT_EQ(o.system, "s");
  EXPECT_EQ(o.n_predict, -1);
  EXPECT_EQ(o.sampling.seed, 5u);
  EXPECT_EQ(o.sampling.top_k, 7);
  EXPECT_EQ(o.decoding.window, 6);
  EXPECT_EQ(o.kv.sinks, 2);
  EXPECT_TRUE(o.decoding.pool_from_prompt);
  EXPECT_EQ(o.chat, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(o.width, 800);
  EXPECT_EQ(o.height, 600);
  // The studio's own defaults: greedy, a fixed seed, FAFO, 256 tokens per reply.
  const auto d = parse_app_options({});
  EXPECT_EQ(d.sampling.temperature, 0.0f);
  EXPECT_EQ(d.sampling.seed, 0xFAF0u);
  EXPECT_EQ(d.n_predict, 256);
  EXPECT_EQ(d.open.backend.name, "auto");
  EXPECT_EQ(d.open.kv_type, KvCacheType::F32);
  EXPECT_TRUE(parse_app_options({"--help"}).help);
  EXPECT_TRUE(parse_app_options({"-m", "m", "-h"}).help);
}

namespace {

// Each option of a CLI11 --help text, keyed by its long name, without its default
// ("=VALUE"), REQUIRED and the column layout.
std::map<std::string, std::string> help_entries(const std::string& help) {
  std::map<std::string, std::string> out;
  std::istringstream in(help);
  std::string current;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  -", 0) == 0) {
      std::smatch m;
      const std::string names = line.substr(0, line.find(' ', 2));
      if (std::regex_search(names, m, std::regex("--([a-z-]+)"))) current = m[1];
    } else if (line.rfind("    ", 0) != 0) {
      current.clear();
    }
    if (!current.empty()) out[current] += " " + line;
  }
  for (auto& [name, text] : out) {
    text = std::regex_replace(text, std::regex("=\\S+"), "");
    text = std::regex_replace(text, std::regex(" REQUIRED"), "");
    text = std::regex_replace(text, std::regex("\\s+"), " ");
  }
  return out;
}

}  // namespace

TEST(StudioViews, HelpDescribesTheSharedFlagsAsFafoChatDoes) {
  const test::CommandResult chat = test::run_fafo("chat --help");
  if (chat.exit_code != 0) GTEST_SKIP() << "the fafo program is not built";
  const auto cli = help_entries(chat.out);
  const auto studio = help_entries(app_usage());
  for (const char* flag : {"model", "backend", "device", "threads", "cache-type", "ctx-size", "system", "chat-template",
                           "n-predict", "temp", "top-k", "top-p", "min-p", "strategy", "window", "ngram", "guesses",
                           "lookback", "pool-from-prompt", "kv-policy", "kv-budget", "sinks", "recent",
                           "update-interval"}) {
    ASSERT_TRUE(cli.count(flag)) << "fafo chat --help lacks --" << flag;
    ASSERT_TRUE(studio.count(flag)) << "fafo-studio --help lacks --" << flag;
    EXPECT_EQ(studio.at(flag), cli.at(flag)) << "--" << flag;
  }
  // Only the studio's defaults differ: a fixed seed, FAFO, greedy.
  EXPECT_NE(app_usage().find("--seed UINT=64240"), std::string::npos) << app_usage();
  EXPECT_NE(app_usage().find("fafo-studio --replay TRACE.jsonl"), std::string::npos);
  EXPECT_NE(app_usage().find("--screenshot"), std::string::npos);
  EXPECT_EQ(app_usage().find("--debug-empty-panel"), std::string::npos) << "a test-only flag";
}

// A real FAFO run on stories260K: the views agree with the run and with each other,
// also after a round trip through the --trace JSONL format.
TEST(StudioViews, RealFafoTrace) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string());
  GenerationOptions o;
  o.n_predict = 80;
  o.sampling.temperature = 0;
  o.stop_at_end_of_generation = false;
  o.decoding.strategy = Strategy::Fafo;
  o.decoding.window = 5, o.decoding.ngram = 4, o.decoding.guesses = 3;
  std::vector<StepTrace> traces;
  o.on_step = [&](const StepTrace& t) { traces.push_back(t); };
  const auto prompt = m.tokenizer->encode("Once upon a time there was a little girl", true);
  const GenerationResult r = generate(*m.model, *m.tokenizer, prompt, o);
  ASSERT_EQ(static_cast<int32_t>(traces.size()), r.n_steps);

  // Write and reload as `fafo run --trace` would.
  const auto path = test::temp_dir("studio-views") / "trace.jsonl";
  {
    std::ofstream out(path);
    for (const auto& t : traces) out << step_trace_to_json(t).dump() << "\n";
  }
  const auto loaded = load_trace_jsonl(path.string());
  ASSERT_EQ(loaded.size(), traces.size());

  const TokenText text = make_token_text(*m.tokenizer);
  for (const std::vector<StepTrace>* seq : {&std::as_const(traces), &loaded}) {
    const TranscriptView v = transcript_view(*seq, text);
    ASSERT_EQ(v.tokens.size(), r.ids.size());
    std::string joined;
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      EXPECT_EQ(v.tokens[i].token, r.ids[i]);
      joined += v.tokens[i].text;
    }
    // The pieces continue the prompt's text exactly.
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), r.ids.begin(), r.ids.end());
    EXPECT_EQ(m.tokenizer->decode(prompt) + joined, m.tokenizer->decode(all));
    int64_t total = 0;
    for (int32_t n : v.accepted_per_step) total += n;
    EXPECT_EQ(total, static_cast<int64_t>(r.ids.size()));
    EXPECT_GT(v.from_candidates, 0) << "FAFO accepted no candidate on a repetitive story";

    const ChartSeries c = chart_series(*seq);
    ASSERT_EQ(c.tau.size(), seq->size());
    EXPECT_NEAR(c.tau.back(), r.tokens_per_step(), 1e-4);

    // The KV map's context after each step is what the next step starts from; after the
    // prefill step, the prompt.
    EXPECT_EQ(kv_map_view(seq->front(), nullptr).context, static_cast<int32_t>(prompt.size()));
    for (size_t i = 1; i < seq->size(); ++i)
      EXPECT_EQ(kv_map_view((*seq)[i - 1], i > 1 ? &(*seq)[i - 2] : nullptr).context, (*seq)[i].n_past)
          << "after step " << i - 1;

    for (size_t i = 1; i < seq->size(); ++i) {
      const StepTrace& t = (*seq)[i];
      const WindowView w = window_view(t);
      ASSERT_EQ(w.rows, 3);
      ASSERT_EQ(w.columns, 5);
      if (t.accepted.size() == 1) {
        for (int32_t col = 0; col < w.columns; ++col)
          EXPECT_EQ(w.cells[2][static_cast<size_t>(col)].token, t.new_guesses[static_cast<size_t>(col)]);
      }
      const CandidateView cv = candidate_view(t);
      EXPECT_EQ(cv.best_match + 1, static_cast<int32_t>(t.accepted.size()));
      for (const auto& row : cv.rows) EXPECT_LE(row.key_length, 4);
      const KvMapView kv = kv_map_view(t, &(*seq)[i - 1]);
      EXPECT_EQ(kv.context, t.n_past + static_cast<int32_t>(t.accepted.size()));
      size_t in = 0;
      for (uint8_t b : kv.in_region) in += b;
      EXPECT_EQ(in, t.kv_region.size());
      const KvLayersView layers = kv_layers_view(t, &(*seq)[i - 1], 16);
      ASSERT_EQ(layers.rows.size(), 5u);  // stories260K's layers
      EXPECT_EQ(layers.dense_layers, 0);  // stream keeps no layer dense
      for (const KvLayerRow& row : layers.rows) EXPECT_EQ(row.cells, layers.rows[0].cells);
      EXPECT_LE(layers.blocks.size(), 16u);
      const PoolView pool = pool_view(t);
      EXPECT_EQ(pool.rows.empty(), t.pool_keys == 0);  // empty while the window warms up
      EXPECT_EQ(pool.keys, t.pool_keys);
    }
  }
}


// Step 3 again with a layer count: two dense layers, and the region after a step
// before it. Each block of 4 entries shows its most notable state.
TEST(StudioViews, KvLayersShowTheSharedRegionAndTheDenseLayers) {
  StepTrace t = hand_step();  // context 12, region {0, 1, 5, 11}
  t.kv_layers = 4;
  t.kv_dense_layers = 2;
  const StepTrace prev = plain_step(2, 1, 9);  // region {0, 1, 2}
  const KvLayersView v = kv_layers_view(t, &prev, 3);
  EXPECT_EQ(v.block, 4);
  ASSERT_EQ(v.blocks.size(), 3u);
  EXPECT_EQ(v.blocks[0].in_region, 2);  // entries 0, 1
  EXPECT_EQ(v.blocks[1].entered, 1);    // entry 5 entered
  EXPECT_EQ(v.blocks[2].count, 4);
  ASSERT_EQ(v.rows.size(), 4u);
  EXPECT_TRUE(v.rows[0].dense);
  EXPECT_TRUE(v.rows[1].dense);
  EXPECT_FALSE(v.rows[2].dense);
  EXPECT_EQ(v.rows[0].cells, std::vector<KvCell>(3, KvCell::Dense));
  EXPECT_EQ(v.rows[2].cells, (std::vector<KvCell>{KvCell::Region, KvCell::Entered, KvCell::Entered}));
  EXPECT_EQ(v.rows[3].cells, v.rows[2].cells);  // one selection for every layer
  EXPECT_EQ(v.slots, (std::vector<int32_t>{0, 1, 5, 11}));
  EXPECT_EQ(v.slot_swapped, (std::vector<uint8_t>{0, 0, 1, 1}));
  // A block of plain rest entries.
  t.kv_region = {0, 1, 2, 3};
  EXPECT_EQ(kv_layers_view(t, &prev, 3).rows[3].cells[2], KvCell::Rest);
  // An older trace without layer counts: one row for all; no region: everything read.
  StepTrace old = hand_step();
  ASSERT_EQ(kv_layers_view(old, nullptr).rows.size(), 1u);
  EXPECT_FALSE(kv_layers_view(old, nullptr).rows[0].dense);
  old.kv_region.clear();
  const KvLayersView none = kv_layers_view(old, nullptr, 100);
  EXPECT_FALSE(none.has_region);
  EXPECT_EQ(none.blocks.size(), 12u);
  EXPECT_EQ(none.rows[0].cells, std::vector<KvCell>(12, KvCell::Dense));
  // More dense layers than layers are clamped.
  t.kv_dense_layers = 9;
  EXPECT_EQ(kv_layers_view(t, nullptr).dense_layers, 4);
}

TEST(StudioViews, PoolMarksTheTriedNgramsUnderTheKeysThatSuppliedThem) {
  StepTrace t = hand_step();  // tried {30, 31} (key 1, no match) and {20, 21} (key 2, match 1)
  t.pool_keys = 40, t.pool_ngrams = 90, t.pool_lookups = 10, t.pool_hits = 4;
  PoolKeySnapshot k2{{6, 9}, 3, 0, true, {{{20, 21}, 1, 2, 2, 0}, {{22, 23}, 0, 1, 0, 5}}};
  PoolKeySnapshot k1{{9}, 7, 0, true, {{{30, 31}, 2, 0, 4, 0}, {{20, 21}, 1, 2, 1, 0}}};
  PoolKeySnapshot other{{4}, 0, 0, false, {{{30, 31}, 2, 0, 0, 0}}};
  t.pool_snapshot = {k2, k1, other};
  const PoolView v = pool_view(t);
  EXPECT_DOUBLE_EQ(v.hit_rate, 0.4);
  EXPECT_EQ(v.tried, 2);
  EXPECT_EQ(v.tried_in_snapshot, 2);
  ASSERT_EQ(v.rows.size(), 3u);
  EXPECT_TRUE(v.rows[0].supplied);
  EXPECT_EQ(v.rows[0].ngrams[0].tried_match, 1);
  EXPECT_EQ(v.rows[0].ngrams[1].tried_match, -1);
  EXPECT_EQ(v.rows[0].ngrams[1].lru_rank, 1);
  EXPECT_EQ(v.rows[0].ngrams[1].age, 5);
  EXPECT_EQ(v.rows[1].ngrams[0].tried_match, 0);   // {30, 31} came from the 1-token key
  EXPECT_EQ(v.rows[1].ngrams[1].tried_match, -1);  // {20, 21} was taken under the 2-token key
  EXPECT_EQ(v.rows[1].hits, 7);
  EXPECT_FALSE(v.rows[2].supplied);  // not used by this step's lookup
  EXPECT_EQ(v.rows[2].ngrams[0].tried_match, -1);
  t.pool_snapshot.clear();
  EXPECT_EQ(pool_view(t).tried_in_snapshot, 0);
}

// What a new user meets: `fafo-studio` with no flags opens the default model in the
// Debugger on a fafo run of "Once upon a time", held after its first step for Step or
// Resume. Only a view, prompt, trace, chat, bench or --browse of the user's own changes that.
TEST(StudioViews, ABareStartIsTheDebuggerPausedOnAFafoRun) {
  const auto bare = parse_app_options({}, "shipped.gguf");
  EXPECT_EQ(bare.view, View::Debugger);
  EXPECT_EQ(bare.open.path, "shipped.gguf");
  EXPECT_EQ(bare.prompt, "Once upon a time");
  EXPECT_TRUE(bare.start_paused);
  EXPECT_EQ(debugger_generation(settings_from_options(bare)).decoding.strategy, Strategy::Fafo);
  // -m alone, or --view debugger: the same start.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"-m", "mine.gguf"},
                                               std::vector<std::string>{"--view", "debugger"},
                                               std::vector<std::string>{"--backend", "cpu", "--kv-policy", "quest"}}) {
    const auto o = parse_app_options(args, "shipped.gguf");
    EXPECT_EQ(o.view, View::Debugger) << args[0];
    EXPECT_EQ(o.prompt, "Once upon a time") << args[0];
    EXPECT_TRUE(o.start_paused) << args[0];
  }
  // A strategy picked is what the run uses.
  EXPECT_EQ(debugger_generation(settings_from_options(parse_app_options({"--strategy", "ar"}, "shipped.gguf")))
                .decoding.strategy,
            Strategy::Ar);
  // --steps K runs K steps without waiting; --prompt runs without waiting.
  const auto steps = parse_app_options({"--steps", "60"}, "shipped.gguf");
  EXPECT_EQ(steps.view, View::Debugger);
  EXPECT_EQ(steps.prompt, "Once upon a time");
  EXPECT_FALSE(steps.start_paused);
  const auto prompt = parse_app_options({"--prompt", "A cat"}, "shipped.gguf");
  EXPECT_EQ(prompt.prompt, "A cat");
  EXPECT_FALSE(prompt.start_paused);
  // The other views start without a run.
  for (const char* view : {"chat", "bench"}) {
    const auto o = parse_app_options({"--view", view}, "shipped.gguf");
    EXPECT_EQ(view_name(o.view), std::string(view));
    EXPECT_TRUE(o.prompt.empty()) << view;
    EXPECT_FALSE(o.start_paused) << view;
  }
  const auto chat = parse_app_options({"--chat", "hi"}, "shipped.gguf");
  EXPECT_EQ(chat.view, View::Chat);
  EXPECT_TRUE(chat.prompt.empty());
  const auto browse = parse_app_options({"--browse", "/models"}, "shipped.gguf");  // the Model panel's dialog
  EXPECT_EQ(browse.view, View::Chat);
  EXPECT_TRUE(browse.prompt.empty());
  const auto bench = parse_app_options({"-m", "m", "--bench", "cpu"}, "shipped.gguf");
  EXPECT_EQ(bench.view, View::Bench);
  EXPECT_TRUE(bench.prompt.empty());
  const auto replay = parse_app_options({"--replay", "t.jsonl"}, "shipped.gguf");
  EXPECT_EQ(replay.view, View::Debugger);
  EXPECT_TRUE(replay.prompt.empty());
  EXPECT_FALSE(replay.start_paused);
  // No model to open anywhere: the chat view, whose Model panel opens one.
  const auto none = parse_app_options({});
  EXPECT_EQ(none.view, View::Chat);
  EXPECT_TRUE(none.prompt.empty());
  // What a screenshot says it was taken with: the command line without its own outputs.
  EXPECT_EQ(parse_app_options({"--steps", "3", "--screenshot", "x.png", "--layout-json", "x.json", "--width", "800"}).args,
            (std::vector<std::string>{"--steps", "3", "--width", "800"}));
}

// `fafo-studio --replay TRACE` without -m opens the model the trace names (a "model"
// field, as given or beside the trace), else the default one, and says which and why.
TEST(StudioViews, ReplayOpensTheTracesModelElseTheDefault) {
  const auto dir = test::temp_dir("studio-replay-model");
  std::filesystem::create_directories(dir / "traces");
  std::ofstream(dir / "traces" / "beside.gguf") << "x";
  std::ofstream(dir / "mine.gguf") << "x";
  const std::string step = step_trace_to_json(plain_step(0, 7, 5)).dump();
  const auto write_trace = [&](const std::string& name, const std::string& model_field) {
    nlohmann::json first = nlohmann::json::parse(step);
    if (!model_field.empty()) first["model"] = model_field;
    std::ofstream out(dir / "traces" / name);
    out << first.dump() << "\n" << step << "\n";
    return (dir / "traces" / name).string();
  };

  // `fafo run --trace` names no model: the default one.
  const std::string plain = write_trace("plain.jsonl", "");
  const TraceFile plain_file = load_trace_file(plain);
  EXPECT_EQ(plain_file.steps.size(), 2u);
  EXPECT_EQ(plain_file.model, "");
  ReplayModel m = replay_model(plain, plain_file.model, "shipped.gguf");
  EXPECT_EQ(m.path, "shipped.gguf");
  EXPECT_EQ(m.why, "the default: the trace names no model; -m picks another");

  // A model named by an absolute path, or by one relative to the trace's folder.
  const std::string named = write_trace("named.jsonl", (dir / "mine.gguf").string());
  EXPECT_EQ(load_trace_file(named).model, (dir / "mine.gguf").string());
  m = replay_model(named, load_trace_file(named).model, "shipped.gguf");
  EXPECT_EQ(m.path, (dir / "mine.gguf").string());
  EXPECT_EQ(m.why, "named by the trace");
  const std::string beside = write_trace("beside.jsonl", "beside.gguf");
  m = replay_model(beside, load_trace_file(beside).model, "shipped.gguf");
  EXPECT_EQ(std::filesystem::path(m.path), dir / "traces" / "beside.gguf");

  // A model that is not there: the default one, saying so.
  const std::string gone = write_trace("gone.jsonl", "/nonexistent/big.gguf");
  m = replay_model(gone, load_trace_file(gone).model, "shipped.gguf");
  EXPECT_EQ(m.path, "shipped.gguf");
  EXPECT_EQ(m.why, "the default: the trace's model /nonexistent/big.gguf is not there; -m picks another");
  // And no default either: no model, token ids only.
  m = replay_model(gone, "/nonexistent/big.gguf", "");
  EXPECT_EQ(m.path, "");
  EXPECT_NE(m.why.find("token ids only"), std::string::npos) << m.why;
}

// A replayed trace checked against the open model: a token id past its vocabulary or
// another layer count means the trace was recorded with another model.
TEST(StudioViews, TraceFitTellsAnotherModelsTrace) {
  std::vector<StepTrace> steps = {plain_step(0, 7, 0), hand_step()};
  EXPECT_EQ(trace_fit_problem(steps, 512, 5), "");
  EXPECT_EQ(trace_fit_problem(steps, 41, 5), "");  // the largest id is 40
  EXPECT_EQ(trace_fit_problem(steps, 40, 5),
            "the trace holds token id 40, outside the model's vocabulary of 40: it was recorded with another model "
            "(-m picks it)");
  steps[1].kv_layers = 22;
  steps[1].kv_dense_layers = 2;
  EXPECT_EQ(trace_fit_problem(steps, 512, 5),
            "the trace's steps have 22 layers and the model 5: it was recorded with another model (-m picks it)");
  EXPECT_EQ(trace_fit_problem(steps, 512, 22), "");
}

// Step while a live generation is held: the step asked for is shown when it comes, so
// one press is one step (the first start's first step is shown so too).
TEST(StudioViews, PlaybackShowsAStepAskedForWhenItComes) {
  Playback p;
  p.step_once(0);  // the first start: paused, its first step wanted
  EXPECT_TRUE(p.paused());
  EXPECT_TRUE(p.waiting_for_step());
  p.update(0.1, 0);
  EXPECT_EQ(p.shown(), 0u);
  p.restart();  // the generation's first drain
  p.update(0.1, 1);
  EXPECT_EQ(p.shown(), 1u);
  EXPECT_FALSE(p.waiting_for_step());
  p.update(0.1, 2);  // paused: no more than asked for
  EXPECT_EQ(p.shown(), 1u);
  p.step_once(2);  // a step known: shown at once
  EXPECT_EQ(p.shown(), 2u);
  p.step_once(2);  // past the newest: shown when it comes
  EXPECT_EQ(p.shown(), 2u);
  p.update(0.1, 2);
  EXPECT_EQ(p.shown(), 2u);
  p.update(0.1, 4);
  EXPECT_EQ(p.shown(), 3u);
  p.step_once(4);
  p.step_back();  // going back forgets a step asked for
  EXPECT_FALSE(p.waiting_for_step());
  p.step_once(4);
  p.step_once(4);
  p.resume();
  EXPECT_FALSE(p.waiting_for_step());
}

// A screenshot's description rides in a tEXt chunk of its PNG, which stays a PNG that
// decoders read; a damaged chunk reads as none.
TEST(StudioViews, PngTextRoundTripsAndRejectsDamage) {
  bench::Chart chart;
  chart.width = 4;
  chart.height = 3;
  chart.rgb.assign(4 * 3 * 3, 200);
  std::vector<uint8_t> png = bench::encode_png(chart);
  EXPECT_FALSE(png_text(png, kScreenshotKeyword).has_value());
  const std::string text = R"({"view":"debugger","menus":["File","Chat"]})";
  ASSERT_TRUE(insert_png_text(png, kScreenshotKeyword, text));
  EXPECT_EQ(png_text(png, kScreenshotKeyword), text);
  EXPECT_FALSE(png_text(png, "other").has_value());
  ASSERT_TRUE(insert_png_text(png, "other", "second"));
  EXPECT_EQ(png_text(png, "other"), "second");
  EXPECT_EQ(png_text(png, kScreenshotKeyword), text);
  int w = 0, h = 0, channels = 0;
  unsigned char* pixels = stbi_load_from_memory(png.data(), static_cast<int>(png.size()), &w, &h, &channels, 3);
  ASSERT_NE(pixels, nullptr) << "the PNG no longer decodes";
  EXPECT_EQ(w, 4);
  EXPECT_EQ(h, 3);
  EXPECT_EQ(pixels[0], 200);
  stbi_image_free(pixels);
  std::vector<uint8_t> damaged = png;
  damaged[8 + 25 + 8 + 3] ^= 1;  // in the first chunk after IHDR ("other"): reading stops at a damaged chunk
  EXPECT_FALSE(png_text(damaged, kScreenshotKeyword).has_value());
  EXPECT_FALSE(png_text(std::vector<uint8_t>{1, 2, 3}, kScreenshotKeyword).has_value());
  std::vector<uint8_t> not_png = {1, 2, 3};
  EXPECT_FALSE(insert_png_text(not_png, kScreenshotKeyword, text));
  EXPECT_FALSE(insert_png_text(png, "", text));
  EXPECT_FALSE(insert_png_text(png, std::string(80, 'k'), text));
}

// What a screenshot says it shows: stable parts only (whole-pixel rectangles, no items).
TEST(StudioViews, LayoutDescriptionKeepsWhatStaysTheSame) {
  LayoutRecord r;
  r.add_menu("File");
  r.add_menu("Chat");
  PanelRecord p;
  p.name = "Controls";
  p.x = 0.4f, p.y = 19.6f, p.w = 351.5f, p.h = 100.2f;
  p.items = 42;
  r.add(p);
  const nlohmann::json d = r.description(View::Debugger, 1600, 1000, 60, "assets/models/stories260K.gguf", {"--steps", "60"});
  EXPECT_EQ(d["view"], "debugger");
  EXPECT_EQ(d["width"], 1600);
  EXPECT_EQ(d["menus"], nlohmann::json({"File", "Chat"}));
  EXPECT_EQ(d["panels"], nlohmann::json::parse(R"([{"name":"Controls","rect":[0,20,352,100]}])"));
  EXPECT_EQ(d["steps"], 60);
  EXPECT_EQ(d["model"], "assets/models/stories260K.gguf");
  EXPECT_EQ(d["args"], nlohmann::json({"--steps", "60"}));
  EXPECT_EQ(r.to_json(View::Debugger, 1600, 1000, 60)["panels"][0]["items"], 42);
  r.clear();
  EXPECT_TRUE(r.menus().empty());
}

// The Debugger's Run while its playback is paused: the new run starts paused, and its
// first step is shown when it comes, not a last step of the run it ended.
TEST(StudioViews, PlaybackWaitsForTheFirstStepOfTheNextRun) {
  Playback p;
  p.update(0.1, 7);
  EXPECT_EQ(p.shown(), 7u);
  p.pause_for_next_sequence();
  EXPECT_TRUE(p.paused());
  p.update(0.1, 8);  // a step of the run it ended
  EXPECT_EQ(p.shown(), 7u);
  p.restart();  // the new run's first drain
  p.update(0.1, 0);
  EXPECT_EQ(p.shown(), 0u);
  p.update(0.1, 1);
  EXPECT_EQ(p.shown(), 1u);
  p.update(0.1, 3);
  EXPECT_EQ(p.shown(), 1u) << "paused after the first step";
  p.restart();  // asked for once
  p.update(0.1, 2);
  EXPECT_EQ(p.shown(), 0u);
  p.pause_for_next_sequence();
  p.resume();  // Resume forgets it
  p.restart();
  p.set_speed(0.0);
  p.update(0.1, 4);
  EXPECT_EQ(p.shown(), 4u);
}

TEST(StudioViews, PlaybackRestartsForANewGeneration) {
  Playback p;
  p.update(0.1, 7);
  EXPECT_EQ(p.shown(), 7u);
  p.restart();
  EXPECT_EQ(p.shown(), 0u);
  p.update(0.1, 2);
  EXPECT_EQ(p.shown(), 2u);
}

TEST(StudioViews, RecentFilesAreKeptAndACorruptFileIsIgnored) {
  const auto dir = test::temp_dir("studio-recent");
  const auto file = dir / "sub" / "recent.json";
  {
    RecentFiles r(file, 3);
    EXPECT_TRUE(r.paths().empty());
    EXPECT_TRUE(r.add("/m/a.gguf"));
    r.add("/m/b.gguf");
    r.add("/m/a.gguf");  // moves to the front, no duplicate
    r.add("/m/c.gguf");
    r.add("/m/d.gguf");  // drops the oldest past 3
    EXPECT_EQ(r.paths(), (std::vector<std::string>{"/m/d.gguf", "/m/c.gguf", "/m/a.gguf"}));
  }
  EXPECT_EQ(RecentFiles(file, 3).paths(), (std::vector<std::string>{"/m/d.gguf", "/m/c.gguf", "/m/a.gguf"}));
  RecentFiles rel(dir / "rel.json");
  rel.add("x/../y.gguf");
  EXPECT_EQ(rel.paths()[0], (std::filesystem::current_path() / "y.gguf").string());  // absolute, normalised
  std::ofstream(file) << "{\"recent\": [1, 2";
  RecentFiles corrupt(file);
  EXPECT_TRUE(corrupt.paths().empty());
  EXPECT_NE(corrupt.problem().find("ignored"), std::string::npos) << corrupt.problem();
  EXPECT_TRUE(corrupt.add("/m/e.gguf"));  // and it is rewritten
  EXPECT_EQ(RecentFiles(file).paths(), (std::vector<std::string>{"/m/e.gguf"}));
  EXPECT_TRUE(RecentFiles("").add("/m/f.gguf"));  // no file: in memory only
}

TEST(StudioViews, RecentFilesLiveUnderTheConfigHome) {
  const char* old_xdg = std::getenv("XDG_CONFIG_HOME");
  const std::string saved = old_xdg ? old_xdg : "";
  setenv("XDG_CONFIG_HOME", "/tmp/cfg", 1);
  EXPECT_EQ(RecentFiles::default_path(), std::filesystem::path("/tmp/cfg/fafo-studio/recent.json"));
  unsetenv("XDG_CONFIG_HOME");
  const char* home = std::getenv("HOME");
  if (home && *home) {
    EXPECT_EQ(RecentFiles::default_path(), std::filesystem::path(home) / ".config/fafo-studio/recent.json");
  }
  if (old_xdg) setenv("XDG_CONFIG_HOME", saved.c_str(), 1);
}

TEST(StudioViews, FileBrowserListsFoldersAndModels) {
  const auto dir = test::temp_dir("studio-browse");
  std::filesystem::create_directories(dir / "models" / "deep");
  std::filesystem::create_directories(dir / ".hidden");
  std::ofstream(dir / "b.gguf") << "12345";
  std::ofstream(dir / "A.GGUF") << "1";
  std::ofstream(dir / "notes.txt") << "x";
  FileBrowser b(dir / "b.gguf", {".gguf"});  // a file: its folder is shown
  EXPECT_EQ(b.directory(), dir.lexically_normal());
  std::vector<std::string> names;
  for (const BrowserEntry& e : b.entries()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"..", "models", "A.GGUF", "b.gguf"}));
  EXPECT_EQ(b.entries()[3].size, 5u);
  EXPECT_FALSE(b.open("models").has_value());
  EXPECT_EQ(b.directory(), (dir / "models").lexically_normal());
  EXPECT_EQ(b.entries().size(), 2u);  // "..", "deep"
  EXPECT_FALSE(b.open("..").has_value());
  const auto picked = b.open("b.gguf");
  ASSERT_TRUE(picked.has_value());
  EXPECT_EQ(*picked, dir.lexically_normal() / "b.gguf");
  b.go(dir / "nosuch");
  EXPECT_FALSE(b.error().empty());
  EXPECT_EQ(human_size(5), "5 B");
  EXPECT_EQ(human_size(3u << 20), "3.0 MiB");
}

TEST(StudioViews, LayoutPlacesEveryPanelOfAView) {
  for (View view : {View::Chat, View::Debugger, View::Bench}) {
    float area = 0.0f;
    for (const std::string& name : view_panels(view)) {
      const auto r = panel_rect(view, name);
      ASSERT_TRUE(r.has_value()) << name;
      EXPECT_GE(r->x, 0.0f);
      EXPECT_LE(r->x + r->w, 1.0001f) << name;
      EXPECT_LE(r->y + r->h, 1.0001f) << name;
      area += r->w * r->h;
    }
    EXPECT_NEAR(area, 1.0f, 1e-3) << "the panels of the " << view_name(view) << " view tile the window";
  }
  EXPECT_FALSE(panel_rect(View::Chat, "KV map").has_value());
  EXPECT_TRUE(panel_rect(View::Debugger, "Candidate pool").has_value());
  LayoutRecord rec;
  rec.add({"Chat", 1, 2, 3, 4, 1, 20, 3, 4, -1, false});
  rec.set_items(7);
  const auto j = rec.to_json(View::Chat, 800, 600, 12);
  EXPECT_EQ(j["view"], "chat");
  EXPECT_EQ(j["panels"][0]["items"], 7);
  EXPECT_EQ(j["panels"][0]["content"][1], 20);
}

// The gate between generator and UI: traces queue up, a new generation clears what
// the UI holds, max_steps and stop() end it, and a paused generator waits in
// on_step() until resumed, given a step, or stopped.
TEST(StudioViews, StepGateQueuesPausesAndStops) {
  StepGate gate;
  std::vector<StepTrace> out = {plain_step(9, 9, 9)};
  EXPECT_FALSE(gate.drain(out));  // nothing began: what the UI holds (a replay) stays
  EXPECT_EQ(out.size(), 1u);
  gate.begin(3);
  gate.on_step(plain_step(0, 5, 0));
  gate.on_step(hand_step());
  EXPECT_FALSE(gate.should_stop());
  EXPECT_TRUE(gate.drain(out));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].step, 3);
  EXPECT_EQ(gate.stats().tokens, 3);
  EXPECT_DOUBLE_EQ(gate.stats().tau(), 1.5);
  gate.on_step(plain_step(4, 6, 12));
  EXPECT_TRUE(gate.should_stop()) << "max_steps reached";
  EXPECT_FALSE(gate.drain(out));
  EXPECT_EQ(out.size(), 3u);
  gate.begin();
  EXPECT_FALSE(gate.should_stop());

  gate.set_paused(true);
  std::atomic<int> done{0};
  std::thread generator([&] {
    for (int i = 0; i < 3 && !gate.should_stop(); ++i) {
      gate.on_step(plain_step(i, i, i));
      ++done;
    }
  });
  auto wait_for = [](auto&& cond) {
    for (int i = 0; i < 2000 && !cond(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return cond();
  };
  ASSERT_TRUE(wait_for([&] { return gate.waiting(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(done.load(), 0) << "paused: waits after its first step";
  gate.allow_one_step();
  ASSERT_TRUE(wait_for([&] { return done.load() == 1 && gate.waiting(); }));
  gate.stop();  // while waiting: must not hang
  generator.join();
  EXPECT_EQ(done.load(), 2);
  EXPECT_TRUE(gate.drain(out));
  EXPECT_EQ(out.size(), 2u);
}

namespace {

// Runs gate.on_step(t) on a thread of its own and returns whether it waits there for the
// debugger (then gives it its step) or returns. No time limit: one of the two happens.
bool on_step_waits(StepGate& gate, const StepTrace& t) {
  std::atomic<bool> returned{false};
  std::thread generator([&] {
    gate.on_step(t);
    returned = true;
  });
  bool waited = false;
  while (!returned && !waited) {
    waited = gate.waiting();
    if (!waited) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (waited) gate.allow_one_step();
  generator.join();
  return waited;
}

}  // namespace

// A pause belongs to one generation: begin() says whether it starts paused (a pause
// asked for before it does not reach it), the Debugger's Pause holds it while it runs,
// and its end ends the pause, so a chat reply after a Debugger run that was held never
// waits for a Resume the Chat view does not have. A released generator no longer counts
// as waiting, before it has left.
TEST(StudioViews, StepGatePausesOneGenerationAtATime) {
  StepGate gate;
  gate.begin(0, true);  // the first start's run
  EXPECT_TRUE(gate.paused());
  EXPECT_TRUE(on_step_waits(gate, plain_step(0, 1, 0))) << "begun paused: waits after its first step";
  gate.end();  // stopped in the Debugger, or stepped to its end
  EXPECT_FALSE(gate.paused()) << "the pause ended with its generation";
  gate.begin();  // a chat reply
  EXPECT_FALSE(on_step_waits(gate, plain_step(0, 1, 0)));
  gate.set_paused(true);  // the Debugger's Pause while it runs
  EXPECT_TRUE(on_step_waits(gate, plain_step(1, 2, 5)));
  gate.end();
  gate.set_paused(true);  // a pause asked for between generations
  gate.begin();
  EXPECT_FALSE(gate.paused());
  EXPECT_FALSE(on_step_waits(gate, plain_step(0, 1, 0))) << "a pause does not reach the next generation";
  gate.end();

  gate.begin(0, true);
  std::thread generator([&] { gate.on_step(plain_step(0, 1, 0)); });
  while (!gate.waiting()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  gate.stop();
  EXPECT_FALSE(gate.waiting()) << "released by the stop request";
  generator.join();
  gate.end();
}

// Destroying the engine closes its gate: the running generation stops, and so does one
// the worker begins after that (it had taken its job just before), even begun paused:
// begin() clears a stop request, not the close, and a closed gate never waits.
TEST(StudioViews, AClosedStepGateNeverWaits) {
  StepGate gate;
  gate.begin(0, true);
  gate.stop();
  gate.close();
  gate.begin(0, true);  // the paused run the worker took as the engine closed
  EXPECT_TRUE(gate.should_stop());
  EXPECT_FALSE(on_step_waits(gate, plain_step(0, 1, 0))) << "a closed gate held the generator";
  gate.set_paused(true);
  EXPECT_FALSE(on_step_waits(gate, plain_step(1, 2, 5)));
  EXPECT_TRUE(gate.should_stop());

  // A generator waiting when the gate closes goes on at once.
  StepGate held;
  held.begin(0, true);
  std::thread generator([&] { held.on_step(plain_step(0, 1, 0)); });
  while (!held.waiting()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  held.close();
  const bool still_waits = held.waiting();
  EXPECT_FALSE(still_waits) << "close() did not release the generator";
  if (still_waits) held.allow_one_step();
  generator.join();
  EXPECT_TRUE(held.should_stop());
}

// A studio pointed at a hostile trace: every line of a real recording, with its numbers
// replaced by extremes and its bytes damaged, either fails to load with an error naming
// the file and line or loads into traces every panel's view model takes without a crash
// (the sanitizer job runs this under AddressSanitizer).
TEST(StudioViews, HostileTracesAreErrorsOrDrawableNeverACrash) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string());
  GenerationOptions o;
  o.n_predict = 24;
  o.sampling.temperature = 0;
  o.stop_at_end_of_generation = false;
  o.decoding.strategy = Strategy::Fafo;
  std::vector<std::string> lines;
  o.on_step = [&](const StepTrace& t) { lines.push_back(step_trace_to_json(t).dump()); };
  generate(*m.model, *m.tokenizer, m.tokenizer->encode("Once upon a time", true), o);
  ASSERT_GT(lines.size(), 3u);

  // Numbers in the JSON text, each replaced in turn by these.
  const std::vector<std::string> extremes = {"-1", "0", "2147483647", "-2147483648", "1e300", "-7", "99999999999", "65536"};
  std::vector<std::string> cases;
  const std::regex number(R"(-?\d+(\.\d+)?([eE][-+]?\d+)?)");
  for (size_t l = 0; l < lines.size(); l += 3) {
    const std::string& line = lines[l];
    size_t k = 0;
    for (auto it = std::sregex_iterator(line.begin(), line.end(), number); it != std::sregex_iterator(); ++it, ++k) {
      const std::string& value = extremes[k % extremes.size()];
      cases.push_back(line.substr(0, static_cast<size_t>(it->position())) + value +
                      line.substr(static_cast<size_t>(it->position() + it->length())));
    }
  }
  uint64_t state = 12345;  // damaged bytes, from a fixed seed
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
  for (int i = 0; i < 200; ++i) {
    std::string line = lines[next() % lines.size()];
    for (int e = 0; e < 3; ++e) line[(next() >> 33) % line.size()] = static_cast<char>(next() >> 56);
    cases.push_back(line);
  }
  cases.push_back("");
  cases.push_back("{}");
  cases.push_back("[]");
  cases.push_back("{\"step\": 1}");

  const auto dir = test::temp_dir("studio-hostile-traces");
  size_t loaded = 0, refused = 0;
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto path = dir / ("case" + std::to_string(c) + ".jsonl");
    {
      std::ofstream out(path);
      // The damaged line among good ones: the panels compare neighbouring steps.
      out << lines[0] << "\n" << cases[c] << "\n" << lines[1] << "\n";
    }
    std::vector<StepTrace> traces;
    try {
      traces = load_trace_jsonl(path.string());
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
      ++refused;
      continue;
    }
    ++loaded;
    for (size_t i = 0; i < traces.size(); ++i) {
      const StepTrace* previous = i > 0 ? &traces[i - 1] : nullptr;
      (void)window_view(traces[i]);
      (void)candidate_view(traces[i]);
      (void)pool_view(traces[i]);
      (void)kv_map_view(traces[i], previous);
      (void)kv_layers_view(traces[i], previous);
    }
    (void)transcript_view(traces, make_token_text(*m.tokenizer));
    (void)chart_series(traces);
  }
  std::printf("hostile traces: %zu loaded and drawn, %zu refused with an error\n", loaded, refused);
  EXPECT_GT(loaded, 0u);
  EXPECT_GT(refused, 0u);
}
