// The menu bar: switch between the chat, the debugger and the bench, open a model or a trace.
#include <imgui.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "actions.h"
#include "panels.h"

namespace fafo::studio {

namespace {

void open_browser(StudioState& s, StudioState::Browse purpose) {
  std::filesystem::path start = purpose == StudioState::Browse::Model ? s.settings.open.path : s.source;
  if (purpose == StudioState::Browse::Trace && s.source.rfind("replay: ", 0) == 0) start = s.source.substr(8);
  s.browser.emplace(start, purpose == StudioState::Browse::Model ? std::vector<std::string>{".gguf"}
                                                                 : std::vector<std::string>{".jsonl", ".json"});
  s.browse = purpose;
  s.browse_error.clear();
}

void set_view(StudioState& s, View v) {
  if (s.view != v) s.relayout = true;
  s.view = v;
}

}  // namespace

float draw_menu_bar(StudioState& s) {
  float height = 0.0f;
  if (ImGui::BeginMainMenuBar()) {
    // The bar's own entries, each recorded as it is drawn (a screenshot's description lists them).
    const auto bar_menu = [&s](const char* name) {
      s.layout.add_menu(name);
      return ImGui::BeginMenu(name);
    };
    const auto bar_item = [&s](const char* name, bool selected) {
      s.layout.add_menu(name);
      return ImGui::MenuItem(name, nullptr, selected);
    };
    if (bar_menu("File")) {
      if (ImGui::MenuItem("Open model...")) open_browser(s, StudioState::Browse::Model);
      if (ImGui::BeginMenu("Recent models", s.recent && !s.recent->paths().empty())) {
        for (const std::string& p : s.recent->paths())
          if (ImGui::MenuItem(p.c_str(), nullptr, false, engine_free(s))) {
            s.settings.open.path = p;
            queue_open_model(s);
          }
        ImGui::EndMenu();
      }
      if (ImGui::MenuItem("Open trace (fafo run --trace)...")) open_browser(s, StudioState::Browse::Trace);
      ImGui::Separator();
      if (ImGui::MenuItem("Quit")) s.quit = true;
      ImGui::EndMenu();
    }
    if (bar_item("Chat", s.view == View::Chat)) set_view(s, View::Chat);
    if (bar_item("Debugger", s.view == View::Debugger)) set_view(s, View::Debugger);
    if (bar_item("Bench", s.view == View::Bench)) set_view(s, View::Bench);
    if (bar_menu("Server")) {
      const ServerSession::Status st = s.server.status();
      if (st.state == ServerSession::Status::State::Stopped) {
        ImGui::SetNextItemWidth(120.0f);
        ImGui::InputInt("port", &s.server_port);
        s.server_port = std::clamp(s.server_port, 0, 65535);
        const std::string start = "Start on 127.0.0.1:" + std::to_string(s.server_port);
        if (ImGui::MenuItem(start.c_str(), nullptr, false, s.ev.has_model))
          s.server.start(s.settings.open, "127.0.0.1", s.server_port, s.engine->loaded_model(s.settings.open));
        if (!s.ev.has_model) ImGui::TextDisabled("open a model first");
        if (!st.error.empty()) ImGui::TextWrapped("could not start: %s", st.error.c_str());
      } else if (st.state == ServerSession::Status::State::Starting) {
        ImGui::TextDisabled("opening %s...", st.model.c_str());
      } else {
        ImGui::Text("OpenAI API at %s", st.url.c_str());
        ImGui::TextDisabled("serving %s", st.model.c_str());
        if (ImGui::MenuItem("Stop")) s.server.stop();
      }
      ImGui::EndMenu();
    }
    if (bar_menu("Layout")) {
      if (ImGui::MenuItem("Reset panel positions")) s.relayout = true;
      ImGui::EndMenu();
    }
    height = ImGui::GetWindowSize().y;
    ImGui::EndMainMenuBar();
  }
  return height;
}

}  // namespace fafo::studio
