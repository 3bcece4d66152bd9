// The Decoding panel: strategy and its parameters, KV policy, sampling, reply length,
// chat template and system text. Generation settings apply to the next reply; the
// template and system text to the next conversation (New chat).
#include <imgui.h>
#include <imgui_stdlib.h>

#include <algorithm>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "fafo/chat_template.h"
#include "fafo/decoding.h"
#include "fafo/kv_policy.h"
#include "actions.h"
#include "panels.h"

namespace fafo::studio {

namespace {

// Returns whether the user picked a strategy in the combo (fafo::strategy_names: the
// enum's order, so an index is a Strategy).
bool strategy_settings(DecodingOptions& d, KvPolicyOptions& kv) {
  int strategy = static_cast<int>(d.strategy);
  const std::span<const char* const> strategies = strategy_names();
  const bool picked = ImGui::Combo("strategy", &strategy, strategies.data(), static_cast<int>(strategies.size()));
  if (picked) d.strategy = static_cast<Strategy>(strategy);
  ImGui::InputText("corpus index (.fidx)", &d.corpus_path);
  if (d.strategy == Strategy::Corpus && d.corpus_path.empty()) ImGui::TextDisabled("corpus needs an index: fafo index build");
  if (d.strategy == Strategy::Draft) {
    ImGui::InputText("draft model (.gguf or self)", &d.draft_model_path);
    ImGui::SliderInt("draft tokens per step", &d.draft_n, 1, 16);
  }
  const bool window = d.strategy == Strategy::Lookahead || d.strategy == Strategy::Fafo;
  if (d.strategy != Strategy::Ar) ImGui::SliderInt(window ? "W: window columns" : "W: guesses", &d.window, 1, 64);
  if (window) {
    ImGui::SliderInt("N: n-gram size", &d.ngram, 2, 16);
    ImGui::SliderInt("G: candidates per step", &d.guesses, 0, 64);
  }
  if (d.strategy == Strategy::Fafo) {
    ImGui::SliderInt("k: lookback", &d.lookback, 1, 16);
    // The policies that need no draft model (fafo::kv_policy_names).
    static const std::vector<std::string> names = kv_policy_names(/*with_draft=*/false);
    static const std::vector<const char*> items = [] {
      std::vector<const char*> out;
      for (const std::string& n : names) out.push_back(n.c_str());
      return out;
    }();
    int policy = 0;
    for (size_t i = 0; i < names.size(); ++i)
      if (kv.name == names[i]) policy = static_cast<int>(i);
    if (ImGui::Combo("KV policy", &policy, items.data(), static_cast<int>(items.size()))) kv.name = names[policy];
    ImGui::InputInt("KV budget", &kv.budget, 4, 64);
    kv.budget = std::max(kv.budget, 1);
  }
  return picked;
}

void sampling_settings(GenerationOptions& g) {
  SamplerOptions& sp = g.sampling;
  ImGui::SliderFloat("temperature", &sp.temperature, 0.0f, 2.0f, sp.temperature <= 0.0f ? "0 (greedy)" : "%.2f");
  if (sp.temperature > 0.0f) {
    ImGui::SliderInt("top-k (0: off)", &sp.top_k, 0, 200);
    ImGui::SliderFloat("top-p", &sp.top_p, 0.0f, 1.0f, "%.2f");
    ImGui::SliderFloat("min-p", &sp.min_p, 0.0f, 1.0f, "%.2f");
    int seed = static_cast<int>(sp.seed & 0x7fffffff);
    if (ImGui::InputInt("seed", &seed)) sp.seed = static_cast<uint64_t>(std::max(seed, 0));
  }
  ImGui::InputInt("max tokens (-1: no limit)", &g.n_predict, 16, 128);
}

void conversation_settings(StudioState& s) {
  StudioSettings& st = s.settings;
  const std::string current = st.open.chat_template.empty() ? "the model's" : st.open.chat_template;
  if (ImGui::BeginCombo("chat template", current.c_str())) {
    if (ImGui::Selectable("the model's", st.open.chat_template.empty())) st.open.chat_template.clear();
    for (const std::string& n : builtin_chat_template_names())
      if (ImGui::Selectable(n.c_str(), st.open.chat_template == n)) st.open.chat_template = n;
    ImGui::EndCombo();
  }
  ImGui::TextUnformatted("system message");
  ImGui::InputTextMultiline("##system", &st.system, ImVec2(-1.0f, ImGui::GetTextLineHeight() * 3.5f));
  ImGui::BeginDisabled(!engine_free(s) || !s.ev.has_model);
  if (ImGui::Button("New chat with these")) queue_new_chat(s);
  ImGui::EndDisabled();
}

}  // namespace

void draw_decoding_panel(StudioState& s) {
  if (begin_panel(s, "Decoding")) {
    GenerationOptions& g = s.settings.generation;
    ImGui::PushItemWidth(ImGui::GetContentRegionAvail().x * 0.5f);
    ImGui::TextDisabled("decoding (every strategy gives the same text as ar)");
    if (strategy_settings(g.decoding, g.kv)) s.settings.strategy_chosen = true;
    if (!s.settings.strategy_chosen && g.decoding.strategy == Strategy::Auto)
      ImGui::TextDisabled("the chat runs auto; the Debugger runs fafo until a strategy is picked");
    ImGui::Separator();
    ImGui::TextDisabled("sampling");
    sampling_settings(g);
    ImGui::Separator();
    ImGui::TextDisabled("conversation");
    conversation_settings(s);
    ImGui::PopItemWidth();
    const std::string problem = settings_problem(s.settings);
    if (!problem.empty()) ImGui::TextColored(ImVec4(1, 0.4f, 0.4f, 1), "%s", problem.c_str());
    report_items(s, 1);
  }
  end_panel();
}

}  // namespace fafo::studio
