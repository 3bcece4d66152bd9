// The chart of a `fafo bench` run over one or more devices, as an RGB image and a PNG
// file: on the left the step-cost curve t(T) per device, on the right tokens/s per
// decoding strategy per device (or pp and tg tokens/s per device when no strategy was
// run). Text is drawn with stb_easy_font; the PNG is written with stb_image_write.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_result.h"

namespace fafo::bench {

// A label as drawn and its pixel box (top-left corner, width and height).
struct ChartText {
  std::string text;
  int x = 0, y = 0, width = 0, height = 0;
};

struct Chart {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;      // width * height * 3, rows top to bottom
  std::vector<ChartText> texts;  // every label drawn (titles, axis labels, tick labels, legend)
};

struct ChartColor {
  uint8_t r = 0, g = 0, b = 0;
};

// The colour of the device at `device_index` in BenchReport::devices, in both panels
// and the legend (a palette of 8 that cycles).
ChartColor device_color(size_t device_index);

// Draws the report: left panel t(T) per device (x: T on a log2 axis, y: ms per step,
// one coloured line with point markers per device with a step cost), right panel
// tokens/s per strategy per device as grouped bars (groups: the strategies present in
// any device, in order of first appearance; a device's first row of a strategy counts).
// When no device has strategy rows, the right panel shows pp and tg tokens/s per device
// instead (groups "pp<N>", "tg<N>"). A legend lists every device by label; a device
// with an error and no data is listed as "<label>: failed", one without data as
// "<label>: no data". A panel without data (and so an empty report) says "no
// measurements". NaN and infinite values are left out.
Chart draw_bench_chart(const BenchReport& report);

// The chart as PNG bytes. Throws std::runtime_error when the chart is empty or its
// pixels do not match its size.
std::vector<uint8_t> encode_png(const Chart& chart);

// Draws and writes the report's chart to `path` as PNG; throws std::runtime_error
// naming the path when it cannot be written.
void write_bench_chart(const BenchReport& report, const std::string& path);

}  // namespace fafo::bench
