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
  CandidateSource source = CandidateSource::Window;
};
struct CandidateView {
  int32_t step = 0;
  int32_t best_match = 0;
  std::vector<CandidateRow> rows;
};
CandidateView candidate_view(const StepTrace& t);

// (b2) The candidate pool after a step, as far as the trace's bounded snapshot shows
// it: the keys this step's lookup used, then the most recently used ones, with their
// n-grams, LRU ages and hit counts; the n-grams tried this step are marked with their
// match lengths.
struct PoolNgramRow {
  std::vector<int32_t> tokens;
  int64_t hits = 0;
  int64_t age = 0;              // steps since last added, refreshed or retrieved
  int32_t origin_step = -1;
  int32_t origin_column = -1;
  int32_t lru_rank = 0;         // 0: most recently used under its key (the last is evicted next)
  int32_t tried_match = -1;     // match length when it was a candidate this step, else -1
};
struct PoolKeyRow {
  std::vector<int32_t> key;
  int64_t hits = 0;
  int64_t age = 0;
  bool retrieved = false;       // this step's lookup used the key
  bool supplied = false;        // a candidate tried this step came from this key
  std::vector<PoolNgramRow> ngrams;
};
struct PoolView {
  int32_t step = 0;
  int64_t keys = 0, ngrams = 0;            // the whole pool
  int64_t lookups = 0, hits = 0;           // cumulative
  double hit_rate = 0.0;                   // hits / lookups
  int32_t tried = 0;                       // candidates tried this step (padding left out)
  int32_t tried_in_snapshot = 0;           // of them, found among the shown keys
  std::vector<PoolKeyRow> rows;            // most recently used key first
};
PoolView pool_view(const StepTrace& t);

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
  // Entries in the KV cache after the step: n_past + accepted for a decoding step (its
  // input token, the last one emitted before it, and the accepted tokens but the last,
  // which is the next step's input); the prompt after the prefill step (step 0: n_past +
  // batch_size, its first token not in the cache yet). The next step's n_past.
  int32_t context = 0;
  std::vector<int32_t> region;       // logical entries in physical order
  std::vector<uint8_t> in_region;    // [position] for 0..context-1 (positions past it included when listed)
  std::vector<int32_t> entered;      // entries in the region now but not after the previous step
  int64_t swaps = 0;
};
// `previous` is the step before (nullptr for the first).
KvMapView kv_map_view(const StepTrace& t, const StepTrace* previous);

// (d2) The KV cache per layer. The region's selection (and its swaps) is the same in
// every layer; in the first `dense_layers` layers the fumble rows nevertheless read
// every entry; in a sliding-window layer no row reads the entries before its window.
// Entries are grouped into at most `max_blocks` blocks of `block` entries.
enum class KvCell : uint8_t {
  Rest,     // not read by the fumble rows (verification rows read it)
  Region,   // in the compressed region: read by the fumble rows
  Entered,  // swapped into the region this step
  Dense,    // a dense layer: the fumble rows read it although it is not in the region
  OutsideWindow,  // a sliding-window layer: before the window of the step's last row, read by no row
};
struct KvBlock {
  int32_t first = 0, count = 0;       // logical entries [first, first + count)
  int32_t in_region = 0, entered = 0; // of them
};
struct KvLayerRow {
  int32_t layer = 0;
  bool dense = false;
  int32_t window = 0;                 // a sliding-window layer's window (0: global)
  int32_t ring = 0;                   // the entries its cache keeps as a ring (0: the whole context)
  std::vector<KvCell> cells;          // per block: Entered > Region > Rest (Dense in dense layers)
};
struct KvLayersView {
  int32_t step = 0;
  int32_t context = 0;
  int32_t layers = 0;                 // 0 when the trace does not say (older traces): one row for all
  int32_t dense_layers = 0;
  std::string kv_type;                // the cache's type ("q8_0"; "" in an older trace)
  int64_t bytes_per_token = 0;        // every layer's keys and values for one token
  int32_t block = 1;                  // entries per block
  bool has_region = false;            // false: the fumble rows (if any) read everything
  std::vector<KvBlock> blocks;
  std::vector<KvLayerRow> rows;       // one per layer (one when layers is 0)
  // The region in physical order: the logical entry in each slot, and whether the slot
  // received it this step (swapped in from the rest).
  std::vector<int32_t> slots;
  std::vector<uint8_t> slot_swapped;
  int64_t swaps = 0;
};
KvLayersView kv_layers_view(const StepTrace& t, const StepTrace* previous, int32_t max_blocks = 256);

// (e) Chart series, one value per step.
struct ChartSeries {
  std::vector<float> tau;              // tokens per step so far (cumulative, prefill step included)
  std::vector<float> tokens_per_step;  // tokens each step emitted
  std::vector<float> build_ms, forward_ms, verify_ms;
  std::vector<float> total_ms;         // build + forward + verify
  // --strategy auto: the candidate each step ran, as an index into choice_labels (labels
  // in order of first use, e.g. "ar", "fafo W8 N5 G8"); -1 where a step recorded none
  // (the prefill step, other strategies). Empty when no step recorded one.
  std::vector<int32_t> choice;
  std::vector<std::string> choice_labels;
};
// The candidate an auto_choice line names: what comes before " (" or ":".
std::string auto_choice_label(const std::string& auto_choice);
ChartSeries chart_series(std::span<const StepTrace> traces);

}  // namespace fafo::studio
