#include <imgui.h>

#include "panels.h"

namespace fafo::studio {

namespace {

float g_top = 0.0f;  // the menu bar's height this frame

}  // namespace

void begin_panels(StudioState&, float top) { g_top = top; }

bool begin_panel(StudioState& s, const char* title) {
  if (const auto rect = panel_rect(s.view, title); rect && (s.relayout || s.fixed_layout)) {
    const ImVec2 size = ImGui::GetIO().DisplaySize;
    const float h = size.y - g_top;
    ImGui::SetNextWindowPos(ImVec2(rect->x * size.x, g_top + rect->y * h), ImGuiCond_Always);
    ImGui::SetNextWindowSize(ImVec2(rect->w * size.x, rect->h * h), ImGuiCond_Always);
  }
  const bool open = ImGui::Begin(title, nullptr, ImGuiWindowFlags_NoCollapse);
  PanelRecord r;
  r.name = title;
  const ImVec2 pos = ImGui::GetWindowPos(), size = ImGui::GetWindowSize();
  r.x = pos.x, r.y = pos.y, r.w = size.x, r.h = size.y;
  const ImVec2 cmin = ImGui::GetWindowContentRegionMin(), cmax = ImGui::GetWindowContentRegionMax();
  r.content_x = pos.x + cmin.x, r.content_y = pos.y + cmin.y;
  r.content_w = cmax.x - cmin.x, r.content_h = cmax.y - cmin.y;
  r.empty = s.empty_panel == title;
  s.layout.add(r);
  return open && !r.empty;
}

void report_items(StudioState& s, int64_t n) { s.layout.set_items(n); }

unsigned int series_colour(size_t i) {
  static const ImU32 colours[] = {IM_COL32(86, 180, 233, 255), IM_COL32(230, 159, 0, 255),  IM_COL32(0, 190, 140, 255),
                                  IM_COL32(240, 228, 66, 255), IM_COL32(213, 94, 0, 255),   IM_COL32(204, 121, 167, 255),
                                  IM_COL32(170, 170, 170, 255), IM_COL32(150, 120, 255, 255)};
  return colours[i % (sizeof colours / sizeof colours[0])];
}

void end_panel() { ImGui::End(); }

std::string display_piece(const std::string& piece) {
  std::string out;
  for (char c : piece) {
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else out += c;
  }
  return out;
}

}  // namespace fafo::studio
