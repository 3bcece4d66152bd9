// A model's weights as loaded: the file, its hyperparameters (fafo/model_config.h) and
// every tensor resident on one backend. Immutable once constructed: the forward pass
// and the step's activations are the StepRunner's (fafo/step_runner.h), and a Sequence
// (fafo/sequence.h) is one context over a StepRunner.
//
// Supported architectures: `llama` (Llama 2/3/3.1/3.2, Mistral, TinyLlama, SmolLM),
// `qwen2` (QKV bias), `qwen3` (per-head Q/K norms), `phi3` (fused tensors, LongRoPE),
// `gemma2` and `gemma3` (GeGLU, post-norms, soft-caps, sliding windows); any of the
// dense ones with multi-head latent attention where fafo-care made the file.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "fafo/backend.h"
#include "fafo/gguf.h"
#include "fafo/kv_cache.h"
#include "fafo/model_config.h"

namespace fafo {

// One layer's weights. fused_qkv: wq (and bq) hold the query, key and value rows
// stacked, and wk, wv, bk, bv stay empty. An empty w_up: w_gate holds the gate's rows
// then the up projection's (the backend fuses them).
struct LayerWeights {
  Weight attn_norm, wq, wk, wv, wo, bq, bk, bv, ffn_norm, w_gate, w_up, w_down;
  Weight q_norm, k_norm;                 // ModelConfig::qk_norm: one head's gains each
  Weight attn_post_norm, ffn_post_norm;  // ModelConfig::post_norms
  bool fused_qkv = false;
  // MLA layers (ModelConfig::mla): wk and wv are the latent down-projections (rank x
  // n_embd), k_up and v_up the F32 up-projections (kv_dim x rank); k_up_host is k_up's
  // floats in the file.
  Weight k_up, v_up;
  const float* k_up_host = nullptr;
};

class ModelWeights {
 public:
  // Validates the file (architecture, hyperparameters, every tensor's presence, type
  // and shape) and uploads the weights, reporting progress by bytes. Throws GgufError /
  // std::runtime_error.
  ModelWeights(std::shared_ptr<const GgufFile> file, std::unique_ptr<Backend> backend);
  ~ModelWeights();
  ModelWeights(const ModelWeights&) = delete;
  ModelWeights& operator=(const ModelWeights&) = delete;

  // ModelWeights alive in this process (loads of weights not yet freed): what a server
  // reports, so a load kept after it was replaced (a lost device) shows.
  static int64_t loads_alive();

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return *file_; }
  const std::shared_ptr<const GgufFile>& shared_file() const { return file_; }
  // The device the weights sit on (a StepRunner runs steps on it).
  Backend& backend() const { return *backend_; }

  const Weight& token_embd() const { return token_embd_; }
  const Weight& output_norm() const { return output_norm_; }
  const Weight& output() const { return output_; }  // token_embd() where the embeddings are tied
  const LayerWeights& layer(int32_t l) const { return layers_[static_cast<size_t>(l)]; }
  const std::vector<LayerWeights>& layers() const { return layers_; }

  // The KV cache shape of a sequence of `n_ctx` entries stored as `type`.
  KvCacheShape kv_cache_shape(int32_t n_ctx, KvCacheType type) const;
  // An MLA model's latent keys `stored` (count x rank of layer `layer`) as the keys of
  // logical entries first.. (count x kv_dim, rotated by `rope` at their positions).
  std::vector<float> recover_keys(int32_t layer, const std::vector<float>& stored, int32_t first, int32_t count,
                                  const RopeParams& rope) const;

 private:
  // Counts this object in loads_alive() from its construction (first member) to its end.
  struct LoadCount {
    LoadCount();
    ~LoadCount();
    LoadCount(const LoadCount&) = delete;
    LoadCount& operator=(const LoadCount&) = delete;
  };
  LoadCount counted_;
  std::shared_ptr<const GgufFile> file_;
  std::unique_ptr<Backend> backend_;  // declared before the weights: outlives them
  ModelConfig config_;
  Weight token_embd_, output_norm_, output_;
  std::vector<LayerWeights> layers_;
};

}  // namespace fafo
