// Multi-token decoding: which strategy generates the tokens, its parameters, and the
// StepTrace each step reports (to the CLI's --json/--trace and to fafo-studio).
//
// Every strategy emits exactly the tokens plain decoding (`ar`) emits: greedy steps
// accept only candidates whose every token equals the model's argmax, and sampling
// steps only candidates whose every token equals the one plain sampling draws there
// with the same seed (each position's draw depends on the seed and the position).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace fafo {

// Auto: plain decoding or Lookahead/FAFO at some (W, N, G), chosen step by step from what
// steps cost on this device and what each yields (fafo/auto_strategy.h).
// Corpus: the continuations a corpus index holds for the text's longest suffix found
// there (fafo/corpus_index.h), without a 2D window. Draft: speculative decoding, the
// next draft_n tokens predicted by a draft model of the same vocabulary.
enum class Strategy { Ar, Jacobi, Lookahead, Fafo, Auto, Corpus, Draft };
const char* strategy_name(Strategy s);
// Every strategy's name, in the enum's order (element i names Strategy(i)): the one
// list the CLI's checks, the studio's combo and the bench take.
std::span<const char* const> strategy_names();
// Parses a name of strategy_names(); throws std::invalid_argument naming them otherwise.
Strategy parse_strategy(const std::string& name);

// Where a candidate came from: the pool's n-grams of the 2D window or of the prompt
// (--pool-from-prompt), a corpus index, Jacobi's guesses, a draft model.
enum class CandidateSource : uint8_t { Window, Prompt, Corpus, Jacobi, Draft };
const char* candidate_source_name(CandidateSource s);
// Parses those names; throws std::invalid_argument otherwise.
CandidateSource parse_candidate_source(const std::string& name);

class CorpusIndex;
class Sequence;

struct DecodingResources;

struct DecodingOptions {
  Strategy strategy = Strategy::Ar;
  // Defaults tuned on stories260K (CPU backend, MT-Bench/GSM8K prompts); see --help.
  int32_t window = 8;     // W: columns of the 2D window (jacobi: guesses per step)
  int32_t ngram = 5;      // N: n-gram size; the window has N-1 rows; candidates have N-1 tokens
  int32_t guesses = 8;    // G: candidates verified per step (and n-grams kept per pool key)
  int32_t lookback = 4;   // k: longest key (tokens of context) a FAFO candidate is cached under
  // (FAFO's fumble rows attend the compressed region; its policy is GenerationOptions::kv.)
  bool pool_from_prompt = false;  // seed the candidate pool with the prompt's n-grams
  // A corpus index (--corpus): strategy corpus drafts from it alone; lookahead and fafo
  // fill the G candidates the pool leaves free with its continuations. The most frequent
  // continuations (N-1 tokens) of the longest suffix of the text (at most
  // corpus_max_suffix tokens) that occurs in the corpus are taken, pool duplicates skipped.
  // corpus_path names the file (--corpus); open_decoding_resources (fafo/open_model.h)
  // opens it into DecodingResources::corpus.
  std::string corpus_path;
  int32_t corpus_max_suffix = 16;
  // Strategy draft: the draft model (its vocabulary equal to the target's token for
  // token), which predicts draft_n tokens a step with its own KV cache; the target
  // verifies them as one chain. draft_model_path ("self": the target's own file) and
  // draft_backend / draft_device (empty: the target's) say what open_decoding_resources
  // (fafo/open_model.h) opens into DecodingResources::draft_model.
  std::string draft_model_path;
  std::string draft_backend;
  std::string draft_device;
  int32_t draft_n = 4;
  // The drafter's KV cache made sparse (BudgetDraft): after the prompt, its rows attend
  // only the region this policy keeps (stream, quest, snapkv, chunks; "" or "full": the
  // whole cache) of draft_kv_budget entries. The target always reads its whole cache.
  std::string draft_kv_policy;
  int32_t draft_kv_budget = 256;
  // A small tree of drafts: besides the chain, the draft model's next most likely
  // draft_alternatives first tokens are verified in the same step, one token each
  // (--draft-alternatives; 0: the chain alone).
  int32_t draft_alternatives = 0;
  uint64_t seed = 0xFAF0;         // window initialisation from prompt tokens
  // StepTrace::pool_snapshot holds this many keys of the pool (0 or less: none): the
  // ones this step's candidates came from, then the most recently used. Copied only
  // when a step callback is set: a few hundred integers a step.
  int32_t trace_pool_keys = 16;

  // Throws std::invalid_argument with a clear message for out-of-range values, and for
  // strategy corpus or draft without a file named (or, given `resources`, opened).
  void validate(const DecodingResources* resources = nullptr) const;
};

// What a decoding's options name and someone opened (open_decoding_resources,
// fafo/open_model.h; GenerationOptions::resources): DecodingOptions holds values only.
struct DecodingResources {
  std::shared_ptr<const CorpusIndex> corpus;  // corpus_path's index; null: none
  std::shared_ptr<Sequence> draft_model;         // draft_model_path's model; null: none
  std::string draft_key;                      // what it was opened from (draft_model_key, fafo/open_model.h)
};

// Where an accepted token came from.
struct TokenSource {
  enum Kind : uint8_t { Plain, Candidate } kind = Plain;
  int32_t origin_step = -1;    // step whose window produced the candidate (-1: prompt or plain)
  int32_t origin_column = -1;  // column of the 2D window that produced it
  CandidateSource source = CandidateSource::Window;  // for Candidate: where the candidate came from
};

// One n-gram of the candidate pool as a StepTrace reports it.
struct PoolNgramSnapshot {
  std::vector<int32_t> tokens;
  int32_t origin_step = -1;    // step whose window produced (or last refreshed) it; -1: the prompt
  int32_t origin_column = -1;
  int64_t hits = 0;            // times it was retrieved as a candidate
  int64_t age = 0;             // pool lookups (decoding steps) since it was added, refreshed or retrieved
};

// One key (a suffix of the context) of the candidate pool and its n-grams.
struct PoolKeySnapshot {
  std::vector<int32_t> key;
  int64_t hits = 0;            // lookups that took at least one candidate from this key
  int64_t age = 0;             // pool lookups since the key was last used (added to or retrieved from)
  bool retrieved = false;      // supplied candidates in the latest lookup (this step's)
  std::vector<PoolNgramSnapshot> ngrams;  // most recently used first (the next eviction is the last)
};

struct CandidateTrace {
  std::vector<int32_t> tokens;
  int32_t key_length = 0;      // context tokens the pool (or the corpus) matched it under
  int32_t match_length = 0;    // leading tokens that verification accepted
  int32_t origin_step = -1;
  int32_t origin_column = -1;
  bool padding = false;        // filler to keep the step shape fixed; never verified
  CandidateSource source = CandidateSource::Window;
};

// One decoding step, reported after it is verified.
struct StepTrace {
  int32_t step = 0;            // 0 = the prefill step that produced the first token
  Strategy strategy = Strategy::Ar;  // what ran this step (with auto: the chosen candidate's)
  std::string auto_choice;     // --strategy auto: the candidate, why, and the numbers (else empty)
  int32_t n_past = 0;          // committed context before the step
  int32_t batch_size = 0;      // tokens in the forward pass
  std::vector<std::vector<int32_t>> window_before;  // rows x columns (empty for ar)
  std::vector<std::vector<int32_t>> window_after;
  std::vector<int32_t> new_guesses;                 // the tokens the last window row produced
  std::vector<CandidateTrace> candidates;           // tried this step
  std::vector<int32_t> accepted;                    // tokens this step emitted
  std::vector<TokenSource> accepted_sources;
  int64_t pool_keys = 0;
  int64_t pool_ngrams = 0;
  int64_t pool_lookups = 0;    // cumulative
  int64_t pool_hits = 0;       // cumulative lookups that returned at least one candidate
  // DecodingOptions::trace_pool_keys keys of the pool after the step: those that supplied
  // this step's candidates, then the most recently used (empty for ar and jacobi, or
  // when trace_pool_keys is 0).
  std::vector<PoolKeySnapshot> pool_snapshot;
  // FAFO's compressed KV region after the step: the logical entries it holds (in
  // physical order) and how many entries were exchanged with the rest this step.
  std::vector<int32_t> kv_region;
  int64_t kv_swaps = 0;
  // The model's layers, and how many of the first ones are dense: there the fumble
  // rows read every entry instead of the region. The region's selection and its swaps
  // are the same in every layer (0 / 0 when unknown, e.g. an older trace).
  int32_t kv_layers = 0;
  int32_t kv_dense_layers = 0;
  // The KV cache's type ("f32", "q8_0"; "" in an older trace) and the bytes a token
  // takes in it (every layer's keys and values but the rings'), each layer's sliding
  // window (0: a global layer; empty when the model has none) and the entries its cache
  // keeps where that is a ring (KvCacheShape::ring; 0: the whole context; empty: no ring).
  std::string kv_type;
  int64_t kv_bytes_per_token = 0;
  std::vector<int32_t> kv_windows;
  std::vector<int32_t> kv_rings;
  double build_ms = 0.0;
  double forward_ms = 0.0;
  double verify_ms = 0.0;
};

using StepCallback = std::function<void(const StepTrace&)>;

}  // namespace fafo
