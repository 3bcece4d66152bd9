// Charts over the steps shown: with --strategy auto, what ran at each step; tau,
// tokens per step, step time.
#include <imgui.h>

#include <algorithm>
#include <cfloat>
#include <cstdio>
#include <span>

#include "panels.h"

namespace fafo::studio {

namespace {

void plot(const char* label, const std::vector<float>& values, bool histogram) {
  char overlay[64];
  std::snprintf(overlay, sizeof overlay, "last %.2f", values.empty() ? 0.0 : static_cast<double>(values.back()));
  const ImVec2 size(ImGui::GetContentRegionAvail().x, 80.0f);
  const int n = static_cast<int>(values.size());
  ImGui::TextUnformatted(label);
  if (histogram) ImGui::PlotHistogram("##h", values.data(), n, 0, overlay, 0.0f, FLT_MAX, size);
  else ImGui::PlotLines("##l", values.data(), n, 0, overlay, 0.0f, FLT_MAX, size);
}

// One cell per step coloured by the candidate auto ran there (hover: the step and why),
// then the legend with each candidate's step count.
void choice_strip(const ChartSeries& c, std::span<const StepTrace> traces) {
  ImGui::TextUnformatted("auto: what ran at each step");
  const float width = ImGui::GetContentRegionAvail().x, height = 18.0f;
  const ImVec2 at = ImGui::GetCursorScreenPos();
  ImGui::InvisibleButton("##choices", ImVec2(std::max(width, 1.0f), height));
  ImDrawList* d = ImGui::GetWindowDrawList();
  const size_t n = c.choice.size();
  const float cell = width / static_cast<float>(std::max<size_t>(n, 1));
  for (size_t i = 0; i < n; ++i) {
    if (c.choice[i] < 0) continue;
    const float x0 = at.x + cell * static_cast<float>(i);
    d->AddRectFilled(ImVec2(x0, at.y), ImVec2(x0 + std::max(cell, 1.0f), at.y + height),
                     series_colour(static_cast<size_t>(c.choice[i])));
  }
  if (ImGui::IsItemHovered() && n > 0) {
    const size_t i = std::min(n - 1, static_cast<size_t>(std::max(0.0f, ImGui::GetIO().MousePos.x - at.x) / cell));
    ImGui::SetTooltip("step %d: %s", traces[i].step, traces[i].auto_choice.empty() ? "-" : traces[i].auto_choice.c_str());
  }
  for (size_t l = 0; l < c.choice_labels.size(); ++l) {
    const int64_t steps = std::count(c.choice.begin(), c.choice.end(), static_cast<int32_t>(l));
    if (l > 0) ImGui::SameLine();
    const ImVec2 p = ImGui::GetCursorScreenPos();
    const float sq = ImGui::GetTextLineHeight();
    d->AddRectFilled(p, ImVec2(p.x + sq, p.y + sq), series_colour(l));
    ImGui::Dummy(ImVec2(sq, sq));
    ImGui::SameLine();
    ImGui::Text("%s: %lld", c.choice_labels[l].c_str(), static_cast<long long>(steps));
  }
}

}  // namespace

void draw_charts_panel(StudioState& s) {
  if (begin_panel(s, "Charts")) {
    const ChartSeries c = chart_series(s.shown());
    report_items(s, static_cast<int64_t>(c.tau.size()));
    if (!c.choice.empty()) choice_strip(c, s.shown());
    ImGui::PushID("tau");
    plot("tau (tokens per step so far)", c.tau, false);
    ImGui::PopID();
    ImGui::PushID("tps");
    plot("tokens per step (accepted length)", c.tokens_per_step, true);
    ImGui::PopID();
    ImGui::PushID("build");
    plot("build ms", c.build_ms, false);
    ImGui::PopID();
    ImGui::PushID("forward");
    plot("forward ms", c.forward_ms, false);
    ImGui::PopID();
    ImGui::PushID("verify");
    plot("verify ms", c.verify_ms, false);
    ImGui::PopID();
  }
  end_panel();
}

}  // namespace fafo::studio
