#include "backend/vulkan/command_sequence.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/vulkan/buffer.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/descriptor_cache.h"
#include "backend/vulkan/kernel_profiler.h"
#include "backend/vulkan/pipeline.h"
#include "backend/vulkan/replay_cache.h"
#include "backend/vulkan/vulkan_error.h"

namespace fafo::vulkan {

namespace {

// Storage-buffer descriptors the pool holds per dispatch.
constexpr uint32_t kMaxBuffersPerDispatch = 8;

constexpr VkPipelineStageFlags kDeviceStages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;

}  // namespace

// Every device write since the last barrier made visible to the device's later
// commands (a memory barrier), or an execution barrier where nothing was written.
void CommandSequence::device_barrier() {
  Op op;
  op.kind = Op::Kind::Barrier;
  op.memory = !written_.empty();
  ops_.push_back(op);
  ++barriers_;
  written_.clear();
  read_.clear();
}

void CommandSequence::set_profiler(KernelProfiler* profiler) {
  if (commands_recorded_ > 0) throw std::logic_error("set_profiler after the first command");
  profiler_ = profiler;
}

void CommandSequence::note_weight_bytes(double bytes) {
  if (!ops_.empty()) ops_.back().weight_bytes += bytes;
}

CommandSequence::CommandSequence(const Context& context, uint32_t max_dispatches)
    : context_(context), max_dispatches_(max_dispatches) {
  try {
    VkDescriptorPoolSize size{};
    size.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    size.descriptorCount = max_dispatches * kMaxBuffersPerDispatch;
    VkDescriptorPoolCreateInfo pool_info{};
    pool_info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
    pool_info.maxSets = max_dispatches;
    pool_info.poolSizeCount = 1;
    pool_info.pPoolSizes = &size;
    check(vkCreateDescriptorPool(context.device(), &pool_info, nullptr, &pool_), "vkCreateDescriptorPool");
    VkFenceCreateInfo fence_info{};
    fence_info.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    check(vkCreateFence(context.device(), &fence_info, nullptr, &fence_), "vkCreateFence");
  } catch (...) {
    destroy();
    throw;
  }
}

CommandSequence::CommandSequence(const Context& context, DescriptorCache& cache)
    : context_(context), cache_(&cache), max_dispatches_(UINT32_MAX) {
  VkFenceCreateInfo fence_info{};
  fence_info.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
  check(vkCreateFence(context.device(), &fence_info, nullptr, &fence_), "vkCreateFence");
}

CommandSequence::~CommandSequence() { destroy(); }

void CommandSequence::destroy() noexcept {
  const VkDevice device = context_.device();
  // A submitted sequence whose wait failed may still be running: let it finish
  // before its command buffer and descriptor sets go away.
  if (submitted_ && fence_ != VK_NULL_HANDLE) vkWaitForFences(device, 1, &fence_, VK_TRUE, UINT64_MAX);
  if (fence_ != VK_NULL_HANDLE) vkDestroyFence(device, fence_, nullptr);
  if (commands_ != VK_NULL_HANDLE) vkFreeCommandBuffers(device, context_.command_pool(), 1, &commands_);
  if (pool_ != VK_NULL_HANDLE) vkDestroyDescriptorPool(device, pool_, nullptr);
  fence_ = VK_NULL_HANDLE;
  commands_ = VK_NULL_HANDLE;
  pool_ = VK_NULL_HANDLE;
}

void CommandSequence::barrier_before_command(const std::vector<const Buffer*>& reads,
                                             const std::vector<const Buffer*>& writes) {
  if (submitted_) throw std::logic_error("recording into a command sequence already submitted");
  const auto span = [](const Buffer* b) {
    const MemoryPool::Range& r = b->memory_range();
    return MemorySpan{r.memory, r.offset, r.offset + std::max<VkDeviceSize>(r.size, 1)};
  };
  const auto overlaps = [](const std::vector<MemorySpan>& set, const MemorySpan& s) {
    for (const MemorySpan& o : set)
      if (o.memory == s.memory && o.begin < s.end && s.begin < o.end) return true;
    return false;
  };
  bool depends = false;
  for (const Buffer* b : reads) depends = depends || overlaps(written_, span(b));  // read after write
  for (const Buffer* b : writes)
    depends = depends || overlaps(written_, span(b)) || overlaps(read_, span(b));  // write after write or read
  if (depends) {
    device_barrier();
  } else if (profiler_ && commands_recorded_ > 0) {
    // Profiling: the commands run one at a time, so the time between two timestamps is
    // one command's. This execution barrier is for the measurement only: it is not
    // counted and leaves what the next commands depend on as it was.
    Op op;
    op.kind = Op::Kind::TimingBarrier;
    ops_.push_back(op);
  }
  for (const Buffer* b : reads) read_.push_back(span(b));
  for (const Buffer* b : writes) written_.push_back(span(b));
  ++commands_recorded_;
}

VkDescriptorSet CommandSequence::descriptor_set(const ComputePipeline& pipeline,
                                                std::initializer_list<const Buffer*> buffers) {
  std::vector<VkBuffer> handles;
  handles.reserve(buffers.size());
  for (const Buffer* b : buffers) {
    if (b == nullptr || b->handle() == VK_NULL_HANDLE)
      throw std::invalid_argument("shader " + pipeline.name() + ": an empty buffer was bound");
    handles.push_back(b->handle());
  }
  if (cache_) return cache_->get(pipeline.set_layout(), handles);

  const VkDevice device = context_.device();
  VkDescriptorSet set = VK_NULL_HANDLE;
  const VkDescriptorSetLayout set_layout = pipeline.set_layout();
  VkDescriptorSetAllocateInfo alloc{};
  alloc.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
  alloc.descriptorPool = pool_;
  alloc.descriptorSetCount = 1;
  alloc.pSetLayouts = &set_layout;
  check(vkAllocateDescriptorSets(device, &alloc, &set), "vkAllocateDescriptorSets");
  write_descriptor_set(device, set, handles);
  return set;
}

void CommandSequence::dispatch(const ComputePipeline& pipeline, std::initializer_list<const Buffer*> buffers,
                               const void* push, uint32_t push_bytes, uint32_t groups_x, uint32_t groups_y,
                               uint32_t groups_z) {
  if (submitted_) throw std::logic_error("dispatch into a command sequence already submitted");
  if (dispatches_ == max_dispatches_)
    throw std::length_error("command sequence full (" + std::to_string(max_dispatches_) + " dispatches)");
  if (buffers.size() != pipeline.n_buffers() || buffers.size() > kMaxBuffersPerDispatch)
    throw std::invalid_argument("shader " + pipeline.name() + " takes " + std::to_string(pipeline.n_buffers()) +
                                " buffers, got " + std::to_string(buffers.size()));
  if (push_bytes != pipeline.push_constant_bytes())
    throw std::invalid_argument("shader " + pipeline.name() + " takes " +
                                std::to_string(pipeline.push_constant_bytes()) + " bytes of push constants, got " +
                                std::to_string(push_bytes));
  const uint32_t* max_groups = context_.properties().limits.maxComputeWorkGroupCount;
  if (groups_x == 0 || groups_y == 0 || groups_z == 0 || groups_x > max_groups[0] || groups_y > max_groups[1] ||
      groups_z > max_groups[2])
    throw std::invalid_argument("shader " + pipeline.name() + ": workgroup count " + std::to_string(groups_x) + "x" +
                                std::to_string(groups_y) + "x" + std::to_string(groups_z) +
                                " is empty or over the device limit");
  const VkDescriptorSet set = descriptor_set(pipeline, buffers);
  std::vector<const Buffer*> reads, writes;
  uint32_t binding = 0;
  for (const Buffer* b : buffers) {
    reads.push_back(b);
    if (pipeline.writes(binding++)) writes.push_back(b);
  }
  barrier_before_command(reads, writes);
  Op op;
  op.kind = Op::Kind::Dispatch;
  op.pipeline = &pipeline;
  op.set = set;
  op.push_at = static_cast<uint32_t>(push_data_.size());
  op.push_bytes = push_bytes;
  const auto* bytes = static_cast<const uint8_t*>(push);
  push_data_.insert(push_data_.end(), bytes, bytes + push_bytes);
  op.groups[0] = groups_x;
  op.groups[1] = groups_y;
  op.groups[2] = groups_z;
  ops_.push_back(op);
  ++dispatches_;
}

void CommandSequence::copy(const Buffer& src, const Buffer& dst, const std::vector<VkBufferCopy>& regions) {
  if (regions.empty()) return;
  for (const VkBufferCopy& r : regions)
    if (r.size == 0 || r.srcOffset + r.size > src.size() || r.dstOffset + r.size > dst.size())
      throw std::out_of_range("buffer copy of " + std::to_string(r.size) + " bytes from offset " +
                              std::to_string(r.srcOffset) + " (of " + std::to_string(src.size()) + ") to offset " +
                              std::to_string(r.dstOffset) + " (of " + std::to_string(dst.size()) + ")");
  barrier_before_command({&src}, {&dst});
  Op op;
  op.kind = Op::Kind::Copy;
  op.src = src.handle();
  op.dst = dst.handle();
  op.regions_at = static_cast<uint32_t>(regions_.size());
  op.n_regions = static_cast<uint32_t>(regions.size());
  regions_.insert(regions_.end(), regions.begin(), regions.end());
  ops_.push_back(op);
}

void CommandSequence::zero(const Buffer& dst) {
  barrier_before_command({}, {&dst});
  Op op;
  op.kind = Op::Kind::Fill;
  op.dst = dst.handle();
  ops_.push_back(op);
}

std::vector<uint64_t> CommandSequence::key() const {
  const auto handle = [](auto h) { return reinterpret_cast<uint64_t>(h); };
  std::vector<uint64_t> k;
  k.reserve(ops_.size() * 8 + push_data_.size() / 8);
  for (const Op& op : ops_) {
    k.push_back(static_cast<uint64_t>(op.kind) | (op.memory ? 0x100u : 0u));
    switch (op.kind) {
      case Op::Kind::Barrier:
      case Op::Kind::TimingBarrier: break;
      case Op::Kind::Dispatch: {
        k.push_back(handle(op.pipeline->handle()));
        k.push_back(handle(op.set));
        k.push_back(uint64_t{op.groups[0]} | uint64_t{op.groups[1]} << 32);
        k.push_back(uint64_t{op.groups[2]} | uint64_t{op.push_bytes} << 32);
        for (uint32_t i = 0; i < op.push_bytes; i += 8) {
          uint64_t word = 0;
          std::memcpy(&word, push_data_.data() + op.push_at + i, std::min<uint32_t>(8, op.push_bytes - i));
          k.push_back(word);
        }
        break;
      }
      case Op::Kind::Copy:
        k.push_back(handle(op.src));
        k.push_back(handle(op.dst));
        k.push_back(op.n_regions);
        for (uint32_t i = 0; i < op.n_regions; ++i) {
          const VkBufferCopy& r = regions_[op.regions_at + i];
          k.push_back(r.srcOffset);
          k.push_back(r.dstOffset);
          k.push_back(r.size);
        }
        break;
      case Op::Kind::Fill: k.push_back(handle(op.dst)); break;
    }
  }
  return k;
}

void CommandSequence::record(bool one_time) {
  const VkDevice device = context_.device();
  VkCommandBufferAllocateInfo alloc{};
  alloc.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  alloc.commandPool = context_.command_pool();
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = 1;
  check(vkAllocateCommandBuffers(device, &alloc, &commands_), "vkAllocateCommandBuffers");
  VkCommandBufferBeginInfo begin_info{};
  begin_info.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  begin_info.flags = one_time ? VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT : 0;
  check(vkBeginCommandBuffer(commands_, &begin_info), "vkBeginCommandBuffer");
  if (profiler_) profiler_->begin(commands_);
  for (const Op& op : ops_) {
    switch (op.kind) {
      case Op::Kind::Barrier: {
        VkMemoryBarrier b{};
        b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
        b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        b.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                          VK_ACCESS_TRANSFER_WRITE_BIT;
        vkCmdPipelineBarrier(commands_, kDeviceStages, kDeviceStages, 0, op.memory ? 1 : 0, &b, 0, nullptr, 0, nullptr);
        continue;  // not a command: no timestamp
      }
      case Op::Kind::TimingBarrier:
        vkCmdPipelineBarrier(commands_, kDeviceStages, kDeviceStages, 0, 0, nullptr, 0, nullptr, 0, nullptr);
        continue;
      case Op::Kind::Dispatch:
        vkCmdBindPipeline(commands_, VK_PIPELINE_BIND_POINT_COMPUTE, op.pipeline->handle());
        vkCmdBindDescriptorSets(commands_, VK_PIPELINE_BIND_POINT_COMPUTE, op.pipeline->layout(), 0, 1, &op.set, 0,
                                nullptr);
        if (op.push_bytes > 0)
          vkCmdPushConstants(commands_, op.pipeline->layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, op.push_bytes,
                             push_data_.data() + op.push_at);
        vkCmdDispatch(commands_, op.groups[0], op.groups[1], op.groups[2]);
        break;
      case Op::Kind::Copy:
        vkCmdCopyBuffer(commands_, op.src, op.dst, op.n_regions, regions_.data() + op.regions_at);
        break;
      case Op::Kind::Fill: vkCmdFillBuffer(commands_, op.dst, 0, VK_WHOLE_SIZE, 0); break;
    }
    if (profiler_) {
      profiler_->after(commands_, op.kind == Op::Kind::Dispatch ? op.pipeline->name()
                                  : op.kind == Op::Kind::Copy   ? std::string("copy")
                                                                : std::string("fill"));
      profiler_->add_bytes(op.weight_bytes);
    }
  }
  if (commands_recorded_ > 0) {  // every device write of the sequence made visible to the host
    VkMemoryBarrier b{};
    b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    b.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(commands_, kDeviceStages, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &b, 0, nullptr, 0, nullptr);
  }
  check(vkEndCommandBuffer(commands_), "vkEndCommandBuffer");
}

void CommandSequence::submit_and_wait(std::chrono::milliseconds timeout) { run(nullptr, 0, timeout); }

bool CommandSequence::submit_and_wait(ReplayCache& cache, uint64_t generation, std::chrono::milliseconds timeout) {
  return run(&cache, generation, timeout);
}

bool CommandSequence::run(ReplayCache* cache, uint64_t generation, std::chrono::milliseconds timeout) {
  if (submitted_) throw std::logic_error("a command sequence is submitted only once");
  if (commands_recorded_ > 0) ++barriers_;  // the barrier to the host
  // Only a sequence whose descriptor sets outlive it (a DescriptorCache's) can be kept.
  const bool keep = cache != nullptr && cache_ != nullptr && profiler_ == nullptr;
  std::vector<uint64_t> k;
  bool replayed = false;
  if (keep) {
    k = key();
    commands_ = cache->take(k, generation);
    replayed = commands_ != VK_NULL_HANDLE;
  }
  if (!replayed) record(!keep);
  VkSubmitInfo submit{};
  submit.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  submit.commandBufferCount = 1;
  submit.pCommandBuffers = &commands_;
  check(vkQueueSubmit(context_.queue(), 1, &submit, fence_), "vkQueueSubmit");
  submitted_ = true;
  const uint64_t ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count());
  const VkResult waited = vkWaitForFences(context_.device(), 1, &fence_, VK_TRUE, ns);
  if (waited == VK_TIMEOUT)
    throw VulkanError("vkWaitForFences: the device did not finish within " + std::to_string(timeout.count()) +
                      " ms");
  check(waited, "vkWaitForFences");
  if (profiler_) profiler_->collect(dispatches_, barriers_, !part_of_step_);
  if (keep) {  // ran to completion: the cache keeps it for the next sequence with this key
    cache->add(std::move(k), commands_, generation);
    commands_ = VK_NULL_HANDLE;
  }
  return replayed;
}

}  // namespace fafo::vulkan
