// The candidate pool after the shown step, as the trace's bounded snapshot has it: the
// keys (context suffixes) this step's lookup used, highlighted, then the most recently
// used ones, each with its n-grams, LRU ages and hit counts; the n-grams tried this
// step are green with their match lengths.
#include <imgui.h>

#include "panels.h"

namespace fafo::studio {

namespace {

const ImVec4 kTried(0.5f, 1.0f, 0.5f, 1.0f);
const ImVec4 kPlainToken(0.8f, 0.8f, 0.8f, 1.0f);

// The pieces of `tokens`, each its own item so that token boundaries show.
void tokens(const StudioState& s, const std::vector<int32_t>& ids, const ImVec4& colour) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) ImGui::SameLine(0.0f, 5.0f);
    ImGui::TextColored(colour, "%s", display_piece(token_label(s.text, ids[i])).c_str());
  }
}

}  // namespace

void draw_pool_panel(StudioState& s) {
  if (begin_panel(s, "Candidate pool")) {
    const StepTrace* t = s.current();
    if (!t) {
      ImGui::TextUnformatted("no step yet");
      report_items(s, 0);
    } else {
      const PoolView v = pool_view(*t);
      ImGui::Text("step %d: %lld keys, %lld n-grams; %lld lookups, hit rate %.0f%%; %d tried, %d of them below", v.step,
                  static_cast<long long>(v.keys), static_cast<long long>(v.ngrams), static_cast<long long>(v.lookups),
                  100.0 * v.hit_rate, v.tried, v.tried_in_snapshot);
      ImGui::PushStyleColor(ImGuiCol_Text, ImGui::GetStyleColorVec4(ImGuiCol_TextDisabled));
      ImGui::TextWrapped("%zu keys: those this step's lookup used (highlighted), then the most recently used; n-grams "
                         "newest first (the last is evicted next); green: tried this step, with its match length",
                         v.rows.size());
      ImGui::PopStyleColor();
      if (v.rows.empty())
        ImGui::TextDisabled(t->step == 0 ? "(the prefill step)" : "(no pool here: ar or jacobi, or a trace without a pool snapshot)");
      const ImGuiTableFlags flags =
          ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingStretchProp;
      int64_t drawn = 0;
      if (!v.rows.empty() && ImGui::BeginTable("pool", 8, flags)) {
        ImGui::TableSetupScrollFreeze(0, 1);
        ImGui::TableSetupColumn("key", ImGuiTableColumnFlags_WidthStretch, 1.0f);
        ImGui::TableSetupColumn("age", ImGuiTableColumnFlags_WidthFixed, 28.0f);
        ImGui::TableSetupColumn("hits", ImGuiTableColumnFlags_WidthFixed, 32.0f);
        ImGui::TableSetupColumn("n-gram", ImGuiTableColumnFlags_WidthStretch, 1.4f);
        ImGui::TableSetupColumn("age", ImGuiTableColumnFlags_WidthFixed, 28.0f);
        ImGui::TableSetupColumn("hits", ImGuiTableColumnFlags_WidthFixed, 32.0f);
        ImGui::TableSetupColumn("origin", ImGuiTableColumnFlags_WidthFixed, 56.0f);
        ImGui::TableSetupColumn("tried", ImGuiTableColumnFlags_WidthFixed, 36.0f);
        ImGui::TableHeadersRow();
        for (size_t k = 0; k < v.rows.size(); ++k) {
          const PoolKeyRow& key = v.rows[k];
          ImGui::PushID(static_cast<int>(k));
          for (size_t i = 0; i < key.ngrams.size(); ++i) {
            const PoolNgramRow& n = key.ngrams[i];
            ImGui::TableNextRow();
            if (key.retrieved) ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg1, IM_COL32(30, 70, 40, 255));
            ImGui::TableNextColumn();
            if (i == 0) tokens(s, key.key, kPlainToken);
            ImGui::TableNextColumn();
            if (i == 0) ImGui::Text("%lld", static_cast<long long>(key.age));
            ImGui::TableNextColumn();
            if (i == 0) ImGui::Text("%lld", static_cast<long long>(key.hits));
            ImGui::TableNextColumn();
            tokens(s, n.tokens, n.tried_match >= 0 ? kTried : kPlainToken);
            ImGui::TableNextColumn();
            ImGui::Text("%lld", static_cast<long long>(n.age));
            ImGui::TableNextColumn();
            ImGui::Text("%lld", static_cast<long long>(n.hits));
            ImGui::TableNextColumn();
            if (n.origin_step >= 0) ImGui::Text("%d c%d", n.origin_step, n.origin_column);
            else ImGui::TextDisabled("prompt");
            ImGui::TableNextColumn();
            if (n.tried_match >= 0) ImGui::TextColored(kTried, "%d", n.tried_match);
            ++drawn;
          }
          ImGui::PopID();
        }
        ImGui::EndTable();
      }
      report_items(s, drawn);
    }
  }
  end_panel();
}

}  // namespace fafo::studio
