// What runs steps on loaded weights: one step's activations on the backend, the step
// lock, the RoPE factors its sequences use, and the forward pass written once against
// the Backend interface (record_step). Every Sequence (fafo/sequence.h) on the same
// weights shares one StepRunner: the backend runs one step at a time, and the sequences
// of a joined step are computed in one pass (the server's slots, a model drafting for
// itself, the studio's views).
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
#include "fafo/model_weights.h"
#include "fafo/step_batch.h"

namespace fafo {

class StepRunner {
 public:
  // Allocates one step's activations for `weights`, which it owns (one runner per
  // backend: it holds the step lock). Throws std::runtime_error where not even one row
  // of logits fits in a buffer of the backend.
  explicit StepRunner(std::unique_ptr<ModelWeights> weights);
  // Loads the weights (ModelWeights) first.
  StepRunner(std::shared_ptr<const GgufFile> file, std::unique_ptr<Backend> backend);
  ~StepRunner();
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  // Tokens one step may hold at most.
  static constexpr int32_t kMaxStepTokens = 512;

  const ModelWeights& weights() const { return *weights_; }
  const ModelConfig& config() const { return weights_->config(); }
  const GgufFile& file() const { return weights_->file(); }
  // The backend of the last device (the only one without a split): the output head's,
  // which computes the logits and what is read back of them.
  Backend& backend() const { return weights_->backend(); }
  // What every device of the split can do: the fewest sequences a step, latent
  // attention and immediate execution only where all have them.
  BackendCapabilities capabilities() const;
  // The most rows one step may want logits for (the step itself may be longer): 512,
  // or fewer where a device buffer cannot hold 512 rows of n_vocab logits.
  int32_t max_logit_rows() const { return max_logit_rows_; }

  // A sequence of `n_ctx` entries starts using this runner: a LongRoPE model's RoPE
  // takes its short factors for contexts up to ModelConfig::rope_original_ctx, its long
  // ones past them (the context rounded up to a multiple of 256 first, as llama.cpp
  // does); nothing to do for other models. Throws std::invalid_argument where a sequence
  // using the other set is open (one step computes for every sequence alike).
  // release_context(n_ctx) when the sequence ends.
  void use_context(int32_t n_ctx);
  void release_context(int32_t n_ctx);
  // The RoPE of layer `layer` as steps apply it: ModelConfig::rope_of with the LongRoPE
  // factors the open sequences use.
  const RopeParams& rope_of(int32_t layer) const;

  // The step's activations are shared: a sequence holds this lock from record_step
  // until it has read the step's results, and around anything else that uses the
  // backend (its cache's exchanges, moves, reads). Recursive, so a policy called inside
  // such a section may read keys.
  std::recursive_mutex& step_mutex() const { return step_mutex_; }

  // --- the forward pass (callers hold step_mutex()) ---------------------------------
  // Calls `tap(layer, rows, n_rows, n_embd)` with each layer's attention input.
  using AttentionInputTap = std::function<void(int32_t layer, const float* rows, int64_t n_rows, int64_t n_embd)>;
  // Issues the whole forward pass of `batch`, part s over the KV caches parts[s] (its
  // cache on each device, in device order; one part for a batch that is not joined), up
  // to (not including) the last device's finish_step; the logits of batch.logit_rows()
  // land in logits(). On a split, each device but the last runs its layers as a step of
  // its own, and the residual stream's rows cross to the next (read_rows, write_rows).
  // `tap`: only for a step of one part.
  void record_step(const StepBatch& batch, std::span<const std::vector<KvCache*>> parts, const AttentionInputTap& tap);
  // The logits buffer of the last step (batch.logit_rows().size() rows of n_vocab).
  const Activation& logits() const;
  // On a split: the seconds each device but the last took in the last step, from the
  // rows written to it to its rows read back (the crossing included); the last device's
  // share is the step's time less these. Empty on one device.
  const std::vector<double>& split_seconds() const { return split_seconds_; }
  // A mixture-of-experts model: the expert products the last step ran, summed over its
  // layers (each expert its rows chose, once per layer); a one-token step runs
  // n_expert_used per layer. 0 for a dense model.
  int64_t experts_run() const { return experts_run_; }
  // Why the attention inputs cannot be shown on this backend ("" when they can).
  std::string why_no_attention_input_tap() const;
  // An MLA model's latent keys as the keys of logical entries (ModelWeights::recover_keys
  // with the RoPE steps apply).
  std::vector<float> recover_keys(int32_t layer, const std::vector<float>& stored, int32_t first, int32_t count) const;

 private:
  struct Buffers;
  std::unique_ptr<ModelWeights> weights_;
  std::vector<std::unique_ptr<Buffers>> buffers_;  // per device: handles of its activation memory
  int32_t max_logit_rows_ = 0;
  RopeParams rope_;  // ModelConfig::rope with the LongRoPE factors in use
  int32_t rope_factor_users_[2] = {0, 0};  // open sequences on the short, the long factors
  mutable std::recursive_mutex step_mutex_;
  std::vector<double> split_seconds_;
  int64_t experts_run_ = 0;
};

}  // namespace fafo
