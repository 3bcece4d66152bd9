// The generated text, each token coloured by how it was produced (plain, an accepted
// candidate, one from the corpus index); clicking a token
// selects it and says which step produced it, double-clicking shows that step.
#include <imgui.h>

#include "panels.h"
#include "plural.h"

namespace fafo::studio {

namespace {

const ImVec4 kPlain(0.85f, 0.85f, 0.85f, 1.0f);
const ImVec4 kCandidate(0.45f, 0.95f, 0.45f, 1.0f);
const ImVec4 kCorpus(0.45f, 0.75f, 1.0f, 1.0f);  // a candidate from the corpus index
const ImVec4 kSelected(1.0f, 0.85f, 0.3f, 1.0f);

}  // namespace

void draw_transcript_panel(StudioState& s) {
  if (begin_panel(s, "Transcript")) {
    const TranscriptView v = transcript_view(s.shown(), s.text);
    report_items(s, static_cast<int64_t>(v.tokens.size()));
    ImGui::Text("%s, %lld from accepted candidates", app::count_of(static_cast<int64_t>(v.tokens.size()), "token").c_str(),
                static_cast<long long>(v.from_candidates));
    ImGui::TextColored(kPlain, "plain");
    ImGui::SameLine();
    ImGui::TextColored(kCandidate, "accepted candidate");
    ImGui::SameLine();
    ImGui::TextColored(kCorpus, "from the corpus");
    ImGui::SameLine();
    ImGui::TextColored(kSelected, "selected");
    if (s.selected_token >= 0 && s.selected_token < static_cast<int>(v.tokens.size())) {
      const TranscriptToken& tok = v.tokens[static_cast<size_t>(s.selected_token)];
      if (tok.source.kind == TokenSource::Candidate && tok.source.source == CandidateSource::Window)
        ImGui::Text("token %d (id %d): step %d, candidate from step %d column %d", s.selected_token, tok.token, tok.step,
                    tok.source.origin_step, tok.source.origin_column);
      else if (tok.source.kind == TokenSource::Candidate)
        ImGui::Text("token %d (id %d): step %d, candidate from the %s", s.selected_token, tok.token, tok.step,
                    candidate_source_name(tok.source.source));
      else
        ImGui::Text("token %d (id %d): step %d, plain", s.selected_token, tok.token, tok.step);
    }
    ImGui::Separator();
    ImGui::BeginChild("text");
    const float right = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
    ImGui::PushStyleVar(ImGuiStyleVar_ItemSpacing, ImVec2(0.0f, 2.0f));
    for (size_t i = 0; i < v.tokens.size(); ++i) {
      const TranscriptToken& tok = v.tokens[i];
      const std::string label = tok.text.empty() ? token_label(s.text, tok.token) + " " : display_piece(tok.text);
      const ImVec4 colour = static_cast<int>(i) == s.selected_token ? kSelected
                            : tok.source.kind != TokenSource::Candidate          ? kPlain
                            : tok.source.source == CandidateSource::Corpus       ? kCorpus
                                                                                 : kCandidate;
      ImGui::TextColored(colour, "%s", label.c_str());
      if (ImGui::IsItemClicked()) s.selected_token = static_cast<int>(i);
      if (ImGui::IsItemHovered() && ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left))
        s.playback.seek(static_cast<size_t>(tok.step_index), s.traces.size());  // show the step that produced it
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("id %d, step %d", tok.token, tok.step);
      if (i + 1 < v.tokens.size()) {
        const std::string next = display_piece(v.tokens[i + 1].text.empty() ? "#000000 " : v.tokens[i + 1].text);
        if (ImGui::GetItemRectMax().x + ImGui::CalcTextSize(next.c_str()).x < right) ImGui::SameLine();
      }
    }
    ImGui::PopStyleVar();
    ImGui::EndChild();
  }
  end_panel();
}

}  // namespace fafo::studio
