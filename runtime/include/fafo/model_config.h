// A model's hyperparameters as its GGUF file gives them (ModelConfig::from_gguf, in
// model_config.cpp): the shapes, RoPE, the architecture's switches (biases, norms,
// soft-caps, sliding windows, fused tensors, latent attention).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fafo/backend.h"
#include "fafo/gguf.h"

namespace fafo {

struct ModelConfig {
  std::string arch;  // "llama", "qwen2", "qwen3", "qwen3moe", "gpt-oss", "phi3", "gemma2" or "gemma3"
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
  // rope.freq_factors: rope_freqs.weight's per-pair divisors (Llama 3.1/3.2), else empty
  // (LongRoPE's factors are not here: the StepRunner puts the set its sequences use in
  // its own copy, StepRunner::rope_of).
  RopeParams rope;
  // "none", "linear" (rope.freq_scale) or "yarn" (folded into rope.freq_factors and
  // rope.attn_factor at load: model_config.cpp's apply_yarn; rope_original_ctx holds
  // rope.scaling.original_context_length).
  std::string rope_scaling;
  float rope_factor = 1.0f;  // rope.scaling.factor (1: none)
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
  // Sliding-window layers (Gemma 2 and 3, gpt-oss): with sliding_window > 0, layer l attends
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

  // Mixture-of-experts feed-forward (qwen3moe): every layer has n_expert experts of
  // n_ff_exp hidden units (expert_feed_forward_length) and a router (ffn_gate_inp) that
  // picks n_expert_used of them for each token (fafo/moe_routing.h). 0: a dense model.
  int32_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
  bool moe() const { return n_expert > 0; }
  // gpt-oss: the router's k largest logits pick the experts and the softmax of those k
  // weights them (moe_softmax_of_chosen; else qwen3moe's softmax of all, the chosen
  // renormalized); the router and each expert's gate, up and down projections add a
  // bias (expert_biases); the experts' activation is the clamped SwiGLU (swiglu_oai_ffn).
  bool moe_softmax_of_chosen = false, expert_biases = false, swiglu_oai_ffn = false;
  // gpt-oss: attn_output.bias (attn_out_bias) and a sink per query head (attn_sinks.weight:
  // AttentionShape::sinks).
  bool attn_out_bias = false, attention_sinks = false;
  // The name of the norm before each feed-forward block (blk.N.<name>.weight): "ffn_norm",
  // or gpt-oss's "post_attention_norm".
  std::string ffn_norm_name = "ffn_norm";

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

}  // namespace fafo
