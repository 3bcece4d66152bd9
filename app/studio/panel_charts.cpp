// Charts over the steps shown: tau, tokens per step, step time.
#include <imgui.h>

#include <cfloat>
#include <cstdio>

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

}  // namespace

void draw_charts_panel(StudioState& s) {
  if (begin_panel(s, "Charts")) {
    const ChartSeries c = chart_series(s.shown());
    report_items(s, static_cast<int64_t>(c.tau.size()));
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
