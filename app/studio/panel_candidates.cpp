// The candidates verified in the shown step, with key and match lengths, their source
// (coloured: the 2D window, the prompt, a corpus index, Jacobi) and origin.
#include <imgui.h>

#include "panels.h"

namespace fafo::studio {

void draw_candidates_panel(StudioState& s) {
  if (begin_panel(s, "Candidates")) {
    const StepTrace* t = s.current();
    if (!t) {
      ImGui::TextUnformatted("no step yet");
      report_items(s, 0);
    } else {
      const CandidateView v = candidate_view(*t);
      report_items(s, static_cast<int64_t>(v.rows.size()));
      ImGui::Text("step %d: %zu candidates, best match %d; pool %lld keys, %lld n-grams, hits %lld/%lld", v.step,
                  v.rows.size(), v.best_match, static_cast<long long>(t->pool_keys),
                  static_cast<long long>(t->pool_ngrams), static_cast<long long>(t->pool_hits),
                  static_cast<long long>(t->pool_lookups));
      const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY;
      if (ImGui::BeginTable("candidates", 5, flags)) {
        ImGui::TableSetupColumn("tokens", ImGuiTableColumnFlags_WidthStretch);
        ImGui::TableSetupColumn("key", ImGuiTableColumnFlags_WidthFixed, 40.0f);
        ImGui::TableSetupColumn("match", ImGuiTableColumnFlags_WidthFixed, 50.0f);
        ImGui::TableSetupColumn("source", ImGuiTableColumnFlags_WidthFixed, 60.0f);
        ImGui::TableSetupColumn("origin (step, col)", ImGuiTableColumnFlags_WidthFixed, 130.0f);
        ImGui::TableHeadersRow();
        for (const CandidateRow& row : v.rows) {
          ImGui::TableNextRow();
          if (row.accepted) ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg1, IM_COL32(40, 120, 60, 255));
          ImGui::TableNextColumn();
          for (size_t k = 0; k < row.tokens.size(); ++k) {
            if (k) ImGui::SameLine(0.0f, 4.0f);
            const bool matched = static_cast<int32_t>(k) < row.match_length;
            const ImVec4 colour = matched ? ImVec4(0.5f, 1.0f, 0.5f, 1.0f) : ImVec4(0.75f, 0.75f, 0.75f, 1.0f);
            ImGui::TextColored(colour, "%s", display_piece(token_label(s.text, row.tokens[k])).c_str());
          }
          ImGui::TableNextColumn();
          ImGui::Text("%d", row.key_length);
          ImGui::TableNextColumn();
          ImGui::Text("%d", row.match_length);
          ImGui::TableNextColumn();
          ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(series_colour(static_cast<size_t>(row.source))), "%s",
                             candidate_source_name(row.source));
          ImGui::TableNextColumn();
          ImGui::Text("(%d, %d)", row.origin_step, row.origin_column);
        }
        ImGui::EndTable();
      }
    }
  }
  end_panel();
}

}  // namespace fafo::studio
