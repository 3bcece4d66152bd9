// The 2D window after the shown step: rows x columns of tokens, new guesses highlighted.
#include <imgui.h>

#include "panels.h"

namespace fafo::studio {

void draw_window_panel(StudioState& s) {
  if (begin_panel(s, "2D window")) {
    const StepTrace* t = s.current();
    if (!t || t->window_after.empty()) {
      ImGui::TextUnformatted(t ? "this step has no window (prefill or ar)" : "no step yet");
      report_items(s, 0);
    } else {
      const WindowView v = window_view(*t);
      ImGui::Text("step %d: %d rows x %d columns (highlighted: guesses made this step)", v.step, v.rows, v.columns);
      const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_ScrollX;
      if (v.columns > 0 && ImGui::BeginTable("window", v.columns + 1, flags)) {
        ImGui::TableSetupColumn("row");
        for (int32_t c = 0; c < v.columns; ++c) ImGui::TableSetupColumn(("col " + std::to_string(c)).c_str());
        ImGui::TableHeadersRow();
        for (int32_t r = 0; r < v.rows; ++r) {
          ImGui::TableNextRow();
          ImGui::TableNextColumn();
          ImGui::Text("%d", r);
          for (const WindowCell& cell : v.cells[static_cast<size_t>(r)]) {
            ImGui::TableNextColumn();
            if (cell.is_new) ImGui::TableSetBgColor(ImGuiTableBgTarget_CellBg, IM_COL32(40, 120, 60, 255));
            ImGui::TextUnformatted(display_piece(token_label(s.text, cell.token)).c_str());
            if (ImGui::IsItemHovered()) ImGui::SetTooltip("token %d", cell.token);
          }
        }
        ImGui::EndTable();
      }
      report_items(s, static_cast<int64_t>(v.rows) * v.columns);
    }
  }
  end_panel();
}

}  // namespace fafo::studio
