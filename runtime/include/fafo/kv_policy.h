// KV compression policies: which committed entries the fixed region holds for
// FAFO's fumble rows (COMPRESSED prefix view). One interface, one class per policy:
//   stream  StreamingLLM: the first `sinks` entries and the most recent ones
//   quest   Quest: 16-token pages with per-page elementwise min/max keys; the pages
//           with the largest upper bound of q.k for the newest query, refreshed every
//           `update_interval` steps; the first `dense_layers` layers stay dense
//   snapkv  SnapKV: after prefill the last `window` prompt queries score the prompt's
//           keys (softmax attention, summed over heads and layers, pooled with kernel
//           5); the best prompt tokens are kept, plus the most recent tokens
//   chunks  8-token chunks of the prompt scored once after prefill in the same way;
//           the best chunks are kept, plus the most recent tokens
//   speckv  SpecKV (seed 004): SnapKV's scoring, with the observation window extended
//           by `lookahead` rows: a draft model's predicted continuation, which the
//           target runs after the prompt in the prompt's last step without keeping it
//           (prefill_with_lookahead, fafo/generator.h), so the prompt is scored by
//           what the answer is likely to need
// The region holds `budget` entries. A policy only chooses; KvLayout moves entries.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fafo {

struct KvPolicyOptions {
  std::string name = "stream";  // stream, quest, snapkv, chunks, speckv
  int32_t budget = 68;          // region entries (--kv-budget)
  int32_t sinks = 4;            // stream: first entries always kept (at most budget)
  int32_t recent = 32;          // snapkv / chunks / quest: most recent entries always kept (at most budget)
  int32_t update_interval = 4;  // quest: steps between re-selections (--update-interval)
  int32_t dense_layers = 2;     // quest: layers whose COMPRESSED rows read everything
  int32_t page = 16;            // quest page size
  int32_t chunk = 8;            // chunks: chunk size
  int32_t window = 16;          // snapkv / chunks: observation window (last prompt queries)
  int32_t pool_kernel = 5;      // snapkv / speckv: pooling kernel
  int32_t lookahead = 16;       // speckv: draft tokens whose target queries join the window (--kv-lookahead)
  void validate() const;        // throws std::invalid_argument
};

// What a policy can look at when it chooses.
class KvInspector {
 public:
  virtual ~KvInspector() = default;
  virtual int32_t n_layer() const = 0;
  virtual int32_t n_head() const = 0;
  virtual int32_t n_head_kv() const = 0;
  virtual int32_t head_dim() const = 0;
  // The factor of the query-key dot products (ModelConfig::attention_scale).
  virtual float attention_scale() const { return 1.0f / std::sqrt(static_cast<float>(head_dim())); }
  // > 0: the scaled scores are soft-capped, cap * tanh(s / cap) (ModelConfig::attn_softcap).
  virtual float attention_softcap() const { return 0.0f; }
  // Whether layer `layer` attends the whole context: false for a sliding-window layer,
  // whose cache may be a ring holding only its window (keys() throws for older entries).
  // The policies score global layers only (a model of window layers alone: none, and
  // every entry scores 0).
  virtual bool global_layer(int32_t layer) const {
    (void)layer;
    return true;
  }
  // Keys (after RoPE) of a layer's committed entries, by logical index, n x kv_dim.
  virtual std::vector<float> keys(int32_t layer, int32_t first, int32_t count) const = 0;
  // Queries (after RoPE) of the rows captured in the last step, rows x (n_head*head_dim).
  virtual std::vector<float> captured_queries(int32_t layer) const = 0;
};

struct KvPolicyEvent {
  enum Kind { Prefilled, Committed } kind = Committed;
  int32_t n_past = 0;       // committed entries after the event
  int32_t prompt_end = 0;   // entries that belong to the prompt
  int64_t step = 0;         // decoding steps so far
};

class KvPolicy {
 public:
  virtual ~KvPolicy() = default;
  virtual std::string name() const = 0;
  virtual int32_t budget() const = 0;
  // Layers whose COMPRESSED rows read everything.
  virtual int32_t dense_layers() const { return 0; }
  // Rows of a step of `step_size` tokens whose queries (after RoPE) the policy wants to
  // see in its next choose(), as KvInspector::captured_queries, in this order.
  virtual std::vector<int32_t> wanted_query_rows(int32_t step_size) const {
    (void)step_size;
    return {};
  }
  // The logical entries the region should hold now (at most budget), or nullopt to
  // keep the current choice.
  virtual std::optional<std::vector<int32_t>> choose(const KvPolicyEvent& event, const KvInspector& kv) = 0;
};

std::unique_ptr<KvPolicy> make_kv_policy(const KvPolicyOptions& options);

// Every KV policy's name (what make_kv_policy and the CLI take), those that need a draft
// model's predictions (speckv) with `with_draft` only: the one list the CLI's checks,
// the studio's combo and the draft's sparse cache take.
std::vector<std::string> kv_policy_names(bool with_draft = true);

// How attention_scores() weighs the captured queries.
struct AttentionScoreOptions {
  int32_t rows = 16;         // the last `rows` captured rows score (fewer if fewer were captured)
  int32_t skip_layers = 0;   // the first layers are left out (their attention is diffuse)
  bool ramp = false;         // row r of R weighs (r + 1) / R (the newest most); else every row 1
  bool max_over_heads = false;  // a key's score in a layer: the most any head gave it; else the sum
};

// Importance of the committed entries [0, n_keys) from the queries captured in the last
// step: each row's softmax attention over those keys (per head), weighted per row,
// combined over heads, summed over the global layers (KvInspector::global_layer).
std::vector<double> attention_scores(const KvInspector& kv, int32_t n_keys, const AttentionScoreOptions& options);

}  // namespace fafo
