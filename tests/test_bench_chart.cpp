// The bench chart (app/bench/bench_chart.h): the PNG it writes decodes to the declared
// size, shows every device in its colour in both panels, draws its labels where it says
// it does, and says so when there is nothing or a device failed.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <stb/stb_image.h>

#include "bench_chart.h"
#include "test_support.h"

using namespace fafo::bench;

namespace {

// A device with a step-cost curve over T = 1..256, pp/tg and the four strategies,
// everything `speed` times as fast as a speed-1 device.
DeviceResult device(const std::string& label, double speed) {
  DeviceResult d;
  d.label = label;
  d.backend = label.substr(0, label.find(':'));
  d.pp_tokens = 512;
  d.pp = {400 * speed, 3};
  d.tg_tokens = 128;
  d.tg = {25 * speed, 0.5};
  for (int32_t T = 1; T <= 256; T *= 2) d.step_cost.push_back({T, {(8 + 0.12 * T) / speed, 0.1}});
  const char* names[] = {"ar", "jacobi", "lookahead", "fafo"};
  const double gains[] = {1.0, 1.2, 1.6, 2.1};
  for (int i = 0; i < 4; ++i) {
    StrategyRow row;
    row.strategy = names[i];
    row.tokens_per_s = 25 * speed * gains[i];
    row.speedup = gains[i];
    d.strategies.push_back(row);
  }
  return d;
}

BenchReport three_devices() {
  BenchReport r;
  r.model = "tiny-q8.gguf";
  r.devices = {device("cpu", 1), device("vulkan:0", 2.5), device("reference", 0.4)};
  return r;
}

struct ChartImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  const uint8_t* at(int x, int y) const { return &rgb[(static_cast<size_t>(y) * width + x) * 3]; }
};

// The PNG decoded by stb_image, as RGB.
ChartImage decode(const std::vector<uint8_t>& png) {
  ChartImage img;
  int channels = 0;
  stbi_uc* pixels =
      stbi_load_from_memory(png.data(), static_cast<int>(png.size()), &img.width, &img.height, &channels, 3);
  if (pixels == nullptr) return {};
  img.rgb.assign(pixels, pixels + static_cast<size_t>(img.width) * img.height * 3);
  stbi_image_free(pixels);
  return img;
}

bool near(const uint8_t* p, ChartColor c, int tolerance) {
  return std::abs(p[0] - c.r) <= tolerance && std::abs(p[1] - c.g) <= tolerance && std::abs(p[2] - c.b) <= tolerance;
}

// Pixels of colour c (within tolerance per channel) in columns [x0, x1).
int count_color(const ChartImage& img, ChartColor c, int x0, int x1, int tolerance = 6) {
  int n = 0;
  for (int y = 0; y < img.height; ++y) {
    for (int x = x0; x < x1; ++x) n += near(img.at(x, y), c, tolerance);
  }
  return n;
}

int count_color(const ChartImage& img, ChartColor c) { return count_color(img, c, 0, img.width); }

int count_non_white(const ChartImage& img) {
  int n = 0;
  for (int y = 0; y < img.height; ++y) {
    for (int x = 0; x < img.width; ++x) n += !near(img.at(x, y), {255, 255, 255}, 0);
  }
  return n;
}

const ChartText* find_text(const Chart& chart, const std::string& text) {
  for (const ChartText& t : chart.texts) {
    if (t.text == text) return &t;
  }
  return nullptr;
}

bool inside(const ChartImage& img, const ChartText& t) {
  return t.width > 0 && t.height > 0 && t.x >= 0 && t.y >= 0 && t.x + t.width <= img.width &&
         t.y + t.height <= img.height;
}

// Dark pixels (every channel below 100) in the text's box.
int dark_pixels_in(const ChartImage& img, const ChartText& t) {
  int n = 0;
  for (int y = t.y; y < t.y + t.height; ++y) {
    for (int x = t.x; x < t.x + t.width; ++x) {
      const uint8_t* p = img.at(x, y);
      n += p[0] < 100 && p[1] < 100 && p[2] < 100;
    }
  }
  return n;
}

void expect_drawn(const Chart& chart, const ChartImage& img, const std::string& text) {
  const ChartText* t = find_text(chart, text);
  ASSERT_NE(t, nullptr) << "no label \"" << text << "\"";
  EXPECT_TRUE(inside(img, *t)) << text << " at " << t->x << "," << t->y << " " << t->width << "x" << t->height;
  EXPECT_GE(dark_pixels_in(img, *t), 8) << "label \"" << text << "\" has no ink in its box";
}

std::vector<uint8_t> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST(BenchChart, PngDecodesToTheChartItsSizeAndPixels) {
  const Chart chart = draw_bench_chart(three_devices());
  ASSERT_GE(chart.width, 800);
  ASSERT_GE(chart.height, 400);
  ASSERT_EQ(chart.rgb.size(), static_cast<size_t>(chart.width) * chart.height * 3);
  const ChartImage img = decode(encode_png(chart));
  ASSERT_EQ(img.width, chart.width);
  ASSERT_EQ(img.height, chart.height);
  EXPECT_EQ(img.rgb, chart.rgb);  // PNG is lossless
  EXPECT_GT(count_non_white(img), img.width * img.height / 50) << "the chart is (nearly) blank";
}

TEST(BenchChart, EveryDeviceHasItsOwnColourInBothPanels) {
  const Chart chart = draw_bench_chart(three_devices());
  const ChartImage img = decode(encode_png(chart));
  ASSERT_EQ(img.width, chart.width);
  const int half = img.width / 2;
  for (size_t i = 0; i < 3; ++i) {
    const ChartColor c = device_color(i);
    EXPECT_GT(count_color(img, c, 0, half), 300) << "device " << i << ": no curve in the left panel";
    EXPECT_GT(count_color(img, c, half, img.width), 2000) << "device " << i << ": no bars in the right panel";
    for (size_t j = 0; j < i; ++j) {
      const ChartColor o = device_color(j);
      EXPECT_GT(std::abs(c.r - o.r) + std::abs(c.g - o.g) + std::abs(c.b - o.b), 60)
          << "devices " << i << " and " << j << " look alike";
    }
  }
  // The fourth colour is not used by three devices.
  EXPECT_EQ(count_color(img, device_color(3), 0, img.width, 0), 0);
}

TEST(BenchChart, PaletteCyclesForManyDevices) {
  EXPECT_EQ(device_color(8).r, device_color(0).r);
  EXPECT_EQ(device_color(8).g, device_color(0).g);
  EXPECT_EQ(device_color(9).b, device_color(1).b);
  BenchReport r;
  for (int i = 0; i < 12; ++i) r.devices.push_back(device("backend-with-a-name:" + std::to_string(i), 1 + i));
  const Chart chart = draw_bench_chart(r);
  const ChartImage img = decode(encode_png(chart));
  ASSERT_EQ(img.height, chart.height);
  for (int i = 0; i < 12; ++i) expect_drawn(chart, img, "backend-with-a-name:" + std::to_string(i));
  for (const ChartText& t : chart.texts) EXPECT_TRUE(inside(img, t)) << t.text;
}

TEST(BenchChart, AxisTickAndLegendLabelsAreDrawnWhereTheySayTheyAre) {
  const Chart chart = draw_bench_chart(three_devices());
  const ChartImage img = decode(encode_png(chart));
  ASSERT_EQ(img.width, chart.width);
  for (const char* label : {"T (tokens per step)", "ms per step", "tokens/s"}) expect_drawn(chart, img, label);
  for (const char* label : {"cpu", "vulkan:0", "reference"}) expect_drawn(chart, img, label);   // legend
  for (const char* label : {"ar", "jacobi", "lookahead", "fafo"}) expect_drawn(chart, img, label);  // groups
  for (const char* label : {"1", "16", "256"}) expect_drawn(chart, img, label);                 // T ticks
  expect_drawn(chart, img, "0");
  expect_drawn(chart, img, "fafo bench: tiny-q8.gguf");  // the title names the model
  for (const ChartText& t : chart.texts) EXPECT_TRUE(inside(img, t)) << t.text;
}

TEST(BenchChart, LinearAxesHaveNiceTicksFromZero) {
  BenchReport r;
  DeviceResult d;
  d.label = "cpu";
  d.step_cost = {{1, {12, 0}}, {4, {23, 0}}, {16, {40, 0}}};  // 0..40 in steps of 10
  r.devices = {d};
  const Chart chart = draw_bench_chart(r);
  for (const char* tick : {"0", "10", "20", "30", "40", "1", "4", "16"}) {
    EXPECT_NE(find_text(chart, tick), nullptr) << "no tick " << tick;
  }
  EXPECT_EQ(find_text(chart, "50"), nullptr);
  EXPECT_EQ(find_text(chart, "15"), nullptr);
  // Nothing on the right: no strategies and no pp/tg.
  int no_measurements = 0;
  for (const ChartText& t : chart.texts) no_measurements += t.text == "no measurements";
  EXPECT_EQ(no_measurements, 1);
}

TEST(BenchChart, ValuesSpanningMoreThan30xGetALogAxis) {
  // A CPU backend and a software rasterizer differ by 100x: on a linear axis the fast
  // device's curve would lie flat on zero.
  BenchReport r;
  DeviceResult fast, slow;
  fast.label = "cpu";
  fast.step_cost = {{1, {0.06, 0}}, {8, {0.3, 0}}};
  slow.label = "vulkan";
  slow.step_cost = {{1, {4, 0}}, {8, {18, 0}}};
  r.devices = {fast, slow};
  const Chart chart = draw_bench_chart(r);
  const ChartImage img = decode(encode_png(chart));
  expect_drawn(chart, img, "ms per step (log scale)");
  for (const char* tick : {"0.01", "0.1", "1", "10", "100"}) EXPECT_NE(find_text(chart, tick), nullptr) << "no tick " << tick;
  EXPECT_EQ(find_text(chart, "0.001"), nullptr);
  EXPECT_EQ(find_text(chart, "1000"), nullptr);
  // The fast device's markers are spread over the plot's height, not on its floor.
  int top = img.height, bottom = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width / 2; ++x) {
      const uint8_t* p = img.at(x, y);
      const ChartColor c = device_color(0);
      if (p[0] == c.r && p[1] == c.g && p[2] == c.b) {
        top = std::min(top, y);
        bottom = std::max(bottom, y);
      }
    }
  EXPECT_GT(bottom - top, 100) << "the cpu curve is flat";
}

TEST(BenchChart, WithoutStrategiesTheRightPanelShowsPpAndTg) {
  BenchReport r = three_devices();
  for (DeviceResult& d : r.devices) d.strategies.clear();
  const Chart chart = draw_bench_chart(r);
  const ChartImage img = decode(encode_png(chart));
  ASSERT_EQ(img.width, chart.width);
  expect_drawn(chart, img, "pp512");
  expect_drawn(chart, img, "tg128");
  expect_drawn(chart, img, "tokens/s (log scale)");  // pp 400-1200, tg 25-75: more than 30x apart
  EXPECT_EQ(find_text(chart, "fafo"), nullptr);
  EXPECT_EQ(find_text(chart, "no measurements"), nullptr);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_GT(count_color(img, device_color(i), img.width / 2, img.width), 1000) << "device " << i;
  }
}

TEST(BenchChart, AnEmptyReportSaysNoMeasurements) {
  const Chart chart = draw_bench_chart(BenchReport{});
  const ChartImage img = decode(encode_png(chart));
  ASSERT_EQ(img.width, chart.width);
  ASSERT_EQ(img.height, chart.height);
  ASSERT_GT(img.width, 0);
  expect_drawn(chart, img, "no measurements");
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(count_color(img, device_color(i), 0, img.width, 0), 0) << i;
  EXPECT_EQ(find_text(chart, "ms per step"), nullptr);
}

TEST(BenchChart, AFailedDeviceIsListedAsFailedAndNotDrawn) {
  BenchReport r;
  r.devices = {device("cpu", 1), DeviceResult{}};
  r.devices[1].label = "vulkan:1";
  r.devices[1].error = "vkCreateDevice failed";
  const Chart chart = draw_bench_chart(r);
  const ChartImage img = decode(encode_png(chart));
  ASSERT_EQ(img.width, chart.width);
  expect_drawn(chart, img, "vulkan:1: failed");
  expect_drawn(chart, img, "cpu");
  EXPECT_GT(count_color(img, device_color(0)), 1000);
  EXPECT_EQ(count_color(img, device_color(1), 0, img.width, 0), 0);

  BenchReport all_failed;
  all_failed.devices = {r.devices[1]};
  const Chart failed = draw_bench_chart(all_failed);
  EXPECT_NE(find_text(failed, "vulkan:1: failed"), nullptr);
  EXPECT_NE(find_text(failed, "no measurements"), nullptr);
}

TEST(BenchChart, OddValuesAreSkippedOrHeldInsideThePlot) {
  BenchReport r;
  DeviceResult d;
  d.label = std::string("a-device-label-far-too-long-for-the-legend-of-any-chart-") + std::string(80, 'x');
  d.step_cost = {{8, {std::nan(""), 0}}, {16, {3e12, 0}}, {0, {5, 0}}, {-4, {5, 0}}};  // one usable point
  StrategyRow zero;
  zero.strategy = "ar";
  zero.tokens_per_s = 0;
  StrategyRow inf;
  inf.strategy = "fafo";
  inf.tokens_per_s = INFINITY;
  d.strategies = {zero, inf};
  r.devices = {d};
  const Chart chart = draw_bench_chart(r);
  const ChartImage img = decode(encode_png(chart));
  ASSERT_EQ(img.width, chart.width);
  ASSERT_EQ(img.height, chart.height);
  for (const ChartText& t : chart.texts) EXPECT_TRUE(inside(img, t)) << t.text;
  // The long label is cut to fit and says so.
  bool cut = false;
  for (const ChartText& t : chart.texts) {
    if (t.text.rfind("a-device-label", 0) == 0) {
      cut = true;
      EXPECT_EQ(t.text.substr(t.text.size() - 3), "...");
      EXPECT_LT(t.width, chart.width / 2);
    }
  }
  EXPECT_TRUE(cut);
  EXPECT_NE(find_text(chart, "16"), nullptr);  // the one point's T
  EXPECT_EQ(find_text(chart, "fafo"), nullptr);  // infinite tokens/s is left out
  EXPECT_NE(find_text(chart, "ar"), nullptr);
  EXPECT_GT(count_color(img, device_color(0), 0, img.width / 2), 30);  // the single marker
}

TEST(BenchChart, EncodingAnEmptyChartThrows) {
  EXPECT_THROW(encode_png(Chart{}), std::runtime_error);
  Chart wrong;
  wrong.width = 4;
  wrong.height = 4;
  wrong.rgb.assign(10, 0);
  EXPECT_THROW(encode_png(wrong), std::runtime_error);
}

TEST(BenchChart, TheWrittenFileIsTheEncodedPng) {
  const BenchReport r = three_devices();
  const std::filesystem::path path = fafo::test::temp_dir("bench_chart") / "chart.png";
  write_bench_chart(r, path.string());
  const std::vector<uint8_t> written = read_bytes(path);
  ASSERT_FALSE(written.empty());
  EXPECT_EQ(written, encode_png(draw_bench_chart(r)));
  const uint8_t signature[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  EXPECT_TRUE(std::equal(std::begin(signature), std::end(signature), written.begin()));
}

TEST(BenchChart, AnUnwritablePathThrowsNamingIt) {
  const std::string path =
      (fafo::test::temp_dir("bench_chart_unwritable") / "no-such-folder" / "chart.png").string();
  try {
    write_bench_chart(three_devices(), path);
    FAIL() << "wrote " << path;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}
