// FAFO's compressed KV region over the context: one block per entry.
#include <imgui.h>

#include <algorithm>

#include "panels.h"

namespace fafo::studio {

void draw_kv_panel(const StudioState& s) {
  if (begin_panel("KV map", {0.25f, 0.6f, 0.45f, 0.4f})) {
    const StepTrace* t = s.current();
    if (!t) {
      ImGui::TextUnformatted("no step yet");
    } else {
      const KvMapView v = kv_map_view(*t, s.previous());
      ImGui::Text("step %d: context %d, region %zu entries, %zu new, %lld swapped this step", v.step, v.context,
                  v.region.size(), v.entered.size(), static_cast<long long>(v.swaps));
      ImGui::TextColored(ImVec4(0.3f, 0.6f, 1.0f, 1.0f), "in region");
      ImGui::SameLine();
      ImGui::TextColored(ImVec4(1.0f, 0.7f, 0.2f, 1.0f), "entered this step");
      ImGui::SameLine();
      ImGui::TextColored(ImVec4(0.4f, 0.4f, 0.4f, 1.0f), "rest of the cache");
      std::vector<uint8_t> entered(v.in_region.size(), 0);
      for (int32_t e : v.entered)
        if (e >= 0 && static_cast<size_t>(e) < entered.size()) entered[static_cast<size_t>(e)] = 1;
      ImDrawList* draw = ImGui::GetWindowDrawList();
      const ImVec2 origin = ImGui::GetCursorScreenPos();
      const float cell = 10.0f, gap = 2.0f;
      const float width = ImGui::GetContentRegionAvail().x;
      const int per_row = std::max(1, static_cast<int>(width / (cell + gap)));
      const int n = static_cast<int>(v.in_region.size());
      for (int i = 0; i < n; ++i) {
        const float x = origin.x + static_cast<float>(i % per_row) * (cell + gap);
        const float y = origin.y + static_cast<float>(i / per_row) * (cell + gap);
        const ImU32 colour = entered[static_cast<size_t>(i)]        ? IM_COL32(255, 180, 50, 255)
                             : v.in_region[static_cast<size_t>(i)] ? IM_COL32(80, 150, 255, 255)
                                                                   : IM_COL32(100, 100, 100, 255);
        draw->AddRectFilled(ImVec2(x, y), ImVec2(x + cell, y + cell), colour);
      }
      const int rows = (n + per_row - 1) / per_row;
      ImGui::Dummy(ImVec2(width, static_cast<float>(rows) * (cell + gap)));
    }
  }
  end_panel();
}

}  // namespace fafo::studio
