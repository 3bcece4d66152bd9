// A model as decoding uses it: one sequence (its KV cache, the committed context, the KV
// policy) over a StepRunner (fafo/step_runner.h: the forward pass and one step's
// activations over the loaded ModelWeights), which any number of sequences may share.
// Sequences on the same runner may be used from different threads: each step (and each
// use of the cache) holds the runner's step lock.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fafo/backend.h"
#include "fafo/gguf.h"
#include "fafo/kv_layout.h"
#include "fafo/kv_policy.h"
#include "fafo/step_runner.h"
#include "fafo/step_batch.h"

namespace fafo {

class StepJoiner;

// One step a sequence asks for and what it returns: the logit rows' logits, their argmax
// or their k best (Sequence::forward, forward_argmax, forward_top_k), or the exception the
// step threw for this sequence.
enum class StepWant : uint8_t { Logits, Argmax, TopK };
struct StepRequest {
  StepRequest() = default;
  StepRequest(StepBatch* step, StepWant result, int32_t top_k = 0) : batch(step), want(result), k(top_k) {}

  StepBatch* batch = nullptr;
  StepWant want = StepWant::Logits;
  int32_t k = 0;  // TopK: 1 <= k <= kMaxTopK
  std::vector<float> logits;
  std::vector<int32_t> ids;
  TopK top;
  std::exception_ptr error;
};

struct SequenceOptions {
  int32_t n_ctx = 0;  // KV cache length; 0 uses min(context length of the model, 4096)
  KvCacheType kv_type = KvCacheType::F32;  // F16 halves the cache (values rounded to fp16)
  // Sliding-window layers keep a ring of window + ring_step - 1 entries (KvCacheShape::
  // ring) where their backend can, so a step holds at most ring_step tokens; 0: every
  // layer holds n_ctx entries (--swa-full).
  int32_t ring_step = StepRunner::kMaxStepTokens;
};

class Sequence {
 public:
  // Loads the weights (ModelWeights), makes a StepRunner for them and this the first
  // sequence on it. Throws GgufError / std::runtime_error.
  Sequence(std::shared_ptr<const GgufFile> file, std::unique_ptr<Backend> backend, const SequenceOptions& options = {});
  // Another sequence on loaded weights: its own KV cache (options.n_ctx entries of
  // options.kv_type) and context; nothing is loaded again. Throws std::runtime_error
  // when the cache does not fit.
  explicit Sequence(std::shared_ptr<StepRunner> runner, const SequenceOptions& options = {});
  ~Sequence();

  // Tokens one step may hold at most.
  static constexpr int32_t kMaxStepTokens = StepRunner::kMaxStepTokens;

  const ModelConfig& config() const { return runner_->config(); }
  Backend& backend() { return runner_->backend(); }
  const GgufFile& file() const { return runner_->file(); }
  // What runs this sequence's steps (shared with every other sequence on its weights).
  const std::shared_ptr<StepRunner>& runner() const { return runner_; }
  int32_t n_ctx() const { return n_ctx_; }
  KvCacheType kv_type() const { return kvs_.front()->shape().type; }
  // SequenceOptions::ring_step as asked (a cache on a backend without rings has none).
  int32_t ring_step() const { return ring_step_; }
  // Bytes one token takes in this sequence's KV cache: every layer's keys and values but
  // the rings' (KvCacheShape::ring), on every device of a layer split.
  uint64_t kv_bytes_per_token() const {
    uint64_t bytes = 0;
    for (const auto& kv : kvs_) bytes += kv->shape().bytes_per_entry();
    return bytes;
  }
  // Bytes the sliding-window layers' rings take, whatever the context (0: none).
  uint64_t kv_ring_bytes() const {
    uint64_t bytes = 0;
    for (const auto& kv : kvs_) bytes += kv->shape().ring_bytes();
    return bytes;
  }
  // The entries layer `layer`'s cache keeps where it is a ring (KvCacheShape::ring), else 0.
  int32_t kv_ring_of(int32_t layer) const {
    const auto [kv, local] = cache_of(layer);
    return kv.shape().ring(local);
  }
  // Bytes the whole KV cache takes: n_ctx() x kv_bytes_per_token() + kv_ring_bytes().
  uint64_t kv_bytes() const {
    uint64_t bytes = 0;
    for (const auto& kv : kvs_) bytes += kv->shape().bytes();
    return bytes;
  }
  // The most rows one step may want logits for (the step itself may be longer): 512,
  // or fewer where a device buffer cannot hold 512 rows of n_vocab logits.
  int32_t max_logit_rows() const { return runner_->max_logit_rows(); }

  // Committed KV entries (the length of the context the next step continues).
  int32_t n_past() const { return n_past_; }
  // Runs one step; returns batch.logit_rows().size() rows of n_vocab logits. The
  // batch's n_past is set to n_past(). Throws std::length_error when the step does
  // not fit in the context.
  std::vector<float> forward(StepBatch& batch);
  // The same step, but returns only the argmax of each logit row (computed by the
  // backend, on the device for GPU backends): what greedy decoding needs, without
  // reading back n_vocab floats per row. Throws std::runtime_error when a row holds a
  // NaN or only -inf, as fafo::argmax does.
  std::vector<int32_t> forward_argmax(StepBatch& batch);
  // The same step, returning the k best logits of each logit row (k is clamped to
  // n_vocab; 1 <= k <= kMaxTopK): what top-k sampling needs. Throws std::runtime_error
  // when a row holds a NaN, as the sampler does.
  TopK forward_top_k(StepBatch& batch, int32_t k);
  // The steps of several sequences on the same weights as one step (StepBatch::join;
  // at most runner()->capabilities().max_step_sequences of them, distinct): each request gets what
  // the matching forward* call would return for its model, bit for bit, or in `error`
  // the exception it would throw (a part that fails its own checks does not stop the
  // others; a failing step fails every part). The sequences' logit rows together must
  // fit max_logit_rows() and their tokens kMaxStepTokens. Throws std::invalid_argument
  // for sequences on different step runners (weights), a sequence twice, or an attention input tap in a step
  // of several parts.
  static void forward_joined(const std::vector<std::pair<Sequence*, StepRequest*>>& parts);
  // Sends this sequence's steps through `joiner`, which runs them joined with the
  // concurrent steps of other sequences on the same weights (the server's slots);
  // nullptr: each step alone (the default).
  void set_step_joiner(std::shared_ptr<StepJoiner> joiner) { joiner_ = std::move(joiner); }
  StepJoiner* step_joiner() const { return joiner_.get(); }
  // Whether this sequence's steps may be joined with others' (not while an attention
  // input tap is set).
  bool joins_steps() const { return !tap_; }

  // Makes the first n tokens of the last step part of the committed context.
  void commit(int32_t n);
  // Makes the listed rows of the last step (in this order) the next committed entries;
  // their KV entries are moved into place. Their positions must continue the context.
  void commit_rows(const std::vector<int32_t>& rows);
  // Forgets the context after the first n entries (n <= n_past()). Throws
  // std::invalid_argument where reusable(n) < n, changing nothing.
  void truncate(int32_t n);
  // The longest context of at most n committed entries a step can continue from: n, or
  // 0 where the sliding-window layers' rings were overwritten past what a step after
  // entry n reads (a context rewound by more than a step: feed it again from the start).
  int32_t reusable(int32_t n) const;

  // The compression policy whose region COMPRESSED rows read (nullptr: none, the
  // region is empty). Setting it re-selects the region for the current context.
  // drop: lossy KV dropping (--kv-drop): once the prompt is in (end_prefill), every row
  // of every step reads only the region, as if the other entries were evicted.
  void set_kv_policy(std::unique_ptr<KvPolicy> policy, bool drop = false);
  const KvPolicy* kv_policy() const { return policy_.get(); }
  bool kv_drop() const { return drop_; }
  // The committed keys and the queries captured in the last step (the rows the policy
  // asked for), for scoring outside a policy (SpecPC).
  std::unique_ptr<KvInspector> inspector();
  const KvLayout& kv_layout() const { return kvs_.front()->layout(); }
  // This sequence's KV cache (its own; the backend computes with it in this model's
  // steps); on a layer split, the first device's part (the layout is the same in each).
  KvCache& kv_cache() { return *kvs_.front(); }
  // Tells the policy that the prompt (the first n_past() entries) is complete.
  void end_prefill();
  // Keys of committed entries by logical index (count x kv_dim, after RoPE; an MLA
  // model's recovered from the latents), for policies, tests and tools.
  std::vector<float> committed_keys(int32_t layer, int32_t first, int32_t count);

  // Calls `tap(layer, rows, n_rows, n_embd)` with each layer's attention input (the rows
  // after the attention RMSNorm, row-major) during every step: fafo-care's calibration.
  // Only on backends that execute each op at once (BackendCapabilities::executes_immediately) and
  // without fused attention projections; throws std::invalid_argument otherwise. An
  // empty function turns it off.
  using AttentionInputTap = StepRunner::AttentionInputTap;
  void set_attention_input_tap(AttentionInputTap tap);
  // Total KV entries exchanged between the region and the rest so far.
  int64_t kv_swaps() const { return kvs_.front()->exchanges(); }

 private:
  // Runs one request: through the joiner if one is set, else alone; rethrows its error.
  void run(StepRequest& request);
  // The checks of a step and the sequence's part of recording it (n_past, the KV
  // policy's captured rows, lossy dropping); the caller holds the step lock.
  void prepare_step(StepRequest& request);
  void after_commit();
  // This sequence's cache on each device, and the one holding `layer` with its index there.
  std::vector<KvCache*> device_caches() const;
  std::pair<KvCache&, int32_t> cache_of(int32_t layer) const;
  // Throws unless the last step's row `row` sits at position n_past() + k (MLA models).
  void check_committed_position(int32_t row, int32_t k) const;
  class Inspector;

  std::shared_ptr<StepRunner> runner_;
  std::shared_ptr<StepJoiner> joiner_;
  // The KV cache on each device of the runner (one without a split), the same layout in
  // each; declared after runner_: destroyed before the backends.
  std::vector<std::unique_ptr<KvCache>> kvs_;
  int32_t n_ctx_ = 0;
  int32_t ring_step_ = 0;
  int32_t n_past_ = 0;
  int32_t last_step_size_ = 0;
  std::vector<int32_t> last_positions_;  // of the last step's tokens (an MLA model checks what it commits)
  AttentionInputTap tap_;
  std::unique_ptr<KvPolicy> policy_;
  bool drop_ = false;
  int32_t prompt_end_ = 0;
  int64_t steps_ = 0;
};

}  // namespace fafo
