#include "layout.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>

namespace fafo::studio {

namespace {

struct Placement {
  const char* name;
  PanelRect rect;
};

// Chat: model and decoding settings left, the conversation in the middle, how the
// reply was produced on the right.
const Placement kChat[] = {
    {"Model", {0.0f, 0.0f, 0.27f, 0.40f}},
    {"Decoding", {0.0f, 0.40f, 0.27f, 0.60f}},
    {"Chat", {0.27f, 0.0f, 0.45f, 1.0f}},
    {"Transcript", {0.72f, 0.0f, 0.28f, 1.0f}},
};

// Debugger: controls and charts left, the step (window, candidates, KV) in the middle,
// the pool and the transcript right.
const Placement kDebugger[] = {
    {"Controls", {0.0f, 0.0f, 0.22f, 0.26f}},
    {"Charts", {0.0f, 0.26f, 0.22f, 0.74f}},
    {"2D window", {0.22f, 0.0f, 0.40f, 0.26f}},
    {"Candidates", {0.22f, 0.26f, 0.40f, 0.26f}},
    {"KV map", {0.22f, 0.52f, 0.40f, 0.48f}},
    {"Candidate pool", {0.62f, 0.0f, 0.38f, 0.52f}},
    {"Transcript", {0.62f, 0.52f, 0.38f, 0.48f}},
};

// Bench: the setup left, the results (table and plots) right with the run's log under them.
const Placement kBench[] = {
    {"Bench setup", {0.0f, 0.0f, 0.28f, 1.0f}},
    {"Bench results", {0.28f, 0.0f, 0.72f, 0.70f}},
    {"Bench log", {0.28f, 0.70f, 0.72f, 0.30f}},
};

std::span<const Placement> placements(View view) {
  switch (view) {
    case View::Chat: return kChat;
    case View::Debugger: return kDebugger;
    case View::Bench: return kBench;
  }
  return {};
}

std::vector<std::string> names(std::span<const Placement> table) {
  std::vector<std::string> out;
  for (const Placement& p : table) out.push_back(p.name);
  return out;
}

}  // namespace

const std::vector<std::string>& view_panels(View view) {
  static const std::vector<std::string> chat = names(kChat);
  static const std::vector<std::string> debugger = names(kDebugger);
  static const std::vector<std::string> bench = names(kBench);
  return view == View::Chat ? chat : view == View::Bench ? bench : debugger;
}

std::optional<PanelRect> panel_rect(View view, std::string_view panel) {
  for (const Placement& p : placements(view))
    if (panel == p.name) return p.rect;
  return std::nullopt;
}

nlohmann::json LayoutRecord::to_json(View view, int width, int height, size_t steps_shown, const std::string& model) const {
  nlohmann::json panels = nlohmann::json::array();
  for (const PanelRecord& p : panels_)
    panels.push_back({{"name", p.name},
                      {"rect", {p.x, p.y, p.w, p.h}},
                      {"content", {p.content_x, p.content_y, p.content_w, p.content_h}},
                      {"items", p.items},
                      {"empty", p.empty}});
  return {{"view", view_name(view)}, {"width", width},   {"height", height}, {"steps", steps_shown},
          {"menus", menus_},           {"model", model},   {"panels", panels}};
}

nlohmann::json LayoutRecord::description(View view, int width, int height, size_t steps_shown, const std::string& model,
                                         const std::vector<std::string>& args) const {
  nlohmann::json panels = nlohmann::json::array();
  const auto px = [](float v) { return static_cast<int>(std::lround(v)); };
  for (const PanelRecord& p : panels_) panels.push_back({{"name", p.name}, {"rect", {px(p.x), px(p.y), px(p.w), px(p.h)}}});
  return {{"view", view_name(view)}, {"width", width}, {"height", height}, {"menus", menus_}, {"panels", panels},
          {"steps", steps_shown},    {"model", model}, {"args", args}};
}

bool write_json_file(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path, std::ios::trunc);
  out << j.dump(2) << '\n';
  return static_cast<bool>(out);
}

}  // namespace fafo::studio
