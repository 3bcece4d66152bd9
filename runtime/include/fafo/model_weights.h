// A model's weights as loaded: the file, its hyperparameters (fafo/model_config.h) and
// every tensor resident on its backend, or on several (a layer split: consecutive
// layers on each device, the embedding on the first, the output head on the last).
// Nothing here changes once constructed (the backends they sit on compute, but only a
// StepRunner runs them): the forward pass and the step's activations are the StepRunner's (fafo/step_runner.h), and a Sequence
// (fafo/sequence.h) is one context over a StepRunner.
//
// Supported architectures: `llama` (Llama 2/3/3.1/3.2, Mistral, TinyLlama, SmolLM),
// `qwen2` (QKV bias), `qwen3` (per-head Q/K norms), `qwen3moe` (Qwen3's attention, a
// mixture of experts in every feed-forward block), `phi3` (fused tensors, LongRoPE),
// `gemma2` and `gemma3` (GeGLU, post-norms, soft-caps, sliding windows); `llama` files
// with multi-head latent attention that fafo-care made.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
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
  Weight bo;                             // ModelConfig::attn_out_bias: attn_output.bias
  Weight attn_sinks;                     // ModelConfig::attention_sinks: one per query head
  bool fused_qkv = false;
  // MLA layers (ModelConfig::mla): wk and wv are the latent down-projections (rank x
  // n_embd), k_up and v_up the F32 up-projections (kv_dim x rank); k_up_host is k_up's
  // floats in the file.
  Weight k_up, v_up;
  const float* k_up_host = nullptr;
  // A mixture-of-experts layer (ModelConfig::moe; w_gate, w_up, w_down stay empty): the
  // router (ffn_gate_inp: n_expert x n_embd) and each expert's gate, up (n_ff_exp x
  // n_embd) and down (n_embd x n_ff_exp) projections, slices of the file's 3-D tensors.
  // gpt-oss (ModelConfig::expert_biases): each projection's bias (gate_b, up_b: n_ff_exp;
  // down_b: n_embd) and the router's (ffn_gate_inp_b: n_expert).
  struct Expert {
    Weight gate, up, down;
    Weight gate_b{}, up_b{}, down_b{};
  };
  Weight ffn_gate_inp, ffn_gate_inp_b;
  std::vector<Expert> experts;
};

// One device of a layer split: its backend and how many consecutive layers it holds
// (0 on the last device: the layers the others leave).
struct DevicePart {
  std::unique_ptr<Backend> backend;
  int32_t layers = 0;
};

class ModelWeights {
 public:
  // Validates the file (architecture, hyperparameters, every tensor's presence, type
  // and shape) and uploads the weights, reporting progress by bytes. Throws GgufError /
  // std::runtime_error.
  ModelWeights(std::shared_ptr<const GgufFile> file, std::unique_ptr<Backend> backend);
  // The layers split over `devices` in order (fafo/step_runner.h runs such a step device
  // after device). Throws std::invalid_argument for a split that leaves a device no layer
  // or places more or fewer layers than the model has.
  ModelWeights(std::shared_ptr<const GgufFile> file, std::vector<DevicePart> devices);
  ~ModelWeights();
  ModelWeights(const ModelWeights&) = delete;
  ModelWeights& operator=(const ModelWeights&) = delete;

  // ModelWeights alive in this process (loads of weights not yet freed): what a server
  // reports, so a load kept after it was replaced (a lost device) shows.
  static int64_t loads_alive();

  const ModelConfig& config() const { return config_; }
  const GgufFile& file() const { return *file_; }
  const std::shared_ptr<const GgufFile>& shared_file() const { return file_; }
  // The backend of device `device` (0 ..< n_devices()), and the last device's, which
  // holds the output head and computes the logits (the only one without a split).
  Backend& backend(int32_t device) const { return *backends_.at(static_cast<size_t>(device)); }
  Backend& backend() const { return *backends_.back(); }
  int32_t n_devices() const { return static_cast<int32_t>(backends_.size()); }
  // The layers of device `device`: [first_layer(device), first_layer(device) + layer_count(device)).
  int32_t first_layer(int32_t device) const { return first_layer_.at(static_cast<size_t>(device)); }
  int32_t layer_count(int32_t device) const { return first_layer(device + 1) - first_layer(device); }
  int32_t device_of(int32_t layer) const;
  // Where the layers are, for messages: "layers 0-2 on cpu, 3-4 on vulkan"; "" on one device.
  std::string placement() const;
  // Device `device` for messages: its backend's name, numbered where the split holds the
  // backend more than once ("vulkan #2").
  std::string device_label(int32_t device) const;

  const Weight& token_embd() const { return token_embd_; }
  const Weight& output_norm() const { return output_norm_; }
  // token_embd() where the embeddings are tied (on one device; a split uploads the table
  // again to the last device).
  const Weight& output() const { return output_; }
  const LayerWeights& layer(int32_t l) const { return layers_[static_cast<size_t>(l)]; }
  const std::vector<LayerWeights>& layers() const { return layers_; }

  // The KV cache shape of a sequence of `n_ctx` entries stored as `type`, for the layers
  // of device `device` (layer i of that cache is the model's first_layer(device) + i):
  // the sliding-window layers' windows, and with ring_step > 0, where the device's
  // backend keeps rings (BackendCapabilities::window_rings), rings for steps of up to
  // ring_step tokens (KvCacheShape::ring).
  KvCacheShape kv_cache_shape(int32_t n_ctx, KvCacheType type, int32_t device, int32_t ring_step = 0) const;
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
  std::vector<std::unique_ptr<Backend>> backends_;  // hold the weights' memory (Weight is a handle)
  std::vector<int32_t> first_layer_;  // per device, and n_layer after the last
  ModelConfig config_;
  Weight token_embd_, output_norm_, output_;
  std::vector<LayerWeights> layers_;
};

}  // namespace fafo
