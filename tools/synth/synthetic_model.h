// Writes GGUF files with random weights for any llama-like configuration, in any
// weight format fafo supports, with a valid SentencePiece-style vocabulary. Tests use
// it for odd shapes; benchmarks use it for files shaped like real models
// (e.g. Llama-3-8B Q4_K_M), which cannot be downloaded on the build machines.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fafo/tensor_type.h"

namespace fafo::synth {

struct SyntheticConfig {
  // "llama"; "qwen2" (adds QKV biases, NEOX RoPE); "qwen3" (per-head Q/K norms, NEOX
  // RoPE); "phi3" (attn_qkv.weight and a gate-and-up ffn_up.weight, NEOX RoPE);
  // "gemma2" (post_attention_norm / post_ffw_norm weights, soft-capping and sliding-window
  // metadata, NEOX RoPE; a GeGLU model); "gemma3" (gemma2's blocks with Q/K norms,
  // without soft-capping); "qwen3moe" (qwen3's attention, a mixture of n_expert experts
  // of n_ff_exp hidden units, n_expert_used per token, in every feed-forward block);
  // "gpt-oss" (attention biases and sinks, a sliding window on even layers, experts with
  // biases and the clamped SwiGLU, a router with a bias)
  std::string arch = "llama";
  std::string name = "synthetic";
  int32_t n_layer = 2;
  int32_t n_embd = 64;
  int32_t n_head = 4;
  int32_t n_head_kv = 4;
  int32_t head_dim = 0;  // 0: n_embd / n_head; else written as attention.key_length / value_length
  int32_t rope_dims = 0;  // rotated dimensions per head (rope.dimension_count); 0: the whole head
  int32_t n_ff = 128;
  int32_t n_vocab = 320;        // at least 259 (3 specials + 256 byte tokens)
  int32_t n_ctx = 512;
  float rope_base = 10000.0f;
  // "none"; "linear" (rope.scaling.type/factor metadata); "llama3": a rope_freqs.weight
  // tensor of per-pair divisors, as the Hub's Llama 3.1/3.2 GGUFs carry it (no metadata).
  // "longrope" (phi3 only): rope_factors_short/long.weight tensors, original context
  // rope_original_ctx, attention factor sqrt(1 + ln(n_ctx / original) / ln(original)),
  // as llama.cpp's converter writes Phi-3.5's. "yarn": rope.scaling.type/factor and
  // original_context_length metadata (rope_original_ctx).
  std::string rope_scaling = "none";
  int32_t rope_original_ctx = 4096;
  float rope_scaling_factor = 8.0f;  // > 0
  bool tied_embeddings = false;
  float rms_eps = 1e-5f;
  // "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K",
  // "Q4_K", "Q5_K", "Q6_K", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS", "MXFP4" (every matrix
  // in that type; also "IQ2_XXS", "IQ2_XS", which fafo does not quantize to: random
  // codes at the weights' magnitude, tools/synth/codebook_rows.h), or
  // the llama.cpp mixes "Q4_K_M" / "Q5_K_M" (Q6_K for output, or for token_embd when the
  // embeddings are tied, and for some attn_v / ffn_down layers) and "MXFP4_MOE" (the
  // experts MXFP4, the rest Q8_0): fafo/quant_mix.h.
  std::string weight_type = "F32";
  // A GGUF whose tokenizer.* keys the model gets (a real vocabulary: a vocab-only GGUF of
  // llama.cpp's or fafo-convert-tokenizer's); n_vocab is then its token count. Empty: a
  // synthetic SentencePiece-style vocabulary of n_vocab tokens.
  std::string vocab_from;
  // gemma2: attn_logit_softcapping, final_logit_softcapping; gemma2 and gemma3:
  // attention.sliding_window and attention.sliding_window_pattern (0: not written, the
  // family's default period: 2 for gemma2, 6 for gemma3).
  float attn_softcap = 50.0f, final_softcap = 30.0f;
  int32_t sliding_window = 4096;
  int32_t swa_pattern = 0;
  int32_t n_expert = 8, n_expert_used = 2, n_ff_exp = 32;  // qwen3moe, gpt-oss
  uint64_t seed = 1;
};

// Named presets: "llama3-8b", "llama2-7b", "tinyllama-1.1b", "qwen2.5-0.5b", "qwen3-8b",
// "qwen3-0.6b", "phi3-mini", "phi3.5-mini", "phi4-mini", "gemma2-9b", "gemma2-2b",
// "gemma3-4b", "gemma3-1b", "qwen3-30b-a3b", "gpt-oss-20b", "tiny", "qwen3-tiny",
// "phi3-tiny", "phi4-mini-tiny", "gemma2-tiny", "gemma3-tiny", "qwen3moe-tiny",
// "gpt-oss-tiny", "grid-tiny".
std::optional<SyntheticConfig> preset(const std::string& name);

// The type each tensor gets under cfg.weight_type. Throws std::invalid_argument for
// an unknown type name or a row length that is not a multiple of its block size.
TensorType tensor_type_for(const SyntheticConfig& cfg, const std::string& tensor_name, int64_t row_length);

// llama.cpp's general.file_type id for a weight type name (the pure Q3_K / Q4_K / Q5_K
// get the _S ids 11 / 14 / 16). Throws std::invalid_argument for an unknown name.
uint32_t file_type_id(const std::string& weight_type);

// The rope_freqs.weight divisors llama.cpp's converter writes for Llama 3 RoPE scaling
// (factor cfg.rope_scaling_factor, low/high frequency factors 1 and 4, original context
// 8192): one per rotated pair, head_dim/2 values, from 1 (high frequencies) to the factor.
std::vector<float> llama3_rope_freqs(const SyntheticConfig& cfg);

// Checks the configuration; throws std::invalid_argument with a clear message.
void validate(const SyntheticConfig& cfg);

// The head size: cfg.head_dim, or n_embd / n_head when it is 0.
int32_t head_dim_of(const SyntheticConfig& cfg);

// Writes the file. `progress(done, total)` is called after each tensor (may be empty).
// Returns the number of bytes written.
uint64_t write_synthetic_model(const SyntheticConfig& cfg, const std::string& path,
                               const std::function<void(size_t, size_t)>& progress = {});

}  // namespace fafo::synth
