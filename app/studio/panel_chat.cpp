// The Chat panel: the conversation with streaming replies, the message box, Send /
// Stop / New chat, and tokens/s and tau, live while a reply is generated.
#include <imgui.h>
#include <imgui_stdlib.h>

#include "actions.h"
#include "panels.h"
#include "plural.h"

namespace fafo::studio {

namespace {

const ImVec4 kUser(0.55f, 0.78f, 1.0f, 1.0f);
const ImVec4 kModel(0.55f, 1.0f, 0.6f, 1.0f);
const ImVec4 kSystem(0.8f, 0.8f, 0.5f, 1.0f);

std::string without_leading_space(const std::string& text) {
  const size_t begin = text.find_first_not_of(' ');
  return begin == std::string::npos ? "" : text.substr(begin);
}

void message(const char* who, const ImVec4& colour, const std::string& text) {
  ImGui::TextColored(colour, "%s", who);
  ImGui::PushTextWrapPos(0.0f);
  ImGui::TextUnformatted(text.c_str());
  ImGui::PopTextWrapPos();
  ImGui::Spacing();
}

void stats_line(StudioState& s) {
  const EngineView& ev = s.ev;
  if (debugger_run_held(s)) {
    ImGui::TextColored(kNoteText, "the Debugger's run is paused; sending a message, New chat or opening a model ends it");
  } else if (ev.activity == EngineView::Activity::Generating) {
    const LiveStats live = s.engine->gate().stats();
    ImGui::Text("generating: %s, %.1f tokens/s, tau %.2f (%s)%s", app::count_of(live.tokens, "token").c_str(),
                live.tokens_per_second(), live.tau(), strategy_name(s.settings.generation.decoding.strategy),
                s.engine->gate().paused() ? "; paused in the debugger" : "");
  } else if (ev.last) {
    const TurnSummary& t = *ev.last;
    ImGui::Text("last reply: %s, %.1f tokens/s, tau %.2f; prompt %zu new + %d cached; stop: %s",
                app::count_of(static_cast<int64_t>(t.tokens), "token").c_str(),
                t.tokens_per_second, t.tau, t.new_tokens, t.reused, t.stop.c_str());
  } else {
    ImGui::TextDisabled(ev.has_model ? "type a message below" : "open a model (left) to chat");
  }
  if (ev.has_model) ImGui::TextDisabled("context %d / %d tokens", ev.n_past, ev.n_ctx);
}

}  // namespace

void draw_chat_panel(StudioState& s) {
  if (begin_panel(s, "Chat")) {
    const EngineView& ev = s.ev;
    stats_line(s);
    ImGui::Separator();
    const float input_height = ImGui::GetTextLineHeight() * 4.0f + ImGui::GetFrameHeightWithSpacing() * 2.0f;
    ImGui::BeginChild("conversation", ImVec2(0, -input_height), true);
    int64_t messages = 0;
    size_t length = 0;
    for (const ChatMessage& m : ev.conversation) {
      const bool user = m.role == "user", system = m.role == "system";
      message(user ? "you" : system ? "system" : "model", user ? kUser : system ? kSystem : kModel,
              user ? m.content : without_leading_space(m.content));
      ++messages;
      length += m.content.size();
    }
    if (!ev.pending_user.empty()) {
      message("you", kUser, ev.pending_user);
      message("model", kModel, ev.streaming + "_");
      messages += 2;
      length += ev.pending_user.size() + ev.streaming.size();
    }
    if (length != s.chat_seen) {  // new text: keep the end in view
      ImGui::SetScrollHereY(1.0f);
      s.chat_seen = length;
    }
    ImGui::EndChild();

    const bool generating = ev.activity == EngineView::Activity::Generating;
    const bool can_send = ev.has_model && engine_free(s) && settings_problem(s.settings).empty();
    const ImGuiInputTextFlags flags = ImGuiInputTextFlags_EnterReturnsTrue | ImGuiInputTextFlags_CtrlEnterForNewLine;
    const bool entered = ImGui::InputTextMultiline("##message", &s.input,
                                                   ImVec2(-1.0f, ImGui::GetTextLineHeight() * 4.0f), flags);
    ImGui::BeginDisabled(!can_send || s.input.empty());
    if ((ImGui::Button("Send (Enter)") || entered) && can_send && !s.input.empty()) queue_message(s);
    ImGui::EndDisabled();
    ImGui::SameLine();
    ImGui::BeginDisabled(!generating);
    if (ImGui::Button("Stop")) s.engine->stop();
    ImGui::EndDisabled();
    ImGui::SameLine();
    ImGui::BeginDisabled(!engine_free(s) || !ev.has_model);
    if (ImGui::Button("New chat")) queue_new_chat(s);
    ImGui::EndDisabled();
    ImGui::SameLine();
    ImGui::TextDisabled("Ctrl+Enter: new line");
    report_items(s, messages);
  }
  end_panel();
}

}  // namespace fafo::studio
