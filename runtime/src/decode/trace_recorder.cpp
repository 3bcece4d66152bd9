#include "decode/trace_recorder.h"

#include <utility>

namespace fafo {

TraceRecorder::TraceRecorder(const StepCallback& on_step, const DecodingOptions& decoding, const Sequence& model,
                             const StrategyState& state)
    : on_step_(on_step), decoding_(decoding), model_(model), state_(&state) {}

void TraceRecorder::prefill_done(int32_t prompt_size, int32_t first, double ms) {
  if (!on_step_) return;
  StepTrace t;
  t.step = 0;
  t.strategy = decoding_.strategy;
  t.n_past = model_.n_past() - prompt_size;  // what the cache held before: a chat's earlier turns
  t.batch_size = prompt_size;
  t.accepted = {first};
  t.accepted_sources = {TokenSource{}};
  t.forward_ms = ms;
  on_step_(t);
}

void TraceRecorder::step_started(int32_t step, const StrategyState& state, const std::string& auto_choice) {
  state_ = &state;
  if (!on_step_) return;
  trace_ = StepTrace{};
  trace_.step = step;
  trace_.strategy = state.options().strategy;
  trace_.auto_choice = auto_choice;
  trace_.n_past = model_.n_past();
  if (const LookaheadWindow* w = state_->window()) trace_.window_before = w->grid();
  mark_ = Clock::now();
}

void TraceRecorder::step_built(const StepLayout& layout, bool full) {
  if (!on_step_) return;
  full_step_ = full;
  if (full) add_candidates(layout);
  trace_.batch_size = layout.size();
  trace_.build_ms = lap_ms();
}

void TraceRecorder::forward_done() {
  if (!on_step_) return;
  trace_.forward_ms = lap_ms();
  swaps_before_ = model_.kv_swaps();
}

void TraceRecorder::step_finished(const Verdict& verdict, const std::vector<int32_t>& emitted) {
  if (!on_step_) return;
  trace_.verify_ms = lap_ms();
  if (full_step_) trace_.new_guesses = state_->new_guesses();
  add_verdict(verdict, emitted);
  add_state_after();
  on_step_(trace_);
}

double TraceRecorder::lap_ms() {
  const Clock::time_point now = Clock::now();
  const double ms = std::chrono::duration<double, std::milli>(now - mark_).count();
  mark_ = now;
  return ms;
}

// The layout's chains are the strategy's candidates: Jacobi's guesses, or the pool's
// retrieved n-grams (with their key length and origin) followed by FAFO's padding.
void TraceRecorder::add_candidates(const StepLayout& layout) {
  const std::vector<RetrievedCandidate>& retrieved = state_->retrieved();
  for (size_t g = 0; g < layout.chains().size(); ++g) {
    const ChainRows& chain = layout.chains()[g];
    CandidateTrace c;
    c.tokens = chain.tokens;
    c.padding = chain.padding;
    if (!chain.padding && g < retrieved.size()) {
      c.key_length = retrieved[g].key_length;
      c.origin_step = retrieved[g].origin_step;
      c.origin_column = retrieved[g].origin_column;
      c.source = retrieved[g].source;
    } else if (state_->options().strategy == Strategy::Jacobi) {
      c.source = CandidateSource::Jacobi;
    }
    trace_.candidates.push_back(std::move(c));
  }
}

// Match lengths per candidate, and the emitted tokens with their source: every token
// but the step's own last prediction came from the winning candidate.
void TraceRecorder::add_verdict(const Verdict& verdict, const std::vector<int32_t>& emitted) {
  for (size_t g = 0; g < trace_.candidates.size() && g < verdict.match_lengths.size(); ++g)
    trace_.candidates[g].match_length = verdict.match_lengths[g];
  trace_.accepted = emitted;
  for (size_t k = 0; k < emitted.size(); ++k) {
    TokenSource src;
    if (k + 1 < verdict.commit_rows.size()) {  // a verified candidate token, not the step's own prediction
      src.kind = TokenSource::Candidate;
      if (verdict.winner >= 0 && static_cast<size_t>(verdict.winner) < trace_.candidates.size()) {
        src.origin_step = trace_.candidates[static_cast<size_t>(verdict.winner)].origin_step;
        src.origin_column = trace_.candidates[static_cast<size_t>(verdict.winner)].origin_column;
        src.source = trace_.candidates[static_cast<size_t>(verdict.winner)].source;
      }
    }
    trace_.accepted_sources.push_back(src);
  }
}

// The window, the KV region and the candidate pool as the step left them.
void TraceRecorder::add_state_after() {
  if (const LookaheadWindow* w = state_->window()) trace_.window_after = w->grid();
  const KvPolicy* policy = model_.kv_policy();
  if (policy) trace_.kv_region = model_.kv_layout().region_entries();
  trace_.kv_swaps = model_.kv_swaps() - swaps_before_;
  const CandidatePool& pool = state_->pool();
  trace_.pool_keys = pool.key_count();
  trace_.pool_ngrams = pool.ngram_count();
  trace_.pool_lookups = pool.lookups();
  trace_.pool_hits = pool.hits();
  if (state_->uses_window()) trace_.pool_snapshot = pool.snapshot(decoding_.trace_pool_keys);
  trace_.kv_layers = model_.config().n_layer;
  trace_.kv_dense_layers = policy ? policy->dense_layers() : 0;
  trace_.kv_type = kv_cache_type_name(model_.kv_type());
  trace_.kv_bytes_per_token = static_cast<int64_t>(model_.kv_bytes_per_token());
  const ModelConfig& c = model_.config();
  trace_.kv_windows.clear();
  if (c.sliding_window > 0)
    for (int32_t l = 0; l < c.n_layer; ++l) trace_.kv_windows.push_back(c.window_layer(l) ? c.sliding_window : 0);
  trace_.kv_rings.clear();
  if (model_.kv_ring_bytes() > 0)
    for (int32_t l = 0; l < c.n_layer; ++l) trace_.kv_rings.push_back(model_.kv_ring_of(l));
}

}  // namespace fafo
