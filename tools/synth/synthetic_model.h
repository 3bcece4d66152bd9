// Writes GGUF files with random weights for any llama-like configuration, in any
// weight format fafo supports, with a valid SentencePiece-style vocabulary. Tests use
// it for odd shapes; benchmarks use it for files shaped like real models
// (e.g. Llama-3-8B Q4_K_M), which cannot be downloaded on the build machines.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "fafo/tensor_type.h"

namespace fafo::synth {

struct SyntheticConfig {
  std::string arch = "llama";  // "llama" or "qwen2" (adds QKV biases, NEOX RoPE)
  std::string name = "synthetic";
  int32_t n_layer = 2;
  int32_t n_embd = 64;
  int32_t n_head = 4;
  int32_t n_head_kv = 4;
  int32_t n_ff = 128;
  int32_t n_vocab = 320;        // at least 259 (3 specials + 256 byte tokens)
  int32_t n_ctx = 512;
  float rope_base = 10000.0f;
  std::string rope_scaling = "none";  // "none", "linear", "llama3"
  float rope_scaling_factor = 8.0f;
  bool tied_embeddings = false;
  float rms_eps = 1e-5f;
  // "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K",
  // "Q4_K", "Q5_K", "Q6_K" (every matrix in that type), or the llama.cpp mixes
  // "Q4_K_M" / "Q5_K_M" (Q6_K for output and some attn_v / ffn_down layers).
  std::string weight_type = "F32";
  uint64_t seed = 1;
};

// Named presets: "llama3-8b", "llama2-7b", "tinyllama-1.1b", "qwen2.5-0.5b", "tiny".
std::optional<SyntheticConfig> preset(const std::string& name);

// The type each tensor gets under cfg.weight_type. Throws std::invalid_argument for
// an unknown type name or a row length that is not a multiple of its block size.
TensorType tensor_type_for(const SyntheticConfig& cfg, const std::string& tensor_name, int64_t row_length);

// Checks the configuration; throws std::invalid_argument with a clear message.
void validate(const SyntheticConfig& cfg);

// Writes the file. `progress(done, total)` is called after each tensor (may be empty).
// Returns the number of bytes written.
uint64_t write_synthetic_model(const SyntheticConfig& cfg, const std::string& path,
                               const std::function<void(size_t, size_t)>& progress = {});

}  // namespace fafo::synth
