// fafo-studio --screenshot under Xvfb. With --layout-json the app says where it drew
// each panel; the test then looks inside each panel's contents rectangle of the PNG
// and requires drawn content there (not just the window background), and checks
// what each panel says it drew (rows, cells, tokens, messages). The checker is shown
// to fail on a panel drawn empty (--debug-empty-panel). Without a display the app
// fails with a clear message. The pictures README.md and docs/studio.md show are
// taken again with this build (tools/screenshots.sh) and compared with the committed ones.
#include <gtest/gtest.h>

#include <stb/stb_image.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "fafo/generator.h"
#include "fafo/step_trace_json.h"
#include "model_fixtures.h"
#include "png_text.h"
#include "test_support.h"

namespace {

bool have_xvfb() { return fafo::test::run_command("command -v xvfb-run >/dev/null 2>&1").exit_code == 0; }

// `xvfb-run -a` starting from a display number of this process's own, so tests run in
// parallel do not race for the same free display. XDG_CONFIG_HOME keeps the recent-files
// list out of the user's configuration.
std::string xvfb(const std::filesystem::path& dir) {
  return "XDG_CONFIG_HOME=" + fafo::test::shell_quote(dir / "config") + " timeout 90 xvfb-run -a -n " +
         std::to_string(100 + getpid() % 800) + " -s '-screen 0 1600x1000x24' ";
}

std::filesystem::path studio_path() { return fafo::test::binary_path("app/studio/fafo-studio"); }
std::string studio_command() { return fafo::test::shell_quote(studio_path()); }

struct Image {
  int w = 0, h = 0;
  std::vector<unsigned char> rgb;
  bool load(const std::filesystem::path& png) {
    int channels = 0;
    unsigned char* data = stbi_load(png.string().c_str(), &w, &h, &channels, 3);
    if (!data) return false;
    rgb.assign(data, data + static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
    stbi_image_free(data);
    return true;
  }
  const unsigned char* at(int x, int y) const { return &rgb[(static_cast<size_t>(y) * static_cast<size_t>(w) + static_cast<size_t>(x)) * 3]; }
};

// Variance of the grey level over the image; a blank image gives 0.
double pixel_variance(const Image& img) {
  double sum = 0.0, sum2 = 0.0;
  const size_t n = static_cast<size_t>(img.w) * static_cast<size_t>(img.h);
  for (size_t i = 0; i < n; ++i) {
    const double g = (img.rgb[3 * i] + img.rgb[3 * i + 1] + img.rgb[3 * i + 2]) / 3.0;
    sum += g;
    sum2 += g * g;
  }
  const double mean = sum / static_cast<double>(n);
  return sum2 / static_cast<double>(n) - mean * mean;
}

// The share of the rectangle's pixels that differ clearly from its most common colour
// (the panel's background): text, table lines, plots, blocks.
double ink(const Image& img, const nlohmann::json& rect) {
  const int x0 = std::max(0, static_cast<int>(rect[0].get<double>()) + 2);
  const int y0 = std::max(0, static_cast<int>(rect[1].get<double>()) + 2);
  const int x1 = std::min(img.w, static_cast<int>(rect[0].get<double>() + rect[2].get<double>()) - 2);
  const int y1 = std::min(img.h, static_cast<int>(rect[1].get<double>() + rect[3].get<double>()) - 2);
  if (x1 <= x0 || y1 <= y0) return 0.0;
  std::map<int, int> counts;
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) {
      const unsigned char* p = img.at(x, y);
      ++counts[(p[0] / 8) << 10 | (p[1] / 8) << 5 | (p[2] / 8)];
    }
  int mode = 0, best = -1;
  for (const auto& [key, n] : counts)
    if (n > best) best = n, mode = key;
  const int mr = (mode >> 10) * 8 + 4, mg = ((mode >> 5) & 31) * 8 + 4, mb = (mode & 31) * 8 + 4;
  size_t lit = 0;
  for (int y = y0; y < y1; ++y)
    for (int x = x0; x < x1; ++x) {
      const unsigned char* p = img.at(x, y);
      if (std::abs(p[0] - mr) + std::abs(p[1] - mg) + std::abs(p[2] - mb) > 60) ++lit;
    }
  return static_cast<double>(lit) / static_cast<double>((x1 - x0) * (y1 - y0));
}

struct Shot {
  fafo::test::CommandResult run;
  Image image;
  nlohmann::json layout;
  std::map<std::string, nlohmann::json> panels;  // by name
};

// Runs fafo-studio --screenshot with `args` and loads the PNG and the layout.
Shot take(const std::string& name, const std::string& args) {
  const auto dir = fafo::test::temp_dir("studio-" + name);
  const auto png = dir / (name + ".png"), layout = dir / (name + ".json");
  Shot s;
  const std::string command = studio_command() + " --screenshot " + fafo::test::shell_quote(png) + " --layout-json " +
                              fafo::test::shell_quote(layout) + " " + args;
  s.run = fafo::test::run_command(xvfb(dir) + command);
  // Two xvfb-run started at once can still take the same display; the X server then
  // fails to start, or xvfb-run fails to remove its temporary folder afterwards (exit
  // 5): the harness's failures, not the studio's. Up to two more tries.
  for (int retry = 0; retry < 2 && s.run.exit_code != 0 && s.run.err.find("xvfb-run: error") != std::string::npos;
       ++retry)
    s.run = fafo::test::run_command(xvfb(dir) + command);
  if (s.run.exit_code != 0) return s;
  s.image.load(png);
  std::ifstream in(layout);
  if (in) s.layout = nlohmann::json::parse(in, nullptr, false);
  if (s.layout.is_object())
    for (const auto& p : s.layout["panels"]) s.panels[p["name"].get<std::string>()] = p;
  return s;
}

// Every panel of the view is there, inside the image, with content drawn in it.
void expect_panels_drawn(const Shot& s, const std::vector<std::string>& names, double min_ink) {
  ASSERT_GT(s.image.w, 0) << "no screenshot";
  EXPECT_GT(pixel_variance(s.image), 50.0) << "the screenshot looks blank";
  for (const std::string& name : names) {
    const auto it = s.panels.find(name);
    ASSERT_NE(it, s.panels.end()) << "panel '" << name << "' is missing from the layout";
    const auto& rect = it->second["rect"];
    EXPECT_GE(rect[0].get<double>(), 0.0) << name;
    EXPECT_LE(rect[0].get<double>() + rect[2].get<double>(), s.image.w + 0.5) << name;
    EXPECT_LE(rect[1].get<double>() + rect[3].get<double>(), s.image.h + 0.5) << name;
    EXPECT_GT(rect[2].get<double>() * rect[3].get<double>(), 0.02 * s.image.w * s.image.h) << name << " is tiny";
    const double v = ink(s.image, it->second["content"]);
    std::printf("%s: ink %.4f, items %lld\n", name.c_str(), v, static_cast<long long>(it->second["items"].get<int64_t>()));
    EXPECT_GE(v, min_ink) << "panel '" << name << "' shows nothing (ink " << v << ")";
  }
}

int64_t items(const Shot& s, const std::string& panel) {
  const auto it = s.panels.find(panel);
  return it == s.panels.end() ? -2 : it->second["items"].get<int64_t>();
}

// A panel with a line of text or more has more than this share of ink; an empty one
// (background only) has none.
constexpr double kMinInk = 0.003;

const std::vector<std::string> kDebuggerPanels = {"Controls",   "Charts",         "2D window", "Candidates",
                                                  "KV map",     "Candidate pool", "Transcript"};
const std::vector<std::string> kChatPanels = {"Model", "Decoding", "Chat", "Transcript"};
const std::vector<std::string> kBenchPanels = {"Bench setup", "Bench results", "Bench log"};

#define REQUIRE_STUDIO()                                                                           \
  if (!std::filesystem::exists(studio_path())) GTEST_SKIP() << "fafo-studio not built";            \
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not found: cannot render headless"

}  // namespace

// The debugger mid-generation: FAFO on stories260K after 20 steps.
TEST(StudioScreenshot, DebuggerShowsEveryViewLive) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  REQUIRE_STUDIO();
  const Shot s = take("debugger", "--model " + fafo::test::shell_quote(model_path) +
                                      " --backend cpu --strategy fafo --prompt 'Once upon a time' --steps 20 --width 1280 --height 800");
  ASSERT_EQ(s.run.exit_code, 0) << s.run.out << s.run.err;
  EXPECT_EQ(s.image.w, 1280);
  EXPECT_EQ(s.image.h, 800);
  EXPECT_NE(s.run.err.find("debugger view, 20 steps"), std::string::npos) << s.run.err;
  ASSERT_TRUE(s.layout.is_object()) << "no layout JSON";
  EXPECT_EQ(s.layout["view"], "debugger");
  EXPECT_EQ(s.layout["steps"], 20);
  expect_panels_drawn(s, kDebuggerPanels, kMinInk);
  EXPECT_EQ(items(s, "2D window"), 4 * 8);  // N-1 rows x W columns
  EXPECT_EQ(items(s, "KV map"), 5);         // one row per layer of stories260K
  EXPECT_EQ(items(s, "Charts"), 20);
  EXPECT_GT(items(s, "Candidate pool"), 0);
  EXPECT_GE(items(s, "Transcript"), 20);  // at least a token per step
  EXPECT_GE(items(s, "Candidates"), 0);
}

// What a newcomer sees first: no flags but --steps, so the shipped model, the default
// prompt and no strategy picked. The Debugger runs fafo (the chat's auto would choose
// plain decoding here and show no window), so it shows a window and candidates.
TEST(StudioScreenshot, TheDebuggerShowsFumbleDecodingByDefault) {
  REQUIRE_STUDIO();
  const Shot s = take("debugger-default", "--backend cpu --steps 20 --width 1280 --height 800");
  ASSERT_EQ(s.run.exit_code, 0) << s.run.out << s.run.err;
  EXPECT_NE(s.run.err.find("stories260K.gguf (the default; -m picks another)"), std::string::npos) << s.run.err;
  ASSERT_TRUE(s.layout.is_object()) << "no layout JSON";
  EXPECT_EQ(s.layout["view"], "debugger");
  expect_panels_drawn(s, kDebuggerPanels, kMinInk);
  EXPECT_EQ(items(s, "2D window"), 4 * 8) << "fafo's window: N-1 rows x W columns";
  EXPECT_GT(items(s, "Candidate pool"), 0);
}

// What a new user meets first: no flags at all (the shipped model), the Debugger on a
// fafo run of "Once upon a time" held after its first step, waiting for Step or Resume.
TEST(StudioScreenshot, TheFirstStartIsTheDebuggerPausedAfterItsFirstStep) {
  REQUIRE_STUDIO();
  const Shot s = take("first-start", "--backend cpu --width 1280 --height 800");
  ASSERT_EQ(s.run.exit_code, 0) << s.run.out << s.run.err;
  EXPECT_HAS(s.run.err, "stories260K.gguf (the default; -m picks another)");
  EXPECT_HAS(s.run.err, "debugger view, 1 step)");
  ASSERT_TRUE(s.layout.is_object()) << "no layout JSON";
  EXPECT_EQ(s.layout["view"], "debugger");
  EXPECT_EQ(s.layout["steps"], 1);
  EXPECT_TRUE(s.layout["model"].get<std::string>().ends_with("stories260K.gguf")) << s.layout["model"];
  EXPECT_EQ(items(s, "Controls"), 1) << "one step known: the generator waits after it";
  EXPECT_EQ(items(s, "Charts"), 1);
  expect_panels_drawn(s, {"Controls", "Charts", "2D window", "Transcript"}, kMinInk);
}

// A first start that cannot get to its first step still takes its picture, showing why,
// and exits 1: the model is not there or not a model, or its backend cannot be made.
TEST(StudioScreenshot, AFirstStartThatCannotRunShowsWhyAndExits) {
  REQUIRE_STUDIO();
  const Shot missing = take("first-start-missing", "-m /nonexistent/m.gguf --width 1280 --height 800");
  EXPECT_EQ(missing.run.exit_code, 1) << missing.run.out << missing.run.err;
  EXPECT_HAS(missing.run.err, "debugger view, 0 steps)");
  EXPECT_HAS(missing.run.err, "fafo-studio: error: /nonexistent/m.gguf: no such file");

  const auto dir = fafo::test::temp_dir("studio-first-start-garbage");
  std::ofstream(dir / "garbage.gguf") << std::string(4096, 'x');
  const Shot garbage = take("first-start-garbage", "-m " + fafo::test::shell_quote(dir / "garbage.gguf"));
  EXPECT_EQ(garbage.run.exit_code, 1) << garbage.run.out << garbage.run.err;
  EXPECT_HAS(garbage.run.err, "fafo-studio: error: ");

  const Shot backend = take("first-start-backend", "--backend vulkan --device 'no such device 12345'");
  EXPECT_EQ(backend.run.exit_code, 1) << backend.run.out << backend.run.err;
  EXPECT_HAS(backend.run.err, "stories260K.gguf (the default; -m picks another)");
  EXPECT_HAS(backend.run.err, "fafo-studio: error: ");
}

// `--replay` without -m opens a model, so the steps show their text: the one the trace
// names, else the default one (`fafo run --trace` names none), and says which and why.
TEST(StudioScreenshot, ReplayWithoutAModelOpensTheDefaultOne) {
  REQUIRE_STUDIO();
  const std::filesystem::path shipped = fafo::test::source_path("assets/models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("studio-default-trace");
  {
    auto m = fafo::test::load_test_model(shipped.string());
    fafo::GenerationOptions o;
    o.n_predict = 40;
    o.sampling.temperature = 0;
    o.decoding.strategy = fafo::Strategy::Fafo;
    std::ofstream plain(dir / "trace.jsonl"), named(dir / "named.jsonl");
    bool first = true;
    o.on_step = [&](const fafo::StepTrace& t) {
      nlohmann::json j = fafo::step_trace_to_json(t);
      plain << j.dump() << "\n";
      if (first) j["model"] = "/nonexistent/other.gguf";
      first = false;
      named << j.dump() << "\n";
    };
    fafo::generate(*m.model, *m.tokenizer, m.tokenizer->encode("Once upon a time", true), o);
  }
  const Shot s = take("replay-default", "--replay " + fafo::test::shell_quote(dir / "trace.jsonl") + " --backend cpu --steps 10");
  ASSERT_EQ(s.run.exit_code, 0) << s.run.out << s.run.err;
  EXPECT_HAS(s.run.err, "stories260K.gguf (the default: the trace names no model; -m picks another)");
  ASSERT_TRUE(s.layout.is_object()) << "no layout JSON";
  EXPECT_EQ(s.layout["steps"], 10);
  EXPECT_TRUE(s.layout["model"].get<std::string>().ends_with("stories260K.gguf")) << "no model open: token ids only";
  expect_panels_drawn(s, kDebuggerPanels, kMinInk);

  const Shot gone = take("replay-gone", "--replay " + fafo::test::shell_quote(dir / "named.jsonl") + " --backend cpu --steps 5");
  ASSERT_EQ(gone.run.exit_code, 0) << gone.run.out << gone.run.err;
  EXPECT_HAS(gone.run.err, "stories260K.gguf (the default: the trace's model /nonexistent/other.gguf is not there; -m picks another)");
  EXPECT_TRUE(gone.layout["model"].get<std::string>().ends_with("stories260K.gguf"));
}

// Replays a recorded FAFO trace (as `fafo run --trace` writes it) and shows step 30.
TEST(StudioScreenshot, ReplayOfARecordedTrace) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  REQUIRE_STUDIO();
  const auto dir = fafo::test::temp_dir("studio-trace");
  {
    auto m = fafo::test::load_test_model(model_path.string());
    fafo::GenerationOptions o;
    o.n_predict = 120;
    o.sampling.temperature = 0;
    o.decoding.strategy = fafo::Strategy::Fafo;
    o.kv.name = "quest";
    std::ofstream out(dir / "trace.jsonl");
    o.on_step = [&](const fafo::StepTrace& t) { out << fafo::step_trace_to_json(t).dump() << "\n"; };
    fafo::generate(*m.model, *m.tokenizer, m.tokenizer->encode("Once upon a time", true), o);
  }
  const Shot s = take("replay", "--replay " + fafo::test::shell_quote(dir / "trace.jsonl") + " --model " +
                                    fafo::test::shell_quote(model_path) + " --backend cpu --steps 30");
  ASSERT_EQ(s.run.exit_code, 0) << s.run.out << s.run.err;
  EXPECT_EQ(s.image.w, 1600);
  EXPECT_NE(s.run.err.find("30 steps"), std::string::npos) << s.run.err;
  expect_panels_drawn(s, kDebuggerPanels, kMinInk);
  EXPECT_EQ(items(s, "KV map"), 5);
  EXPECT_GT(items(s, "Candidate pool"), 0) << "the trace carries the pool's snapshot";
}

// The chat view after a two-turn conversation on stories260K.
TEST(StudioScreenshot, ChatViewShowsTheConversation) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  REQUIRE_STUDIO();
  const Shot s = take("chat", "--model " + fafo::test::shell_quote(model_path) +
                                  " --backend cpu -n 40 --chat 'Tell me a story.' --chat 'What happened next?'");
  ASSERT_EQ(s.run.exit_code, 0) << s.run.out << s.run.err;
  EXPECT_NE(s.run.err.find("chat view"), std::string::npos) << s.run.err;
  ASSERT_TRUE(s.layout.is_object()) << "no layout JSON";
  EXPECT_EQ(s.layout["view"], "chat");
  expect_panels_drawn(s, kChatPanels, kMinInk);
  EXPECT_EQ(items(s, "Chat"), 4);   // two messages, two replies
  EXPECT_EQ(items(s, "Model"), 1);  // open
  EXPECT_GT(items(s, "Transcript"), 0);
  // The debugger's panels are not part of the chat view.
  EXPECT_EQ(s.panels.count("Candidate pool"), 0u);
}

// The Bench view after `--bench cpu,reference` on stories260K: the setup with a checkbox
// per device, the comparison table and both plots for the two devices, the run's log.
TEST(StudioScreenshot, BenchViewShowsARunOnTwoDevices) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  REQUIRE_STUDIO();
  const Shot s = take("bench", "--model " + fafo::test::shell_quote(model_path) +
                                   " --threads 2 --bench cpu,reference --bench-pp 8 --bench-tg 4 --bench-curve 1,2,4"
                                   " --bench-repetitions 1");
  ASSERT_EQ(s.run.exit_code, 0) << s.run.out << s.run.err;
  EXPECT_NE(s.run.err.find("bench view"), std::string::npos) << s.run.err;
  ASSERT_TRUE(s.layout.is_object()) << "no layout JSON";
  EXPECT_EQ(s.layout["view"], "bench");
  expect_panels_drawn(s, kBenchPanels, kMinInk);
  EXPECT_EQ(items(s, "Bench results"), 2);  // both devices finished
  EXPECT_GE(items(s, "Bench setup"), 2);    // every device of this build: cpu and reference at least
  EXPECT_GT(items(s, "Bench log"), 10);     // the headers and the runner's tables
  EXPECT_EQ(s.panels.count("Chat"), 0u);
}

// A device list that names no device fails like a model that cannot be opened.
TEST(StudioScreenshot, ABadBenchDeviceListFails) {
  REQUIRE_STUDIO();
  const Shot s = take("bench-bad", "--model /nonexistent/m.gguf --bench nosuch");
  EXPECT_EQ(s.run.exit_code, 1) << s.run.err;
  EXPECT_NE(s.run.err.find("error: bench: --bench: no backend 'nosuch'"), std::string::npos) << s.run.err;
}

// The check above can fail: a panel drawn without its contents has no ink.
TEST(StudioScreenshot, AnEmptyPanelIsDetected) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  REQUIRE_STUDIO();
  const Shot s = take("empty", "--model " + fafo::test::shell_quote(model_path) +
                                   " --backend cpu --prompt 'Once upon a time' --steps 10 --debug-empty-panel 'Candidate pool'");
  ASSERT_EQ(s.run.exit_code, 0) << s.run.out << s.run.err;
  ASSERT_EQ(s.panels.count("Candidate pool"), 1u);
  EXPECT_TRUE(s.panels.at("Candidate pool")["empty"].get<bool>());
  const double empty = ink(s.image, s.panels.at("Candidate pool")["content"]);
  std::printf("empty panel: ink %.5f\n", empty);
  EXPECT_LT(empty, kMinInk / 3);
  EXPECT_GE(ink(s.image, s.panels.at("Candidates")["content"]), kMinInk);
}

// The in-app file dialog lists folders and *.gguf files only.
TEST(StudioScreenshot, FileDialogListsFoldersAndModels) {
  REQUIRE_STUDIO();
  const auto dir = fafo::test::temp_dir("studio-browse-dir");
  std::filesystem::create_directories(dir / "more");
  std::ofstream(dir / "a.gguf") << "x";
  std::ofstream(dir / "b.gguf") << "y";
  std::ofstream(dir / "readme.txt") << "z";
  const Shot s = take("browse", "--browse " + fafo::test::shell_quote(dir));
  ASSERT_EQ(s.run.exit_code, 0) << s.run.out << s.run.err;
  expect_panels_drawn(s, {"File dialog", "Model", "Chat"}, kMinInk);
  EXPECT_EQ(items(s, "File dialog"), 4);  // "..", more, a.gguf, b.gguf
  EXPECT_EQ(items(s, "Model"), 1);        // the shipped model, opened by default
}

TEST(StudioScreenshot, AModelThatCannotBeOpenedFails) {
  REQUIRE_STUDIO();
  const Shot s = take("nomodel", "--model /nonexistent/m.gguf --chat hi");
  EXPECT_EQ(s.run.exit_code, 1);
  EXPECT_NE(s.run.err.find("/nonexistent/m.gguf: no such file"), std::string::npos) << s.run.err;
}

TEST(StudioScreenshot, BadTraceIsAClearError) {
  if (!std::filesystem::exists(studio_path())) GTEST_SKIP() << "fafo-studio not built";
  const auto dir = fafo::test::temp_dir("studio-badtrace");
  std::ofstream(dir / "bad.jsonl") << "{not json\n";
  const auto r = fafo::test::run_command("timeout 60 " + studio_command() + " --replay " + fafo::test::shell_quote(dir / "bad.jsonl"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bad.jsonl:1: not a step trace"), std::string::npos) << r.err;
}

TEST(StudioScreenshot, NoDisplayIsAClearError) {
  if (!std::filesystem::exists(studio_path())) GTEST_SKIP() << "fafo-studio not built";
  const auto dir = fafo::test::temp_dir("studio-nodisplay");
  {
    std::ofstream(dir / "empty.jsonl") << "";
  }
  const auto r = fafo::test::run_command("env -u DISPLAY -u WAYLAND_DISPLAY timeout 60 " + studio_command() + " --screenshot " +
                                         fafo::test::shell_quote(dir / "x.png") + " --replay " +
                                         fafo::test::shell_quote(dir / "empty.jsonl"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no display: run under xvfb-run or set DISPLAY"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "x.png"));
}

// Like `fafo`: --help prints the options and exits 0 (no display needed); a bad value
// is one clear line naming the flag and exit code 2.
TEST(StudioScreenshot, HelpAndBadValuesExitLikeFafo) {
  if (!std::filesystem::exists(studio_path())) GTEST_SKIP() << "fafo-studio not built";
  const auto help = fafo::test::run_command("env -u DISPLAY -u WAYLAND_DISPLAY timeout 60 " + studio_command() + " --help");
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_NE(help.out.find("--cache-type"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("--chat-template"), std::string::npos) << help.out;
  for (const char* bad : {"--cache-type f8", "--backend tpu", "--steps -3", "--bogus", "--width 10", "--threads x"}) {
    const auto r = fafo::test::run_command("env -u DISPLAY -u WAYLAND_DISPLAY timeout 60 " + studio_command() + " " + bad);
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
    EXPECT_EQ(r.err.rfind("fafo-studio: error: ", 0), 0u) << r.err;
    const std::string flag = std::string(bad).substr(0, std::string(bad).find(' '));
    EXPECT_NE(r.err.find(flag), std::string::npos) << bad << ": " << r.err;
  }
}

namespace {

// A rectangle of a picture, in pixels.
struct PixelRect {
  int x = 0, y = 0, w = 0, h = 0;
  bool overlaps(int bx, int by, int size) const { return bx < x + w && bx + size > x && by < y + h && by + size > y; }
};

// The share of 16x16 blocks whose mean grey level differs by more than 16 (of 255)
// between two pictures of the same size, over the blocks that overlap none of `skip`:
// a coarse look that lets timings, numbers and a plot's line move but not a panel that
// shows something else or nothing.
double changed_blocks(const Image& a, const Image& b, const std::vector<PixelRect>& skip = {}) {
  constexpr int kBlock = 16;
  size_t changed = 0, blocks = 0;
  for (int by = 0; by + kBlock <= a.h; by += kBlock)
    for (int bx = 0; bx + kBlock <= a.w; bx += kBlock) {
      if (std::any_of(skip.begin(), skip.end(), [&](const PixelRect& r) { return r.overlaps(bx, by, kBlock); })) continue;
      double sum_a = 0.0, sum_b = 0.0;
      for (int y = by; y < by + kBlock; ++y)
        for (int x = bx; x < bx + kBlock; ++x) {
          const unsigned char *pa = a.at(x, y), *pb = b.at(x, y);
          sum_a += pa[0] + pa[1] + pa[2];
          sum_b += pb[0] + pb[1] + pb[2];
        }
      const double n = 3.0 * kBlock * kBlock;
      changed += std::abs(sum_a / n - sum_b / n) > 16.0;
      ++blocks;
    }
  return blocks ? static_cast<double>(changed) / static_cast<double>(blocks) : 1.0;
}

std::set<std::string> pngs_in(const std::filesystem::path& dir) {
  std::set<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".png") names.insert(e.path().filename().string());
  return names;
}

// A picture and the description the studio wrote into it (null: none).
struct Picture {
  Image image;
  nlohmann::json description;
  bool load(const std::filesystem::path& png) {
    const auto text = fafo::studio::read_png_text(png.string(), fafo::studio::kScreenshotKeyword);
    description = text ? nlohmann::json::parse(*text, nullptr, false) : nlohmann::json();
    return image.load(png);
  }
};

// At most this share of a committed picture's compared blocks may differ from a fresh
// one's. Two runs of tools/screenshots.sh differ in the debugger's time charts: 0-2% of
// the blocks on a busy machine; the debugger at its first step against step 60: 18%.
constexpr double kMaxChangedBlocks = 0.12;

// What a view's picture shows that a run on another machine, or the same one busier,
// draws otherwise. The chat's step count is FAFO's over the replies, which another
// instruction set (AVX2, AVX-512) can change. The Bench view's results and log are
// timings and the bars and curves drawn from them.
const std::map<std::string, std::set<std::string>> kMeasuredKeys = {{"chat", {"steps"}}};
const std::map<std::string, std::set<std::string>> kMeasuredPanels = {{"bench", {"Bench results", "Bench log"}}};
// A panel's contents under its title bar (ImGui's default style: 19 pixels).
constexpr int kTitleBar = 24;

// How `old` (a committed picture) differs from `fresh` (this build's picture of the same
// command), each difference a line; none when it shows what this build draws. Every key
// of the description must match but the view's measured ones (kMeasuredKeys): the view,
// size, menus, panels and their rectangles, the step shown, model and command line. The
// pictures must look alike (changed_blocks) outside the view's measured panels, which
// must show about as much there (ink, within a factor of 3) as the fresh one: a table,
// plots and a log, whatever their numbers.
std::vector<std::string> staleness(const Picture& fresh, const Picture& old) {
  std::vector<std::string> why;
  if (!old.description.is_object()) return {"it carries no description of what it shows"};
  const std::string view = fresh.description.value("view", "");
  const auto in = [&view](const auto& table, const std::string& name) {
    const auto it = table.find(view);
    return it != table.end() && it->second.count(name) > 0;
  };
  for (const auto& [key, value] : fresh.description.items())
    if (!in(kMeasuredKeys, key) && old.description.value(key, nlohmann::json()) != value)
      why.push_back("it shows another " + key + " (" + old.description.value(key, nlohmann::json()).dump() +
                    ") than this build draws (" + value.dump() + ")");
  if (old.image.w != fresh.image.w || old.image.h != fresh.image.h) {
    why.push_back("it has another size");
    return why;
  }
  std::vector<PixelRect> measured;
  for (const auto& panel : fresh.description.value("panels", nlohmann::json::array())) {
    const std::string name = panel.value("name", "");
    if (!in(kMeasuredPanels, name)) continue;
    const auto& r = panel["rect"];
    const PixelRect rect{r[0].get<int>(), r[1].get<int>(), r[2].get<int>(), r[3].get<int>()};
    measured.push_back(rect);
    const nlohmann::json contents = {rect.x, rect.y + kTitleBar, rect.w, rect.h - kTitleBar};
    const double fresh_ink = ink(fresh.image, contents), old_ink = ink(old.image, contents);
    std::printf("%s: ink %.4f, committed %.4f\n", name.c_str(), fresh_ink, old_ink);
    if (old_ink < kMinInk || old_ink * 3.0 < fresh_ink || fresh_ink * 3.0 < old_ink)
      why.push_back("its panel " + name + " shows " + (old_ink < fresh_ink ? "less" : "more") + " (ink " +
                    std::to_string(old_ink) + ") than this build's (" + std::to_string(fresh_ink) + ")");
  }
  const double changed = changed_blocks(fresh.image, old.image, measured);
  std::printf("%.1f%% of the compared blocks changed\n", 100.0 * changed);
  if (changed > kMaxChangedBlocks)
    why.push_back("it looks unlike what this build draws: " + std::to_string(100.0 * changed) + "% of its blocks changed");
  return why;
}

std::string stale_lines(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& line : v) out += line + "\n";
  return out;
}

// `picture` with the rectangle's pixels replaced by what `paint` makes of them.
template <class F>
Picture repainted(Picture picture, const PixelRect& r, F&& paint) {
  for (int y = std::max(r.y, 0); y < std::min(r.y + r.h, picture.image.h); ++y)
    for (int x = std::max(r.x, 0); x < std::min(r.x + r.w, picture.image.w); ++x) {
      unsigned char* p = &picture.image.rgb[(static_cast<size_t>(y) * static_cast<size_t>(picture.image.w) + static_cast<size_t>(x)) * 3];
      paint(x, y, p);
    }
  return picture;
}

PixelRect panel_box(const Picture& p, const std::string& name) {
  for (const auto& panel : p.description["panels"])
    if (panel["name"] == name) {
      const auto& r = panel["rect"];
      return {r[0].get<int>(), r[1].get<int>(), r[2].get<int>(), r[3].get<int>()};
    }
  ADD_FAILURE() << "no panel " << name;
  return {};
}

}  // namespace

// The comparison below on the committed pictures themselves (no display needed): the
// Bench view's measured panels may show other numbers, bars and curves, and the chat
// another step count, but a picture whose menus, panels or other contents changed, or
// whose results show nothing, is stale.
TEST(StudioScreenshot, AStalePictureIsToldFromMovedMeasurements) {
  const std::filesystem::path committed = fafo::test::source_path("assets/screenshots");
  Picture bench, chat;
  ASSERT_TRUE(bench.load(committed / "bench-stories260k.png"));
  ASSERT_TRUE(chat.load(committed / "chat-stories260k.png"));
  ASSERT_EQ(bench.description.value("view", ""), "bench");
  ASSERT_EQ(chat.description.value("view", ""), "chat");
  EXPECT_TRUE(staleness(bench, bench).empty()) << stale_lines(staleness(bench, bench));

  // Other timings: the results' tables, bars and curves and the log drawn elsewhere
  // (each panel's contents mirrored left to right).
  const PixelRect results = panel_box(bench, "Bench results"), log_panel = panel_box(bench, "Bench log");
  Picture busier = bench;
  for (const PixelRect& r : {results, log_panel}) {
    const Picture before = busier;
    const PixelRect contents{r.x, r.y + kTitleBar, r.w, r.h - kTitleBar};
    const int right = std::min(r.x + r.w, before.image.w) - 1;
    busier = repainted(busier, contents, [&](int x, int y, unsigned char* p) {
      const unsigned char* q = before.image.at(r.x + right - x, y);
      p[0] = q[0], p[1] = q[1], p[2] = q[2];
    });
  }
  EXPECT_GT(changed_blocks(bench.image, busier.image), kMaxChangedBlocks) << "the test's other timings change too little";
  EXPECT_TRUE(staleness(busier, bench).empty()) << stale_lines(staleness(busier, bench));
  EXPECT_TRUE(staleness(bench, busier).empty()) << stale_lines(staleness(bench, busier));

  // The chat's step count, FAFO's: another instruction set may take other steps.
  Picture other_steps = chat;
  other_steps.description["steps"] = chat.description["steps"].get<int>() + 7;
  EXPECT_TRUE(staleness(other_steps, chat).empty()) << stale_lines(staleness(other_steps, chat));

  // Stale: another menu bar, a moved panel, another model, other setup contents, no results.
  Picture menus = bench;
  menus.description["menus"].erase(menus.description["menus"].size() - 1);
  EXPECT_FALSE(staleness(menus, bench).empty()) << "a menu more";
  Picture moved = bench;
  moved.description["panels"][0]["rect"][2] = moved.description["panels"][0]["rect"][2].get<int>() + 40;
  EXPECT_FALSE(staleness(moved, bench).empty()) << "a panel moved";
  Picture model = chat;
  model.description["model"] = "assets/models/other.gguf";
  EXPECT_FALSE(staleness(model, chat).empty()) << "another model";
  // The setup's contents 5 lines lower (a section more above them); a machine with
  // another device list moves them a line (7% of the compared blocks).
  const PixelRect setup = panel_box(bench, "Bench setup");
  const PixelRect setup_contents{setup.x, setup.y + kTitleBar, setup.w, setup.h - kTitleBar};
  const Picture lower = repainted(bench, setup_contents, [&](int x, int y, unsigned char* p) {
    const unsigned char* q = bench.image.at(x, std::max(setup_contents.y, y - 5 * 20));
    p[0] = q[0], p[1] = q[1], p[2] = q[2];
  });
  EXPECT_FALSE(staleness(lower, bench).empty()) << "the setup panel's contents 5 lines lower";
  const unsigned char* background = bench.image.at(setup.x + setup.w - 20, setup.y + setup.h - 8);
  const auto blank = [&](int, int, unsigned char* p) { p[0] = background[0], p[1] = background[1], p[2] = background[2]; };
  EXPECT_FALSE(staleness(bench, repainted(bench, setup_contents, blank)).empty()) << "a setup panel drawn empty";
  const PixelRect results_contents{results.x, results.y + kTitleBar, results.w, results.h - kTitleBar};
  EXPECT_FALSE(staleness(bench, repainted(bench, results_contents, blank)).empty()) << "no results";
}

// The pictures README.md and docs/studio.md show are what this build draws: they are
// taken again (tools/screenshots.sh, into BUILD/screenshots) and each committed one must
// show the same (staleness: its description, and how it looks outside what is measured).
// `cmake --build build --target screenshots` refreshes them.
TEST(StudioScreenshot, TheCommittedScreenshotsAreThisBuilds) {
  REQUIRE_STUDIO();
  const std::filesystem::path out = fafo::test::binary_path("screenshots");
  std::filesystem::remove_all(out);
  const auto r = fafo::test::run_command("bash " + fafo::test::shell_quote(fafo::test::source_path("tools/screenshots.sh")) +
                                         " --build " + fafo::test::shell_quote(fafo::test::binary_path("")) + " --out " +
                                         fafo::test::shell_quote(out));
  if (r.exit_code == 77) GTEST_SKIP() << r.out;
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::filesystem::path committed = fafo::test::source_path("assets/screenshots");
  const std::string refresh = "`cmake --build build --target screenshots` takes them again";
  const std::set<std::string> fresh_names = pngs_in(out), committed_names = pngs_in(committed);
  EXPECT_EQ(committed_names, fresh_names) << "assets/screenshots/ holds other pictures than tools/screenshots.sh takes";
  for (const std::string& name : fresh_names) {
    SCOPED_TRACE(name);
    if (!committed_names.count(name)) continue;
    Picture fresh, old;
    ASSERT_TRUE(fresh.load(out / name));
    ASSERT_TRUE(fresh.description.is_object()) << "the studio wrote no description into " << (out / name);
    ASSERT_TRUE(old.load(committed / name));
    std::printf("%s:\n", name.c_str());
    const std::vector<std::string> why = staleness(fresh, old);
    EXPECT_TRUE(why.empty()) << "assets/screenshots/" << name << " is stale:\n" << stale_lines(why) << refresh;
  }
}
