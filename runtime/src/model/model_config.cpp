// Hyperparameters from GGUF metadata, as each architecture defines them.
#include <cmath>
#include <cstring>

#include "fafo/model_config.h"

namespace fafo {

namespace {

int32_t positive_int(const GgufFile& f, const std::string& key, int64_t limit = 1 << 24) {
  const int64_t v = f.require_int(key);
  if (v <= 0 || v > limit) throw GgufError(f.path(), "key '" + key + "' has invalid value " + std::to_string(v));
  return static_cast<int32_t>(v);
}

// An MLA file's per-layer latent widths (fafo.mla.rank_k / rank_v, one per layer).
std::vector<int32_t> mla_ranks(const GgufFile& f, const std::string& key, int32_t n_layer, int32_t kv_dim) {
  const GgufValue* v = f.find(key);
  if (!v || v->type != GgufType::ARRAY) throw GgufError(f.path(), "key '" + key + "' is missing or not an array");
  const GgufValue::Array& a = v->as_array();
  if (a.items.size() != static_cast<size_t>(n_layer))
    throw GgufError(f.path(), "key '" + key + "' holds " + std::to_string(a.items.size()) + " ranks for " +
                                  std::to_string(n_layer) + " layers");
  std::vector<int32_t> ranks;
  for (const GgufValue& item : a.items) {
    // A latent wider than the key or value it recovers would only cost memory.
    if (!item.is_integer() || item.as_int() < 1 || item.as_int() > kv_dim)
      throw GgufError(f.path(), "key '" + key + "' gives layer " + std::to_string(ranks.size()) + " the rank " +
                                    item.summary() + ", not an integer in [1, " + std::to_string(kv_dim) + "] (kv_dim)");
    ranks.push_back(static_cast<int32_t>(item.as_int()));
  }
  return ranks;
}

void read_mla(const GgufFile& f, ModelConfig& c) {
  if (c.qkv_bias) throw GgufError(f.path(), "MLA models with attention biases are not supported");
  if (c.qk_norm) throw GgufError(f.path(), "MLA models with query and key norms are not supported");
  c.mla_rank_k = mla_ranks(f, "fafo.mla.rank_k", c.n_layer, c.kv_dim());
  c.mla_rank_v = mla_ranks(f, "fafo.mla.rank_v", c.n_layer, c.kv_dim());
  c.mla_method = f.get_string("fafo.mla.method", "");
}

// A positive finite float key, or `fallback` where the file has none.
float positive_float(const GgufFile& f, const std::string& key, double fallback) {
  const double v = f.get_float(key, fallback);
  if (!std::isfinite(v) || v <= 0.0) throw GgufError(f.path(), "key '" + key + "' must be a positive finite number");
  return static_cast<float>(v);
}

// The sliding window of Gemma 2 and 3 (attention.sliding_window; Gemma 2's default
// 4096; 0: none), on the layers `attention.sliding_window_pattern` picks (a scalar
// period; a file giving anything else keeps the family's default period), and their
// RoPE base (rope.freq_base_swa, default `base_swa`) and scale (`scale_swa`).
void read_sliding_window(const GgufFile& f, ModelConfig& c, int32_t default_window, int32_t default_period,
                         double base_swa, float scale_swa) {
  const std::string a = c.arch + ".";
  const int64_t window = f.find(a + "attention.sliding_window") ? f.require_int(a + "attention.sliding_window") : default_window;
  if (window < 0 || window > (1 << 24))
    throw GgufError(f.path(), "key '" + a + "attention.sliding_window' has invalid value " + std::to_string(window));
  c.sliding_window = static_cast<int32_t>(window);
  c.swa_period = default_period;
  if (const GgufValue* v = f.find(a + "attention.sliding_window_pattern"); v && v->is_integer()) {
    if (v->as_int() < 0 || v->as_int() > c.n_layer)
      throw GgufError(f.path(), "key '" + a + "attention.sliding_window_pattern' has invalid value " + v->summary());
    c.swa_period = static_cast<int32_t>(v->as_int());
  }
  // (YaRN is folded into c.rope's factors by now; the window layers' own scaling of it is
  // not worked out: refused where they could differ, gpt-oss handling its own.)
  if (c.rope_scaling == "yarn" && c.arch != "gpt-oss" && c.sliding_window > 0)
    throw GgufError(f.path(), "YaRN scaling (rope.scaling.type yarn) in a " + c.arch +
                                  " file with sliding-window layers is not supported");
  c.rope_swa = c.rope;
  c.rope_swa.freq_factors.clear();  // rope_freqs.weight divides the global layers' frequencies only
  c.rope_swa.freq_base = positive_float(f, a + "rope.freq_base_swa", base_swa);
  c.rope_swa.freq_scale = scale_swa;
}

// Gemma 2, as llama.cpp defines it: embeddings scaled by sqrt(n_embd); soft-capped
// attention scores (attn_logit_softcapping, default 50) and logits
// (final_logit_softcapping, default 30); GeGLU; post-norms; the attention scale
// 1 / sqrt(head_dim), or 1 / sqrt(n_embd / n_head) for the 46-layer (27B) model (the
// query_pre_attn_scalar of Google's configs); a sliding window (default 4096) on
// alternate layers (period 2), which rotate as the others unless the file gives them
// their own base; the output is token_embd.
void read_gemma2(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  c.embedding_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.query_pre_attn_scalar = static_cast<float>(c.n_layer == 46 ? c.n_embd / c.n_head : c.head_dim);
  c.attn_softcap = positive_float(f, a + "attn_logit_softcapping", 50.0);
  c.final_softcap = positive_float(f, a + "final_logit_softcapping", 30.0);
  c.gelu_ffn = true;
  c.post_norms = true;
  c.tied_embeddings = true;  // llama.cpp's gemma2 takes token_embd as the output even where output.weight exists
  read_sliding_window(f, c, 4096, 2, c.rope.freq_base, c.rope.freq_scale);
  if (c.qkv_bias) throw GgufError(f.path(), "gemma2 files with attention biases are not supported");
}

// Gemma 3, as llama.cpp defines it: Gemma 2's embedding scale, GeGLU, post-norms and
// attention scale (1 / sqrt(n_embd / n_head) for the 62-layer 27B model), without
// attention soft-capping; logits capped only where the file gives
// final_logit_softcapping; Q and K head norms before RoPE; a sliding window (where the
// file gives one) on five layers of every six (period 6), rotating with base 10,000 and
// no scaling (rope.freq_base_swa), the global layers with rope.freq_base and the file's
// linear scaling; token_embd as the output unless the file has output.weight.
void read_gemma3(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  c.embedding_scale = std::sqrt(static_cast<float>(c.n_embd));
  c.query_pre_attn_scalar = static_cast<float>(c.n_layer == 62 ? c.n_embd / c.n_head : c.head_dim);
  // final_logit_softcapping where the file gives one (0 or absent: none, as llama.cpp).
  const double final_cap = f.get_float(a + "final_logit_softcapping", 0.0);
  if (!std::isfinite(final_cap) || final_cap < 0.0)
    throw GgufError(f.path(), "key '" + a + "final_logit_softcapping' must be a finite number >= 0");
  c.final_softcap = static_cast<float>(final_cap);
  c.gelu_ffn = true;
  c.post_norms = true;
  read_sliding_window(f, c, 0, 6, 10000.0, 1.0f);
  if (c.qkv_bias) throw GgufError(f.path(), "gemma3 files with attention biases are not supported");
}

// gpt-oss, as llama.cpp defines it: qwen3moe's expert keys; attention with biases (the
// query, key and value ones where the file has them, attn_output.bias) and a sink per head (attn_sinks.weight), scaled
// by 1 / sqrt(head_dim); a sliding window (attention.sliding_window, which it requires)
// on the even layers (period 2, or attention.sliding_window_pattern), rotating as the
// others (NEOX with YaRN: rope.freq_base_swa where the file gives one); the feed-forward
// block's norm named post_attention_norm; a router with a bias whose k largest logits
// pick the experts, weighted by the softmax of those k (not of all of them); experts with
// biases and the clamped SwiGLU (GatedActivation::SwigluOai); its own output.weight.
void read_gpt_oss(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  c.attn_out_bias = true;
  c.attention_sinks = true;
  c.swiglu_oai_ffn = true;
  c.moe_softmax_of_chosen = true;
  c.expert_biases = true;
  c.ffn_norm_name = "post_attention_norm";
  f.require_int(a + "attention.sliding_window");
  read_sliding_window(f, c, 0, 2, c.rope.freq_base, c.rope.freq_scale);
  c.rope_swa.freq_factors = c.rope.freq_factors;  // YaRN's, which every layer takes (gpt-oss has no rope_freqs)
  if (c.rope_scaling == "yarn" && c.rope_swa.freq_base != c.rope.freq_base)
    throw GgufError(f.path(), "a gpt-oss file with YaRN and its own rope.freq_base_swa is not supported");
}

// qwen3moe: expert_count experts of expert_feed_forward_length hidden units, of which
// expert_used_count serve each token (as llama.cpp reads them).
void read_experts(const GgufFile& f, ModelConfig& c) {
  const std::string a = c.arch + ".";
  c.n_expert = positive_int(f, a + "expert_count", 4096);
  c.n_expert_used = positive_int(f, a + "expert_used_count", 4096);
  if (c.n_expert_used > c.n_expert)
    throw GgufError(f.path(), "expert_used_count " + std::to_string(c.n_expert_used) + " is more than expert_count " +
                                  std::to_string(c.n_expert));
  c.n_ff_exp = positive_int(f, a + "expert_feed_forward_length");
}

// YaRN (rope.scaling.type "yarn"), as llama.cpp applies it to the architectures fafo
// reads (ext_factor 1, beta_fast 32, beta_slow 1; ggml's rope_yarn): pair i's angle is
// theta_i * (s (1 - r_i) + r_i), with s = freq_scale (1 / factor) and r_i the ramp
// 1 - clamp((i - low) / max(0.001, high - low), 0, 1) between the correction dimensions
// low = floor(d(32)) and high = ceil(d(1)), d(b) = n_dims ln(n_ctx_orig / (2 pi b)) /
// (2 ln base), clamped to [0, n_dims - 1]; cos and sin are scaled by 1 + 0.1 ln(factor)
// where factor > 1, else 1, times rope.scaling.attn_factor (llama.cpp's yarn_attn_factor,
// get_mscale(factor) / (1 + 0.1 ln factor), times the kernel's 1 + 0.1 ln factor). Here the angle's factor becomes a divisor
// of freq_factors and the scale attn_factor, so every backend's RoPE applies it.
void apply_yarn(RopeParams& r, int32_t n_ctx_orig, float file_attn_factor) {
  const float s = r.freq_scale, base = r.freq_base;
  const int n_dims = r.n_dims;
  const auto corr_dim = [&](float n_rot) {
    return static_cast<float>(n_dims) * std::log(static_cast<float>(n_ctx_orig) / (n_rot * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * std::log(base));
  };
  const float low = std::max(0.0f, std::floor(corr_dim(32.0f)));
  const float high = std::min(static_cast<float>(n_dims - 1), std::ceil(corr_dim(1.0f)));
  if (r.freq_factors.empty()) r.freq_factors.assign(static_cast<size_t>(n_dims / 2), 1.0f);
  for (int i = 0; i < n_dims / 2; ++i) {
    const float y = (static_cast<float>(i) - low) / std::max(0.001f, high - low);
    const float ramp = 1.0f - std::min(1.0f, std::max(0.0f, y));
    r.freq_factors[static_cast<size_t>(i)] /= s * (1.0f - ramp) + ramp;
  }
  const float factor = 1.0f / s;
  r.attn_factor = file_attn_factor * (factor > 1.0f ? 1.0f + 0.1f * std::log(factor) : 1.0f);
  r.freq_scale = 1.0f;
}

}  // namespace

int64_t ModelConfig::kv_floats_per_token() const {
  if (!mla()) return int64_t{2} * n_layer * kv_dim();
  int64_t n = 0;
  for (size_t l = 0; l < mla_rank_k.size(); ++l) n += int64_t{mla_rank_k[l]} + mla_rank_v[l];
  return n;
}

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  c.arch = f.require_string("general.architecture");
  const bool experts = c.arch == "qwen3moe" || c.arch == "gpt-oss";
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3" && !experts && c.arch != "phi3" &&
      c.arch != "gemma2" && c.arch != "gemma3")
    throw GgufError(f.path(), "unsupported architecture '" + c.arch +
                                  "' (supported: llama, qwen2, qwen3, qwen3moe, gpt-oss, phi3, gemma2, gemma3)");
  c.name = f.get_string("general.name", "");
  const std::string a = c.arch + ".";
  if (!experts && (f.get_int(a + "expert_count", 0) > 0 || f.find_tensor("blk.0.ffn_gate_inp.weight")))
    throw GgufError(f.path(), "mixture-of-experts " + c.arch + " files (such as Mixtral) are not supported; of the "
                              "mixture-of-experts architectures fafo runs qwen3moe and gpt-oss");
  c.n_layer = positive_int(f, a + "block_count", 4096);
  c.n_embd = positive_int(f, a + "embedding_length");
  c.n_head = positive_int(f, a + "attention.head_count", 4096);
  c.n_head_kv = f.find(a + "attention.head_count_kv") ? positive_int(f, a + "attention.head_count_kv", 4096) : c.n_head;
  if (c.n_head % c.n_head_kv != 0)
    throw GgufError(f.path(), "attention.head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
                                  std::to_string(c.n_head_kv));
  if (experts) read_experts(f, c);
  // (A mixture-of-experts file's dense width is not used: its layers have only experts.)
  c.n_ff = c.moe() && !f.find(a + "feed_forward_length") ? c.n_ff_exp : positive_int(f, a + "feed_forward_length");
  c.head_dim = f.find(a + "attention.key_length") ? positive_int(f, a + "attention.key_length", 4096) : c.n_embd / c.n_head;
  if (!f.find(a + "attention.key_length") && c.n_embd % c.n_head != 0)
    throw GgufError(f.path(), "embedding_length is not a multiple of head_count");
  c.n_ctx_train_in_file = f.find(a + "context_length") != nullptr;
  c.n_ctx_train = c.n_ctx_train_in_file ? positive_int(f, a + "context_length", 1 << 24) : 2048;
  c.rms_eps = static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5));
  if (!(c.rms_eps > 0.0f && c.rms_eps < 1.0f)) throw GgufError(f.path(), "layer_norm_rms_epsilon out of range");

  c.rope.n_dims = f.find(a + "rope.dimension_count") ? positive_int(f, a + "rope.dimension_count", 4096) : c.head_dim;
  if (c.rope.n_dims > c.head_dim || c.rope.n_dims % 2 != 0)
    throw GgufError(f.path(), "rope.dimension_count " + std::to_string(c.rope.n_dims) + " is invalid for head size " +
                                  std::to_string(c.head_dim));
  c.rope.freq_base = static_cast<float>(f.get_float(a + "rope.freq_base", 10000.0));
  if (!std::isfinite(c.rope.freq_base) || c.rope.freq_base <= 0.0f)
    throw GgufError(f.path(), "rope.freq_base must be a positive finite number");
  // llama GGUFs store Q/K permuted for the interleaved layout; Qwen's and Phi-3's rotate halves.
  c.rope.neox = c.arch != "llama";  // qwen2, qwen3, qwen3moe, gpt-oss, phi3, gemma2, gemma3
  // As llama.cpp reads it: the type defaults to linear; the factor comes from
  // rope.scaling.factor, else the legacy rope.scale_linear; 0 means no scaling.
  // Llama 3.1/3.2 files carry their scaling as a rope_freqs.weight tensor instead (below).
  c.rope_scaling = f.get_string(a + "rope.scaling.type", "linear");
  double factor = f.get_float(a + "rope.scaling.factor", 0.0);
  if (factor == 0.0) factor = f.get_float(a + "rope.scale_linear", 1.0);
  if (!std::isfinite(factor) || factor < 0.0) throw GgufError(f.path(), "rope.scaling.factor must be a finite number >= 0");
  if (factor == 0.0) factor = 1.0;
  c.rope_factor = static_cast<float>(factor);
  // LongRoPE (Phi-3): per-pair factors in two tensors, chosen by the context size
  // (StepRunner::use_context), and an attention factor.
  const GgufTensor* short_factors = f.find_tensor("rope_factors_short.weight");
  const GgufTensor* long_factors = f.find_tensor("rope_factors_long.weight");
  if (short_factors || long_factors) {
    if (!short_factors || !long_factors)
      throw GgufError(f.path(), "a LongRoPE file needs both rope_factors_short.weight and rope_factors_long.weight");
    for (const GgufTensor* t : {short_factors, long_factors}) {
      if (t->type != TensorType::F32 || t->n_elements() != c.rope.n_dims / 2)
        throw GgufError(f.path(), t->name + " must be F32 with rope.dimension_count/2 values");
      std::vector<float>& dst = t == short_factors ? c.rope_factors_short : c.rope_factors_long;
      dst.resize(static_cast<size_t>(c.rope.n_dims / 2));
      std::memcpy(dst.data(), t->data, t->n_bytes);
      for (float v : dst)
        if (!std::isfinite(v) || v <= 0.0f) throw GgufError(f.path(), t->name + " holds a value that is not a positive number");
    }
    c.rope_original_ctx = f.find(a + "rope.scaling.original_context_length")
                              ? positive_int(f, a + "rope.scaling.original_context_length", 1 << 24)
                              : c.n_ctx_train;
  }
  if (const GgufTensor* rf = f.find_tensor("rope_freqs.weight")) {
    if (!c.rope_factors_short.empty()) throw GgufError(f.path(), "rope_freqs.weight and LongRoPE factors in one file");
    if (rf->type != TensorType::F32 || rf->n_elements() != c.rope.n_dims / 2)
      throw GgufError(f.path(), "rope_freqs.weight must be F32 with rope.dimension_count/2 values");
    c.rope.freq_factors.resize(static_cast<size_t>(c.rope.n_dims / 2));
    std::memcpy(c.rope.freq_factors.data(), rf->data, rf->n_bytes);
    for (float v : c.rope.freq_factors)
      if (!std::isfinite(v) || v <= 0.0f) throw GgufError(f.path(), "rope_freqs.weight holds a value that is not a positive number");
  }
  c.rope_attn_factor = static_cast<float>(f.get_float(a + "rope.scaling.attn_factor", 1.0));
  if (!std::isfinite(c.rope_attn_factor) || c.rope_attn_factor <= 0.0f)
    throw GgufError(f.path(), "rope.scaling.attn_factor must be a positive finite number");
  c.rope.attn_factor = c.rope_attn_factor;  // on the rotated dimensions (Phi-4-mini rotates 3/4 of each head)
  if (c.rope_scaling == "linear" || c.rope_scaling == "yarn") {
    c.rope.freq_scale = static_cast<float>(1.0 / factor);
  } else if (c.rope_scaling != "none") {
    throw GgufError(f.path(), "unsupported rope.scaling.type '" + c.rope_scaling + "' (supported: none, linear, yarn)");
  }
  if (c.rope_scaling == "yarn") {
    if (!c.rope_factors_short.empty()) throw GgufError(f.path(), "YaRN and LongRoPE factors in one file");
    c.rope_original_ctx = f.find(a + "rope.scaling.original_context_length")
                              ? positive_int(f, a + "rope.scaling.original_context_length", 1 << 24)
                              : c.n_ctx_train;
    apply_yarn(c.rope, c.rope_original_ctx, c.rope_attn_factor);
  }

  const GgufTensor& embd = f.require_tensor("token_embd.weight");
  if (embd.shape.size() != 2 || embd.shape[0] != c.n_embd)
    throw GgufError(f.path(), "token_embd.weight has the wrong shape for embedding_length " + std::to_string(c.n_embd));
  c.n_vocab = static_cast<int32_t>(embd.shape[1]);
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  if (f.find_tensor("blk.0.attn_qkv.bias"))
    throw GgufError(f.path(), "attention biases in a fused attn_qkv.bias are not supported");
  c.qk_norm = c.arch == "qwen3" || c.arch == "qwen3moe" || c.arch == "gemma3";
  if (c.qk_norm && c.rope.n_dims != c.head_dim)
    throw GgufError(f.path(), "rope.dimension_count " + std::to_string(c.rope.n_dims) + " must equal the head size " +
                                  std::to_string(c.head_dim) + " in a " + c.arch + " file");
  if (c.arch == "gemma2") read_gemma2(f, c);
  if (c.arch == "gemma3") read_gemma3(f, c);
  if (c.arch == "gpt-oss") read_gpt_oss(f, c);
  if (f.find("fafo.mla.rank_k") || f.find("fafo.mla.rank_v")) {
    if (c.sliding_window > 0 || c.gelu_ffn || c.moe() || c.attention_sinks)
      throw GgufError(f.path(), "MLA files of a " + c.arch + " model are not supported");
    read_mla(f, c);
  }
  return c;
}

}  // namespace fafo
