// A minimal chat view: the prompt and the text generated so far, as a conversation.
// (Multi-turn chat with the model's template is not written yet.)
#include <imgui.h>

#include "panels.h"

namespace fafo::studio {

void draw_chat_panel(const StudioState& s) {
  if (begin_panel("Chat", {0.7f, 0.6f, 0.3f, 0.4f})) {
    const TranscriptView v = transcript_view(s.shown(), s.text);
    std::string reply;
    for (const TranscriptToken& tok : v.tokens) reply += tok.text.empty() ? token_label(s.text, tok.token) + " " : tok.text;
    const ChartSeries c = chart_series(s.shown());
    ImGui::Text("tau %.2f over %zu steps", c.tau.empty() ? 0.0 : static_cast<double>(c.tau.back()), c.tau.size());
    ImGui::Separator();
    ImGui::BeginChild("conversation");
    if (!s.prompt.empty()) {
      ImGui::TextColored(ImVec4(0.6f, 0.8f, 1.0f, 1.0f), "you");
      ImGui::TextWrapped("%s", s.prompt.c_str());
    }
    ImGui::TextColored(ImVec4(0.6f, 1.0f, 0.6f, 1.0f), "model");
    ImGui::TextWrapped("%s", reply.c_str());
    ImGui::EndChild();
  }
  end_panel();
}

}  // namespace fafo::studio
