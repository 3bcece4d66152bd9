#include "view_models.h"

#include <algorithm>
#include <memory>
#include <unordered_set>

#include "fafo/tokenizer.h"

namespace fafo::studio {

TokenText make_token_text(const Tokenizer& tokenizer) {
  auto pieces = std::make_shared<std::vector<std::string>>();
  const auto n = static_cast<int32_t>(tokenizer.vocab().size());
  pieces->reserve(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) pieces->push_back(tokenizer.token_to_piece(id, true));
  return [pieces](int32_t id) {
    if (id >= 0 && id < static_cast<int32_t>(pieces->size())) return (*pieces)[static_cast<size_t>(id)];
    std::string unknown = "<";  // (built piecewise: GCC 12 warns falsely on "<" + s at -O3)
    unknown += std::to_string(id);
    unknown += '>';
    return unknown;
  };
}

std::string token_label(const TokenText& text, int32_t id) {
  if (text) return text(id);
  std::string label = "#";
  label += std::to_string(id);
  return label;
}

WindowView window_view(const StepTrace& t) {
  WindowView v;
  v.step = t.step;
  v.rows = static_cast<int32_t>(t.window_after.size());
  for (const auto& row : t.window_after) v.columns = std::max(v.columns, static_cast<int32_t>(row.size()));
  for (int32_t r = 0; r < v.rows; ++r) {
    std::vector<WindowCell> cells;
    for (int32_t token : t.window_after[static_cast<size_t>(r)]) cells.push_back({token, r == v.rows - 1});
    v.cells.push_back(std::move(cells));
  }
  return v;
}

CandidateView candidate_view(const StepTrace& t) {
  CandidateView v;
  v.step = t.step;
  int best_index = -1;
  for (const CandidateTrace& c : t.candidates) {
    if (c.padding) continue;
    if (c.match_length > v.best_match) {
      v.best_match = c.match_length;
      best_index = static_cast<int>(v.rows.size());
    }
    v.rows.push_back({c.tokens, c.key_length, c.match_length, c.origin_step, c.origin_column, false, c.source});
  }
  if (best_index >= 0) v.rows[static_cast<size_t>(best_index)].accepted = true;
  return v;
}

TranscriptView transcript_view(std::span<const StepTrace> traces, const TokenText& text) {
  TranscriptView v;
  for (size_t i = 0; i < traces.size(); ++i) {
    const StepTrace& t = traces[i];
    v.accepted_per_step.push_back(static_cast<int32_t>(t.accepted.size()));
    for (size_t k = 0; k < t.accepted.size(); ++k) {
      TranscriptToken tok;
      tok.token = t.accepted[k];
      tok.step = t.step;
      tok.step_index = static_cast<int32_t>(i);
      if (k < t.accepted_sources.size()) tok.source = t.accepted_sources[k];
      if (tok.source.kind == TokenSource::Candidate) ++v.from_candidates;
      if (text) tok.text = text(tok.token);
      v.tokens.push_back(std::move(tok));
    }
  }
  return v;
}

KvMapView kv_map_view(const StepTrace& t, const StepTrace* previous) {
  KvMapView v;
  v.step = t.step;
  const bool prefill = t.step == 0 && t.batch_size > 0;  // a trace without a batch size: as a decoding step
  v.context = t.n_past + (prefill ? t.batch_size : static_cast<int32_t>(t.accepted.size()));
  v.region = t.kv_region;
  v.swaps = t.kv_swaps;
  int32_t extent = v.context;
  for (int32_t e : t.kv_region) extent = std::max(extent, e + 1);
  v.in_region.assign(static_cast<size_t>(std::max(extent, 0)), 0);
  for (int32_t e : t.kv_region)
    if (e >= 0) v.in_region[static_cast<size_t>(e)] = 1;
  std::unordered_set<int32_t> before;
  if (previous) before.insert(previous->kv_region.begin(), previous->kv_region.end());
  for (int32_t e : t.kv_region)
    if (!before.count(e)) v.entered.push_back(e);
  return v;
}

ChartSeries chart_series(std::span<const StepTrace> traces) {
  ChartSeries s;
  int64_t tokens = 0;
  for (size_t i = 0; i < traces.size(); ++i) {
    const StepTrace& t = traces[i];
    tokens += static_cast<int64_t>(t.accepted.size());
    s.tau.push_back(static_cast<float>(static_cast<double>(tokens) / static_cast<double>(i + 1)));
    s.tokens_per_step.push_back(static_cast<float>(t.accepted.size()));
    s.build_ms.push_back(static_cast<float>(t.build_ms));
    s.forward_ms.push_back(static_cast<float>(t.forward_ms));
    s.verify_ms.push_back(static_cast<float>(t.verify_ms));
    s.total_ms.push_back(static_cast<float>(t.build_ms + t.forward_ms + t.verify_ms));
    int32_t choice = -1;
    if (!t.auto_choice.empty()) {
      const std::string label = auto_choice_label(t.auto_choice);
      const auto it = std::find(s.choice_labels.begin(), s.choice_labels.end(), label);
      choice = static_cast<int32_t>(it - s.choice_labels.begin());
      if (it == s.choice_labels.end()) s.choice_labels.push_back(label);
    }
    s.choice.push_back(choice);
  }
  if (s.choice_labels.empty()) s.choice.clear();
  return s;
}

std::string auto_choice_label(const std::string& auto_choice) {
  return auto_choice.substr(0, std::min(auto_choice.find(" ("), auto_choice.find(':')));
}

}  // namespace fafo::studio
