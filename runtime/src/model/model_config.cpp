// Hyperparameters from GGUF metadata, as each architecture defines them.
#include <cmath>
#include <numbers>

#include "fafo/model.h"

namespace fafo {

namespace {

int32_t positive_int(const GgufFile& f, const std::string& key, int64_t limit = 1 << 24) {
  const int64_t v = f.require_int(key);
  if (v <= 0 || v > limit) throw GgufError(f.path(), "key '" + key + "' has invalid value " + std::to_string(v));
  return static_cast<int32_t>(v);
}

// Llama 3.1 "llama3" RoPE scaling: low frequencies are slowed by `factor`, high ones
// kept, and the band between them interpolated. Expressed as a per-pair divisor.
std::vector<float> llama3_freq_factors(const RopeParams& p, float factor, float low_freq_factor, float high_freq_factor,
                                       float original_ctx) {
  const float low_freq_wavelen = original_ctx / low_freq_factor;
  const float high_freq_wavelen = original_ctx / high_freq_factor;
  std::vector<float> factors;
  for (int32_t i = 0; i < p.n_dims / 2; ++i) {
    const float freq = std::pow(p.freq_base, -2.0f * static_cast<float>(i) / static_cast<float>(p.n_dims));
    const float wavelen = 2.0f * std::numbers::pi_v<float> / freq;
    if (wavelen < high_freq_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_freq_wavelen) {
      factors.push_back(factor);
    } else {
      const float smooth = (original_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      factors.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return factors;
}

}  // namespace

ModelConfig ModelConfig::from_gguf(const GgufFile& f) {
  ModelConfig c;
  c.arch = f.require_string("general.architecture");
  if (c.arch != "llama" && c.arch != "qwen2")
    throw GgufError(f.path(), "unsupported architecture '" + c.arch + "' (supported: llama, qwen2)");
  c.name = f.get_string("general.name", "");
  const std::string a = c.arch + ".";
  c.n_layer = positive_int(f, a + "block_count", 4096);
  c.n_embd = positive_int(f, a + "embedding_length");
  c.n_head = positive_int(f, a + "attention.head_count", 4096);
  c.n_head_kv = f.find(a + "attention.head_count_kv") ? positive_int(f, a + "attention.head_count_kv", 4096) : c.n_head;
  if (c.n_head % c.n_head_kv != 0)
    throw GgufError(f.path(), "attention.head_count " + std::to_string(c.n_head) + " is not a multiple of head_count_kv " +
                                  std::to_string(c.n_head_kv));
  c.n_ff = positive_int(f, a + "feed_forward_length");
  c.head_dim = f.find(a + "attention.key_length") ? positive_int(f, a + "attention.key_length", 4096) : c.n_embd / c.n_head;
  if (!f.find(a + "attention.key_length") && c.n_embd % c.n_head != 0)
    throw GgufError(f.path(), "embedding_length is not a multiple of head_count");
  c.n_ctx_train = f.find(a + "context_length") ? positive_int(f, a + "context_length", 1 << 24) : 2048;
  c.rms_eps = static_cast<float>(f.get_float(a + "attention.layer_norm_rms_epsilon", 1e-5));
  if (!(c.rms_eps > 0.0f && c.rms_eps < 1.0f)) throw GgufError(f.path(), "layer_norm_rms_epsilon out of range");

  c.rope.n_dims = f.find(a + "rope.dimension_count") ? positive_int(f, a + "rope.dimension_count", 4096) : c.head_dim;
  if (c.rope.n_dims > c.head_dim || c.rope.n_dims % 2 != 0)
    throw GgufError(f.path(), "rope.dimension_count " + std::to_string(c.rope.n_dims) + " is invalid for head size " +
                                  std::to_string(c.head_dim));
  c.rope.freq_base = static_cast<float>(f.get_float(a + "rope.freq_base", 10000.0));
  c.rope.neox = c.arch == "qwen2";  // llama GGUFs store Q/K permuted for the interleaved layout
  c.rope_scaling = f.get_string(a + "rope.scaling.type", "none");
  if (c.rope_scaling == "linear") {
    const double factor = f.get_float(a + "rope.scaling.factor", 1.0);
    if (factor <= 0.0) throw GgufError(f.path(), "rope.scaling.factor must be positive");
    c.rope.freq_scale = static_cast<float>(1.0 / factor);
  } else if (c.rope_scaling == "llama3") {
    c.rope.freq_factors = llama3_freq_factors(
        c.rope, static_cast<float>(f.get_float(a + "rope.scaling.factor", 8.0)),
        static_cast<float>(f.get_float(a + "rope.scaling.low_freq_factor", 1.0)),
        static_cast<float>(f.get_float(a + "rope.scaling.high_freq_factor", 4.0)),
        static_cast<float>(f.get_float(a + "rope.scaling.original_context_length", 8192.0)));
  } else if (c.rope_scaling != "none") {
    throw GgufError(f.path(), "unsupported rope.scaling.type '" + c.rope_scaling + "' (supported: none, linear, llama3)");
  }

  const GgufTensor& embd = f.require_tensor("token_embd.weight");
  if (embd.shape.size() != 2 || embd.shape[0] != c.n_embd)
    throw GgufError(f.path(), "token_embd.weight has the wrong shape for embedding_length " + std::to_string(c.n_embd));
  c.n_vocab = static_cast<int32_t>(embd.shape[1]);
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  c.qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  return c;
}

}  // namespace fafo
