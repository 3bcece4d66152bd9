// Text generation on a Sequence: prompt prefill (in chunks), then decoding steps with
// the chosen strategy (plain autoregressive, Jacobi, Lookahead or FAFO; see
// fafo/decoding.h). Tokens are reported through a callback as they are produced so
// callers can stream them; every strategy emits the tokens plain decoding would.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "fafo/auto_state.h"
#include "fafo/auto_strategy.h"
#include "fafo/decoding.h"
#include "fafo/kv_policy.h"
#include "fafo/sequence.h"
#include "fafo/prompt_compression.h"
#include "fafo/sampler.h"
#include "fafo/tokenizer.h"

namespace fafo {

struct GenerationOptions {
  int32_t n_predict = 128;       // new tokens at most; -1: until the context is full
  SamplerOptions sampling;
  bool stop_at_end_of_generation = true;
  int32_t prefill_chunk = 512;   // prompt tokens per prefill step
  // false: start from an empty context. true: append the prompt after what the model
  // already holds (multi-turn chat: only the new tokens are prefilled).
  bool keep_context = false;
  // With keep_context: the tokens the model holds already (empty, or exactly n_past()
  // of them). The drafter, the candidate pool and --pool-from-prompt then read the
  // whole conversation, not only the new prompt.
  std::vector<int32_t> context_ids;
  DecodingOptions decoding;      // strategy (ar, jacobi, lookahead, fafo) and its parameters
  DecodingResources resources;   // the corpus index and draft model they name, opened (fafo/open_model.h)
  KvPolicyOptions kv;            // fafo: the compression policy of the fumble rows' region
  // Lossy modes, off by default; each is named in GenerationResult::lossy when on, and
  // neither runs with keep_context.
  // kv_drop (--kv-drop): `kv` chooses the entries the target keeps and, after the prompt,
  // every row reads only those (plain decoding only: ar, or auto, which then runs ar).
  // prompt_compress (--prompt-compress speckv): SpecPC drops prompt tokens before the
  // prefill. Both speckv modes (and --kv-policy speckv, which is lossless) need
  // resources.draft_model.
  bool kv_drop = false;
  PromptCompressOptions prompt_compress;
  StepCallback on_step;          // receives a StepTrace after every step (may be empty)
  // Asked before every prefill chunk and every decoding step (may be empty): true stops
  // the generation there (StopReason::Cancelled). Stopped during the prefill, it returns
  // no tokens and the model holds the context plus the prompt chunks fed so far.
  std::function<bool()> should_stop;
  // Called once before the prompt's prefill, after what comes before it (auto measuring
  // its step costs, which reports progress: fafo/progress.h), so that an application
  // echoing the prompt does so after any progress line (may be empty).
  std::function<void()> on_prefill;
  // Sampling with top-k (1..kMaxTopK) reads back only each row's k best logits, computed
  // by the backend; false reads whole rows. Both draw the same tokens.
  bool read_top_k_only = true;
  // --strategy auto: its candidates (empty: default_auto_candidates), the step costs
  // (empty: auto_state's, else measured on the model before the first decoding step)
  // and its controller's settings.
  std::vector<AutoCandidate> auto_candidates;
  StepCosts step_costs;
  AutoOptions auto_options;
  // What auto keeps between generations on this model (OpenedModel::auto_state): a
  // curve measured here is kept there, and what the controller learned. Null: measured
  // for this generation and forgotten.
  AutoState* auto_state = nullptr;
};

enum class StopReason { Length, EndOfGeneration, ContextFull, Cancelled };
const char* stop_reason_name(StopReason r);

// What the guesses of one source yielded over a generation, per key length: the pool's
// n-grams from the 2D window ("window") or seeded from the prompt ("prompt"), a corpus
// index's continuations ("corpus"), or Jacobi's guesses ("jacobi"). key_length: the
// context suffix they were matched under (FAFO's lookback; 1 for lookahead; the longest
// suffix found in the corpus, up to corpus_max_suffix; 0 for jacobi).
struct SourceYield {
  std::string source;
  int32_t key_length = 0;
  int64_t verified = 0;  // candidates verified
  int64_t won = 0;       // steps whose accepted guesses came from one of them
  int64_t accepted = 0;  // guess tokens accepted from those (beyond each step's own token)
};

struct GenerationResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> ids;      // generated tokens (the end-of-generation token included)
  // Steps that produced tokens: the prefill step (which yields the first token) plus
  // every decoding forward pass. For plain decoding n_steps == ids.size().
  int32_t n_steps = 0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;   // after the prefill, until the last token
  StopReason stop = StopReason::Length;
  std::vector<int64_t> accepted_histogram;  // [m] = decoding steps that emitted m tokens
  int64_t pool_keys = 0, pool_ngrams = 0, pool_lookups = 0, pool_hits = 0;
  // --strategy auto: the step costs it used, its candidates' labels, (step, candidate)
  // at every change of choice, and the last choice explained.
  StepCosts step_costs;
  std::vector<std::string> auto_labels;
  std::vector<std::pair<int32_t, int32_t>> auto_choices;
  std::string auto_summary;
  // Per source and key length, ordered by source then key length.
  std::vector<SourceYield> source_yields;
  // The lossy modes that were on, in words ("kv-drop speckv budget 256", ...); empty:
  // the output is what plain decoding of the whole prompt gives.
  std::vector<std::string> lossy;
  int32_t prompt_tokens_given = 0;  // before SpecPC (prompt_ids holds what was prefilled)
  double tokens_per_step() const { return n_steps ? static_cast<double>(ids.size()) / n_steps : 0.0; }
  // Decoding speed: tokens produced by decoding steps (all but the first) per second.
  double tokens_per_second() const {
    return decode_seconds > 0.0 && ids.size() > 1 ? static_cast<double>(ids.size() - 1) / decode_seconds : 0.0;
  }
};

// Called for each new token; return false to stop generating.
using TokenCallback = std::function<bool(int32_t token)>;

// Generates a continuation of `prompt` (which must be non-empty). On return the
// model's context holds the prompt and every generated token except the last one
// (it was sampled but never fed back), so a caller continuing the conversation
// must feed that token first. Throws std::length_error when the prompt does not fit.
GenerationResult generate(Sequence& model, const Tokenizer& tokenizer, const std::vector<int32_t>& prompt,
                          const GenerationOptions& options, const TokenCallback& on_token = {});

// Feeds `tokens` to the model after its current context (chunked); returns the logits
// after the last one, or nothing when `should_stop` (asked before each chunk) said stop.
std::vector<float> prefill(Sequence& model, const std::vector<int32_t>& tokens, int32_t chunk,
                           const std::function<bool()>& should_stop = {});
// The same, but the last step also runs `lookahead` after the tokens without keeping
// their KV entries: SpecKV's scoring rows, whose queries the model's policy captures
// with the prompt's last ones.
std::vector<float> prefill_with_lookahead(Sequence& model, const std::vector<int32_t>& tokens,
                                          const std::vector<int32_t>& lookahead, int32_t chunk,
                                          const std::function<bool()>& should_stop = {});

// Sets the model's KV policy (make_kv_policy(*kv), or none when kv is null; `drop`:
// lossy dropping, Sequence::set_kv_policy), feeds `prompt` (for the speckv policy, after
// `draft` predicts up to kv->lookahead tokens after `context` + `prompt`, as many as the
// context has room for: prefill_with_lookahead) and tells the policy the prompt is in.
// Returns the logits after the prompt (nothing when `should_stop` said stop).
std::vector<float> prefill_prompt(Sequence& model, const std::vector<int32_t>& prompt, const KvPolicyOptions* kv, bool drop,
                                  Sequence* draft, int32_t chunk, const std::vector<int32_t>& context = {},
                                  const std::function<bool()>& should_stop = {});
// "kv-drop NAME budget B": how --kv-drop is labelled (GenerationResult::lossy).
std::string kv_drop_label(const KvPolicyOptions& kv);

// Whether these options need a draft model (resources.draft_model) besides strategy draft: SpecKV's
// lookahead (kv policy speckv, for FAFO's region or kv_drop) or SpecPC.
bool scoring_uses_draft_model(const DecodingOptions& decoding, const KvPolicyOptions& kv, bool kv_drop = false,
                              bool prompt_compress = false);
bool scoring_uses_draft_model(const GenerationOptions& options);

}  // namespace fafo
