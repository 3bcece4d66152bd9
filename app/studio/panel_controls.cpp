// Controls: pause / single step / resume, speed, the step slider and the run's status.
#include <imgui.h>

#include "panels.h"

namespace fafo::studio {

void draw_controls_panel(StudioState& s) {
  if (begin_panel("Controls", {0.0f, 0.0f, 0.25f, 0.22f})) {
    ImGui::TextUnformatted(s.source.c_str());
    const size_t available = s.traces.size();
    Playback& p = s.playback;
    if (p.paused()) {
      if (ImGui::Button("Resume")) {
        p.resume();
        if (s.live) s.live->set_paused(false);
      }
    } else if (ImGui::Button("Pause")) {
      p.pause();
      if (s.live) s.live->set_paused(true);
    }
    ImGui::SameLine();
    if (ImGui::Button("Step")) {
      if (s.live && p.shown() >= available) {
        s.live->set_paused(true);
        s.live->allow_one_step();
      }
      p.step_once(available);
    }
    ImGui::SameLine();
    if (ImGui::Button("Back")) p.step_back();
    float speed = static_cast<float>(p.speed());
    if (ImGui::SliderFloat("steps/s (0: max)", &speed, 0.0f, 60.0f, "%.1f")) p.set_speed(speed);
    int index = static_cast<int>(p.shown()) - 1;
    if (available > 0 && ImGui::SliderInt("step", &index, 0, static_cast<int>(available) - 1))
      p.seek(static_cast<size_t>(index), available);
    ImGui::Text("showing %zu of %zu steps", p.shown(), available);
    if (s.live) {
      const std::string err = s.live->error();
      if (!err.empty()) ImGui::TextColored(ImVec4(1, 0.3f, 0.3f, 1), "error: %s", err.c_str());
      else ImGui::Text("generator: %s", s.live->finished() ? "finished" : (p.paused() ? "paused" : "running"));
    }
  }
  end_panel();
}

}  // namespace fafo::studio
