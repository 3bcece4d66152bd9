// fafo-studio's view models: the data each panel shows, derived from StepTraces.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>
#include <utility>

#include "fafo/generator.h"
#include "fafo/step_trace_json.h"
#include "model_fixtures.h"
#include "test_support.h"
#include "app_options.h"
#include "live_session.h"
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

TEST(StudioViews, OptionsParseAndReject) {
  const auto o = parse_app_options({"--model", "m.gguf", "--steps", "12", "--strategy", "lookahead", "--screenshot", "x.png"});
  EXPECT_EQ(o.model, "m.gguf");
  EXPECT_EQ(o.steps, 12);
  EXPECT_EQ(o.decoding.strategy, Strategy::Lookahead);
  EXPECT_EQ(o.screenshot, "x.png");
  EXPECT_THROW(parse_app_options({}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--model", "m", "--bogus"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--model", "m", "--steps", "x"}), std::invalid_argument);
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
    }
  }
}

// The live generator runs off the calling thread, stops after max_steps, waits while
// paused, runs one step per permit, and stop() joins it even while it waits.
TEST(StudioViews, LiveSessionPausesStepsAndStops) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string());
  auto wait_for = [](auto&& done) {
    for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return done();
  };
  LiveOptions lo;
  lo.prompt = "Once upon a time";
  lo.generation.n_predict = 200;
  lo.generation.sampling.temperature = 0;
  lo.generation.decoding.strategy = Strategy::Fafo;
  {
    lo.max_steps = 12;
    LiveSession live(*m.model, *m.tokenizer, lo);
    live.start();
    ASSERT_TRUE(wait_for([&] { return live.finished(); }));
    std::vector<StepTrace> got;
    live.drain(got);
    EXPECT_GE(got.size(), 12u);
    EXPECT_LE(got.size(), 13u);  // the step in flight when the limit was reached may finish
    EXPECT_EQ(got[0].step, 0);
    EXPECT_TRUE(live.error().empty());
  }
  {
    lo.max_steps = 0;
    LiveSession live(*m.model, *m.tokenizer, lo);
    live.set_paused(true);
    live.start();
    std::vector<StepTrace> got;
    ASSERT_TRUE(wait_for([&] { live.drain(got); return got.size() == 1; }));  // waits after its first step
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    live.drain(got);
    EXPECT_EQ(got.size(), 1u);
    live.allow_one_step();
    ASSERT_TRUE(wait_for([&] { live.drain(got); return got.size() == 2; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    live.drain(got);
    EXPECT_EQ(got.size(), 2u);
    EXPECT_FALSE(live.finished());
    live.stop();  // while paused: must not hang
    EXPECT_TRUE(live.finished());
  }
}
