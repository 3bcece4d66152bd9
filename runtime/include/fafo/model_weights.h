// The part of a model that sequences share: the file, its hyperparameters, the weights
// resident on one backend, one step's activations, and the forward pass written once
// against the Backend interface. Immutable after loading; a Model (fafo/model.h) is one
// sequence over it (its own KV cache and context), and any number of them may share one
// ModelWeights: the server's slots, a model drafting for itself, the studio's views.
//
// Supported architectures: `llama` (Llama 2/3/3.1/3.2, Mistral, TinyLlama, SmolLM) and
// `qwen2` (QKV bias, NEOX RoPE).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "fafo/backend.h"
#include "fafo/gguf.h"
#include "fafo/kv_cache.h"
#include "fafo/step_batch.h"

namespace fafo {

struct ModelConfig {
  std::string arch;          // "llama", "qwen2", "qwen3", "phi3", "gemma2" or "gemma3"
  std::string name;          // general.name
  int32_t n_layer = 0;
  int32_t n_embd = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t n_ff = 0;
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;
  // Whether the file gives n_ctx_train (ARCH.context_length); without it n_ctx_train is
  // 2048, a default, and nothing should be said about the context the model was trained on.
  bool n_ctx_train_in_file = false;
  float rms_eps = 1e-5f;
  RopeParams rope;
  std::string rope_scaling;  // "none" or "linear" (rope.freq_scale); per-pair factors come from rope_freqs.weight
  bool tied_embeddings = false;
  bool qkv_bias = false;
  // Each layer normalizes every query and key head (attn_q_norm / attn_k_norm, one
  // head's width) before RoPE: Qwen3, Gemma 3.
  bool qk_norm = false;
  // Phi-3's LongRoPE (rope_factors_short/long.weight, per-pair divisors): the short
  // factors hold for contexts up to rope_original_ctx, the long ones past it (as
  // llama.cpp picks them from the context size); empty: none. rope_attn_factor scales
  // the rotated dimensions of the queries and keys (rope.scaling.attn_factor; 1: none;
  // rope.attn_factor).
  std::vector<float> rope_factors_short, rope_factors_long;
  int32_t rope_original_ctx = 0;
  float rope_attn_factor = 1.0f;
  // Gemma 2 and 3: the embeddings times embedding_scale (sqrt(n_embd); 0: none); the
  // attention scale 1 / sqrt(query_pre_attn_scalar) (0: 1 / sqrt(head_dim)); scores and
  // logits soft-capped at attn_softcap and final_softcap (0: none); GeGLU feed-forward
  // (gelu_ffn, else SwiGLU); RMSNorms after the attention and the feed-forward blocks
  // too (post_norms: attn_post_norm, ffn_post_norm).
  float embedding_scale = 0.0f;
  float query_pre_attn_scalar = 0.0f;
  float attn_softcap = 0.0f, final_softcap = 0.0f;
  bool gelu_ffn = false, post_norms = false;
  // Sliding-window layers (Gemma 2 and 3): with sliding_window > 0, layer l attends
  // only the last sliding_window positions when l % swa_period < swa_period - 1 (every
  // layer when swa_period is 0), as llama.cpp's set_swa_pattern; those layers rotate by
  // rope_swa (Gemma 3: base 10,000, no scaling), the others by rope.
  int32_t sliding_window = 0;
  int32_t swa_period = 0;
  RopeParams rope_swa;
  bool window_layer(int32_t layer) const {
    return sliding_window > 0 && (swa_period == 0 || layer % swa_period < swa_period - 1);
  }
  // The window of layer `layer` (AttentionShape::window; 0: none) and its RoPE.
  int32_t window_of(int32_t layer) const { return window_layer(layer) ? sliding_window : 0; }
  const RopeParams& rope_of(int32_t layer) const { return window_layer(layer) ? rope_swa : rope; }
  // Multi-head latent attention (a file fafo-care made; fafo.mla.* keys): each layer
  // caches a latent key of mla_rank_k[l] and a latent value of mla_rank_v[l] floats per
  // token instead of kv_dim each. Empty: plain attention.
  std::vector<int32_t> mla_rank_k, mla_rank_v;
  std::string mla_method;  // "care" or "svd" (fafo.mla.method)
  bool mla() const { return !mla_rank_k.empty(); }

  // Phi-3's fused projections: attn_qkv.weight (the query, key and value rows in one
  // tensor) and ffn_up.weight holding the gate's rows then the up projection's.
  bool fused_tensors() const { return arch == "phi3"; }
  // Reads and validates the hyperparameters; throws GgufError naming the key.
  static ModelConfig from_gguf(const GgufFile& file);
  int32_t kv_dim() const { return n_head_kv * head_dim; }
  // The factor of the query-key dot products: 1 / sqrt(head_dim), or 1 /
  // sqrt(query_pre_attn_scalar).
  float attention_scale() const {
    const float d = query_pre_attn_scalar > 0.0f ? query_pre_attn_scalar : static_cast<float>(head_dim);
    return 1.0f / std::sqrt(d);
  }
  // Floats the KV cache holds per token over all layers (keys and values).
  int64_t kv_floats_per_token() const;
};

class ModelWeights {
 public:
  // Validates the file (architecture, hyperparameters, every tensor's presence, type
  // and shape), uploads the weights and allocates one step's activations. Throws
  // GgufError / std::runtime_error.
  ModelWeights(std::shared_ptr<const GgufFile> file, std::unique_ptr<Backend> backend);
  ~ModelWeights();
  ModelWeights(const ModelWeights&) = delete;
  ModelWeights& operator=(const ModelWeights&) = delete;

  // Tokens one step may hold at most.
  static constexpr int32_t kMaxStepTokens = 512;
  // ModelWeights alive in this process (loads of weights not yet freed): what a server
  // reports, so a load kept after it was replaced (a lost device) shows.
  static int64_t loads_alive();

  const ModelConfig& config() const { return config_; }
  Backend& backend() { return *backend_; }
  const Backend& backend() const { return *backend_; }
  const GgufFile& file() const { return *file_; }
  const std::shared_ptr<const GgufFile>& shared_file() const { return file_; }
  // The most rows one step may want logits for (the step itself may be longer): 512,
  // or fewer where a device buffer cannot hold 512 rows of n_vocab logits.
  int32_t max_logit_rows() const { return max_logit_rows_; }
  // A sequence of `n_ctx` entries starts using these weights: a LongRoPE model's RoPE
  // takes its short factors for contexts up to ModelConfig::rope_original_ctx, its long
  // ones past them (the context rounded up to a multiple of 256 first, as llama.cpp does) (nothing to do for other models). Throws std::invalid_argument where
  // a sequence using the other set is open (one step computes for every sequence
  // alike). release_context(n_ctx) when the
  // sequence ends.
  void use_context(int32_t n_ctx);
  void release_context(int32_t n_ctx);
  // The KV cache shape of a sequence of `n_ctx` entries stored as `type`.
  KvCacheShape kv_cache_shape(int32_t n_ctx, KvCacheType type) const;

  // The backend runs one step at a time, and the step's activations are shared: a
  // sequence holds this lock from begin_step until it has read the step's results, and
  // around anything else that uses the backend (its cache's exchanges, moves, reads).
  // Recursive, so a policy called inside such a section may read keys.
  std::recursive_mutex& step_mutex() const { return step_mutex_; }

  // --- the forward pass (callers hold step_mutex()) ---------------------------------
  // Calls `tap(layer, rows, n_rows, n_embd)` with each layer's attention input.
  using AttentionInputTap = std::function<void(int32_t layer, const float* rows, int64_t n_rows, int64_t n_embd)>;
  // Issues the whole forward pass of `batch` to the backend, part s over caches[s] (one
  // cache for a batch that is not joined), up to (not including) finish_step; the
  // logits of batch.logit_rows() land in logits(). `tap`: only for a step of one part.
  void record_step(const StepBatch& batch, std::span<KvCache* const> caches, const AttentionInputTap& tap);
  // The logits buffer of the last step (batch.logit_rows().size() rows of n_vocab).
  const Activation& logits() const;
  // Why the attention inputs cannot be shown on this backend ("" when they can).
  std::string why_no_attention_input_tap() const;
  // An MLA model's latent keys `stored` (count x rank of layer `layer`) as the keys of
  // logical entries first.. (count x kv_dim, rotated at their positions).
  std::vector<float> recover_keys(int32_t layer, const std::vector<float>& stored, int32_t first, int32_t count) const;

 private:
  struct Weights;
  struct Buffers;
  // Counts this object in loads_alive() from its construction (first member) to its end.
  struct LoadCount {
    LoadCount();
    ~LoadCount();
    LoadCount(const LoadCount&) = delete;
    LoadCount& operator=(const LoadCount&) = delete;
  };
  LoadCount counted_;
  std::shared_ptr<const GgufFile> file_;
  std::unique_ptr<Backend> backend_;
  ModelConfig config_;
  std::unique_ptr<Weights> weights_;
  std::unique_ptr<Buffers> buffers_;
  int32_t max_logit_rows_ = 0;
  int32_t rope_factor_users_[2] = {0, 0};  // open sequences on the short, the long factors
  mutable std::recursive_mutex step_mutex_;
};

}  // namespace fafo
