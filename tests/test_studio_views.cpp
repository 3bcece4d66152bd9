// fafo-studio's view models: the data each panel shows, derived from StepTraces; the
// panels' layout, a screenshot's PNG text, recent files and the file browser (the command
// line: test_studio_options.cpp; playback and the step gate: test_studio_playback.cpp).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <utility>

#include <stb/stb_image.h>

#include "fafo/generator.h"
#include "fafo/step_trace_json.h"
#include "model_fixtures.h"
#include "studio_test_traces.h"
#include "test_support.h"
#include "app_options.h"
#include "file_browser.h"
#include "bench_chart.h"
#include "layout.h"
#include "png_text.h"
#include "recent_files.h"
#include "settings.h"
#include "trace_io.h"
#include "view_models.h"

using namespace fafo;
using namespace fafo::studio;
using fafo::test::hand_step;
using fafo::test::plain_step;

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
  // Window layers (a window of 5 on layers 1 and 3): the blocks wholly before the last
  // position's window (entries 0-3 of the 12; block 1 is 4-7, partly inside) read by no
  // row; the cache's type and size carried through.
  t.kv_windows = {0, 5, 0, 5};
  t.kv_type = "q8_0";
  t.kv_bytes_per_token = 4352;
  const KvLayersView w = kv_layers_view(t, &prev, 3);
  EXPECT_EQ(w.kv_type, "q8_0");
  EXPECT_EQ(w.bytes_per_token, 4352);
  EXPECT_EQ(w.rows[1].window, 5);
  EXPECT_EQ(w.rows[2].window, 0);
  EXPECT_EQ(w.rows[1].cells, (std::vector<KvCell>{KvCell::OutsideWindow, KvCell::Dense, KvCell::Dense}));
  EXPECT_EQ(w.rows[3].cells[0], KvCell::OutsideWindow);
  EXPECT_EQ(w.rows[3].cells[1], KvCell::Rest);
  EXPECT_EQ(w.rows[2].cells, kv_layers_view(t, &prev, 3).rows[2].cells);
  t.kv_windows.clear();
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
