#include <imgui.h>

#include "panels.h"

namespace fafo::studio {

bool begin_panel(const char* title, PanelRect rect) {
  const ImVec2 size = ImGui::GetIO().DisplaySize;
  ImGui::SetNextWindowPos(ImVec2(rect.x * size.x, rect.y * size.y), ImGuiCond_FirstUseEver);
  ImGui::SetNextWindowSize(ImVec2(rect.w * size.x, rect.h * size.y), ImGuiCond_FirstUseEver);
  return ImGui::Begin(title);
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
