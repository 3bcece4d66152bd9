// The Model panel: which GGUF file (typed, browsed or recent), on which backend and
// device, with which context size; Open loads it on the engine's thread.
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <filesystem>

#include "actions.h"
#include "panels.h"

namespace fafo::studio {

namespace {

std::string device_label(const BackendDevice& d) { return std::to_string(d.index) + ": " + d.name + " (" + d.kind + ")"; }

void backend_picker(StudioState& s) {
  BackendSpec& spec = s.settings.open.backend;
  const EngineView& ev = s.ev;
  const std::string auto_label = "auto" + (ev.default_backend.empty() ? "" : " (" + ev.default_backend + ")");
  std::vector<std::string> names = {"auto"};
  for (const std::string& b : ev.backends) names.push_back(b);
  if (std::find(names.begin(), names.end(), "vulkan") == names.end()) names.push_back("vulkan");  // to say why not
  if (ImGui::BeginCombo("backend", spec.name == "auto" ? auto_label.c_str() : spec.name.c_str())) {
    for (const std::string& n : names)
      if (ImGui::Selectable(n == "auto" ? auto_label.c_str() : n.c_str(), spec.name == n)) spec.name = n;
    ImGui::EndCombo();
  }
  const std::string resolved = spec.name == "auto" ? ev.default_backend : spec.name;
  if (resolved != "cpu") {
    static const std::vector<BackendDevice> kNone;
    auto found = ev.devices.find(resolved);
    const std::vector<BackendDevice>& devices = found != ev.devices.end() ? found->second : kNone;
    std::string current = "best";
    for (const BackendDevice& d : devices)
      if (std::to_string(d.index) == spec.device) current = device_label(d);
    if (ImGui::BeginCombo("device", current.c_str())) {
      if (ImGui::Selectable("best", spec.device.empty())) spec.device.clear();
      for (const BackendDevice& d : devices)
        if (ImGui::Selectable(device_label(d).c_str(), std::to_string(d.index) == spec.device)) spec.device = std::to_string(d.index);
      ImGui::EndCombo();
    }
    if (!ev.devices_known) ImGui::TextDisabled("looking for devices...");
    else if (devices.empty()) ImGui::TextColored(kNoteText, "no %s device found", resolved.c_str());
  } else {
    ImGui::InputInt("threads (0: all)", &spec.threads);
    spec.threads = std::max(spec.threads, 0);
  }
}

// Which backend and device, and how many layers go there; a --split from the command
// line instead names its devices and layers.
void device_controls(StudioState& s) {
  OpenOptions& open = s.settings.open;
  if (!open.split.empty()) {
    ImGui::TextWrapped("devices: --split %s", split_text(open.split).c_str());
    return;
  }
  backend_picker(s);
  bool fitted = open.gpu_layers == OpenOptions::kGpuLayersAuto;
  if (ImGui::Checkbox("layers fitted to the device's free memory", &fitted))
    open.gpu_layers = fitted ? OpenOptions::kGpuLayersAuto : -1;
  if (!fitted) {  // --gpu-layers N: the last N on the device, the rest on the cpu backend
    ImGui::InputInt("layers on the device (-1: all)", &open.gpu_layers, 1, 4);
    open.gpu_layers = std::clamp(open.gpu_layers, -1, 1 << 16);
  }
}


}  // namespace

void draw_model_panel(StudioState& s) {
  if (begin_panel(s, "Model")) {
    StudioSettings& st = s.settings;
    const EngineView& ev = s.ev;
    ImGui::TextUnformatted("GGUF file");
    ImGui::SetNextItemWidth(-90.0f);
    ImGui::InputText("##path", &st.open.path);
    ImGui::SameLine();
    if (ImGui::Button("Browse...")) {
      s.browser.emplace(st.open.path, std::vector<std::string>{".gguf"});
      s.browse = StudioState::Browse::Model;
      s.browse_error.clear();
    }
    const bool have_recent = s.recent && !s.recent->paths().empty();
    ImGui::BeginDisabled(!have_recent);
    if (ImGui::BeginCombo("recent", have_recent ? "pick a recent model" : "no recent models")) {
      if (s.recent)
        for (const std::string& p : s.recent->paths())
          if (ImGui::Selectable(p.c_str(), p == st.open.path)) st.open.path = p;
      ImGui::EndCombo();
    }
    ImGui::EndDisabled();
    if (s.recent && !s.recent->problem().empty()) ImGui::TextColored(kNoteText, "%s", s.recent->problem().c_str());
    device_controls(s);
    ImGui::InputInt("context (0: model's)", &st.open.n_ctx, 256, 1024);
    st.open.n_ctx = std::clamp(st.open.n_ctx, 0, 1 << 20);
    constexpr KvCacheType kTypes[] = {KvCacheType::F32, KvCacheType::F16, KvCacheType::Q8_0, KvCacheType::Q4_0};
    int cache = static_cast<int>(std::find(std::begin(kTypes), std::end(kTypes), st.open.kv_type) - std::begin(kTypes));
    if (ImGui::Combo("KV cache", &cache,
                     "f32\0f16 (half the memory)\0q8_0 (27% of f32)\0q4_0 (14% of f32)\0"))
      st.open.kv_type = kTypes[std::clamp(cache, 0, 3)];

    ImGui::BeginDisabled(!engine_free(s) || st.open.path.empty());
    if (ImGui::Button(ev.has_model ? "Open (replaces the model)" : "Open")) queue_open_model(s);
    ImGui::EndDisabled();
    ImGui::Separator();
    if (ev.activity == EngineView::Activity::Loading) {
      ImGui::TextWrapped("loading %s ...", ev.model_path.c_str());
    } else if (ev.has_model) {
      ImGui::TextWrapped("%s", ev.model_summary.c_str());
      ImGui::TextWrapped("chat template: %s%s%s", ev.template_name.c_str(), ev.turn_end.empty() ? "" : ", turn end ",
                         ev.turn_end.c_str());
    } else {
      ImGui::TextDisabled("no model open");
    }
    if (!ev.note.empty()) ImGui::TextColored(kNoteText, "%s", ev.note.c_str());
    if (!ev.error.empty()) {
      ImGui::PushTextWrapPos(0.0f);
      ImGui::TextColored(kErrorText, "error: %s", ev.error.c_str());
      ImGui::PopTextWrapPos();
    }
    report_items(s, ev.has_model ? 1 : 0);
  }
  end_panel();
}

}  // namespace fafo::studio
