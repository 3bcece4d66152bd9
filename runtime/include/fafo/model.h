// A Llama-family model loaded from GGUF onto a backend, and its forward pass.
//
// Supported architectures: `llama` (Llama 2/3/3.1/3.2, Mistral, TinyLlama, SmolLM) and
// `qwen2` (QKV bias, NEOX RoPE). The model owns the backend and the KV cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fafo/auto_strategy.h"
#include "fafo/backend.h"
#include "fafo/gguf.h"
#include "fafo/kv_layout.h"
#include "fafo/kv_policy.h"
#include "fafo/step_batch.h"
#include "fafo/step_cost_cache.h"

namespace fafo {

struct ModelConfig {
  std::string arch;          // "llama" or "qwen2"
  std::string name;          // general.name
  int32_t n_layer = 0;
  int32_t n_embd = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t n_ff = 0;
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  RopeParams rope;
  std::string rope_scaling;  // "none" or "linear" (rope.freq_scale); per-pair factors come from rope_freqs.weight
  bool tied_embeddings = false;
  bool qkv_bias = false;
  // Multi-head latent attention (a file fafo-care made; fafo.mla.* keys): each layer
  // caches a latent key of mla_rank_k[l] and a latent value of mla_rank_v[l] floats per
  // token instead of kv_dim each. Empty: plain attention.
  std::vector<int32_t> mla_rank_k, mla_rank_v;
  std::string mla_method;  // "care" or "svd" (fafo.mla.method)
  bool mla() const { return !mla_rank_k.empty(); }

  // Reads and validates the hyperparameters; throws GgufError naming the key.
  static ModelConfig from_gguf(const GgufFile& file);
  int32_t kv_dim() const { return n_head_kv * head_dim; }
  // Floats the KV cache holds per token over all layers (keys and values).
  int64_t kv_floats_per_token() const;
};

struct ModelOptions {
  int32_t n_ctx = 0;  // KV cache length; 0 uses min(context length of the model, 4096)
  KvCacheType kv_type = KvCacheType::F32;  // F16 halves the cache (values rounded to fp16)
};

class Model {
 public:
  // Validates the file (architecture, hyperparameters, every tensor's presence, type
  // and shape) and uploads the weights. Throws GgufError / std::runtime_error.
  Model(std::shared_ptr<const GgufFile> file, std::unique_ptr<Backend> backend, const ModelOptions& options = {});
  ~Model();

  // Tokens one step may hold at most.
  static constexpr int32_t kMaxStepTokens = 512;

  const ModelConfig& config() const { return config_; }
  Backend& backend() { return *backend_; }
  const GgufFile& file() const { return *file_; }
  int32_t n_ctx() const { return n_ctx_; }
  // The most rows one step may want logits for (the step itself may be longer): 512,
  // or fewer where a device buffer cannot hold 512 rows of n_vocab logits.
  int32_t max_logit_rows() const { return max_logit_rows_; }

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
  // Makes the first n tokens of the last step part of the committed context.
  void commit(int32_t n);
  // Makes the listed rows of the last step (in this order) the next committed entries;
  // their KV entries are moved into place. Their positions must continue the context.
  void commit_rows(const std::vector<int32_t>& rows);
  // Forgets the context after the first n entries (n <= n_past()).
  void truncate(int32_t n);

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
  const KvLayout& kv_layout() const { return kv_->layout(); }
  // The backend's KV cache this model computes with.
  KvCache& kv_cache() { return *kv_; }
  // Tells the policy that the prompt (the first n_past() entries) is complete.
  void end_prefill();
  // Keys of committed entries by logical index (count x kv_dim, after RoPE; an MLA
  // model's recovered from the latents), for policies, tests and tools.
  std::vector<float> committed_keys(int32_t layer, int32_t first, int32_t count);

  // Calls `tap(layer, rows, n_rows, n_embd)` with each layer's attention input (the rows
  // after the attention RMSNorm, row-major) during every step: fafo-care's calibration.
  // Only on backends that execute each op at once (Backend::executes_immediately) and
  // without fused attention projections; throws std::invalid_argument otherwise. An
  // empty function turns it off.
  using AttentionInputTap = std::function<void(int32_t layer, const float* rows, int64_t n_rows, int64_t n_embd)>;
  void set_attention_input_tap(AttentionInputTap tap);
  // Total KV entries exchanged between the region and the rest so far.
  int64_t kv_swaps() const { return kv_->exchanges(); }

  // --strategy auto's step-cost curve for this model on its backend and cache, kept
  // once measured (fafo/auto_strategy.h); empty until then.
  const StepCosts& step_costs() const { return step_costs_; }
  // Keeps `costs`; a measured curve (source "measured") is also written to the step-cost
  // cache when one is set, and its source then says where (or why it could not be).
  void set_step_costs(StepCosts costs);
  // The on-disk cache this model's curve is kept in between runs (open_model sets it);
  // a curve it holds becomes step_costs().
  void set_step_cost_cache(std::optional<StepCostCache> cache);
  // And what its controller learned in earlier generations (steps and yields).
  AutoMemory& auto_memory() { return auto_memory_; }

 private:
  void record_step(StepBatch& batch);
  // The backend's finish_step, then GgufFile::check_intact (record_step checks first).
  void finish_step();
  struct Weights;
  struct Buffers;
  std::shared_ptr<const GgufFile> file_;
  std::unique_ptr<Backend> backend_;
  ModelConfig config_;
  std::unique_ptr<Weights> weights_;
  std::unique_ptr<Buffers> buffers_;
  void after_commit();
  // Throws unless the last step's row `row` sits at position n_past() + k (MLA models).
  void check_committed_position(int32_t row, int32_t k) const;
  // Hands the step's attention inputs of `layer` (rows rows of xn) to tap_.
  void tap_attention_input(int32_t layer, int32_t rows);
  class Inspector;

  int32_t n_ctx_ = 0;
  int32_t max_logit_rows_ = 0;
  int32_t n_past_ = 0;
  int32_t last_step_size_ = 0;
  std::vector<int32_t> last_positions_;  // of the last step's tokens (an MLA model checks what it commits)
  AttentionInputTap tap_;
  KvCache* kv_ = nullptr;  // owned by backend_
  std::unique_ptr<KvPolicy> policy_;
  bool drop_ = false;
  int32_t prompt_end_ = 0;
  int64_t steps_ = 0;
  StepCosts step_costs_;
  std::optional<StepCostCache> step_cost_cache_;
  AutoMemory auto_memory_;
};

}  // namespace fafo
