// Controls: where the steps come from, a raw prompt to run, pause / single step /
// back / resume, speed, the step slider and the generator's status.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <string>

#include "actions.h"
#include "panels.h"

namespace fafo::studio {

namespace {

// A line in `colour`, wrapped at the panel's edge.
void wrapped(const ImVec4& colour, const std::string& text) {
  ImGui::PushStyleColor(ImGuiCol_Text, colour);
  ImGui::TextWrapped("%s", text.c_str());
  ImGui::PopStyleColor();
}

void run_prompt_controls(StudioState& s) {
  const EngineView& ev = s.ev;
  ImGui::SetNextItemWidth(-60.0f);
  ImGui::InputText("##prompt", &s.debug_prompt);
  ImGui::SameLine();
  ImGui::BeginDisabled(!engine_free(s) || !ev.has_model || s.debug_prompt.empty() || !settings_problem(s.settings).empty());
  if (ImGui::Button("Run")) queue_debugger_run(s);
  ImGui::EndDisabled();
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled))
    ImGui::SetTooltip("generate from this text with the Decoding settings (ends the chat's conversation and a run "
                      "held paused; paused here, the run waits after its first step)");
}

}  // namespace

void draw_controls_panel(StudioState& s) {
  if (begin_panel(s, "Controls")) {
    ImGui::TextUnformatted(s.source.empty() ? "no steps yet: chat, run a prompt, or open a trace" : s.source.c_str());
    if (!s.model_note.empty()) wrapped(kNoteText, s.model_note);
    if (!s.trace_problem.empty()) wrapped(kErrorText, s.trace_problem);
    run_prompt_controls(s);
    const size_t available = s.traces.size();
    Playback& p = s.playback;
    StepGate& gate = s.engine->gate();
    const bool live = s.ev.activity == EngineView::Activity::Generating;
    if (p.paused()) {
      if (ImGui::Button("Resume")) {
        p.resume();
        gate.set_paused(false);
      }
    } else if (ImGui::Button("Pause")) {
      p.pause();
      if (live) gate.set_paused(true);  // between runs, only the playback: Run starts its run paused then
    }
    ImGui::SameLine();
    if (ImGui::Button("Step")) {
      if (live && p.shown() >= available) {
        gate.set_paused(true);
        gate.allow_one_step();
      }
      p.step_once(available);
    }
    ImGui::SameLine();
    if (ImGui::Button("Back")) p.step_back();
    ImGui::SameLine();
    ImGui::BeginDisabled(!live);
    if (ImGui::Button("Stop")) s.engine->stop();
    ImGui::EndDisabled();
    float speed = static_cast<float>(p.speed());
    if (ImGui::SliderFloat("steps/s (0: max)", &speed, 0.0f, 60.0f, "%.1f")) p.set_speed(speed);
    int index = static_cast<int>(p.shown()) - 1;
    if (available > 0 && ImGui::SliderInt("step", &index, 0, static_cast<int>(available) - 1))
      p.seek(static_cast<size_t>(index), available);
    ImGui::Text("showing %zu of %zu steps", p.shown(), available);
    if (!s.ev.error.empty()) wrapped(kErrorText, "error: " + s.ev.error);
    else if (live && gate.paused()) ImGui::TextColored(kNoteText, "generator: paused: Step or Resume");
    else if (live) ImGui::Text("generator: running");
    else ImGui::Text("generator: %s", s.ev.has_model ? "idle" : "no model open");
    report_items(s, static_cast<int64_t>(available));
  }
  end_panel();
}

}  // namespace fafo::studio
