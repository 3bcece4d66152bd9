// The Bench view: `fafo bench --devices` run by a BenchSession (bench_session.h) and
// plotted. Bench setup: the model, a checkbox per device of this build, the tests (pp,
// tg, repetitions, the step sizes of t(T)), optional prompts and strategies, Run and
// Cancel, Save report. Bench results: report_markdown's tables, t(T) per device on a
// log2 T axis, and tokens/s per strategy (pp and tg when no strategy ran) as bars
// grouped by test, one colour per device in both plots and their legends. Bench log:
// what the run printed, as it printed it.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <stdexcept>
#include <utility>

#include "fafo/decoding.h"
#include "bench_report.h"
#include "panels.h"

namespace fafo::studio {

namespace {

const ImU32 kAxis = IM_COL32(150, 150, 150, 255);
const ImU32 kGrid = IM_COL32(70, 70, 76, 255);

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

// ---- setup ------------------------------------------------------------------------------

// A line of greyed text, wrapped at the panel's edge.
void disabled_note(const char* text) {
  ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
  ImGui::TextWrapped("%s", text);
  ImGui::PopStyleColor();
}

// "1, 2,4" -> {1, 2, 4}; "" -> {} (no curve). Throws std::invalid_argument naming an
// item that is not a step size.
std::vector<int32_t> parse_curve(const std::string& text) {
  std::vector<int32_t> out;
  size_t from = 0;
  while (from <= text.size()) {
    const size_t comma = std::min(text.find(',', from), text.size());
    const std::string item = trim(text.substr(from, comma - from));
    from = comma + 1;
    if (item.empty()) continue;
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (*end != '\0' || v < 1 || v > 512)
      throw std::invalid_argument("t(T) step sizes: '" + item + "' is not a whole number from 1 to 512");
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

std::string curve_text(const std::vector<int32_t>& curve) {
  std::string s;
  for (int32_t T : curve) {
    if (!s.empty()) s += ',';
    s += std::to_string(T);
  }
  return s;
}

// The model a run measures: the one open in the chat view, else the path typed here.
std::string bench_model(const StudioState& s) { return s.ev.has_model ? s.ev.model_path : s.bench_setup.model_path; }

// Starts a run on `targets` with the setup's values (the strategies take W, N, G, k and
// the KV policy from the Decoding panel; the model its context and KV cache type from
// the Model panel). What stops it goes to setup.error.
void start_bench(StudioState& s, std::vector<bench::BenchTarget> targets) {
  BenchSetup& b = s.bench_setup;
  b.error.clear();
  BenchPlan plan;
  plan.model = bench_model(s);
  plan.config = b.config;
  plan.config.decoding = s.settings.generation.decoding;
  plan.config.kv = s.settings.generation.kv;
  plan.n_ctx = s.settings.open.n_ctx;
  plan.kv_type = s.settings.open.kv_type;
  try {
    plan.config.curve = parse_curve(b.curve);
    plan.config.prompts.clear();
    if (!b.prompts_file.empty()) {
      plan.config.decoding.validate();
      plan.config.kv.validate();
      plan.config.prompts = bench::read_bench_prompts(b.prompts_file, b.n_prompts);
    }
  } catch (const std::exception& e) {
    b.error = e.what();
    return;
  }
  for (bench::BenchTarget& t : targets) t.spec.threads = b.threads;
  plan.targets = std::move(targets);
  b.error = s.bench.start(std::move(plan));
  if (b.error.empty()) {
    b.saved.clear();
    b.save_error.clear();
    s.bench_log_seen = 0;
  }
}

// Lists every device once, off the UI thread (a GPU backend's list can take a while),
// and takes the list when it is ready.
void poll_device_list(BenchSetup& b) {
  if (!b.listing.valid() && b.targets.empty() && b.targets_error.empty())
    b.listing = std::async(std::launch::async, [] { return bench::resolve_bench_targets("all", 0); });
  if (!b.listing.valid() || b.listing.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  try {
    b.targets = b.listing.get();
  } catch (const std::exception& e) {
    b.targets_error = e.what();
  }
  if (b.choose_all)
    for (const bench::BenchTarget& t : b.targets) b.chosen.push_back(t.label);
  b.choose_all = false;
}

bool is_chosen(const BenchSetup& b, const std::string& label) {
  return std::find(b.chosen.begin(), b.chosen.end(), label) != b.chosen.end();
}

void model_section(StudioState& s) {
  BenchSetup& b = s.bench_setup;
  ImGui::TextUnformatted("Model");
  if (s.ev.has_model) {
    ImGui::TextWrapped("%s", s.ev.model_path.c_str());
    disabled_note("(open in the chat view; context and KV cache type from its Model panel)");
    return;
  }
  ImGui::SetNextItemWidth(-1.0f);
  ImGui::InputTextWithHint("##model", "path of a GGUF file", &b.model_path);
  const bool have_recent = s.recent && !s.recent->paths().empty();
  ImGui::BeginDisabled(!have_recent);
  ImGui::SetNextItemWidth(-1.0f);
  if (ImGui::BeginCombo("##recent", have_recent ? "pick a recent model" : "no recent models")) {
    if (s.recent)
      for (const std::string& p : s.recent->paths())
        if (ImGui::Selectable(p.c_str(), p == b.model_path)) b.model_path = p;
    ImGui::EndCombo();
  }
  ImGui::EndDisabled();
}

void devices_section(BenchSetup& b) {
  ImGui::TextUnformatted("Devices");
  if (!b.targets_error.empty()) ImGui::TextColored(kErrorText, "%s", b.targets_error.c_str());
  else if (b.targets.empty()) ImGui::TextDisabled("looking for devices...");
  for (const bench::BenchTarget& t : b.targets) {
    bool on = is_chosen(b, t.label);
    ImGui::PushID(t.label.c_str());
    if (ImGui::Checkbox(t.label.c_str(), &on)) {
      if (on) b.chosen.push_back(t.label);
      else b.chosen.erase(std::remove(b.chosen.begin(), b.chosen.end(), t.label), b.chosen.end());
    }
    ImGui::PopID();
    ImGui::SameLine();
    ImGui::TextDisabled("%s", t.device_name.c_str());
  }
  ImGui::InputInt("CPU threads (0: all)", &b.threads);
  b.threads = std::clamp(b.threads, 0, 1024);
}

void tests_section(BenchSetup& b) {
  bench::BenchConfig& c = b.config;
  ImGui::TextUnformatted("Tests");
  ImGui::InputInt("pp tokens (0: skip)", &c.pp, 64, 256);
  c.pp = std::clamp(c.pp, 0, 1 << 20);
  ImGui::InputInt("tg tokens (0: skip)", &c.tg, 16, 128);
  c.tg = std::clamp(c.tg, 0, 1 << 20);
  ImGui::InputInt("repetitions", &c.repetitions, 1, 5);
  c.repetitions = std::clamp(c.repetitions, 1, 1000);
  ImGui::InputTextWithHint("t(T) step sizes", "empty: skip", &b.curve);
}

void strategies_section(BenchSetup& b) {
  bench::BenchConfig& c = b.config;
  ImGui::TextUnformatted("Strategies side by side (optional)");
  ImGui::InputTextWithHint("prompts (JSONL)", "empty: skip", &b.prompts_file);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("MT-Bench question.jsonl, GSM8K test.jsonl, or {\"prompt\": ...} lines");
  ImGui::BeginDisabled(b.prompts_file.empty());
  ImGui::InputInt("prompts to use", &b.n_prompts);
  b.n_prompts = std::clamp(b.n_prompts, 1, 100000);
  ImGui::InputInt("new tokens per prompt", &c.n_generate, 16, 128);
  c.n_generate = std::clamp(c.n_generate, 1, 1 << 20);
  std::vector<std::string> chosen;
  for (const char* name : strategy_names()) {
    const bool ar = std::string(name) == "ar";  // the reference the others are compared with: always run
    bool on = ar || std::find(c.strategies.begin(), c.strategies.end(), name) != c.strategies.end();
    ImGui::BeginDisabled(ar);
    ImGui::Checkbox(name, &on);
    ImGui::EndDisabled();
    ImGui::SameLine();
    if (on) chosen.push_back(name);
  }
  ImGui::NewLine();
  c.strategies = chosen;
  disabled_note("W, N, G, k and the KV policy: the chat view's Decoding panel");
  ImGui::EndDisabled();
}

const char* status_text(const BenchSnapshot& b) {
  switch (b.status) {
    case BenchStatus::Idle: return "no run yet";
    case BenchStatus::Running: return "running";
    case BenchStatus::Done: return "done";
    case BenchStatus::Cancelled: return "cancelled";
    case BenchStatus::Failed: return "failed";
  }
  return "";
}

void run_section(StudioState& s) {
  BenchSetup& b = s.bench_setup;
  const BenchSnapshot& now = s.bench_now;
  const bool running = now.status == BenchStatus::Running;
  std::vector<bench::BenchTarget> targets;
  for (const bench::BenchTarget& t : b.targets)
    if (is_chosen(b, t.label)) targets.push_back(t);
  ImGui::BeginDisabled(running || targets.empty() || bench_model(s).empty());
  if (ImGui::Button("Run")) start_bench(s, std::move(targets));
  ImGui::EndDisabled();
  ImGui::SameLine();
  ImGui::BeginDisabled(!running);
  if (ImGui::Button("Cancel")) s.bench.cancel();
  ImGui::EndDisabled();
  ImGui::SameLine();
  if (running) ImGui::Text("device %zu of %zu: %s", now.device, now.devices, now.label.c_str());
  else ImGui::TextUnformatted(status_text(now));
  if (s.ev.activity == EngineView::Activity::Generating)
    ImGui::TextColored(kNoteText, "the chat view is generating: it slows the measurements down");
  if (!b.error.empty()) {
    ImGui::PushTextWrapPos(0.0f);
    ImGui::TextColored(kErrorText, "%s", b.error.c_str());
    ImGui::PopTextWrapPos();
  }
}

void save_section(StudioState& s) {
  BenchSetup& b = s.bench_setup;
  ImGui::TextUnformatted("Report");
  ImGui::InputText("prefix", &b.prefix);
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("writes PREFIX.md, PREFIX.csv, PREFIX.json and PREFIX.png");
  ImGui::BeginDisabled(s.bench_now.report.devices.empty());
  if (ImGui::Button("Save report")) {
    try {
      b.saved = s.bench.save(b.prefix);
      b.save_error.clear();
    } catch (const std::exception& e) {
      b.saved.clear();
      b.save_error = e.what();
    }
  }
  ImGui::EndDisabled();
  ImGui::PushTextWrapPos(0.0f);
  for (const std::string& p : b.saved) ImGui::TextWrapped("wrote %s", p.c_str());
  if (!b.save_error.empty()) ImGui::TextColored(kErrorText, "%s", b.save_error.c_str());
  ImGui::PopTextWrapPos();
}

// ---- results: the tables ----------------------------------------------------------------

// A Markdown table: its header's cells and its rows' (the rule line left out).
struct MarkdownTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

std::vector<std::string> table_cells(const std::string& line) {
  std::vector<std::string> cells;
  for (size_t from = 1; from < line.size();) {  // after the leading '|'
    const size_t bar = line.find('|', from);
    if (bar == std::string::npos) break;
    cells.push_back(trim(line.substr(from, bar - from)));
    from = bar + 1;
  }
  return cells;
}

bool is_rule(const std::vector<std::string>& cells) {
  for (const std::string& c : cells)
    if (c.empty() || c.find_first_not_of("-:") != std::string::npos) return false;
  return !cells.empty();
}

// The tables of report_markdown's text (cells never hold a '|': it writes them as '/').
std::vector<MarkdownTable> markdown_tables(const std::string& md) {
  std::vector<MarkdownTable> tables;
  bool in_table = false;
  size_t from = 0;
  while (from < md.size()) {
    const size_t end = std::min(md.find('\n', from), md.size());
    const std::string line = md.substr(from, end - from);
    from = end + 1;
    if (line.empty() || line[0] != '|') {
      in_table = false;
      continue;
    }
    std::vector<std::string> cells = table_cells(line);
    if (!in_table) tables.push_back({std::move(cells), {}});
    else if (!is_rule(cells)) tables.back().rows.push_back(std::move(cells));
    in_table = true;
  }
  return tables;
}

float table_height(const MarkdownTable& t) {
  const float row = ImGui::GetTextLineHeight() + 2.0f * ImGui::GetStyle().CellPadding.y + 1.0f;
  return static_cast<float>(t.rows.size() + 1) * row + ImGui::GetStyle().ItemSpacing.y + 2.0f;
}

void draw_table(const char* id, const MarkdownTable& t) {
  const int columns = static_cast<int>(t.header.size());
  if (columns == 0) return;
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit;
  if (!ImGui::BeginTable(id, columns, flags)) return;
  for (const std::string& h : t.header) ImGui::TableSetupColumn(h.c_str());
  ImGui::TableHeadersRow();
  for (const std::vector<std::string>& row : t.rows) {
    ImGui::TableNextRow();
    for (int c = 0; c < columns && c < static_cast<int>(row.size()); ++c) {
      ImGui::TableSetColumnIndex(c);
      ImGui::TextUnformatted(row[static_cast<size_t>(c)].c_str());
    }
  }
  ImGui::EndTable();
}

// ---- results: the plots -----------------------------------------------------------------

std::string format_value(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// Ticks from 0 to at least `top`: 1, 2 or 5 times a power of ten apart, five or so.
std::vector<double> nice_ticks(double top) {
  if (!(top > 0.0) || !std::isfinite(top)) top = 1.0;
  const double raw = top / 5.0;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10.0 * power;
  for (double m : {1.0, 2.0, 5.0})
    if (raw <= m * power) {
      step = m * power;
      break;
    }
  std::vector<double> ticks;
  for (int i = 0; ticks.empty() || ticks.back() < top * (1.0 - 1e-9); ++i) ticks.push_back(step * i);
  return ticks;
}

// A plot's data area in pixels, and the value its top stands for (the bottom is 0).
struct PlotFrame {
  ImVec2 lo, hi;  // top-left, bottom-right
  double top = 1.0;
  float y(double v) const { return hi.y - static_cast<float>(v / top) * (hi.y - lo.y); }
};

// Draws a plot's frame in the rectangle at `origin`: the title above, the y axis from 0
// with tick labels and grid lines, the x axis, and `x_title` under the room left for
// the x tick labels (the caller draws those). Returns the data area.
PlotFrame plot_frame(ImDrawList* d, ImVec2 origin, ImVec2 size, const std::string& title, const char* x_title,
                     double max_value) {
  const std::vector<double> ticks = nice_ticks(max_value);
  const float line = ImGui::GetTextLineHeight();
  float label_w = 0.0f;
  for (double t : ticks) label_w = std::max(label_w, ImGui::CalcTextSize(format_value(t).c_str()).x);
  PlotFrame f;
  f.lo = ImVec2(origin.x + label_w + 10.0f, origin.y + line + 8.0f);
  f.hi = ImVec2(origin.x + size.x - 10.0f, origin.y + size.y - 2.0f * line - 8.0f);
  f.top = ticks.back();
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  d->AddText(origin, text, title.c_str());
  for (double t : ticks) {
    const float y = f.y(t);
    if (t > 0.0) d->AddLine(ImVec2(f.lo.x, y), ImVec2(f.hi.x, y), kGrid);
    d->AddLine(ImVec2(f.lo.x - 4.0f, y), ImVec2(f.lo.x, y), kAxis);
    const std::string label = format_value(t);
    d->AddText(ImVec2(f.lo.x - 6.0f - ImGui::CalcTextSize(label.c_str()).x, y - line * 0.5f), text, label.c_str());
  }
  d->AddLine(f.lo, ImVec2(f.lo.x, f.hi.y), kAxis);
  d->AddLine(ImVec2(f.lo.x, f.hi.y), f.hi, kAxis);
  const float title_w = ImGui::CalcTextSize(x_title).x;  // "": none
  d->AddText(ImVec2((f.lo.x + f.hi.x - title_w) * 0.5f, f.hi.y + line + 6.0f), ImGui::GetColorU32(ImGuiCol_TextDisabled),
             x_title);
  return f;
}

struct LegendEntry {
  std::string label;
  ImU32 colour;
};

// A legend in a top corner of the data area: a colour square and a label per device.
void legend(ImDrawList* d, const PlotFrame& f, const std::vector<LegendEntry>& entries, bool right) {
  if (entries.empty()) return;
  const float line = ImGui::GetTextLineHeight(), square = line * 0.7f, pad = 5.0f;
  float w = 0.0f;
  for (const LegendEntry& e : entries) w = std::max(w, ImGui::CalcTextSize(e.label.c_str()).x);
  w += square + 3.0f * pad;
  const float h = static_cast<float>(entries.size()) * line + 2.0f * pad;
  const ImVec2 at(right ? f.hi.x - w - 6.0f : f.lo.x + 6.0f, f.lo.y + 4.0f);
  d->AddRectFilled(at, ImVec2(at.x + w, at.y + h), IM_COL32(24, 24, 28, 225));
  d->AddRect(at, ImVec2(at.x + w, at.y + h), kGrid);
  for (size_t i = 0; i < entries.size(); ++i) {
    const float y = at.y + pad + static_cast<float>(i) * line;
    const float sq_y = y + (line - square) * 0.5f;
    d->AddRectFilled(ImVec2(at.x + pad, sq_y), ImVec2(at.x + pad + square, sq_y + square), entries[i].colour);
    d->AddText(ImVec2(at.x + 2.0f * pad + square, y), ImGui::GetColorU32(ImGuiCol_Text), entries[i].label.c_str());
  }
}

// t(T) per device: ms per step over T on a log2 axis, mean ± sd.
void step_cost_plot(const bench::BenchReport& r, ImVec2 size) {
  ImDrawList* d = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton("step_cost", size);
  const bool hovered = ImGui::IsItemHovered();
  std::vector<int32_t> ts;
  double max_ms = 0.0;
  std::vector<LegendEntry> entries;
  for (size_t i = 0; i < r.devices.size(); ++i) {
    const bench::DeviceResult& dev = r.devices[i];
    if (!dev.error.empty() || dev.step_cost.empty()) continue;
    entries.push_back({dev.label, series_colour(i)});
    for (const bench::StepCost& c : dev.step_cost) {
      if (c.T > 0 && std::find(ts.begin(), ts.end(), c.T) == ts.end()) ts.push_back(c.T);
      if (std::isfinite(c.ms.mean + c.ms.sd)) max_ms = std::max(max_ms, c.ms.mean + c.ms.sd);
    }
  }
  if (ts.empty()) {
    d->AddText(origin, ImGui::GetColorU32(ImGuiCol_TextDisabled), "t(T): no step sizes measured");
    return;
  }
  std::sort(ts.begin(), ts.end());
  const PlotFrame f = plot_frame(d, origin, size, "step cost t(T), ms per step after a 128-token context",
                                 "T: tokens per step (log2 scale)", max_ms * 1.05);
  const double l0 = std::log2(static_cast<double>(ts.front())), l1 = std::log2(static_cast<double>(ts.back()));
  const float pad = 16.0f;
  auto x_of = [&](int32_t T) {
    if (l1 <= l0) return (f.lo.x + f.hi.x) * 0.5f;
    return f.lo.x + pad + static_cast<float>((std::log2(static_cast<double>(T)) - l0) / (l1 - l0)) * (f.hi.x - f.lo.x - 2.0f * pad);
  };
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  float last_label_end = -1e9f;
  for (int32_t T : ts) {
    const float x = x_of(T);
    d->AddLine(ImVec2(x, f.hi.y), ImVec2(x, f.hi.y + 4.0f), kAxis);
    const std::string label = std::to_string(T);
    const float w = ImGui::CalcTextSize(label.c_str()).x;
    if (x - w * 0.5f > last_label_end + 4.0f) {  // labels that would overlap the previous one are left out
      d->AddText(ImVec2(x - w * 0.5f, f.hi.y + 5.0f), text, label.c_str());
      last_label_end = x + w * 0.5f;
    }
  }
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  float best = 10.0f * 10.0f;
  std::string tip;
  for (size_t i = 0; i < r.devices.size(); ++i) {
    const bench::DeviceResult& dev = r.devices[i];
    if (!dev.error.empty() || dev.step_cost.empty()) continue;
    std::vector<bench::StepCost> points = dev.step_cost;
    std::sort(points.begin(), points.end(), [](const bench::StepCost& a, const bench::StepCost& b) { return a.T < b.T; });
    std::vector<ImVec2> line;
    for (const bench::StepCost& c : points) {
      if (!std::isfinite(c.ms.mean) || !std::isfinite(c.ms.sd) || c.T <= 0) continue;
      const ImVec2 p(x_of(c.T), f.y(c.ms.mean));
      line.push_back(p);
      if (c.ms.sd > 0.0) d->AddLine(ImVec2(p.x, f.y(c.ms.mean - c.ms.sd)), ImVec2(p.x, f.y(c.ms.mean + c.ms.sd)), series_colour(i));
      const float dx = mouse.x - p.x, dy = mouse.y - p.y;
      if (hovered && dx * dx + dy * dy < best) {
        best = dx * dx + dy * dy;
        char b[160];
        std::snprintf(b, sizeof b, "%s: t(%d) = %.3f ± %.3f ms (%.4f ms per token)", dev.label.c_str(), c.T, c.ms.mean,
                      c.ms.sd, c.ms.mean / c.T);
        tip = b;
      }
    }
    d->AddPolyline(line.data(), static_cast<int>(line.size()), series_colour(i), ImDrawFlags_None, 2.0f);
    for (const ImVec2& p : line) d->AddCircleFilled(p, 3.5f, series_colour(i));
  }
  legend(d, f, entries, false);
  if (!tip.empty()) ImGui::SetTooltip("%s", tip.c_str());
}

// Tokens/s bars: a group per strategy (or pp and tg when no strategy ran), a bar per
// device in its colour.
struct BarGroups {
  std::string title;
  std::vector<std::string> groups;
  std::vector<std::vector<double>> values;  // [group][device in the report]; < 0: not measured
};

BarGroups rate_groups(const bench::BenchReport& r) {
  BarGroups g;
  const size_t n = r.devices.size();
  for (const bench::DeviceResult& dev : r.devices)
    for (const bench::StrategyRow& s : dev.strategies)
      if (dev.error.empty() && std::find(g.groups.begin(), g.groups.end(), s.strategy) == g.groups.end())
        g.groups.push_back(s.strategy);
  if (!g.groups.empty()) {
    g.title = "decoding speed per strategy, tokens/s (greedy, the same prompts)";
    for (const std::string& name : g.groups) {
      std::vector<double> v(n, -1.0);
      for (size_t i = 0; i < n; ++i)
        for (const bench::StrategyRow& s : r.devices[i].strategies)
          if (r.devices[i].error.empty() && s.strategy == name) v[i] = s.tokens_per_s;
      g.values.push_back(std::move(v));
    }
    return g;
  }
  g.title = "prompt processing and generation, tokens/s";
  std::vector<double> pp(n, -1.0), tg(n, -1.0);
  std::string pp_name, tg_name;
  for (size_t i = 0; i < n; ++i) {
    const bench::DeviceResult& dev = r.devices[i];
    if (!dev.error.empty()) continue;
    if (dev.pp_tokens > 0) {
      pp[i] = dev.pp.mean;
      if (pp_name.empty()) pp_name = "pp" + std::to_string(dev.pp_tokens);
    }
    if (dev.tg_tokens > 0) {
      tg[i] = dev.tg.mean;
      if (tg_name.empty()) tg_name = "tg" + std::to_string(dev.tg_tokens);
    }
  }
  if (!pp_name.empty()) {
    g.groups.push_back(pp_name);
    g.values.push_back(pp);
  }
  if (!tg_name.empty()) {
    g.groups.push_back(tg_name);
    g.values.push_back(tg);
  }
  return g;
}

void rate_bars(const bench::BenchReport& r, ImVec2 size) {
  ImDrawList* d = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton("rates", size);
  const bool hovered = ImGui::IsItemHovered();
  BarGroups g = rate_groups(r);
  // The devices with a bar somewhere get a slot in every group, in report order.
  std::vector<size_t> shown;
  double max_value = 0.0;
  for (size_t i = 0; i < r.devices.size(); ++i) {
    bool any = false;
    for (std::vector<double>& v : g.values) {
      if (!std::isfinite(v[i])) v[i] = -1.0;  // not drawn
      any = any || v[i] >= 0.0;
      max_value = std::max(max_value, v[i]);
    }
    if (any) shown.push_back(i);
  }
  if (shown.empty()) {
    d->AddText(origin, ImGui::GetColorU32(ImGuiCol_TextDisabled), "tokens/s: no pp, tg or strategy measured");
    return;
  }
  const PlotFrame f = plot_frame(d, origin, size, g.title, "", max_value * 1.1);
  const float group_w = (f.hi.x - f.lo.x) / static_cast<float>(g.groups.size());
  const float bar_w = group_w * 0.8f / static_cast<float>(shown.size());
  const ImU32 text = ImGui::GetColorU32(ImGuiCol_Text);
  const ImVec2 mouse = ImGui::GetIO().MousePos;
  std::string tip;
  for (size_t k = 0; k < g.groups.size(); ++k) {
    const float gx = f.lo.x + static_cast<float>(k) * group_w;
    const float name_w = ImGui::CalcTextSize(g.groups[k].c_str()).x;
    d->AddText(ImVec2(gx + (group_w - name_w) * 0.5f, f.hi.y + 5.0f), text, g.groups[k].c_str());
    for (size_t j = 0; j < shown.size(); ++j) {
      const size_t i = shown[j];
      const double v = g.values[k][i];
      if (v < 0.0) continue;
      const float x0 = gx + group_w * 0.1f + static_cast<float>(j) * bar_w, x1 = x0 + bar_w - 2.0f;
      const float y0 = f.y(v);
      d->AddRectFilled(ImVec2(x0, y0), ImVec2(x1, f.hi.y), series_colour(i));
      char value[32];
      std::snprintf(value, sizeof value, v >= 100.0 ? "%.0f" : "%.1f", v);
      const float vw = ImGui::CalcTextSize(value).x;
      if (vw <= bar_w + 4.0f) d->AddText(ImVec2((x0 + x1 - vw) * 0.5f, y0 - ImGui::GetTextLineHeight() - 1.0f), text, value);
      if (hovered && mouse.x >= x0 && mouse.x < x1 && mouse.y >= f.lo.y && mouse.y <= f.hi.y)
        tip = r.devices[i].label + ", " + g.groups[k] + ": " + value + " tokens/s";
    }
  }
  std::vector<LegendEntry> entries;
  for (size_t i : shown) entries.push_back({r.devices[i].label, series_colour(i)});
  legend(d, f, entries, true);
  if (!tip.empty()) ImGui::SetTooltip("%s", tip.c_str());
}

void results_status(const BenchSnapshot& b) {
  const std::string model = b.report.model.empty() ? "" : b.report.model + ": ";
  switch (b.status) {
    case BenchStatus::Idle:
      ImGui::TextDisabled("no run yet: choose the devices in Bench setup and Run");
      break;
    case BenchStatus::Running:
      ImGui::Text("%smeasuring device %zu of %zu: %s", model.c_str(), b.device, b.devices, b.label.c_str());
      break;
    case BenchStatus::Done:
      ImGui::Text("%sdone, %zu devices", model.c_str(), b.report.devices.size());
      break;
    case BenchStatus::Cancelled:
      ImGui::TextColored(kNoteText, "%scancelled after %zu of %zu devices", model.c_str(), b.report.devices.size(), b.devices);
      break;
    case BenchStatus::Failed:
      ImGui::PushTextWrapPos(0.0f);
      ImGui::TextColored(kErrorText, "%s%s", model.c_str(), b.error.c_str());
      ImGui::PopTextWrapPos();
      break;
  }
}

}  // namespace

void init_bench_view(StudioState& s, const AppOptions& o) {
  BenchSetup& b = s.bench_setup;
  b.model_path = o.open.path;
  b.threads = o.open.backend.threads;
  b.config = o.bench_config;
  b.curve = curve_text(o.bench_config.curve);
  b.prompts_file = o.bench_prompts;
  b.n_prompts = o.bench_n_prompts;
  if (o.bench_devices.empty()) return;
  std::vector<bench::BenchTarget> targets;
  try {
    targets = bench::resolve_bench_targets(o.bench_devices, b.threads);
  } catch (const std::exception& e) {
    b.error = e.what();
    if (b.error.rfind("--devices", 0) == 0) b.error.replace(0, 9, "--bench");  // the studio's flag
    return;
  }
  b.choose_all = false;
  for (const bench::BenchTarget& t : targets) b.chosen.push_back(t.label);
  start_bench(s, std::move(targets));
}

void draw_bench_setup_panel(StudioState& s) {
  if (begin_panel(s, "Bench setup")) {
    BenchSetup& b = s.bench_setup;
    poll_device_list(b);
    ImGui::PushItemWidth(ImGui::GetContentRegionAvail().x * 0.4f);
    model_section(s);
    ImGui::Separator();
    devices_section(b);
    ImGui::Separator();
    tests_section(b);
    ImGui::Separator();
    strategies_section(b);
    ImGui::Separator();
    run_section(s);
    ImGui::Separator();
    save_section(s);
    ImGui::PopItemWidth();
    report_items(s, static_cast<int64_t>(b.targets.size()));
  }
  end_panel();
}

void draw_bench_results_panel(StudioState& s) {
  if (begin_panel(s, "Bench results")) {
    const BenchSnapshot& b = s.bench_now;
    results_status(b);
    if (b.report.devices.empty()) {
      if (b.status == BenchStatus::Running) ImGui::TextDisabled("the figures appear here as each device finishes");
      report_items(s, 0);
    } else {
      const std::vector<MarkdownTable> tables = markdown_tables(bench::report_markdown(b.report));
      float height = 0.0f;
      for (const MarkdownTable& t : tables) height += table_height(t);
      ImGui::BeginChild("tables", ImVec2(0.0f, std::min(height + 4.0f, ImGui::GetContentRegionAvail().y * 0.45f)), false,
                        ImGuiWindowFlags_HorizontalScrollbar);
      for (size_t i = 0; i < tables.size(); ++i) draw_table(i == 0 ? "devices" : "comparison", tables[i]);
      ImGui::EndChild();
      const ImVec2 avail = ImGui::GetContentRegionAvail();
      const float spacing = ImGui::GetStyle().ItemSpacing.x;
      const ImVec2 plot((avail.x - spacing) * 0.5f, std::max(avail.y, 160.0f));
      step_cost_plot(b.report, plot);
      ImGui::SameLine();
      rate_bars(b.report, plot);
      report_items(s, static_cast<int64_t>(b.report.devices.size()));
    }
  }
  end_panel();
}

void draw_bench_log_panel(StudioState& s) {
  if (begin_panel(s, "Bench log")) {
    const std::vector<std::string>& log = s.bench_now.log;
    if (log.empty()) ImGui::TextDisabled("what the run prints appears here as it is measured");
    ImGui::BeginChild("log", ImVec2(0.0f, 0.0f), false, ImGuiWindowFlags_HorizontalScrollbar);
    ImGuiListClipper clipper;
    clipper.Begin(static_cast<int>(log.size()));
    while (clipper.Step())
      for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) ImGui::TextUnformatted(log[static_cast<size_t>(i)].c_str());
    if (log.size() != s.bench_log_seen) {  // new lines: keep the end in view
      ImGui::SetScrollHereY(1.0f);
      s.bench_log_seen = log.size();
    }
    ImGui::EndChild();
    report_items(s, static_cast<int64_t>(log.size()));
  }
  end_panel();
}

}  // namespace fafo::studio
