// The in-app file dialog: browse directories, pick a *.gguf model (or a trace file).
#include <imgui.h>
#include <imgui_stdlib.h>

#include "actions.h"
#include "panels.h"
#include "trace_io.h"

namespace fafo::studio {

namespace {

// Takes the chosen file: a model path for the Model panel, or a trace to replay.
void choose(StudioState& s, const std::filesystem::path& file) {
  if (s.browse == StudioState::Browse::Model) {
    s.settings.open.path = file.string();
    if (engine_free(s)) queue_open_model(s);  // else the Model panel's Open opens it once the engine is free
  } else {
    TraceFile trace;
    try {
      trace = load_trace_file(file.string());
    } catch (const std::exception& e) {
      s.browse_error = e.what();
      return;
    }
    s.traces = std::move(trace.steps);
    s.source = "replay: " + file.string() + " (" + std::to_string(s.traces.size()) + " steps)";
    // The open model stays open: the trace's own (when it names one) is opened from the File menu.
    s.model_note = trace.model.empty() ? "" : "the trace names the model " + trace.model;
    s.trace_problem = s.ev.has_model ? trace_fit_problem(s.traces, s.ev.n_vocab, s.ev.n_layer) : "";
    s.playback.restart();
    s.playback.pause();
    s.playback.seek(0, s.traces.size());
    if (s.view != View::Debugger) s.relayout = true;
    s.view = View::Debugger;
  }
  s.browse = StudioState::Browse::None;
}

}  // namespace

void draw_file_dialog(StudioState& s) {
  if (s.browse == StudioState::Browse::None || !s.browser) return;
  const char* title = s.browse == StudioState::Browse::Model ? "Open a model (*.gguf)###browse" : "Open a trace (*.jsonl)###browse";
  if (!ImGui::IsPopupOpen("###browse")) ImGui::OpenPopup(title);
  const ImVec2 display = ImGui::GetIO().DisplaySize;
  ImGui::SetNextWindowSize(ImVec2(display.x * 0.5f, display.y * 0.6f), ImGuiCond_Appearing);
  ImGui::SetNextWindowPos(ImVec2(display.x * 0.5f, display.y * 0.5f), ImGuiCond_Appearing, ImVec2(0.5f, 0.5f));
  bool open = true;
  if (!ImGui::BeginPopupModal(title, &open)) {
    if (!open) s.browse = StudioState::Browse::None;
    return;
  }
  FileBrowser& b = *s.browser;
  PanelRecord record;  // where the dialog was drawn, for --layout-json
  record.name = "File dialog";
  const ImVec2 pos = ImGui::GetWindowPos(), size = ImGui::GetWindowSize();
  record.x = pos.x, record.y = pos.y, record.w = size.x, record.h = size.y;
  record.content_x = pos.x, record.content_y = pos.y + ImGui::GetFrameHeight();
  record.content_w = size.x, record.content_h = size.y - ImGui::GetFrameHeight();
  record.items = static_cast<int64_t>(b.entries().size());
  s.layout.add(record);
  std::string dir = b.directory().string();
  ImGui::SetNextItemWidth(-80.0f);
  if (ImGui::InputText("##dir", &dir, ImGuiInputTextFlags_EnterReturnsTrue)) b.go(dir);
  ImGui::SameLine();
  if (ImGui::Button("Up")) b.open("..");
  if (!b.error().empty()) ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "%s", b.error().c_str());
  if (!s.browse_error.empty()) ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "%s", s.browse_error.c_str());
  ImGui::BeginChild("entries", ImVec2(0, -ImGui::GetFrameHeightWithSpacing()), true);
  std::optional<std::string> clicked;
  for (const BrowserEntry& e : b.entries()) {
    const std::string label = (e.directory ? "[dir] " : "      ") + e.name;
    if (ImGui::Selectable(label.c_str(), false, ImGuiSelectableFlags_AllowDoubleClick | ImGuiSelectableFlags_DontClosePopups) &&
        (e.directory || ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)))
      clicked = e.name;
    if (!e.directory) {
      ImGui::SameLine(ImGui::GetWindowContentRegionMax().x - 90.0f);
      ImGui::TextDisabled("%s", human_size(e.size).c_str());
    }
  }
  ImGui::EndChild();
  if (clicked) {
    if (auto file = b.open(*clicked)) choose(s, *file);
  }
  if (ImGui::Button("Cancel") || !open) s.browse = StudioState::Browse::None;
  ImGui::SameLine();
  ImGui::TextDisabled("click a folder to enter it, double-click a file to open it");
  if (s.browse == StudioState::Browse::None) ImGui::CloseCurrentPopup();
  ImGui::EndPopup();
}

}  // namespace fafo::studio
