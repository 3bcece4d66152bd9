// The KV cache per layer after the shown step. One row per layer over the context
// (blocks of entries): what FAFO's fumble rows read there, which is the region in
// every layer except the first dense ones, where they read everything. Below, the
// region of the selected layer slot by slot (physical order), the slots that received
// a new entry this step highlighted. Verification rows always read every entry but
// those before a sliding-window layer's window. Above, the cache's type and size; a
// window layer's label gives its window ("w16") and, where its cache is a ring of the
// last entries only, the ring's size ("r527").
#include <imgui.h>

#include <algorithm>

#include "panels.h"

namespace fafo::studio {

namespace {

ImU32 cell_colour(KvCell c) {
  switch (c) {
    case KvCell::Entered: return IM_COL32(255, 180, 50, 255);
    case KvCell::Region: return IM_COL32(80, 150, 255, 255);
    case KvCell::Dense: return IM_COL32(70, 200, 190, 255);
    case KvCell::OutsideWindow: return IM_COL32(45, 45, 45, 255);
    case KvCell::Rest: break;
  }
  return IM_COL32(95, 95, 95, 255);
}

void legend() {
  ImGui::TextColored(ImVec4(0.31f, 0.59f, 1.0f, 1.0f), "region");
  ImGui::SameLine();
  ImGui::TextColored(ImVec4(1.0f, 0.7f, 0.2f, 1.0f), "swapped in this step");
  ImGui::SameLine();
  ImGui::TextColored(ImVec4(0.27f, 0.78f, 0.75f, 1.0f), "read by a dense layer");
  ImGui::SameLine();
  ImGui::TextColored(ImVec4(0.5f, 0.5f, 0.5f, 1.0f), "rest (not read by fumble rows)");
  ImGui::SameLine();
  ImGui::TextColored(ImVec4(0.3f, 0.3f, 0.3f, 1.0f), "before a window layer's window (not kept where it is a ring)");
}

// One row of blocks per layer; clicking a row selects the layer.
void layer_rows(StudioState& s, const KvLayersView& v) {
  ImDrawList* draw = ImGui::GetWindowDrawList();
  const float label_w = 110.0f, gap = 1.0f;
  const float avail = ImGui::GetContentRegionAvail().x - label_w;
  const int n = static_cast<int>(v.blocks.size());
  const float cell = std::clamp(n ? avail / static_cast<float>(n) - gap : 8.0f, 2.0f, 10.0f);
  const float row_h = std::min(cell, 8.0f) + 4.0f;
  for (const KvLayerRow& row : v.rows) {
    const bool selected = row.layer == s.selected_layer;
    std::string label = "all";  // (built piecewise: GCC 12 warns falsely on "L" + s at -O3)
    if (v.layers > 0) {
      label = "L";
      label += std::to_string(row.layer);
      if (row.dense) label += " dense";
      if (row.window > 0) {
        label += " w";
        label += std::to_string(row.window);
      }
      if (row.ring > 0) {  // the entries the ring keeps
        label += " r";
        label += std::to_string(row.ring);
      }
    }
    const ImVec2 origin = ImGui::GetCursorScreenPos();
    ImGui::PushID(row.layer);
    if (ImGui::Selectable(label.c_str(), selected, 0, ImVec2(label_w - 6.0f, row_h - 2.0f))) s.selected_layer = row.layer;
    ImGui::PopID();
    for (int i = 0; i < n; ++i) {
      const float x = origin.x + label_w + static_cast<float>(i) * (cell + gap);
      draw->AddRectFilled(ImVec2(x, origin.y + 1.0f), ImVec2(x + cell, origin.y + row_h - 3.0f),
                          cell_colour(row.cells[static_cast<size_t>(i)]));
    }
  }
}

// The selected layer's region, one block per physical slot.
void region_slots(const KvLayersView& v) {
  ImDrawList* draw = ImGui::GetWindowDrawList();
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  const float cell = 12.0f, gap = 2.0f;
  const float width = ImGui::GetContentRegionAvail().x;
  const int per_row = std::max(1, static_cast<int>(width / (cell + gap)));
  const int n = static_cast<int>(v.slots.size());
  for (int i = 0; i < n; ++i) {
    const float x = origin.x + static_cast<float>(i % per_row) * (cell + gap);
    const float y = origin.y + static_cast<float>(i / per_row) * (cell + gap);
    draw->AddRectFilled(ImVec2(x, y), ImVec2(x + cell, y + cell),
                        v.slot_swapped[static_cast<size_t>(i)] ? cell_colour(KvCell::Entered) : cell_colour(KvCell::Region));
  }
  const int rows = (n + per_row - 1) / per_row;
  ImGui::Dummy(ImVec2(width, static_cast<float>(rows) * (cell + gap)));
  if (ImGui::IsItemHovered()) {
    const ImVec2 m = ImGui::GetMousePos();
    const int col = static_cast<int>((m.x - origin.x) / (cell + gap)), row = static_cast<int>((m.y - origin.y) / (cell + gap));
    const int i = row * per_row + col;
    if (col >= 0 && col < per_row && i >= 0 && i < n)
      ImGui::SetTooltip("slot %d holds entry %d%s", i, v.slots[static_cast<size_t>(i)],
                        v.slot_swapped[static_cast<size_t>(i)] ? " (swapped in this step)" : "");
  }
}

}  // namespace

void draw_kv_panel(StudioState& s) {
  if (begin_panel(s, "KV map")) {
    const StepTrace* t = s.current();
    if (!t) {
      ImGui::TextUnformatted("no step yet");
      report_items(s, 0);
    } else {
      const KvLayersView v = kv_layers_view(*t, s.previous(), 200);
      if (v.layers > 0) s.selected_layer = std::clamp(s.selected_layer, 0, v.layers - 1);
      if (v.has_region) {
        ImGui::Text("step %d: context %d, region %zu slots, %lld swapped this step; %d layers, %d dense", v.step, v.context,
                    v.slots.size(), static_cast<long long>(v.swaps), v.layers, v.dense_layers);
        ImGui::TextDisabled("one selection for every layer; in dense layers the fumble rows read all entries");
      } else {
        ImGui::Text("step %d: context %d; no compressed region: every row reads every entry", v.step, v.context);
      }
      if (!v.kv_type.empty())
        ImGui::TextDisabled("KV cache: %s, %.1f KiB per token (%.1f MiB for this context)", v.kv_type.c_str(),
                            static_cast<double>(v.bytes_per_token) / 1024.0,
                            static_cast<double>(v.bytes_per_token) * v.context / (1024.0 * 1024.0));
      legend();
      if (v.block > 1) ImGui::TextDisabled("each block is %d entries (coloured by its most notable entry)", v.block);
      const float rows_height = static_cast<float>(v.rows.size()) * 12.0f + 8.0f;
      ImGui::BeginChild("layers", ImVec2(0, std::min(rows_height, ImGui::GetContentRegionAvail().y * 0.62f)));
      layer_rows(s, v);
      ImGui::EndChild();
      if (v.has_region) {
        const bool dense = v.layers > 0 && s.selected_layer < v.dense_layers;
        ImGui::TextWrapped("layer %d: the region's slots in physical order%s", v.layers > 0 ? s.selected_layer : 0,
                           dense ? " (kept up to date, but this dense layer's fumble rows read every entry)" : "");
        region_slots(v);
      }
      report_items(s, static_cast<int64_t>(v.rows.size()));
    }
  }
  end_panel();
}

}  // namespace fafo::studio
