// The decoding loop shared by every strategy. Each step: build it (the strategy's
// StepLayout), run the model, verify (verifier), emit what is accepted, commit its KV,
// update the strategy's state (2D window, candidate pool, Jacobi guesses), and notify
// the trace recorder (trace_recorder.h), which reports a StepTrace when a step callback
// is set.
#include "fafo/generator.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>

#include "decode/drafter.h"
#include "decode/step_layout.h"
#include "decode/strategy_state.h"
#include "decode/trace_recorder.h"
#include "decode/verifier.h"
#include "fafo/auto_strategy.h"
#include "fafo/corpus_index.h"
#include "fafo/step_joiner.h"

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

std::vector<float> prefill(Sequence& model, const std::vector<int32_t>& tokens, int32_t chunk,
                           const std::function<bool()>& should_stop) {
  if (tokens.empty()) throw std::invalid_argument("prefill: no tokens");
  if (chunk <= 0) throw std::invalid_argument("prefill: chunk must be positive");
  std::vector<float> logits;
  for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(chunk)) {
    if (should_stop && should_stop()) return {};
    const size_t end = std::min(tokens.size(), begin + static_cast<size_t>(chunk));
    StepBatch batch = StepBatch::causal(std::vector<int32_t>(tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                                                             tokens.begin() + static_cast<std::ptrdiff_t>(end)),
                                        model.n_past());
    logits = model.forward(batch);
    model.commit(batch.size());
  }
  return logits;
}

std::vector<float> prefill_with_lookahead(Sequence& model, const std::vector<int32_t>& tokens,
                                          const std::vector<int32_t>& lookahead, int32_t chunk,
                                          const std::function<bool()>& should_stop) {
  if (lookahead.empty()) return prefill(model, tokens, chunk, should_stop);
  if (tokens.empty()) throw std::invalid_argument("prefill: no tokens");
  // The last step holds plain prefill's last piece where the lookahead fits beside it.
  const size_t piece = static_cast<size_t>(std::max(chunk, 1));
  const size_t room = static_cast<size_t>(std::max<int32_t>(1, Sequence::kMaxStepTokens - static_cast<int32_t>(lookahead.size())));
  const size_t tail = std::min(tokens.size() - (tokens.size() - 1) / piece * piece, room);
  if (tail < tokens.size() &&
      prefill(model, std::vector<int32_t>(tokens.begin(), tokens.end() - static_cast<std::ptrdiff_t>(tail)), chunk,
              should_stop)
          .empty())
    return {};
  if (should_stop && should_stop()) return {};
  // One causal step: the prompt's last `tail` tokens (logits after the last of them),
  // then the lookahead tokens; only the prompt's are kept.
  StepBatch step;
  std::vector<int32_t> sees;
  std::vector<int32_t> all(tokens.end() - static_cast<std::ptrdiff_t>(tail), tokens.end());
  all.insert(all.end(), lookahead.begin(), lookahead.end());
  for (size_t i = 0; i < all.size(); ++i) {
    step.add(all[i], model.n_past() + static_cast<int32_t>(i), sees, i + 1 == tail);
    sees.push_back(static_cast<int32_t>(i));
  }
  std::vector<float> logits = model.forward(step);
  model.commit(static_cast<int32_t>(tail));
  return logits;
}

std::vector<float> prefill_prompt(Sequence& model, const std::vector<int32_t>& prompt, const KvPolicyOptions* kv, bool drop,
                                  Sequence* draft, int32_t chunk, const std::vector<int32_t>& context,
                                  const std::function<bool()>& should_stop) {
  model.set_kv_policy(kv ? make_kv_policy(*kv) : nullptr, drop);
  std::vector<int32_t> lookahead;  // SpecKV: the draft model's greedy continuation of the text
  if (kv && kv->name == "speckv") {
    if (!draft) throw std::invalid_argument("the speckv KV policy needs a draft model for its lookahead tokens");
    std::vector<int32_t> text = context;
    text.insert(text.end(), prompt.begin(), prompt.end());
    // As many as the context has room for after the prompt.
    const int32_t room = model.n_ctx() - model.n_past() - static_cast<int32_t>(prompt.size());
    if (room > 0) lookahead = Drafter(*draft).draft(text, std::min(kv->lookahead, room), 0, Sampler(SamplerOptions{}), 0);
  }
  std::vector<float> logits = prefill_with_lookahead(model, prompt, lookahead, chunk, should_stop);
  if (!logits.empty()) model.end_prefill();
  return logits;
}

bool scoring_uses_draft_model(const DecodingOptions& d, const KvPolicyOptions& kv, bool kv_drop, bool prompt_compress) {
  return prompt_compress ||
         (kv.name == "speckv" && (kv_drop || d.strategy == Strategy::Fafo || d.strategy == Strategy::Auto));
}

std::string kv_drop_label(const KvPolicyOptions& kv) { return "kv-drop " + kv.name + " budget " + std::to_string(kv.budget); }

bool scoring_uses_draft_model(const GenerationOptions& o) {
  return scoring_uses_draft_model(o.decoding, o.kv, o.kv_drop, o.prompt_compress.enabled());
}

namespace {

using Clock = std::chrono::steady_clock;

// Throws std::length_error when the prompt leaves no room, after what the model holds,
// for at least one generated token.
void check_prompt_fits(const Sequence& model, size_t prompt_size) {
  const int64_t room = model.n_ctx() - model.n_past();
  if (static_cast<int64_t>(prompt_size) >= room)
    throw std::length_error("the prompt has " + std::to_string(prompt_size) + " tokens but the context holds " +
                            (model.n_past() ? std::to_string(room) + " more" : std::to_string(model.n_ctx())) +
                            " (including at least one generated token); use a shorter prompt or a larger --ctx-size");
}

// Whether other sequences share this sequence's steps now (a server's slots joined by
// a StepJoiner, more than one decoding). Auto then decodes plainly: its step-cost curve
// t(T) was measured for one sequence alone, and in a step that already carries other
// sequences' rows the weights are read once for all of them, so a multi-token
// candidate's extra rows cost their full compute instead of riding on the memory-bound
// weight read (on 2 cores the step of 4 decode rows is already compute-bound). Plain
// decoding keeps each slot's row in every joined step; the output is the same either way.
bool shares_steps(const Sequence& model) { return model.step_joiner() && model.step_joiner()->active() > 1; }

// Whether the step can run as laid out: the context has room for every row, and the
// device can hold logits for every row that wants them (a huge vocabulary on a
// small-buffer device holds few). A plain step (only the input token) always can.
bool step_fits(const Sequence& model, const StepLayout& layout) {
  return layout.size() == 1 || (model.n_past() + layout.size() <= model.n_ctx() &&
                                static_cast<int32_t>(layout.batch().logit_rows().size()) <= model.max_logit_rows());
}

// Runs the step's forward pass and hands its results to the layout. Greedy steps need
// only each row's argmax, and top-k sampling (top_k > 0) only each row's k best logits,
// which the backend computes (on a GPU: a few bytes per row are read back instead of
// n_vocab floats); other sampling reads whole rows.
void forward_step(Sequence& model, StepLayout& layout, const Sampler& sampler, int32_t top_k) {
  const int32_t n_vocab = model.config().n_vocab;
  if (sampler.greedy()) {
    layout.set_argmax(model.forward_argmax(layout.batch()));
  } else if (top_k > 0) {
    layout.set_top_k(model.forward_top_k(layout.batch(), top_k), n_vocab);
  } else {
    layout.set_logits(model.forward(layout.batch()), n_vocab);
  }
}

// Where emitted tokens go: the result, the text the candidate pool is searched with,
// and the caller's token callback. Decides when generation stops.
struct TokenSink {
  const GenerationOptions& options;
  const Tokenizer& tokenizer;
  const TokenCallback& on_token;
  GenerationResult& result;
  std::vector<int32_t>& history;
  std::optional<StopReason> stop;  // set by emit(), or by the loop when the context is full

  // Keeps `tokens` in order and reports each to the callback, up to the first one that
  // stops generation (cancelled, end of generation, length); returns the kept ones.
  std::vector<int32_t> emit(const std::vector<int32_t>& tokens) {
    std::vector<int32_t> kept;
    for (int32_t t : tokens) {
      result.ids.push_back(t);
      history.push_back(t);
      kept.push_back(t);
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
  }
};

// The rows of a verdict to commit when `kept` of its tokens were emitted: the input
// and every kept token but the last (whose KV the next step computes).
std::vector<int32_t> rows_to_commit(const Verdict& verdict, size_t kept) {
  return {verdict.commit_rows.begin(), verdict.commit_rows.begin() + static_cast<std::ptrdiff_t>(kept)};
}

// Counts a decoding step that emitted `kept` tokens.
void count_step(GenerationResult& result, size_t kept) {
  ++result.n_steps;
  if (result.accepted_histogram.size() <= kept) result.accepted_histogram.resize(kept + 1, 0);
  ++result.accepted_histogram[kept];
}

// Counts what a step's guesses yielded, by source and key length, when `kept` of its
// tokens were emitted.
void count_source_yields(const StrategyState& run, const Verdict& verdict, size_t kept, std::vector<SourceYield>& out) {
  auto row = [&](const std::string& source, int32_t key_length) -> SourceYield& {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const SourceYield& y) { return y.source == source && y.key_length == key_length; });
    if (it == out.end()) {
      it = out.insert(std::upper_bound(out.begin(), out.end(), std::make_pair(source, key_length),
                                       [](const std::pair<std::string, int32_t>& k, const SourceYield& y) {
                                         return k < std::make_pair(y.source, y.key_length);
                                       }),
                      SourceYield{source, key_length, 0, 0, 0});
    }
    return *it;
  };
  // The winner's tokens that were emitted (all it matched, unless generation stopped first).
  const int64_t accepted =
      verdict.winner >= 0 ? std::min<int64_t>(static_cast<int64_t>(kept), verdict.match_lengths[static_cast<size_t>(verdict.winner)]) : 0;
  if (run.options().strategy == Strategy::Jacobi) {
    SourceYield& y = row("jacobi", 0);
    ++y.verified;
    if (accepted > 0) {
      ++y.won;
      y.accepted += accepted;
    }
    return;
  }
  const std::vector<RetrievedCandidate>& retrieved = run.retrieved();
  for (size_t g = 0; g < retrieved.size(); ++g) {
    SourceYield& y = row(candidate_source_name(retrieved[g].source), retrieved[g].key_length);
    ++y.verified;
    if (static_cast<int32_t>(g) == verdict.winner && accepted > 0) {
      ++y.won;
      y.accepted += accepted;
    }
  }
}

void add_pool_stats(const CandidatePool& pool, GenerationResult& result) {
  result.pool_keys += pool.key_count();
  result.pool_ngrams += pool.ngram_count();
  result.pool_lookups += pool.lookups();
  result.pool_hits += pool.hits();
}

// What auto's yields depend on besides the candidates (AutoMemory::context): greedy or
// the sampler's cuts, the region FAFO's guesses read, the corpus, a pool seeded from
// the prompt.
std::string auto_memory_context(const GenerationOptions& o) {
  const SamplerOptions& sp = o.sampling;
  const KvPolicyOptions& kv = o.kv;
  std::string s = sp.temperature <= 0.0f ? "greedy"
                                         : "temp " + std::to_string(sp.temperature) + " top-k " + std::to_string(sp.top_k) +
                                               " top-p " + std::to_string(sp.top_p) + " min-p " + std::to_string(sp.min_p);
  s += " | kv " + kv.name + " budget " + std::to_string(kv.budget) + " sinks " + std::to_string(kv.sinks) + " recent " +
       std::to_string(kv.recent) + " interval " + std::to_string(kv.update_interval);
  if (!o.decoding.corpus_path.empty())
    s += " | corpus " + o.decoding.corpus_path + " suffix " + std::to_string(o.decoding.corpus_max_suffix);
  return s + (o.decoding.pool_from_prompt ? " | pool from prompt" : "");
}

}  // namespace

GenerationResult generate(Sequence& model, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                          const GenerationOptions& options, const TokenCallback& on_token) {
  if (prompt.empty()) throw std::invalid_argument("the prompt is empty (no tokens)");
  options.decoding.validate(&options.resources);
  if (options.decoding.corpus_path.size() && !options.resources.corpus)
    throw std::invalid_argument("the corpus index " + options.decoding.corpus_path +
                                " is not opened (open_decoding_resources)");
  if (options.decoding.strategy == Strategy::Draft && !options.resources.draft_model)
    throw std::invalid_argument("the draft model " + options.decoding.draft_model_path +
                                " is not open (open_decoding_resources)");
  if (options.resources.draft_model && options.resources.draft_model.get() == &model)
    throw std::invalid_argument("the draft model must be a model of its own (draft 'self' opens the file again)");
  if (options.resources.draft_model && options.resources.draft_model->config().n_vocab != model.config().n_vocab)
    throw std::invalid_argument("the draft model has " + std::to_string(options.resources.draft_model->config().n_vocab) +
                                " tokens in its vocabulary but the target has " + std::to_string(model.config().n_vocab));
  if (options.resources.corpus && options.resources.corpus->n_vocab() != model.config().n_vocab)
    throw std::invalid_argument("the corpus index " + options.resources.corpus->path() + " has a vocabulary of " +
                                std::to_string(options.resources.corpus->n_vocab()) + " tokens but the model has " +
                                std::to_string(model.config().n_vocab) + "; build the index with this model's tokenizer");
  const DecodingOptions& dec = options.decoding;
  if (options.kv_drop && dec.strategy != Strategy::Ar && dec.strategy != Strategy::Auto)
    throw std::invalid_argument(std::string("--kv-drop runs with plain decoding only (ar, or auto, which then runs ar), not ") +
                                strategy_name(dec.strategy) +
                                ": a multi-token step's rows would read entries plain decoding has already dropped");
  if (scoring_uses_draft_model(options) && !options.resources.draft_model)
    throw std::invalid_argument(options.prompt_compress.enabled()
                                    ? "--prompt-compress speckv needs a draft model (--draft-model FILE, or self)"
                                    : "the speckv KV policy needs a draft model for its lookahead tokens (--draft-model FILE, or self)");
  options.prompt_compress.validate();
  if (options.keep_context && (options.kv_drop || options.prompt_compress.enabled()))
    throw std::invalid_argument("--kv-drop and --prompt-compress read one prompt from an empty context, not a conversation "
                                "(keep_context)");
  if (model.kv_drop()) model.set_kv_policy(nullptr);  // an earlier generation's dropping ends here
  if (!options.keep_context) model.truncate(0);
  if (options.keep_context && !options.context_ids.empty() &&
      options.context_ids.size() != static_cast<size_t>(model.n_past()))
    throw std::invalid_argument("context_ids has " + std::to_string(options.context_ids.size()) +
                                " tokens but the model holds " + std::to_string(model.n_past()));
  GenerationResult result;
  result.prompt_tokens_given = static_cast<int32_t>(prompt.size());
  result.prompt_ids = options.prompt_compress.enabled()
                          ? compress_prompt(*options.resources.draft_model, prompt, options.prompt_compress, options.prefill_chunk)
                          : prompt;
  check_prompt_fits(model, result.prompt_ids.size());
  if (options.prompt_compress.enabled())
    result.lossy.push_back(options.prompt_compress.describe() + ": " + std::to_string(result.prompt_ids.size()) + " of " +
                           std::to_string(prompt.size()) + " prompt tokens kept");
  if (options.kv_drop)
    result.lossy.push_back(kv_drop_label(options.kv));
  Sampler sampler(options.sampling);
  const bool use_top_k = !sampler.greedy() && options.sampling.top_k > 0 && options.sampling.top_k <= kMaxTopK &&
                         options.read_top_k_only;
  const int32_t top_k = use_top_k ? options.sampling.top_k : 0;

  // Auto: its controller, on the step costs given, else the model's (measured once, here,
  // before the prompt). Under kv_drop it runs plain decoding.
  const bool auto_mode = dec.strategy == Strategy::Auto && !options.kv_drop;
  const std::string auto_context = auto_memory_context(options);
  std::optional<AutoController> controller;
  if (auto_mode) {
    std::vector<AutoCandidate> candidates = options.auto_candidates.empty() ? default_auto_candidates(dec, options.resources.corpus != nullptr)
                                                                             : options.auto_candidates;
    // A candidate whose step the device or the context cannot hold would never run.
    std::erase_if(candidates, [&](const AutoCandidate& c) {
      return c.options.strategy != Strategy::Ar &&
             (c.step_tokens > model.max_logit_rows() || c.step_tokens >= model.n_ctx() - model.n_past());
    });
    int32_t max_emitted = 1;
    for (const AutoCandidate& c : candidates) max_emitted = std::max(max_emitted, c.max_emitted());
    AutoState* kept = options.auto_state;
    // A kept curve measured for other candidates (another --corpus) lacks some of these
    // candidates' sizes: measured again, so that no candidate's cost is interpolated.
    if (kept && options.step_costs.empty() && !kept->step_costs().empty())
      for (const AutoCandidate& c : candidates)
        if (c.step_tokens <= kept->step_costs().sizes.back() && !kept->step_costs().measured(c.step_tokens)) {
          kept->forget_step_costs("the kept curve has no point at T = " + std::to_string(c.step_tokens) + ", a candidate's step");
          break;
        }
    StepCosts costs = !options.step_costs.empty() ? options.step_costs : kept ? kept->step_costs() : StepCosts{};
    if (costs.empty()) {
      std::vector<int32_t> candidate_sizes;
      for (const AutoCandidate& c : candidates) candidate_sizes.push_back(c.step_tokens);
      costs = measure_step_costs(model, max_emitted, candidate_sizes);
      // Kept for later generations (and runs) unless the context cut it short.
      if (kept && !costs.empty() && (costs.sizes.back() >= 8 || costs.relative(costs.sizes.back()) > max_emitted)) {
        kept->set_step_costs(std::move(costs));
        costs = kept->step_costs();
      }
    }
    controller.emplace(std::move(costs), std::move(candidates), options.auto_options);
    if (kept && kept->memory().context == auto_context) controller->recall(kept->memory());
    result.step_costs = controller->costs();
  }
  // FAFO's fumble rows read the region its policy keeps; other strategies need none
  // (auto: only if it may run FAFO here).
  bool fafo_may_run = dec.strategy == Strategy::Fafo;
  if (controller)
    for (size_t c = 1; c < controller->candidates().size(); ++c)
      fafo_may_run |= controller->candidates()[c].options.strategy == Strategy::Fafo &&
                      (controller->viable(static_cast<int32_t>(c)) || options.auto_options.rotate);
  // Without the region, FAFO's shapes never run in this generation (its fumble rows would
  // read nothing), even if their costs come down as steps are timed.
  if (controller && !fafo_may_run)
    for (size_t c = 1; c < controller->candidates().size(); ++c)
      if (controller->candidates()[c].options.strategy == Strategy::Fafo) controller->exclude(static_cast<int32_t>(c));
  const std::vector<int32_t>& text = result.prompt_ids;
  if (options.on_prefill) options.on_prefill();
  const Clock::time_point t0 = Clock::now();
  const std::vector<float> logits =
      prefill_prompt(model, text, fafo_may_run || options.kv_drop ? &options.kv : nullptr, options.kv_drop,
                     options.resources.draft_model.get(), options.prefill_chunk, options.keep_context ? options.context_ids : std::vector<int32_t>{},
                     options.should_stop);
  const Clock::time_point t1 = Clock::now();
  result.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  if (logits.empty()) {  // stopped during the prefill
    result.stop = StopReason::Cancelled;
    return result;
  }
  if (options.n_predict == 0) return result;

  // The text the pool and the drafter read (the conversation so far, ending with the
  // input token).
  std::vector<int32_t> history = options.keep_context ? options.context_ids : std::vector<int32_t>{};
  history.insert(history.end(), text.begin(), text.end());
  // The strategy's state; with auto, plain decoding's, and each candidate's own state
  // (window, pool), made when first chosen.
  DecodingOptions plain = dec;
  if (dec.strategy == Strategy::Auto) plain.strategy = Strategy::Ar;
  StrategyState state(plain, options.resources, history);
  state.set_sampling(sampler, options.sampling.seed);
  std::vector<std::unique_ptr<StrategyState>> candidate_states(controller ? controller->candidates().size() : 0);
  TraceRecorder trace(options.on_step, plain, model, state);
  TokenSink sink{options, tokenizer, on_token, result, history, std::nullopt};

  const int32_t n_vocab = model.config().n_vocab;
  const uint64_t seed = options.sampling.seed;
  const int32_t first = sampler.greedy() ? argmax(logits.data(), n_vocab)
                                         : draw_token(sampler.distribution(logits.data(), n_vocab), position_uniform(seed, 0));
  result.n_steps = 1;  // the prefill step produced the first token
  sink.emit({first});
  trace.prefill_done(static_cast<int32_t>(text.size()), first, result.prefill_seconds * 1e3);

  int32_t shared_steps = 0;  // auto's steps decoded plainly because other sequences shared them
  while (!sink.stop) {
    if (model.n_past() >= model.n_ctx()) {
      sink.stop = StopReason::ContextFull;
      break;
    }
    if (options.should_stop && options.should_stop()) {
      sink.stop = StopReason::Cancelled;
      break;
    }
    const int32_t input = result.ids.back();
    const int32_t step = result.n_steps;
    StrategyState* run = &state;
    int32_t chosen = 0;
    std::string choice;
    // A step shared with other sequences (a server's slots) is neither chosen nor timed
    // for this sequence's candidates: alone before the step and after it, or not at all.
    const bool alone = !shares_steps(model);
    if (controller && !alone) {
      // Other sequences share the step (a server's slots): plain decoding (see shares_steps).
      choice = "ar (the step is shared with other sequences)";
      ++shared_steps;
      if (result.auto_choices.empty() || result.auto_choices.back().second != 0) result.auto_choices.emplace_back(step, 0);
    } else if (controller) {
      const AutoDecision d = controller->choose();
      chosen = d.candidate;
      if (chosen > 0) {
        std::unique_ptr<StrategyState>& s = candidate_states[static_cast<size_t>(chosen)];
        if (!s) {
          s = std::make_unique<StrategyState>(controller->candidates()[static_cast<size_t>(chosen)].options,
                                              options.resources, history);
          s->set_sampling(sampler, options.sampling.seed);
        } else if (d.restart) {
          s->restart(history);
        }
        run = s.get();
      }
      if (options.on_step) choice = controller->explain();  // for the step's trace only
      if (result.auto_choices.empty() || result.auto_choices.back().second != chosen)
        result.auto_choices.emplace_back(step, chosen);
    }
    trace.step_started(step, *run, choice);

    StepLayout layout(model.n_past(), input);
    run->build(layout, history);
    const bool full_step = step_fits(model, layout);
    if (!full_step) layout = StepLayout(model.n_past(), input);  // a plain step
    trace.step_built(layout, full_step);

    const int32_t step_context = model.n_past();
    const Clock::time_point step_start = Clock::now();
    forward_step(model, layout, sampler, top_k);
    if (controller && alone && !shares_steps(model))
      controller->time_step(full_step ? chosen : 0, layout.size(), std::chrono::duration<double>(Clock::now() - step_start).count(),
                            step_context);
    trace.forward_done();

    const Verdict verdict = sampler.greedy() ? verify_greedy(layout) : verify_sampling(layout, sampler, seed, static_cast<int64_t>(result.ids.size()));
    const std::vector<int32_t> emitted = sink.emit(verdict.tokens);
    model.commit_rows(rows_to_commit(verdict, emitted.size()));
    count_step(result, emitted.size());
    if (full_step) {
      count_source_yields(*run, verdict, emitted.size(), result.source_yields);
      run->update(layout, input, emitted, history, step);
    }
    if (controller && full_step) controller->observe(chosen, static_cast<int32_t>(emitted.size()));
    trace.step_finished(verdict, emitted);
  }
  result.stop = *sink.stop;
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  add_pool_stats(state.pool(), result);
  if (controller) {
    if (options.auto_state) {
      options.auto_state->memory() = controller->memory();
      options.auto_state->memory().context = auto_context;
      // A kept curve whose one-token steps no longer take what it says is measured again
      // by the next generation.
      if (options.step_costs.empty())
        options.auto_state->follow_plain_steps(controller->plain_step_median(), controller->plain_steps_timed());
    }
    result.auto_summary = controller->explain();
    if (shared_steps > 0)
      result.auto_summary = "plain decoding at " + std::to_string(shared_steps) + " step" + (shared_steps == 1 ? "" : "s") +
                            " shared with other sequences; " + result.auto_summary;
    for (const std::unique_ptr<StrategyState>& s : candidate_states)
      if (s) add_pool_stats(s->pool(), result);
    result.auto_labels.clear();
    for (const AutoCandidate& c : controller->candidates()) result.auto_labels.push_back(c.label());
  }
  return result;
}

}  // namespace fafo
