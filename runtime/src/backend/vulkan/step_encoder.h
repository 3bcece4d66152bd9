// The step the Vulkan backend is recording, between begin_step and finish_step:
//   - the step's inputs on the device, written by the host at begin(): the tokens, and
//     step_info ([header: n_past, keys per attention part, parts in use, 1 word
//     unused][T prefix
//     flags][T x mask_words in-step masks][n_past logical order of the KV cache], the
//     layout shaders/attention.comp reads; the kernels that need n_past read it from
//     the header); the RoPE table (cos, sin of every row's position and pair) when the
//     first rope op asks for it;
//   - the one CommandSequence every op of the step records into (dispatches, copies and
//     the barriers between them), submitted once by finish(), which waits for the
//     device: from the command buffer of an earlier step with the same commands when
//     there is one (ReplayCache; every AR step after the first), else recorded;
//   - the row count of the activations a gather_rows shortened, for the rest of the
//     step.
// The ops themselves (what to dispatch with which arguments) are VulkanBackend's.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/vulkan/allocator.h"
#include "backend/vulkan/buffer.h"
#include "backend/vulkan/replay_cache.h"
#include "fafo/backend.h"

namespace fafo::vulkan {

class CommandSequence;
class Context;
class DescriptorCache;
class KernelProfiler;

class StepEncoder {
 public:
  StepEncoder(const Context& context, DescriptorCache& descriptors);
  ~StepEncoder();
  StepEncoder(const StepEncoder&) = delete;
  StepEncoder& operator=(const StepEncoder&) = delete;

  // Sizes the step inputs for steps of up to StepBatch::kMaxTokens tokens over a KV
  // cache of `capacity` entries (when a cache is created).
  void reserve(int32_t capacity);
  // Writes the step's inputs (`order`: the cache's logical order, null when it has
  // none) and starts recording. A recording not finished is dropped.
  void begin(const StepBatch& batch, const std::vector<int32_t>* order);
  // Submits the step's commands once and waits, at most `timeout` (then VulkanError);
  // throws std::logic_error without begin().
  void finish(std::chrono::milliseconds timeout = std::chrono::seconds(120));
  // Drops the recording, if any, without submitting it.
  void abandon();
  // Times the commands of the steps begun from now on (null: stop timing). Profiled
  // steps are recorded, never replayed.
  void set_profiler(KernelProfiler* profiler) { profiler_ = profiler; }
  // Whether finish() may replay a recorded step (on by default).
  void set_replay(bool on);
  uint64_t steps() const { return steps_; }        // finished
  uint64_t replayed() const { return replayed_; }  // of which replayed

  // What ops record into; throws std::logic_error outside begin()/finish().
  CommandSequence& commands();
  // The batch of the last begin() (still the last step's after finish()); throws
  // std::logic_error before the first.
  const StepBatch& batch() const;

  const Buffer& tokens() const { return tokens_.get(); }
  const Buffer& step_info() const { return step_info_.get(); }
  static constexpr uint32_t kHeaderWords = 4;
  // Where the prefix flags, masks and order start in step_info.
  uint32_t flags_offset() const { return kHeaderWords; }
  uint32_t mask_offset() const { return kHeaderWords + static_cast<uint32_t>(batch().size()); }
  uint32_t order_offset() const { return mask_offset() + static_cast<uint32_t>(batch().size()) * mask_words_; }
  // Writes the attention split into the header (keys per part, parts in use): one per
  // step (std::logic_error for a second, different one).
  void set_split(uint32_t part_keys, uint32_t n_parts);
  uint32_t mask_words() const { return mask_words_; }
  // Whether step_info holds the cache's logical order (the cache has one and n_past > 0).
  bool use_order() const { return use_order_; }
  // cos/sin of every (batch row, pair) of this step, computed like the CPU reference;
  // one RoPE configuration per step (std::logic_error for a second).
  const Buffer& rope_table(const RopeParams& p);

  // The rows activation `a` holds in this step: the batch size unless a gather wrote
  // fewer into it.
  uint32_t rows_of(const Activation& a) const;
  // Results written into a gathered buffer keep its row count for the rest of the step.
  void set_rows(const Activation& out, uint32_t rows);
  // gather_rows wrote `rows` rows into `dst`.
  void gathered(const Activation& dst, uint32_t rows) { gathered_rows_[dst.id] = rows; }

 private:
  const Context& context_;
  DescriptorCache& descriptors_;
  KernelProfiler* profiler_ = nullptr;
  ScratchBuffer step_info_;
  ScratchBuffer tokens_;
  ScratchBuffer rope_table_;
  std::optional<std::tuple<int32_t, float, float, std::vector<float>>> rope_key_;
  uint32_t mask_words_ = 0;
  uint32_t part_keys_ = 0, n_parts_ = 0;  // in the header this step; 0 = not yet
  bool use_order_ = false;
  const StepBatch* batch_ = nullptr;
  std::unordered_map<int32_t, uint32_t> gathered_rows_;
  std::unique_ptr<CommandSequence> seq_;
  ReplayCache replay_;
  bool replay_on_ = true;
  uint64_t steps_ = 0, replayed_ = 0;
};

}  // namespace fafo::vulkan
