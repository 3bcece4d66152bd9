#include "synthetic_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <stdexcept>
#include <thread>
#include <vector>

#include "fafo/gguf.h"
#include "fafo/quant_mix.h"
#include "codebook_rows.h"
#include "synthetic_vocab.h"

namespace fafo::synth {

namespace {

// Whether the architecture's feed-forward blocks are mixtures of experts.
bool has_experts(const SyntheticConfig& c) { return c.arch == "qwen3moe" || c.arch == "gpt-oss"; }

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t hash_name(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Fills `out` with N(mean, stddev) values (Box-Muller over splitmix64).
void fill_normal(uint64_t seed, float mean, float stddev, float* out, int64_t n) {
  uint64_t state = seed;
  for (int64_t i = 0; i < n; i += 2) {
    const double u1 = (static_cast<double>(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53;
    const double u2 = static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = mean + stddev * static_cast<float>(r * std::cos(2.0 * M_PI * u2));
    if (i + 1 < n) out[i + 1] = mean + stddev * static_cast<float>(r * std::sin(2.0 * M_PI * u2));
  }
}


struct TensorPlan {
  std::string name;
  std::vector<int64_t> shape;
  TensorType type;
  float mean, stddev;
  std::vector<float> values;  // fixed F32 contents (rope_freqs); empty: random N(mean, stddev)
};

}  // namespace

std::optional<SyntheticConfig> preset(const std::string& name) {
  SyntheticConfig c;
  c.name = name;
  if (name == "llama3-8b") {
    c.n_layer = 32, c.n_embd = 4096, c.n_head = 32, c.n_head_kv = 8, c.n_ff = 14336, c.n_vocab = 128256;
    c.n_ctx = 8192, c.rope_base = 500000.0f, c.weight_type = "Q4_K_M";
  } else if (name == "llama2-7b") {
    c.n_layer = 32, c.n_embd = 4096, c.n_head = 32, c.n_head_kv = 32, c.n_ff = 11008, c.n_vocab = 32000;
    c.n_ctx = 4096, c.weight_type = "Q4_K_M";
  } else if (name == "tinyllama-1.1b") {
    c.n_layer = 22, c.n_embd = 2048, c.n_head = 32, c.n_head_kv = 4, c.n_ff = 5632, c.n_vocab = 32000;
    c.n_ctx = 2048, c.weight_type = "Q4_K_M";
  } else if (name == "qwen2.5-0.5b") {
    c.arch = "qwen2", c.n_layer = 24, c.n_embd = 896, c.n_head = 14, c.n_head_kv = 2, c.n_ff = 4864;
    c.n_vocab = 151936, c.n_ctx = 32768, c.rope_base = 1000000.0f, c.tied_embeddings = true, c.rms_eps = 1e-6f;
    c.weight_type = "Q8_0";
  } else if (name == "qwen3-8b") {
    c.arch = "qwen3", c.n_layer = 36, c.n_embd = 4096, c.n_head = 32, c.n_head_kv = 8, c.head_dim = 128, c.n_ff = 12288;
    c.n_vocab = 151936, c.n_ctx = 40960, c.rope_base = 1000000.0f, c.rms_eps = 1e-6f, c.weight_type = "Q4_K_M";
  } else if (name == "qwen3-0.6b") {
    c.arch = "qwen3", c.n_layer = 28, c.n_embd = 1024, c.n_head = 16, c.n_head_kv = 8, c.head_dim = 128, c.n_ff = 3072;
    c.n_vocab = 151936, c.n_ctx = 40960, c.rope_base = 1000000.0f, c.rms_eps = 1e-6f, c.tied_embeddings = true;
    c.weight_type = "Q8_0";
  } else if (name == "phi3-mini") {  // Phi-3-mini-4k-instruct
    c.arch = "phi3", c.n_layer = 32, c.n_embd = 3072, c.n_head = 32, c.n_head_kv = 32, c.n_ff = 8192, c.n_vocab = 32064;
    c.n_ctx = 4096, c.weight_type = "Q4_K_M";
  } else if (name == "phi3.5-mini") {  // Phi-3.5-mini-instruct: LongRoPE to 128k
    c.arch = "phi3", c.n_layer = 32, c.n_embd = 3072, c.n_head = 32, c.n_head_kv = 32, c.n_ff = 8192, c.n_vocab = 32064;
    c.n_ctx = 131072, c.rope_scaling = "longrope", c.rope_original_ctx = 4096, c.weight_type = "Q4_K_M";
  } else if (name == "phi4-mini") {  // Phi-4-mini-instruct: 3/4 of each head rotated, LongRoPE, tied embeddings
    c.arch = "phi3", c.n_layer = 32, c.n_embd = 3072, c.n_head = 24, c.n_head_kv = 8, c.rope_dims = 96, c.n_ff = 8192;
    c.n_vocab = 200064, c.n_ctx = 131072, c.rope_scaling = "longrope", c.rope_original_ctx = 4096;
    c.tied_embeddings = true, c.weight_type = "Q4_K_M";
  } else if (name == "gemma2-9b") {
    c.arch = "gemma2", c.n_layer = 42, c.n_embd = 3584, c.n_head = 16, c.n_head_kv = 8, c.head_dim = 256, c.n_ff = 14336;
    c.n_vocab = 256000, c.n_ctx = 8192, c.rms_eps = 1e-6f, c.tied_embeddings = true, c.weight_type = "Q4_K_M";
  } else if (name == "gemma2-2b") {
    c.arch = "gemma2", c.n_layer = 26, c.n_embd = 2304, c.n_head = 8, c.n_head_kv = 4, c.head_dim = 256, c.n_ff = 9216;
    c.n_vocab = 256000, c.n_ctx = 8192, c.rms_eps = 1e-6f, c.tied_embeddings = true, c.weight_type = "Q4_K_M";
  } else if (name == "gemma3-4b") {  // global layers: base 1e6, linear scaling 8; local ones: base 10,000
    c.arch = "gemma3", c.n_layer = 34, c.n_embd = 2560, c.n_head = 8, c.n_head_kv = 4, c.head_dim = 256, c.n_ff = 10240;
    c.n_vocab = 262144, c.n_ctx = 131072, c.rope_base = 1000000.0f, c.rope_scaling = "linear", c.rope_scaling_factor = 8.0f;
    c.rms_eps = 1e-6f, c.tied_embeddings = true, c.sliding_window = 1024, c.weight_type = "Q4_K_M";
  } else if (name == "gemma3-1b") {
    c.arch = "gemma3", c.n_layer = 26, c.n_embd = 1152, c.n_head = 4, c.n_head_kv = 1, c.head_dim = 256, c.n_ff = 6912;
    c.n_vocab = 262144, c.n_ctx = 32768, c.rope_base = 1000000.0f, c.rms_eps = 1e-6f, c.tied_embeddings = true;
    c.sliding_window = 512, c.weight_type = "Q4_K_M";
  } else if (name == "qwen3-30b-a3b") {  // Qwen3-30B-A3B: 128 experts of 768, 8 per token
    c.arch = "qwen3moe", c.n_layer = 48, c.n_embd = 2048, c.n_head = 32, c.n_head_kv = 4, c.head_dim = 128;
    c.n_ff = 6144, c.n_expert = 128, c.n_expert_used = 8, c.n_ff_exp = 768;
    c.n_vocab = 151936, c.n_ctx = 40960, c.rope_base = 1000000.0f, c.rms_eps = 1e-6f, c.weight_type = "Q4_K_M";
  } else if (name == "gpt-oss-20b") {  // 32 experts of 2880, 4 per token; a window of 128 on even layers; YaRN x32
    c.arch = "gpt-oss", c.n_layer = 24, c.n_embd = 2880, c.n_head = 64, c.n_head_kv = 8, c.head_dim = 64;
    c.n_ff = 2880, c.n_expert = 32, c.n_expert_used = 4, c.n_ff_exp = 2880, c.n_vocab = 201088, c.n_ctx = 131072;
    c.rope_base = 150000.0f, c.rope_scaling = "yarn", c.rope_scaling_factor = 32.0f, c.rope_original_ctx = 4096;
    c.sliding_window = 128, c.weight_type = "MXFP4_MOE";
  } else if (name == "tiny") {
    // defaults
  } else if (name == "grid-tiny") {  // rows of 256 and 512: whole super-blocks (the codebook formats' tests)
    c.n_embd = 256, c.n_ff = 512, c.n_head = 4, c.n_head_kv = 2;
  } else if (name == "qwen3-tiny") {  // heads wider than n_embd / n_head, as Qwen3's
    c.arch = "qwen3", c.n_head = 4, c.n_head_kv = 2, c.head_dim = 32, c.rms_eps = 1e-6f, c.tied_embeddings = true;
  } else if (name == "phi3-tiny") {  // LongRoPE from 256 positions on
    c.arch = "phi3", c.n_head_kv = 2, c.n_ctx = 1024, c.rope_scaling = "longrope", c.rope_original_ctx = 256;
  } else if (name == "phi4-mini-tiny") {  // phi3-tiny with 3/4 of each head rotated, as Phi-4-mini
    c.arch = "phi3", c.n_head_kv = 2, c.rope_dims = 12, c.n_ctx = 1024, c.rope_scaling = "longrope";
    c.rope_original_ctx = 256, c.tied_embeddings = true;
  } else if (name == "gemma2-tiny") {  // caps low enough to bend this model's scores and logits; a window of 24
    c.arch = "gemma2", c.n_head = 4, c.n_head_kv = 2, c.head_dim = 32, c.rms_eps = 1e-6f, c.tied_embeddings = true;
    c.attn_softcap = 1.0f, c.final_softcap = 20.0f, c.sliding_window = 24;
  } else if (name == "gemma3-tiny") {  // layer 0 local (a window of 16, base 10,000), layer 1 global (1e6, scaled)
    c.arch = "gemma3", c.n_head = 4, c.n_head_kv = 2, c.head_dim = 32, c.rms_eps = 1e-6f, c.tied_embeddings = true;
    c.rope_base = 1000000.0f, c.rope_scaling = "linear", c.rope_scaling_factor = 8.0f;
    c.sliding_window = 16, c.swa_pattern = 2;
  } else if (name == "qwen3moe-tiny") {  // qwen3-tiny's attention, 8 experts of 32, 2 per token
    c.arch = "qwen3moe", c.n_head = 4, c.n_head_kv = 2, c.head_dim = 32, c.rms_eps = 1e-6f, c.tied_embeddings = true;
  } else if (name == "gpt-oss-tiny") {  // gpt-oss-20b's rules: 8 experts of 32, 4 per token, a window of 16, YaRN
    c.arch = "gpt-oss", c.n_head = 4, c.n_head_kv = 2, c.head_dim = 32, c.n_expert = 8, c.n_expert_used = 4;
    c.rope_base = 150000.0f, c.rope_scaling = "yarn", c.rope_scaling_factor = 32.0f, c.rope_original_ctx = 4096;
    c.sliding_window = 16;
  } else {
    return std::nullopt;
  }
  return c;
}

void validate(const SyntheticConfig& c) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("synthetic model: " + what); };
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3" && c.arch != "qwen3moe" && c.arch != "gpt-oss" &&
      c.arch != "phi3" && c.arch != "gemma2" && c.arch != "gemma3")
    bad("architecture must be llama, qwen2, qwen3, qwen3moe, gpt-oss, phi3, gemma2 or gemma3, not '" + c.arch + "'");
  if (has_experts(c) && !(c.n_expert > 0 && c.n_expert_used > 0 && c.n_expert_used <= c.n_expert && c.n_ff_exp > 0))
    bad(c.arch + " needs experts (n_expert > 0), 1 .. n_expert of them used and a positive expert width");
  if (c.arch == "gpt-oss" && c.sliding_window <= 0) bad("gpt-oss's sliding window must be positive");
  if (c.arch == "gemma2" && !(c.attn_softcap > 0.0f && c.final_softcap > 0.0f && c.sliding_window > 0))
    bad("gemma2's soft-caps and sliding window must be positive");
  if (c.sliding_window < 0 || c.swa_pattern < 0) bad("the sliding window and its pattern must not be negative");
  if (c.n_layer <= 0 || c.n_embd <= 0 || c.n_head <= 0 || c.n_head_kv <= 0 || c.n_ff <= 0 || c.n_ctx <= 0)
    bad("layers, dim, heads, KV heads, FFN size and context must be positive");
  if (c.head_dim < 0) bad("the head size must be positive (or 0: dim / heads)");
  if (c.head_dim == 0 && c.n_embd % c.n_head != 0)
    bad("dim " + std::to_string(c.n_embd) + " is not a multiple of heads " + std::to_string(c.n_head));
  if (head_dim_of(c) % 2 != 0) bad("the head size must be even (RoPE rotates pairs)");
  if (c.rope_dims < 0 || c.rope_dims % 2 != 0 || c.rope_dims > head_dim_of(c))
    bad("the rotated dimensions must be even and at most the head size (0: the whole head)");
  if (c.n_head % c.n_head_kv != 0) bad("heads must be a multiple of KV heads");
  if (c.n_vocab < 259) bad("vocab must be at least 259 (3 special tokens + 256 byte tokens)");
  if (c.rope_scaling != "none" && c.rope_scaling != "linear" && c.rope_scaling != "llama3" && c.rope_scaling != "longrope" &&
      c.rope_scaling != "yarn")
    bad("rope scaling must be none, linear, llama3, longrope or yarn");
  if (c.rope_scaling == "yarn" && !(c.rope_original_ctx > 0)) bad("yarn needs a positive original context");
  if (c.rope_scaling == "longrope" && c.arch != "phi3") bad("longrope scaling is phi3's");
  if (c.rope_scaling == "longrope" && !(c.rope_original_ctx > 0 && c.rope_original_ctx < c.n_ctx))
    bad("longrope needs an original context between 1 and the context length");
  if (c.rope_scaling != "none" && !(std::isfinite(c.rope_scaling_factor) && c.rope_scaling_factor > 0.0f))
    bad("the rope scaling factor must be a positive finite number");
  tensor_type_for(c, "blk.0.attn_q.weight", 256);  // checks the type name
}

int32_t head_dim_of(const SyntheticConfig& c) { return c.head_dim > 0 ? c.head_dim : c.n_embd / c.n_head; }

TensorType tensor_type_for(const SyntheticConfig& c, const std::string& name, int64_t row_length) {
  try {
    // A codebook format fafo reads but does not write (IQ2_XXS, IQ2_XS): random codes (codebook_rows.h) for
    // every matrix llama.cpp's --pure would give it, IQ4_NL for rows that are not whole
    // super-blocks (as llama.cpp falls back), F32 where any mix keeps F32.
    const auto only_read = tensor_type_from_name(c.weight_type);
    if (only_read && codebook_max_per_d(*only_read) > 0.0f) {
      const TensorType plain = quant_type_for("Q8_0", name, row_length, c.n_layer, c.tied_embeddings,
                                              has_experts(c) ? c.n_expert : 0);
      if (plain == TensorType::F32) return plain;
      if (row_length % tensor_type_info(*only_read).block_size == 0) return *only_read;
      return row_length % tensor_type_info(TensorType::IQ4_NL).block_size == 0 ? TensorType::IQ4_NL : TensorType::F16;
    }
    return quant_type_for(c.weight_type, name, row_length, c.n_layer, c.tied_embeddings,
                          has_experts(c) ? c.n_expert : 0);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("synthetic model: ") + e.what());
  }
}

uint32_t file_type_id(const std::string& weight_type) {
  try {
    return quant_file_type(weight_type);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("synthetic model: ") + e.what());
  }
}

std::vector<float> llama3_rope_freqs(const SyntheticConfig& c) {
  // As llama.cpp's convert_hf_to_gguf.py computes them for Llama 3.1/3.2 (factor from the
  // config, low_freq_factor 1, high_freq_factor 4, original context 8192).
  const double factor = c.rope_scaling_factor, low_freq_factor = 1.0, high_freq_factor = 4.0, original_ctx = 8192.0;
  const double low_freq_wavelen = original_ctx / low_freq_factor, high_freq_wavelen = original_ctx / high_freq_factor;
  const int64_t dim = head_dim_of(c);  // rope.dimension_count
  std::vector<float> divisors;
  for (int64_t i = 0; i < dim; i += 2) {
    const double freq = 1.0 / std::pow(static_cast<double>(c.rope_base), static_cast<double>(i) / static_cast<double>(dim));
    const double wavelen = 2.0 * M_PI / freq;
    double d;
    if (wavelen < high_freq_wavelen) {
      d = 1.0;
    } else if (wavelen > low_freq_wavelen) {
      d = factor;
    } else {
      const double smooth = (original_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      d = 1.0 / ((1.0 - smooth) / factor + smooth);
    }
    divisors.push_back(static_cast<float>(d));
  }
  return divisors;
}

uint64_t write_synthetic_model(const SyntheticConfig& config, const std::string& path,
                               const std::function<void(size_t, size_t)>& progress) {
  validate(config);
  // A real vocabulary: its tokenizer.* keys, and its size for the embeddings.
  std::shared_ptr<const GgufFile> vocab_file;
  SyntheticConfig c = config;
  if (!c.vocab_from.empty()) {
    vocab_file = GgufFile::open(c.vocab_from);
    const GgufValue* tokens = vocab_file->find("tokenizer.ggml.tokens");
    if (!tokens || tokens->type != GgufType::ARRAY)
      throw std::invalid_argument("synthetic model: " + c.vocab_from + " holds no tokenizer.ggml.tokens");
    c.n_vocab = static_cast<int32_t>(tokens->as_array().items.size());
  }
  const int64_t head_dim = head_dim_of(c);
  const int64_t q_dim = c.n_head * head_dim;
  const int64_t kv_dim = c.n_head_kv * head_dim;

  GgufWriter w;
  const std::string a = c.arch + ".";
  w.set_string("general.architecture", c.arch);
  w.set_string("general.name", c.name);
  w.set_u32("general.file_type", file_type_id(c.weight_type));
  w.set_u32(a + "block_count", static_cast<uint32_t>(c.n_layer));
  w.set_u32(a + "context_length", static_cast<uint32_t>(c.n_ctx));
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(c.n_embd));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(c.n_ff));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(c.n_head));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(c.n_head_kv));
  const int64_t rope_dims = c.rope_dims > 0 ? c.rope_dims : head_dim;
  w.set_u32(a + "rope.dimension_count", static_cast<uint32_t>(rope_dims));
  if (c.head_dim > 0) {
    w.set_u32(a + "attention.key_length", static_cast<uint32_t>(head_dim));
    w.set_u32(a + "attention.value_length", static_cast<uint32_t>(head_dim));
  }
  w.set_f32(a + "rope.freq_base", c.rope_base);
  w.set_f32(a + "attention.layer_norm_rms_epsilon", c.rms_eps);
  w.set_u32(a + "vocab_size", static_cast<uint32_t>(c.n_vocab));
  // Linear scaling is metadata. Llama 3 scaling is not: the Hub's Llama 3.1/3.2 GGUFs
  // carry it as a rope_freqs.weight tensor of per-pair divisors (written below).
  if (c.rope_scaling == "linear") {
    w.set_string(a + "rope.scaling.type", "linear");
    w.set_f32(a + "rope.scaling.factor", c.rope_scaling_factor);
  }
  if (c.rope_scaling == "yarn") {
    w.set_string(a + "rope.scaling.type", "yarn");
    w.set_f32(a + "rope.scaling.factor", c.rope_scaling_factor);
    w.set_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(c.rope_original_ctx));
  }
  if (c.rope_scaling == "longrope") {
    const double scale = static_cast<double>(c.n_ctx) / c.rope_original_ctx;
    w.set_u32(a + "rope.scaling.original_context_length", static_cast<uint32_t>(c.rope_original_ctx));
    w.set_f32(a + "rope.scaling.attn_factor",
              static_cast<float>(std::sqrt(1.0 + std::log(scale) / std::log(static_cast<double>(c.rope_original_ctx)))));
  }
  if (c.arch == "gpt-oss") w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
  if (has_experts(c)) {
    w.set_u32(a + "expert_count", static_cast<uint32_t>(c.n_expert));
    w.set_u32(a + "expert_used_count", static_cast<uint32_t>(c.n_expert_used));
    w.set_u32(a + "expert_feed_forward_length", static_cast<uint32_t>(c.n_ff_exp));
  }
  if (c.arch == "gemma2") {
    w.set_f32(a + "attn_logit_softcapping", c.attn_softcap);
    w.set_f32(a + "final_logit_softcapping", c.final_softcap);
  }
  if (c.arch == "gemma2" || c.arch == "gemma3") {
    w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
    if (c.swa_pattern > 0) w.set_u32(a + "attention.sliding_window_pattern", static_cast<uint32_t>(c.swa_pattern));
  }
  if (vocab_file) {
    for (const auto& [key, value] : vocab_file->metadata())
      if (key.rfind("tokenizer.", 0) == 0) w.set(key, value);
  } else {
    const SyntheticVocab vocab = make_synthetic_vocab(c.n_vocab);
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", vocab.tokens);
    w.set_f32_array("tokenizer.ggml.scores", vocab.scores);
    w.set_i32_array("tokenizer.ggml.token_type", vocab.types);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set_bool("tokenizer.ggml.add_eos_token", false);
  }

  // Tensors in the order llama.cpp's converter writes them.
  std::vector<TensorPlan> plan;
  auto matrix = [&](const std::string& name, int64_t cols, int64_t rows, float stddev) {
    plan.push_back({name, {cols, rows}, tensor_type_for(c, name, cols), 0.0f, stddev, {}});
  };
  auto vec = [&](const std::string& name, int64_t n, float mean, float stddev) {
    plan.push_back({name, {n}, TensorType::F32, mean, stddev, {}});
  };
  const float in_std = 1.0f / std::sqrt(static_cast<float>(c.n_embd));
  matrix("token_embd.weight", c.n_embd, c.n_vocab, 1.0f);
  vec("output_norm.weight", c.n_embd, 1.0f, 0.02f);
  if (!c.tied_embeddings) matrix("output.weight", c.n_embd, c.n_vocab, in_std);
  if (c.rope_scaling == "llama3") {
    std::vector<float> divisors = llama3_rope_freqs(c);
    const auto n = static_cast<int64_t>(divisors.size());
    plan.push_back({"rope_freqs.weight", {n}, TensorType::F32, 0.0f, 0.0f, std::move(divisors)});
  }
  if (c.rope_scaling == "longrope") {
    // Divisors per rotated pair: the short ones near 1, the long ones growing to 8 for
    // the slowest pairs (the shape of Phi-3.5's).
    const int64_t n = rope_dims / 2;
    std::vector<float> short_factors, long_factors;
    for (int64_t i = 0; i < n; ++i) {
      const double f = n > 1 ? static_cast<double>(i) / static_cast<double>(n - 1) : 0.0;
      short_factors.push_back(static_cast<float>(1.0 + 0.05 * f));
      long_factors.push_back(static_cast<float>(1.0 + 7.0 * f * f));
    }
    plan.push_back({"rope_factors_long.weight", {n}, TensorType::F32, 0.0f, 0.0f, std::move(long_factors)});
    plan.push_back({"rope_factors_short.weight", {n}, TensorType::F32, 0.0f, 0.0f, std::move(short_factors)});
  }
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", c.n_embd, 1.0f, 0.02f);
    if (c.arch == "phi3") {
      matrix(p + "attn_qkv.weight", c.n_embd, q_dim + 2 * kv_dim, in_std);
    } else {
      matrix(p + "attn_q.weight", c.n_embd, q_dim, in_std);
      matrix(p + "attn_k.weight", c.n_embd, kv_dim, in_std);
      matrix(p + "attn_v.weight", c.n_embd, kv_dim, in_std);
    }
    if (c.arch == "qwen2" || c.arch == "gpt-oss") {
      vec(p + "attn_q.bias", q_dim, 0.0f, 0.02f);
      vec(p + "attn_k.bias", kv_dim, 0.0f, 0.02f);
      vec(p + "attn_v.bias", kv_dim, 0.0f, 0.02f);
    }
    matrix(p + "attn_output.weight", q_dim, c.n_embd, 1.0f / std::sqrt(static_cast<float>(q_dim)));
    if (c.arch == "gpt-oss") {
      // The output bias, the heads' sinks (logits near those of the scores), the block's
      // norm; the router and its bias (F32); the experts' 3-D tensors and their biases, a
      // row per expert.
      vec(p + "attn_output.bias", c.n_embd, 0.0f, 0.02f);
      vec(p + "attn_sinks.weight", c.n_head, 0.0f, 1.0f);
      vec(p + "post_attention_norm.weight", c.n_embd, 1.0f, 0.02f);
      plan.push_back({p + "ffn_gate_inp.weight", {c.n_embd, c.n_expert}, TensorType::F32, 0.0f, in_std, {}});
      plan.push_back({p + "ffn_gate_inp.bias", {c.n_expert}, TensorType::F32, 0.0f, 0.1f, {}});
      const auto experts = [&](const std::string& name, int64_t cols, int64_t rows, float stddev) {
        plan.push_back({name + ".weight", {cols, rows, c.n_expert}, tensor_type_for(c, name + ".weight", cols), 0.0f, stddev, {}});
        plan.push_back({name + ".bias", {rows, c.n_expert}, TensorType::F32, 0.0f, 0.1f, {}});
      };
      // Gates and ups wide enough that the activation's clamps at 7 come into play.
      experts(p + "ffn_gate_exps", c.n_embd, c.n_ff_exp, 4.0f * in_std);
      experts(p + "ffn_down_exps", c.n_ff_exp, c.n_embd, 1.0f / std::sqrt(static_cast<float>(c.n_ff_exp)));
      experts(p + "ffn_up_exps", c.n_embd, c.n_ff_exp, 4.0f * in_std);
      continue;
    }
    const bool gemma = c.arch == "gemma2" || c.arch == "gemma3";
    if (c.arch == "qwen3" || c.arch == "qwen3moe" || c.arch == "gemma3") {
      vec(p + "attn_k_norm.weight", head_dim, 1.0f, 0.2f);
      vec(p + "attn_q_norm.weight", head_dim, 1.0f, 0.2f);
    }
    if (gemma) vec(p + "post_attention_norm.weight", c.n_embd, 1.0f, 0.02f);
    vec(p + "ffn_norm.weight", c.n_embd, 1.0f, 0.02f);
    if (c.arch == "qwen3moe") {  // the router (F32, as llama.cpp keeps it), then the experts' 3-D tensors
      plan.push_back({p + "ffn_gate_inp.weight", {c.n_embd, c.n_expert}, TensorType::F32, 0.0f, in_std, {}});
      const auto experts = [&](const std::string& name, int64_t cols, int64_t rows, float stddev) {
        plan.push_back({name, {cols, rows, c.n_expert}, tensor_type_for(c, name, cols), 0.0f, stddev, {}});
      };
      experts(p + "ffn_gate_exps.weight", c.n_embd, c.n_ff_exp, in_std);
      experts(p + "ffn_down_exps.weight", c.n_ff_exp, c.n_embd, 1.0f / std::sqrt(static_cast<float>(c.n_ff_exp)));
      experts(p + "ffn_up_exps.weight", c.n_embd, c.n_ff_exp, in_std);
      continue;
    }
    if (c.arch == "phi3") {
      matrix(p + "ffn_up.weight", c.n_embd, 2 * int64_t{c.n_ff}, in_std);  // the gate's rows, then the up projection's
    } else {
      matrix(p + "ffn_gate.weight", c.n_embd, c.n_ff, in_std);
      matrix(p + "ffn_up.weight", c.n_embd, c.n_ff, in_std);
    }
    matrix(p + "ffn_down.weight", c.n_ff, c.n_embd, 1.0f / std::sqrt(static_cast<float>(c.n_ff)));
    if (gemma) vec(p + "post_ffw_norm.weight", c.n_embd, 1.0f, 0.02f);
  }
  for (const TensorPlan& t : plan) w.add_tensor_info(t.name, t.type, t.shape);

  const unsigned n_threads = std::max(1u, std::thread::hardware_concurrency());
  w.write(path, [&](size_t index, std::vector<uint8_t>& out) {
    const TensorPlan& t = plan[index];
    const int64_t cols = t.shape[0];
    int64_t rows = 1;  // every dimension past the first (a 3-D tensor: its matrices' rows one after another)
    for (size_t d = 1; d < t.shape.size(); ++d) rows *= t.shape[d];
    const size_t row_bytes = tensor_row_bytes(t.type, cols);
    const uint64_t tensor_seed = c.seed ^ hash_name(t.name);
    auto work = [&](int64_t begin, int64_t end) {
      std::vector<float> values(static_cast<size_t>(cols));
      for (int64_t r = begin; r < end; ++r) {
        if (!t.values.empty())
          std::copy_n(t.values.begin() + static_cast<std::ptrdiff_t>(r * cols), cols, values.begin());
        else
          fill_normal(tensor_seed + static_cast<uint64_t>(r) * 0x9E3779B97F4A7C15ull, t.mean, t.stddev, values.data(), cols);
        synth::write_row(t.type, values.data(), out.data() + static_cast<size_t>(r) * row_bytes, cols);
      }
    };
    std::vector<std::thread> threads;
    const int64_t per = (rows + n_threads - 1) / n_threads;
    for (unsigned k = 1; k < n_threads; ++k) {
      const int64_t b = std::min<int64_t>(rows, per * k), e = std::min<int64_t>(rows, per * (k + 1));
      if (b < e) threads.emplace_back(work, b, e);
    }
    work(0, std::min<int64_t>(rows, per));
    for (auto& th : threads) th.join();
    if (progress) progress(index + 1, plan.size());
  });
  uint64_t total = 0;
  for (const TensorPlan& t : plan) {
    uint64_t rows = 1;
    for (size_t d = 1; d < t.shape.size(); ++d) rows *= static_cast<uint64_t>(t.shape[d]);
    total += tensor_row_bytes(t.type, t.shape[0]) * rows;
  }
  return total;
}

}  // namespace fafo::synth
