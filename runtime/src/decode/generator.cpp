// The decoding loop shared by every strategy: build the step (StepLayout), run the
// model, verify (verifier), keep what is emitted, commit its KV, update the strategy's
// state (2D window, candidate pool, Jacobi guesses) and report a StepTrace.
#include "fafo/generator.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <stdexcept>

#include "decode/step_layout.h"
#include "decode/strategy_state.h"
#include "decode/verifier.h"

namespace fafo {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::Length: return "length";
    case StopReason::EndOfGeneration: return "end_of_generation";
    case StopReason::ContextFull: return "context_full";
    case StopReason::Cancelled: return "cancelled";
  }
  return "unknown";
}

std::vector<float> prefill(Model& model, const std::vector<int32_t>& tokens, int32_t chunk) {
  if (tokens.empty()) throw std::invalid_argument("prefill: no tokens");
  if (chunk <= 0) throw std::invalid_argument("prefill: chunk must be positive");
  std::vector<float> logits;
  for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(chunk)) {
    const size_t end = std::min(tokens.size(), begin + static_cast<size_t>(chunk));
    StepBatch batch = StepBatch::causal(std::vector<int32_t>(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                                                             tokens.begin() + static_cast<std::ptrdiff_t>(end)),
                                        model.n_past());
    logits = model.forward(batch);
    model.commit(batch.size());
  }
  return logits;
}

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

}  // namespace

GenerationResult generate(Model& model, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                          const GenerationOptions& options, const TokenCallback& on_token) {
  if (prompt.empty()) throw std::invalid_argument("the prompt is empty (no tokens)");
  options.decoding.validate();
  if (!options.keep_context) model.truncate(0);
  const int64_t room = model.n_ctx() - model.n_past();
  if (static_cast<int64_t>(prompt.size()) >= room)
    throw std::length_error("the prompt has " + std::to_string(prompt.size()) + " tokens but the context holds " +
                            (model.n_past() ? std::to_string(room) + " more" : std::to_string(model.n_ctx())) +
                            " (including at least one generated token); use a shorter prompt or a larger --ctx-size");
  GenerationResult result;
  result.prompt_ids = prompt;
  Sampler sampler(options.sampling);
  std::mt19937_64 accept_rng(options.sampling.seed ^ 0x5eedull);
  const int32_t n_vocab = model.config().n_vocab;
  const DecodingOptions& dec = options.decoding;

  // FAFO's fumble rows read the region its policy keeps; other strategies need none.
  model.set_kv_policy(dec.strategy == Strategy::Fafo ? make_kv_policy(options.kv) : nullptr);
  auto t0 = Clock::now();
  std::vector<float> logits = prefill(model, prompt, options.prefill_chunk);
  model.end_prefill();
  auto t1 = Clock::now();
  result.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  if (options.n_predict == 0) return result;

  const bool use_top_k = !sampler.greedy() && options.sampling.top_k > 0 && options.sampling.top_k <= kMaxTopK &&
                         options.read_top_k_only;
  StrategyState state(dec, prompt);
  std::vector<int32_t> history = prompt;  // the text the pool is searched with (ends with the input token)

  // Emits tokens through the callback; returns how many were kept and sets `stop`.
  auto emit = [&](const std::vector<int32_t>& tokens, std::optional<StopReason>& stop) {
    size_t kept = 0;
    for (int32_t t : tokens) {
      result.ids.push_back(t);
      history.push_back(t);
      ++kept;
      if (on_token && !on_token(t)) {
        stop = StopReason::Cancelled;
        break;
      }
      if (options.stop_at_end_of_generation && tokenizer.is_end_of_generation(t)) {
        stop = StopReason::EndOfGeneration;
        break;
      }
      if (options.n_predict >= 0 && static_cast<int32_t>(result.ids.size()) >= options.n_predict) {
        stop = StopReason::Length;
        break;
      }
    }
    return kept;
  };

  std::optional<StopReason> stop;
  {
    const int32_t first = sampler.greedy() ? argmax(logits.data(), n_vocab) : sampler.sample(logits.data(), n_vocab);
    result.n_steps = 1;  // the prefill step produced the first token
    emit({first}, stop);
    if (options.on_step) {
      StepTrace t;
      t.step = 0;
      t.strategy = dec.strategy;
      t.n_past = 0;
      t.batch_size = static_cast<int32_t>(prompt.size());
      t.accepted = {first};
      t.accepted_sources = {TokenSource{}};
      t.forward_ms = result.prefill_seconds * 1e3;
      options.on_step(t);
    }
  }

  while (!stop) {
    if (model.n_past() >= model.n_ctx()) {
      stop = StopReason::ContextFull;
      break;
    }
    const int32_t input = result.ids.back();
    const int32_t step = result.n_steps;
    StepTrace trace;
    trace.step = step;
    trace.strategy = dec.strategy;
    trace.n_past = model.n_past();
    if (const LookaheadWindow* w = state.window()) trace.window_before = w->grid();

    auto tb = Clock::now();
    StepLayout layout(model.n_past(), input);
    state.build(layout, history, trace);
    bool full_step = true;
    // Near the end of the context, or where the device cannot hold logits for every row
    // of the step (a huge vocabulary on a small-buffer device), a plain step fits.
    if (layout.size() > 1 && (model.n_past() + layout.size() > model.n_ctx() ||
                              static_cast<int32_t>(layout.batch().logit_rows().size()) > model.max_logit_rows())) {
      layout = StepLayout(model.n_past(), input);
      trace.candidates.clear();
      full_step = false;
    }
    trace.batch_size = layout.size();
    trace.build_ms = ms_since(tb);

    auto tf = Clock::now();
    // Greedy steps need only each row's argmax, and top-k sampling only each row's k best
    // logits, which the backend computes (on a GPU: a few bytes per row are read back
    // instead of n_vocab floats).
    if (sampler.greedy()) {
      layout.set_argmax(model.forward_argmax(layout.batch()));
    } else if (use_top_k) {
      layout.set_top_k(model.forward_top_k(layout.batch(), options.sampling.top_k), n_vocab);
    } else {
      layout.set_logits(model.forward(layout.batch()), n_vocab);
    }
    trace.forward_ms = ms_since(tf);

    auto tv = Clock::now();
    const int64_t swaps_before = model.kv_swaps();
    const Verdict verdict = sampler.greedy() ? verify_greedy(layout) : verify_sampling(layout, sampler, accept_rng);
    const size_t kept = emit(verdict.tokens, stop);
    // The input and every kept token but the last are in the cache now.
    model.commit_rows(std::vector<int32_t>(verdict.commit_rows.begin(), verdict.commit_rows.begin() + static_cast<std::ptrdiff_t>(kept)));
    ++result.n_steps;
    if (result.accepted_histogram.size() <= kept) result.accepted_histogram.resize(kept + 1, 0);
    ++result.accepted_histogram[kept];

    const std::vector<int32_t> emitted(verdict.tokens.begin(), verdict.tokens.begin() + static_cast<std::ptrdiff_t>(kept));
    if (full_step) state.update(layout, input, emitted, history, step, trace);
    trace.verify_ms = ms_since(tv);

    if (options.on_step) {
      for (size_t g = 0; g < trace.candidates.size() && g < verdict.match_lengths.size(); ++g)
        trace.candidates[g].match_length = verdict.match_lengths[g];
      trace.accepted = emitted;
      for (size_t k = 0; k < emitted.size(); ++k) {
        TokenSource src;
        if (k + 1 < verdict.commit_rows.size()) {  // a verified candidate token, not the step's own prediction
          src.kind = TokenSource::Candidate;
          if (verdict.winner >= 0 && static_cast<size_t>(verdict.winner) < trace.candidates.size()) {
            src.origin_step = trace.candidates[static_cast<size_t>(verdict.winner)].origin_step;
            src.origin_column = trace.candidates[static_cast<size_t>(verdict.winner)].origin_column;
          }
        }
        trace.accepted_sources.push_back(src);
      }
      if (const LookaheadWindow* w = state.window()) trace.window_after = w->grid();
      if (model.kv_policy()) trace.kv_region = model.kv_layout().region_entries();
      trace.kv_swaps = model.kv_swaps() - swaps_before;
      trace.pool_keys = state.pool().key_count();
      trace.pool_ngrams = state.pool().ngram_count();
      trace.pool_lookups = state.pool().lookups();
      trace.pool_hits = state.pool().hits();
      if (state.uses_window()) trace.pool_snapshot = state.pool().snapshot(dec.trace_pool_keys);
      trace.kv_layers = model.config().n_layer;
      trace.kv_dense_layers = model.kv_policy() ? model.kv_policy()->dense_layers() : 0;
      options.on_step(trace);
    }
  }
  result.stop = *stop;
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  result.pool_keys = state.pool().key_count();
  result.pool_ngrams = state.pool().ngram_count();
  result.pool_lookups = state.pool().lookups();
  result.pool_hits = state.pool().hits();
  return result;
}

}  // namespace fafo
