// The step the Vulkan backend is recording, between begin_step and finish_step:
//   - the step's inputs on the device, written by the host at begin(): the tokens, and
//     for each part of the step (one sequence: one part; a joined step: one per
//     sequence, StepBatch::segment) a step_info buffer ([header: n_past, keys per
//     attention part, attention parts in use, first row of the part][T prefix
//     flags][T x mask_words in-step masks][T positions][region words: the logical
//     index of each region slot in use][n_past logical order of the part's KV cache],
//     with T, the flags, masks and positions the part's own, indexed from its first
//     row: the layout shaders/attention.comp reads; the kernels that need n_past read it
//     from the header); the RoPE tables (cos, sin of every row's position and pair),
//     one per RoPE configuration the step's rope ops ask for;
//   - the one CommandSequence every op of the step records into (dispatches, copies and
//     the barriers between them), submitted once by finish(), which waits for the
//     device: from the command buffer of an earlier step with the same commands when
//     there is one (ReplayCache; every AR step after the first), else recorded. A
//     mixture-of-experts model's step is several: flush() (sync_step) submits what was
//     recorded so far, without the cache, and recording goes on in a new one;
//   - the row count of the activations a gather_rows shortened, for the rest of the
//     step.
// The ops themselves (what to dispatch with which arguments) are VulkanBackend's.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "backend/vulkan/allocator.h"
#include "backend/vulkan/buffer.h"
#include "backend/vulkan/replay_cache.h"
#include "fafo/backend.h"
#include "fafo/kv_layout.h"

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

  // The most sequences one step joins (BackendCapabilities::max_step_sequences).
  static constexpr int32_t kMaxParts = 16;
  // Sizes the step inputs for steps of up to StepBatch::kMaxTokens tokens over KV
  // caches of up to `capacity` entries (when a cache is created).
  void reserve(int32_t capacity);
  // Writes the step's inputs (`layouts`: each part's KV cache layout, which gives the
  // logical order and the region's entries, null for a cache without either; one per
  // part of the batch) and starts recording. A recording not finished is dropped.
  void begin(const StepBatch& batch, std::span<const KvLayout* const> layouts);
  // A step of one sequence.
  void begin(const StepBatch& batch, const KvLayout* layout) {
    const KvLayout* layouts[1] = {layout};
    begin(batch, layouts);
  }
  // Submits the step's commands once and waits, at most `timeout` (then VulkanError);
  // throws std::logic_error without begin().
  void finish(std::chrono::milliseconds timeout = std::chrono::seconds(120));
  // Inside a step: submits what was recorded so far and waits (as finish), then records
  // on into a new command buffer of the same step (its inputs, RoPE tables and gathered
  // row counts kept). std::logic_error without begin().
  void flush(std::chrono::milliseconds timeout = std::chrono::seconds(120));
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
  // The parts of the step begun last (its sequences), and part `part`'s step_info.
  int32_t parts() const { return static_cast<int32_t>(in_use_); }
  const Buffer& step_info(int32_t part = 0) const { return part_at(part).info.get(); }
  static constexpr uint32_t kHeaderWords = 4;
  // Where the prefix flags, masks, positions, region entries and order start in a
  // part's step_info.
  uint32_t flags_offset() const { return kHeaderWords; }
  uint32_t mask_offset(int32_t part = 0) const { return kHeaderWords + part_at(part).rows; }
  uint32_t positions_offset(int32_t part = 0) const {
    return mask_offset(part) + part_at(part).rows * part_at(part).mask_words;
  }
  uint32_t region_offset(int32_t part = 0) const { return positions_offset(part) + part_at(part).rows; }
  uint32_t order_offset(int32_t part = 0) const { return region_offset(part) + part_at(part).region_words; }
  uint32_t mask_words(int32_t part = 0) const { return part_at(part).mask_words; }
  // Whether the part's step_info holds its cache's logical order (the cache has one
  // and the part's n_past > 0).
  bool use_order(int32_t part = 0) const { return part_at(part).use_order; }
  // Writes the attention split into the part's header (keys per attention part,
  // attention parts in use): one per part and step (std::logic_error for a second,
  // different one).
  void set_split(int32_t part, uint32_t part_keys, uint32_t n_parts);
  // cos/sin of every (batch row, pair) of this step, computed like the CPU reference;
  // a table per RoPE configuration the step uses (Gemma 3's local and global layers
  // have two), up to kMaxRopeTables (std::logic_error past them).
  static constexpr size_t kMaxRopeTables = 4;
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
  struct Part {
    ScratchBuffer info;  // step_info
    uint32_t rows = 0, mask_words = 0;
    uint32_t region_words = 0;  // the layout's region size (the reserved capacity at most)
    uint32_t part_keys = 0, n_parts = 0;  // in the header this step; 0 = not yet
    bool use_order = false;
  };
  const Part& part_at(int32_t part) const;
  std::vector<Part> parts_;  // grown to the most parts a step has used
  size_t in_use_ = 0;
  uint64_t info_bytes_ = 0;  // of each part's step_info
  int32_t capacity_ = 0;     // the longest cache reserve() was told of
  ScratchBuffer tokens_;
  using RopeKey = std::tuple<int32_t, float, float, std::vector<float>, float>;
  struct RopeTable {
    ScratchBuffer buffer;
    std::optional<RopeKey> key;  // the configuration it holds this step; none: free
  };
  std::vector<RopeTable> rope_tables_;  // kMaxRopeTables, made at construction
  const StepBatch* batch_ = nullptr;
  std::unordered_map<int32_t, uint32_t> gathered_rows_;
  std::unique_ptr<CommandSequence> seq_;
  ReplayCache replay_;
  bool replay_on_ = true;
  uint64_t steps_ = 0, replayed_ = 0;
};

}  // namespace fafo::vulkan
