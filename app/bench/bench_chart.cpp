// The chart of a bench run: two panels side by side over a legend, drawn into an RGB
// buffer with filled rectangles, thick lines and discs; text is stb_easy_font's quads
// filled at an integer scale.
#include "bench_chart.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <tuple>

#include <stb_easy_font.h>
#include <stb_image_write.h>

namespace fafo::bench {
namespace {

// Layout, in pixels. The height grows when the legend needs more than one row.
constexpr int kWidth = 1400;
constexpr int kBaseHeight = 600;
constexpr int kScale = 2;         // text scale of every label but the bar values
constexpr int kGlyphRows = 9;     // an stb_easy_font line's glyphs cover rows 0..8
constexpr int kTitleY = 14;
constexpr int kPanelTitleY = 50;
constexpr int kPlotTop = 106;     // the y-axis label sits above it
constexpr int kPlotBottom = 470;  // tick labels and the x-axis label sit below it
constexpr int kLegendTop = 556;
constexpr int kLegendRow = 26;
constexpr int kLegendMaxText = 360;
constexpr int kSwatch = 16;

constexpr ChartColor kBackground{255, 255, 255};
constexpr ChartColor kInk{30, 30, 30};
constexpr ChartColor kAxis{70, 70, 70};
constexpr ChartColor kGrid{225, 225, 225};
constexpr ChartColor kFailed{160, 160, 160};

// Tableau's 10-colour palette less its grey and olive: 8 hues apart from each other and
// from the ink, grid and failed greys.
constexpr ChartColor kPalette[] = {{31, 119, 180}, {255, 127, 14},  {44, 160, 44},  {214, 39, 40},
                                   {148, 103, 189}, {140, 86, 75}, {227, 119, 194}, {23, 190, 207}};

struct Rect {
  int x = 0, y = 0, w = 0, h = 0;
  int right() const { return x + w; }
  int bottom() const { return y + h; }
};

// ---- pixels ----------------------------------------------------------------------

// A coordinate as an integer pixel, far outside the image for huge or NaN values so
// that clipping drops them.
int to_px(double v) {
  if (!(v > -1e6)) return -1000000;
  if (v > 1e6) return 1000000;
  return static_cast<int>(std::lround(v));
}

// Fills [x, x+w) x [y, y+h), clipped to the image.
void fill_rect(Chart& c, int x, int y, int w, int h, ChartColor col) {
  const int x0 = std::max(x, 0), y0 = std::max(y, 0);
  const int x1 = std::min(x + w, c.width), y1 = std::min(y + h, c.height);
  for (int py = y0; py < y1; ++py) {
    for (int px = x0; px < x1; ++px) {
      uint8_t* p = &c.rgb[(static_cast<size_t>(py) * static_cast<size_t>(c.width) + static_cast<size_t>(px)) * 3];
      p[0] = col.r;
      p[1] = col.g;
      p[2] = col.b;
    }
  }
}

void fill_disc(Chart& c, int cx, int cy, int r, ChartColor col) {
  for (int dy = -r; dy <= r; ++dy) {
    for (int dx = -r; dx <= r; ++dx) {
      if (dx * dx + dy * dy <= r * r + r) fill_rect(c, cx + dx, cy + dy, 1, 1, col);
    }
  }
}

// A line `thickness` pixels wide: a square stamped at every pixel step along it.
void draw_line(Chart& c, int x0, int y0, int x1, int y1, int thickness, ChartColor col) {
  const int steps = std::max(std::abs(x1 - x0), std::abs(y1 - y0));
  const int half = thickness / 2;
  for (int i = 0; i <= steps; ++i) {
    const double t = steps == 0 ? 0.0 : static_cast<double>(i) / steps;
    const int x = to_px(x0 + t * (x1 - x0)), y = to_px(y0 + t * (y1 - y0));
    fill_rect(c, x - half, y - half, thickness, thickness, col);
  }
}

// ---- text ------------------------------------------------------------------------

// stb_easy_font draws ASCII 32..126 only; anything else becomes '?'.
std::string printable(const std::string& s) {
  std::string out = s;
  for (char& ch : out) {
    if (ch < 32 || ch > 126) ch = '?';
  }
  return out;
}

int text_width(const std::string& s, int scale) {
  std::string t = printable(s);
  return stb_easy_font_width(t.data()) * scale;
}

int text_height(int scale) { return kGlyphRows * scale; }

// `s` as it fits in max_width pixels: whole, or cut and ended with "..." (empty when
// not even "..." fits).
std::string fit_text(const std::string& s, int max_width, int scale) {
  std::string t = printable(s);
  if (text_width(t, scale) <= max_width) return t;
  if (text_width("...", scale) > max_width) return "";
  while (!t.empty() && text_width(t + "...", scale) > max_width) t.pop_back();
  return t + "...";
}

// Draws `s` with its top-left corner at (x, y) and records it in chart.texts.
void draw_text(Chart& c, const std::string& s, int x, int y, int scale, ChartColor col) {
  std::string t = printable(s);
  if (t.empty()) return;
  // stb_easy_font writes 4 vertices of 16 bytes (x, y, z floats, RGBA) per quad; no
  // glyph has more than 24 quads.
  std::vector<char> vertices(t.size() * 24 * 64 + 64);
  const int quads = stb_easy_font_print(0, 0, t.data(), nullptr, vertices.data(), static_cast<int>(vertices.size()));
  for (int q = 0; q < quads; ++q) {
    float x0 = 1e9f, y0 = 1e9f, x1 = -1e9f, y1 = -1e9f;
    for (int v = 0; v < 4; ++v) {
      float xy[2];
      std::memcpy(xy, vertices.data() + (static_cast<size_t>(q) * 4 + static_cast<size_t>(v)) * 16, sizeof xy);
      x0 = std::min(x0, xy[0]);
      x1 = std::max(x1, xy[0]);
      y0 = std::min(y0, xy[1]);
      y1 = std::max(y1, xy[1]);
    }
    fill_rect(c, x + to_px(x0) * scale, y + to_px(y0) * scale, to_px(x1 - x0) * scale, to_px(y1 - y0) * scale, col);
  }
  c.texts.push_back({t, x, y, text_width(t, scale), text_height(scale)});
}

void draw_text_centred(Chart& c, const std::string& s, int centre_x, int y, int scale, ChartColor col) {
  draw_text(c, s, centre_x - text_width(s, scale) / 2, y, scale, col);
}

void draw_text_right(Chart& c, const std::string& s, int right_x, int y, int scale, ChartColor col) {
  draw_text(c, s, right_x - text_width(s, scale), y, scale, col);
}

// ---- numbers and axes ------------------------------------------------------------

// A linear axis from 0 to `top` with a tick every `step`, step being 1, 2 or 5 x 10^k;
// or, where the values span more than kLogSpan (devices often differ by 100x), a
// log10 axis from 10^lo to 10^hi with a tick per decade.
struct LinearAxis {
  double top = 1, step = 0.2;
  bool log = false;
  int lo = 0, hi = 1;
  int ticks() const { return log ? hi - lo : std::clamp(static_cast<int>(std::llround(top / step)), 1, 20); }
  double tick(int k) const { return log ? std::pow(10.0, lo + k) : k * step; }
};
constexpr double kLogSpan = 30;

// The axis from 0 that holds max_value in at most 5 steps; 0..1 when there is nothing
// above 0 to show.
LinearAxis nice_axis(double max_value) {
  if (!std::isfinite(max_value) || max_value < 1e-200) return {};
  const double raw = max_value / 5;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10 * decade;
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * decade >= raw * (1 - 1e-9)) {
      step = m * decade;
      break;
    }
  }
  const double top = std::ceil(max_value / step * (1 - 1e-12)) * step;
  if (!std::isfinite(top) || !(top > 0)) return {max_value, max_value / 5};
  return {top, step};
}

// The axis for these values: linear from 0 (nice_axis of the largest times `headroom`),
// or log10 where the positive finite values span more than kLogSpan.
LinearAxis value_axis(const std::vector<double>& values, double headroom) {
  double lo = 0, hi = 0;
  for (double v : values)
    if (std::isfinite(v) && v > 0) {
      lo = lo == 0 ? v : std::min(lo, v);
      hi = std::max(hi, v);
    }
  if (lo > 0 && hi / lo > kLogSpan) {
    LinearAxis a;
    a.log = true;
    a.lo = static_cast<int>(std::floor(std::log10(lo)));
    a.hi = std::max(a.lo + 1, static_cast<int>(std::ceil(std::log10(hi * headroom))));
    return a;
  }
  const double top = hi * headroom;
  return nice_axis(std::isfinite(top) ? top : hi);
}

// A tick value with as many decimals as the step needs; exponent form when huge or tiny.
std::string format_tick(double v, double step) {
  if (v == 0) return "0";
  if (step == 0) {  // a decade of a log axis
    char buf[48];
    std::snprintf(buf, sizeof buf, std::fabs(v) >= 1e5 || std::fabs(v) < 1e-3 ? "%.0e" : "%g", v);
    return buf;
  }
  char buf[48];
  if (std::fabs(v) >= 1e6 || step < 1e-4) {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  } else {
    const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  }
  return buf;
}

// A measured value to about 3 significant digits.
std::string format_value(double v) {
  char buf[48];
  if (std::fabs(v) >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  } else if (std::fabs(v) >= 100) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
  } else if (std::fabs(v) >= 10) {
    std::snprintf(buf, sizeof buf, "%.1f", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f", v);
  }
  return buf;
}

// The pixel row of value v on `axis` in `plot`; values below 0 or above the top are
// held at the plot's edge.
double y_of(double v, const Rect& plot, const LinearAxis& axis) {
  const double frac =
      axis.log ? (v > 0 ? std::clamp((std::log10(v) - axis.lo) / (axis.hi - axis.lo), 0.0, 1.0) : 0.0)
               : std::clamp(v / axis.top, 0.0, 1.0);
  return plot.bottom() - frac * plot.h;
}

// The plot area of a panel: room on the left for the widest y tick label.
Rect plot_rect(const Rect& panel, const LinearAxis& axis) {
  int widest = 0;
  for (int k = 0; k <= axis.ticks(); ++k)
    widest = std::max(widest, text_width(format_tick(axis.tick(k), axis.log ? 0 : axis.step), kScale));
  const int left = panel.x + 24 + widest;
  return {left, kPlotTop, panel.right() - 36 - left, kPlotBottom - kPlotTop};
}

// Horizontal grid lines, y tick labels and the axis label above the plot.
void draw_y_axis(Chart& c, const Rect& plot, const LinearAxis& axis, const std::string& label) {
  for (int k = 0; k <= axis.ticks(); ++k) {
    const double v = axis.tick(k);
    const int y = to_px(y_of(v, plot, axis));
    if (k > 0) fill_rect(c, plot.x, y, plot.w, 1, kGrid);
    draw_text_right(c, format_tick(v, axis.log ? 0 : axis.step), plot.x - 8, y - text_height(kScale) / 2, kScale, kInk);
  }
  draw_text(c, axis.log ? label + " (log scale)" : label, plot.x, plot.y - 26, kScale, kInk);
}

// The x-axis label centred under the tick labels.
void draw_x_label(Chart& c, const Rect& plot, const std::string& label) {
  draw_text_centred(c, fit_text(label, plot.w, kScale), plot.x + plot.w / 2, plot.bottom() + 40, kScale, kInk);
}

// The left and bottom axis lines, drawn over the data.
void draw_axis_lines(Chart& c, const Rect& plot) {
  fill_rect(c, plot.x - 1, plot.y, 2, plot.h + 1, kAxis);
  fill_rect(c, plot.x - 1, plot.bottom() - 1, plot.w + 1, 2, kAxis);
}

void draw_panel_title(Chart& c, const Rect& panel, const std::string& title) {
  draw_text_centred(c, fit_text(title, panel.w - 20, kScale), panel.x + panel.w / 2, kPanelTitleY, kScale, kInk);
}

void draw_no_measurements(Chart& c, const Rect& panel) {
  draw_text_centred(c, "no measurements", panel.x + panel.w / 2, (kPlotTop + kPlotBottom) / 2, kScale, kInk);
}

// ---- the data ----------------------------------------------------------------------

// One device's step-cost curve: (T, ms per step), sorted by T.
struct Series {
  size_t device = 0;
  std::vector<std::pair<double, double>> points;
};

std::vector<Series> step_cost_series(const BenchReport& report) {
  std::vector<Series> out;
  for (size_t i = 0; i < report.devices.size(); ++i) {
    Series s{i, {}};
    for (const StepCost& sc : report.devices[i].step_cost) {
      if (sc.T > 0 && std::isfinite(sc.ms.mean)) s.points.emplace_back(sc.T, sc.ms.mean);
    }
    std::sort(s.points.begin(), s.points.end());
    if (!s.points.empty()) out.push_back(std::move(s));
  }
  return out;
}

// Grouped bars: values[group][slot] is the device devices[slot]'s bar in that group
// (NaN: none).
struct Bars {
  std::vector<std::string> groups;
  std::vector<size_t> devices;
  std::vector<std::vector<double>> values;
};

// (device index, group, value) entries as bars: groups and devices in order of first
// appearance; a device's first entry in a group counts.
using BarEntry = std::tuple<size_t, std::string, double>;

Bars make_bars(const std::vector<BarEntry>& entries) {
  Bars bars;
  for (const auto& [device, group, value] : entries) {
    if (std::find(bars.groups.begin(), bars.groups.end(), group) == bars.groups.end()) bars.groups.push_back(group);
    if (std::find(bars.devices.begin(), bars.devices.end(), device) == bars.devices.end()) bars.devices.push_back(device);
  }
  bars.values.assign(bars.groups.size(), std::vector<double>(bars.devices.size(), std::nan("")));
  for (const auto& [device, group, value] : entries) {
    const size_t g = static_cast<size_t>(std::find(bars.groups.begin(), bars.groups.end(), group) - bars.groups.begin());
    const size_t s = static_cast<size_t>(std::find(bars.devices.begin(), bars.devices.end(), device) - bars.devices.begin());
    if (std::isnan(bars.values[g][s])) bars.values[g][s] = value;
  }
  return bars;
}

Bars strategy_bars(const BenchReport& report) {
  std::vector<BarEntry> entries;
  for (size_t i = 0; i < report.devices.size(); ++i) {
    for (const StrategyRow& row : report.devices[i].strategies) {
      if (std::isfinite(row.tokens_per_s)) entries.emplace_back(i, row.strategy, row.tokens_per_s);
    }
  }
  return make_bars(entries);
}

Bars pp_tg_bars(const BenchReport& report) {
  std::vector<BarEntry> entries;
  for (size_t i = 0; i < report.devices.size(); ++i) {
    const DeviceResult& d = report.devices[i];
    if (d.pp_tokens > 0 && std::isfinite(d.pp.mean)) entries.emplace_back(i, "pp" + std::to_string(d.pp_tokens), d.pp.mean);
    if (d.tg_tokens > 0 && std::isfinite(d.tg.mean)) entries.emplace_back(i, "tg" + std::to_string(d.tg_tokens), d.tg.mean);
  }
  return make_bars(entries);
}

// Whether the chart shows anything of this device.
bool has_data(const DeviceResult& d) {
  const bool curve = std::any_of(d.step_cost.begin(), d.step_cost.end(),
                                 [](const StepCost& sc) { return sc.T > 0 && std::isfinite(sc.ms.mean); });
  const bool rows = std::any_of(d.strategies.begin(), d.strategies.end(),
                                [](const StrategyRow& r) { return std::isfinite(r.tokens_per_s); });
  const bool pp = d.pp_tokens > 0 && std::isfinite(d.pp.mean);
  const bool tg = d.tg_tokens > 0 && std::isfinite(d.tg.mean);
  return curve || rows || pp || tg;
}

// ---- the panels ----------------------------------------------------------------------

// The x axis of the step-cost panel: log2(T) from lo to hi, with a margin at each end.
struct Log2Axis {
  int lo = 0, hi = 1;
  static constexpr double kMargin = 0.3;
  double x_of(double T, const Rect& plot) const {
    return plot.x + (std::log2(T) - lo + kMargin) / (hi - lo + 2 * kMargin) * plot.w;
  }
};

Log2Axis log2_axis(const std::vector<Series>& series) {
  double lo = 1e300, hi = -1e300;
  for (const Series& s : series) {
    lo = std::min(lo, std::log2(s.points.front().first));
    hi = std::max(hi, std::log2(s.points.back().first));
  }
  Log2Axis axis{static_cast<int>(std::floor(lo)), static_cast<int>(std::ceil(hi))};
  if (axis.lo == axis.hi) {  // one T: centre it between its neighbouring powers of 2
    --axis.lo;
    ++axis.hi;
  }
  return axis;
}

std::string power_of_two_label(int k) {
  if (k >= 0) return std::to_string(1LL << std::min(k, 62));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", std::ldexp(1.0, k));
  return buf;
}

// Vertical grid lines and labels at powers of 2, every `stride`-th so the labels do not touch.
void draw_log2_ticks(Chart& c, const Rect& plot, const Log2Axis& axis) {
  int widest = 0;
  for (int k = axis.lo; k <= axis.hi; ++k) widest = std::max(widest, text_width(power_of_two_label(k), kScale));
  const double per_power = plot.w / (axis.hi - axis.lo + 2 * Log2Axis::kMargin);
  const int stride = std::max(1, static_cast<int>(std::ceil((widest + 12) / per_power)));
  for (int k = axis.lo; k <= axis.hi; k += stride) {
    const int x = to_px(axis.x_of(std::ldexp(1.0, k), plot));
    fill_rect(c, x, plot.y, 1, plot.h, kGrid);
    draw_text_centred(c, power_of_two_label(k), x, plot.bottom() + 10, kScale, kInk);
  }
}

void draw_step_cost_panel(Chart& c, const Rect& panel, const BenchReport& report) {
  draw_panel_title(c, panel, "Step cost t(T): ms per forward pass of T tokens");
  const std::vector<Series> series = step_cost_series(report);
  if (series.empty()) {
    draw_no_measurements(c, panel);
    return;
  }
  std::vector<double> all_ms;
  for (const Series& s : series) {
    for (const auto& p : s.points) all_ms.push_back(p.second);
  }
  const LinearAxis y_axis = value_axis(all_ms, 1.0);
  const Rect plot = plot_rect(panel, y_axis);
  const Log2Axis x_axis = log2_axis(series);
  draw_y_axis(c, plot, y_axis, "ms per step");
  draw_log2_ticks(c, plot, x_axis);
  draw_x_label(c, plot, "T (tokens per step)");
  for (const Series& s : series) {
    const ChartColor col = device_color(s.device);
    for (size_t i = 1; i < s.points.size(); ++i) {
      const auto& [t0, ms0] = s.points[i - 1];
      const auto& [t1, ms1] = s.points[i];
      draw_line(c, to_px(x_axis.x_of(t0, plot)), to_px(y_of(ms0, plot, y_axis)), to_px(x_axis.x_of(t1, plot)),
                to_px(y_of(ms1, plot, y_axis)), 3, col);
    }
    for (const auto& [t, ms] : s.points) {  // markers: a white ring keeps crossing lines apart
      const int x = to_px(x_axis.x_of(t, plot)), y = to_px(y_of(ms, plot, y_axis));
      fill_disc(c, x, y, 6, kBackground);
      fill_disc(c, x, y, 4, col);
    }
  }
  draw_axis_lines(c, plot);
}

// The bar's value above it: at text scale if it fits the bar, else at scale 1, else not at all.
void draw_bar_value(Chart& c, double value, int bar_x, int bar_w, int bar_top) {
  const std::string label = format_value(value);
  for (int scale : {kScale, 1}) {
    if (text_width(label, scale) <= bar_w + 4) {
      draw_text_centred(c, label, bar_x + bar_w / 2, bar_top - text_height(scale) - 4, scale, kInk);
      return;
    }
  }
}

void draw_throughput_panel(Chart& c, const Rect& panel, const BenchReport& report) {
  Bars bars = strategy_bars(report);
  const bool strategies = !bars.groups.empty();
  if (!strategies) bars = pp_tg_bars(report);
  const bool pp_tg = !strategies && !bars.groups.empty();
  draw_panel_title(c, panel, pp_tg ? "Prompt processing (pp) and generation (tg)" : "Decoding speed per strategy");
  if (bars.groups.empty()) {
    draw_no_measurements(c, panel);
    return;
  }
  std::vector<double> all_values;
  for (const auto& group : bars.values) all_values.insert(all_values.end(), group.begin(), group.end());
  const LinearAxis y_axis = value_axis(all_values, 1.1);  // room above the highest bar for its value label
  const Rect plot = plot_rect(panel, y_axis);
  draw_y_axis(c, plot, y_axis, "tokens/s");
  const double group_w = static_cast<double>(plot.w) / bars.groups.size();
  const double bar_w = 0.8 * group_w / bars.devices.size();
  for (size_t g = 0; g < bars.groups.size(); ++g) {
    const double group_x = plot.x + g * group_w;
    for (size_t s = 0; s < bars.devices.size(); ++s) {
      const double v = bars.values[g][s];
      if (std::isnan(v)) continue;
      const int x = to_px(group_x + 0.1 * group_w + s * bar_w);
      const int w = std::max(1, to_px(bar_w) - 2);
      const int top = to_px(y_of(v, plot, y_axis));
      fill_rect(c, x, top, w, plot.bottom() - top, device_color(bars.devices[s]));
      draw_bar_value(c, v, x, w, top);
    }
    const std::string label = fit_text(bars.groups[g], static_cast<int>(group_w) - 4, kScale);
    draw_text_centred(c, label, to_px(group_x + group_w / 2), plot.bottom() + 10, kScale, kInk);
  }
  draw_x_label(c, plot, strategies ? "decoding strategy" : "test (tokens)");
  draw_axis_lines(c, plot);
}

// ---- the legend ----------------------------------------------------------------------

struct LegendItem {
  std::string text;
  ChartColor color;
  int x = 0, y = 0;
};

// Every device by label, in rows that wrap at the image's width, from kLegendTop down.
std::vector<LegendItem> layout_legend(const BenchReport& report) {
  std::vector<LegendItem> items;
  int x = 24, y = kLegendTop;
  for (size_t i = 0; i < report.devices.size(); ++i) {
    const DeviceResult& d = report.devices[i];
    const bool data = has_data(d);
    const std::string suffix = data ? "" : (d.error.empty() ? ": no data" : ": failed");
    const std::string label = d.label.empty() ? "device " + std::to_string(i) : d.label;
    const std::string text = fit_text(label, kLegendMaxText - text_width(suffix, kScale), kScale) + suffix;
    const int w = kSwatch + 8 + text_width(text, kScale);
    if (x > 24 && x + w > kWidth - 24) {
      x = 24;
      y += kLegendRow;
    }
    items.push_back({text, data ? device_color(i) : kFailed, x, y});
    x += w + 28;
  }
  return items;
}

void draw_legend(Chart& c, const std::vector<LegendItem>& items) {
  for (const LegendItem& item : items) {
    fill_rect(c, item.x, item.y, kSwatch, kSwatch, item.color);
    draw_text(c, item.text, item.x + kSwatch + 8, item.y + (kSwatch - text_height(kScale)) / 2, kScale, kInk);
  }
}

}  // namespace

ChartColor device_color(size_t device_index) { return kPalette[device_index % std::size(kPalette)]; }

Chart draw_bench_chart(const BenchReport& report) {
  const std::vector<LegendItem> legend = layout_legend(report);
  const int legend_bottom = legend.empty() ? kLegendTop : legend.back().y + kLegendRow;
  Chart c;
  c.width = kWidth;
  c.height = std::max(kBaseHeight, legend_bottom + 18);
  c.rgb.assign(static_cast<size_t>(c.width) * static_cast<size_t>(c.height) * 3, 255);
  const std::string title = report.model.empty() ? "fafo bench" : "fafo bench: " + report.model;
  draw_text_centred(c, fit_text(title, kWidth - 40, kScale), kWidth / 2, kTitleY, kScale, kInk);
  draw_step_cost_panel(c, {0, 0, kWidth / 2, kPlotBottom}, report);
  draw_throughput_panel(c, {kWidth / 2, 0, kWidth / 2, kPlotBottom}, report);
  draw_legend(c, legend);
  return c;
}

std::vector<uint8_t> encode_png(const Chart& chart) {
  if (chart.width <= 0 || chart.height <= 0 ||
      chart.rgb.size() != static_cast<size_t>(chart.width) * static_cast<size_t>(chart.height) * 3) {
    throw std::runtime_error("encode_png: the chart is empty or its pixels do not match its size");
  }
  std::vector<uint8_t> png;
  auto append = [](void* context, void* data, int size) {
    auto* out = static_cast<std::vector<uint8_t>*>(context);
    const auto* bytes = static_cast<const uint8_t*>(data);
    out->insert(out->end(), bytes, bytes + size);
  };
  if (!stbi_write_png_to_func(append, &png, chart.width, chart.height, 3, chart.rgb.data(), chart.width * 3) ||
      png.empty()) {
    throw std::runtime_error("encode_png: stb_image_write could not encode the chart");
  }
  return png;
}

void write_bench_chart(const BenchReport& report, const std::string& path) {
  const std::vector<uint8_t> png = encode_png(draw_bench_chart(report));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write chart " + path + ": " + std::strerror(errno));
  out.write(reinterpret_cast<const char*>(png.data()), static_cast<std::streamsize>(png.size()));
  out.close();
  if (!out) throw std::runtime_error("cannot write chart " + path);
}

}  // namespace fafo::bench
