// The data each fafo-studio panel shows, derived from a run's StepTraces. Plain C++
// (no ImGui), so the derivations are unit-tested on their own.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "fafo/decoding.h"

namespace fafo {
class Tokenizer;
}

namespace fafo::studio {

// Text of a token id for display; an empty function shows ids only.
using TokenText = std::function<std::string(int32_t)>;
// Every piece of the tokenizer's vocabulary, looked up by id ("<id>" when out of range).
TokenText make_token_text(const Tokenizer& tokenizer);
// `text` applied to `id`, or "#id" when `text` is empty.
std::string token_label(const TokenText& text, int32_t id);

// (a) The 2D window after a step: rows x columns of tokens. The rows shifted up by
// one and the last row holds the guesses this step produced: those cells are new.
struct WindowCell {
  int32_t token = 0;
  bool is_new = false;
};
struct WindowView {
  int32_t step = 0;
  int32_t rows = 0;
  int32_t columns = 0;
  std::vector<std::vector<WindowCell>> cells;  // [row][column]
};
WindowView window_view(const StepTrace& t);

// (b) The candidates verified in a step (padding left out), with where they came from.
struct CandidateRow {
  std::vector<int32_t> tokens;
  int32_t key_length = 0;
  int32_t match_length = 0;
  int32_t origin_step = -1;
  int32_t origin_column = -1;
  bool accepted = false;  // the first candidate with the longest match (> 0)
};
struct CandidateView {
  int32_t step = 0;
  int32_t best_match = 0;
  std::vector<CandidateRow> rows;
};
CandidateView candidate_view(const StepTrace& t);

// (c) Every generated token with the step that produced it and how.
struct TranscriptToken {
  int32_t token = 0;
  int32_t step = 0;       // StepTrace::step of the step that emitted it
  int32_t step_index = 0; // index of that step in the trace sequence
  TokenSource source;
  std::string text;       // empty without a TokenText
};
struct TranscriptView {
  std::vector<TranscriptToken> tokens;
  std::vector<int32_t> accepted_per_step;  // tokens emitted by each step, in order
  int64_t from_candidates = 0;             // tokens whose source is an accepted candidate
};
TranscriptView transcript_view(std::span<const StepTrace> traces, const TokenText& text = {});

// (d) FAFO's compressed KV region after a step over the whole context.
struct KvMapView {
  int32_t step = 0;
  int32_t context = 0;               // committed entries after the step (n_past + accepted)
  std::vector<int32_t> region;       // logical entries in physical order
  std::vector<uint8_t> in_region;    // [position] for 0..context-1 (positions past it included when listed)
  std::vector<int32_t> entered;      // entries in the region now but not after the previous step
  int64_t swaps = 0;
};
// `previous` is the step before (nullptr for the first).
KvMapView kv_map_view(const StepTrace& t, const StepTrace* previous);

// (e) Chart series, one value per step.
struct ChartSeries {
  std::vector<float> tau;              // tokens per step so far (cumulative, prefill step included)
  std::vector<float> tokens_per_step;  // tokens each step emitted
  std::vector<float> build_ms, forward_ms, verify_ms;
  std::vector<float> total_ms;         // build + forward + verify
};
ChartSeries chart_series(std::span<const StepTrace> traces);

}  // namespace fafo::studio
