// A sequence of compute dispatches and buffer copies, submitted once and waited for
// with a fence. The commands are collected as a list and recorded into a command
// buffer at submission, so that a sequence equal to one already recorded (key()) can
// be submitted from that command buffer instead (ReplayCache). Descriptor sets come
// from a DescriptorCache shared with later sequences (a backend's steps) or, without
// one, from the sequence's own pool. A command that reads or writes memory written
// since the last barrier, or writes memory read since then, gets a barrier first (a
// memory barrier, or an execution barrier where only reads came before), so it sees
// everything the earlier ones wrote; independent commands run without one. What a
// command touches is tracked as ranges of device memory, not buffer handles, so a
// buffer freed and another placed in its memory during the recording still count as
// the same memory. A dispatch reads every buffer bound and writes those its shader
// does not declare `readonly` (ComputePipeline::writes). After the last command a
// barrier to the host makes the results readable with Buffer::download. With a
// KernelProfiler, a timestamp follows every command, and every command waits for the
// one before it (so each interval is one command's time); barrier_count() still counts
// only the barriers the commands need. A profiled sequence is never replayed.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

namespace fafo::vulkan {

class Context;
class Buffer;
class ComputePipeline;
class DescriptorCache;
class KernelProfiler;
class ReplayCache;

class CommandSequence {
 public:
  explicit CommandSequence(const Context& context, uint32_t max_dispatches = 256);
  // Takes descriptor sets from `cache` (which must outlive the sequence, and any
  // ReplayCache entry it recorded); no limit on the number of dispatches.
  CommandSequence(const Context& context, DescriptorCache& cache);
  ~CommandSequence();
  CommandSequence(const CommandSequence&) = delete;
  CommandSequence& operator=(const CommandSequence&) = delete;

  // Adds one dispatch: `buffers` bound to bindings 0..n-1, `push` as the push
  // constants (exactly pipeline.push_constant_bytes()), groups_x/y/z workgroups.
  void dispatch(const ComputePipeline& pipeline, std::initializer_list<const Buffer*> buffers, const void* push,
                uint32_t push_bytes, uint32_t groups_x, uint32_t groups_y = 1, uint32_t groups_z = 1);
  template <class PushConstants>
  void dispatch(const ComputePipeline& pipeline, std::initializer_list<const Buffer*> buffers,
                const PushConstants& push, uint32_t groups_x, uint32_t groups_y = 1, uint32_t groups_z = 1) {
    dispatch(pipeline, buffers, &push, sizeof push, groups_x, groups_y, groups_z);
  }

  // Copies `regions` (byte offsets and sizes) from src to dst.
  void copy(const Buffer& src, const Buffer& dst, const std::vector<VkBufferCopy>& regions);
  void copy(const Buffer& src, VkDeviceSize src_offset, const Buffer& dst, VkDeviceSize dst_offset, VkDeviceSize bytes) {
    copy(src, dst, {VkBufferCopy{src_offset, dst_offset, bytes}});
  }

  // Sets every byte of dst to zero.
  void zero(const Buffer& dst);

  uint32_t dispatch_count() const { return dispatches_; }
  uint32_t command_count() const { return commands_recorded_; }
  uint32_t barrier_count() const { return barriers_; }

  // Times every command from here on with `profiler` (kernel_profiler.h), which must
  // outlive the sequence; call before recording the first command.
  void set_profiler(KernelProfiler* profiler);
  // The weight bytes the last command reads (for the profile's GB/s).
  void note_weight_bytes(double bytes);
  // The sequence holds part of a step (sync_step ran it): the profiler does not count it
  // as a step.
  void mark_part_of_step() { part_of_step_ = true; }

  // Records the commands, submits, and waits; throws VulkanError on failure or when the
  // device does not finish within `timeout` (never hangs). Only once per sequence.
  void submit_and_wait(std::chrono::milliseconds timeout = std::chrono::seconds(120));
  // The same, submitting the command buffer `cache` holds for this sequence's key()
  // when there is one (recorded under descriptor-set `generation`), and keeping this
  // sequence's in `cache` otherwise; a sequence with a profiler or without a
  // DescriptorCache is recorded as above. Returns whether it was replayed.
  bool submit_and_wait(ReplayCache& cache, uint64_t generation,
                       std::chrono::milliseconds timeout = std::chrono::seconds(120));

  // Every command and barrier of the sequence, as words (pipelines, descriptor sets,
  // buffers by handle; push constants; workgroup counts; copy regions): two sequences
  // with the same key record the same command buffer.
  std::vector<uint64_t> key() const;

 private:
  struct Op {
    enum class Kind : uint8_t { Barrier, TimingBarrier, Dispatch, Copy, Fill };
    Kind kind = Kind::Barrier;
    bool memory = false;  // Barrier: something was written since the last one
    const ComputePipeline* pipeline = nullptr;
    VkDescriptorSet set = VK_NULL_HANDLE;
    uint32_t push_at = 0, push_bytes = 0;  // in push_data_
    uint32_t groups[3] = {1, 1, 1};
    VkBuffer src = VK_NULL_HANDLE, dst = VK_NULL_HANDLE;
    uint32_t regions_at = 0, n_regions = 0;  // in regions_
    double weight_bytes = 0;                 // for the profile
  };
  bool run(ReplayCache* cache, uint64_t generation, std::chrono::milliseconds timeout);
  // Records the list into commands_ (allocated here), ending with the barrier to the host.
  void record(bool one_time);
  void destroy() noexcept;
  // Records a barrier first when the next command (reading `reads`, writing `writes`)
  // depends on an earlier one since the last barrier, then notes what it touches.
  void barrier_before_command(const std::vector<const Buffer*>& reads, const std::vector<const Buffer*>& writes);
  void device_barrier();
  VkDescriptorSet descriptor_set(const ComputePipeline& pipeline, std::initializer_list<const Buffer*> buffers);

  const Context& context_;
  DescriptorCache* cache_ = nullptr;
  KernelProfiler* profiler_ = nullptr;
  bool part_of_step_ = false;
  VkDescriptorPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer commands_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  uint32_t max_dispatches_ = 0;
  uint32_t dispatches_ = 0;
  uint32_t commands_recorded_ = 0;
  uint32_t barriers_ = 0;
  bool submitted_ = false;
  struct MemorySpan {
    VkDeviceMemory memory;
    VkDeviceSize begin, end;
  };
  std::vector<MemorySpan> written_, read_;  // since the last barrier
  std::vector<Op> ops_;
  std::vector<uint8_t> push_data_;
  std::vector<VkBufferCopy> regions_;
};

}  // namespace fafo::vulkan
