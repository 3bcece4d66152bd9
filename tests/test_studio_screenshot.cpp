// fafo-studio --screenshot under Xvfb: the PNG exists and is not blank; without a
// display the app fails with a clear message.
#include <gtest/gtest.h>

#define STB_IMAGE_IMPLEMENTATION
#include <stb/stb_image.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fafo/generator.h"
#include "fafo/step_trace_json.h"
#include "model_fixtures.h"
#include "test_support.h"

namespace {

bool have_xvfb() { return fafo::test::run_command("command -v xvfb-run >/dev/null 2>&1").exit_code == 0; }

// Variance of the grey level over the image; a blank image gives 0.
double pixel_variance(const std::filesystem::path& png, int* w, int* h) {
  int channels = 0;
  unsigned char* data = stbi_load(png.string().c_str(), w, h, &channels, 3);
  if (!data) return -1.0;
  const size_t n = static_cast<size_t>(*w) * static_cast<size_t>(*h);
  double sum = 0.0, sum2 = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double g = (data[3 * i] + data[3 * i + 1] + data[3 * i + 2]) / 3.0;
    sum += g;
    sum2 += g * g;
  }
  stbi_image_free(data);
  const double mean = sum / static_cast<double>(n);
  return sum2 / static_cast<double>(n) - mean * mean;
}

// `xvfb-run -a` starting from a display number of this process's own, so tests run in
// parallel do not race for the same free display.
std::string xvfb() {
  return "timeout 60 xvfb-run -a -n " + std::to_string(100 + getpid() % 800) + " -s '-screen 0 1600x1000x24' ";
}

std::string studio() { return fafo::test::shell_quote(fafo::test::binary_path("app/studio/fafo-studio")); }

}  // namespace

TEST(StudioScreenshot, LiveFafoOnStories260K) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  if (!std::filesystem::exists(fafo::test::binary_path("app/studio/fafo-studio"))) GTEST_SKIP() << "fafo-studio not built";
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not found: cannot render headless";
  const auto png = fafo::test::temp_dir("studio-shot") / "live.png";
  const auto r = fafo::test::run_command(xvfb() + studio() +
                                         " --screenshot " + fafo::test::shell_quote(png) + " --model " +
                                         fafo::test::shell_quote(model_path) +
                                         " --prompt 'Once upon a time' --steps 20 --width 1280 --height 800");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_TRUE(std::filesystem::exists(png)) << r.err;
  int w = 0, h = 0;
  const double variance = pixel_variance(png, &w, &h);
  EXPECT_EQ(w, 1280);
  EXPECT_EQ(h, 800);
  EXPECT_GT(variance, 50.0) << "the screenshot looks blank";
  EXPECT_NE(r.err.find("20 steps"), std::string::npos) << r.err;
}

// Replays a recorded FAFO trace (as `fafo run --trace` writes it) and shows step 30.
TEST(StudioScreenshot, ReplayOfARecordedTrace) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  if (!std::filesystem::exists(fafo::test::binary_path("app/studio/fafo-studio"))) GTEST_SKIP() << "fafo-studio not built";
  if (!have_xvfb()) GTEST_SKIP() << "xvfb-run not found: cannot render headless";
  const auto dir = fafo::test::temp_dir("studio-replay");
  {
    auto m = fafo::test::load_test_model(model_path.string());
    fafo::GenerationOptions o;
    o.n_predict = 120;
    o.sampling.temperature = 0;
    o.decoding.strategy = fafo::Strategy::Fafo;
    std::ofstream out(dir / "trace.jsonl");
    o.on_step = [&](const fafo::StepTrace& t) { out << fafo::step_trace_to_json(t).dump() << "\n"; };
    fafo::generate(*m.model, *m.tokenizer, m.tokenizer->encode("Once upon a time", true), o);
  }
  const auto png = dir / "replay.png";
  const auto r = fafo::test::run_command(xvfb() + studio() +
                                         " --screenshot " + fafo::test::shell_quote(png) + " --replay " +
                                         fafo::test::shell_quote(dir / "trace.jsonl") + " --model " +
                                         fafo::test::shell_quote(model_path) + " --steps 30");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  int w = 0, h = 0;
  EXPECT_GT(pixel_variance(png, &w, &h), 50.0) << "the screenshot looks blank";
  EXPECT_EQ(w, 1600);
  EXPECT_NE(r.err.find("30 steps"), std::string::npos) << r.err;
}

TEST(StudioScreenshot, BadTraceIsAClearError) {
  if (!std::filesystem::exists(fafo::test::binary_path("app/studio/fafo-studio"))) GTEST_SKIP() << "fafo-studio not built";
  const auto dir = fafo::test::temp_dir("studio-badtrace");
  std::ofstream(dir / "bad.jsonl") << "{not json\n";
  const auto r = fafo::test::run_command("timeout 60 " + studio() + " --replay " + fafo::test::shell_quote(dir / "bad.jsonl"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("bad.jsonl:1: not a step trace"), std::string::npos) << r.err;
}

TEST(StudioScreenshot, NoDisplayIsAClearError) {
  if (!std::filesystem::exists(fafo::test::binary_path("app/studio/fafo-studio"))) GTEST_SKIP() << "fafo-studio not built";
  const auto dir = fafo::test::temp_dir("studio-nodisplay");
  {
    std::ofstream(dir / "empty.jsonl") << "";
  }
  const auto r = fafo::test::run_command("env -u DISPLAY -u WAYLAND_DISPLAY timeout 60 " + studio() + " --screenshot " +
                                         fafo::test::shell_quote(dir / "x.png") + " --replay " +
                                         fafo::test::shell_quote(dir / "empty.jsonl"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("no display: run under xvfb-run or set DISPLAY"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir / "x.png"));
}
