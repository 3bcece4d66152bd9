#include "backend/vulkan/command_sequence.h"

#include <algorithm>

#include <stdexcept>
#include <string>
#include <vector>

#include "backend/vulkan/buffer.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/descriptor_cache.h"
#include "backend/vulkan/kernel_profiler.h"
#include "backend/vulkan/pipeline.h"
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
  VkMemoryBarrier b{};
  b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  b.dstAccessMask =
      VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  vkCmdPipelineBarrier(commands_, kDeviceStages, kDeviceStages, 0, written_.empty() ? 0 : 1, &b, 0, nullptr, 0, nullptr);
  ++barriers_;
  written_.clear();
  read_.clear();
}

void CommandSequence::set_profiler(KernelProfiler* profiler) {
  if (commands_recorded_ > 0) throw std::logic_error("set_profiler after the first command");
  profiler_ = profiler;
  if (profiler_) profiler_->begin(commands_);
}

void CommandSequence::note_weight_bytes(double bytes) {
  if (profiler_) profiler_->add_bytes(bytes);
}

void CommandSequence::after_command(const std::string& name) {
  if (profiler_) profiler_->after(commands_, name);
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
    begin();
  } catch (...) {
    destroy();
    throw;
  }
}

CommandSequence::CommandSequence(const Context& context, DescriptorCache& cache)
    : context_(context), cache_(&cache), max_dispatches_(UINT32_MAX) {
  try {
    begin();
  } catch (...) {
    destroy();
    throw;
  }
}

void CommandSequence::begin() {
  const VkDevice device = context_.device();
  VkCommandBufferAllocateInfo alloc{};
  alloc.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  alloc.commandPool = context_.command_pool();
  alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  alloc.commandBufferCount = 1;
  check(vkAllocateCommandBuffers(device, &alloc, &commands_), "vkAllocateCommandBuffers");

  VkFenceCreateInfo fence_info{};
  fence_info.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
  check(vkCreateFence(device, &fence_info, nullptr, &fence_), "vkCreateFence");

  VkCommandBufferBeginInfo begin_info{};
  begin_info.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  begin_info.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  check(vkBeginCommandBuffer(commands_, &begin_info), "vkBeginCommandBuffer");
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
    vkCmdPipelineBarrier(commands_, kDeviceStages, kDeviceStages, 0, 0, nullptr, 0, nullptr, 0, nullptr);
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
  vkCmdBindPipeline(commands_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.handle());
  vkCmdBindDescriptorSets(commands_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.layout(), 0, 1, &set, 0, nullptr);
  if (push_bytes > 0)
    vkCmdPushConstants(commands_, pipeline.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  vkCmdDispatch(commands_, groups_x, groups_y, groups_z);
  ++dispatches_;
  after_command(pipeline.name());
}

void CommandSequence::copy(const Buffer& src, const Buffer& dst, const std::vector<VkBufferCopy>& regions) {
  if (regions.empty()) return;
  for (const VkBufferCopy& r : regions)
    if (r.size == 0 || r.srcOffset + r.size > src.size() || r.dstOffset + r.size > dst.size())
      throw std::out_of_range("buffer copy of " + std::to_string(r.size) + " bytes from offset " +
                              std::to_string(r.srcOffset) + " (of " + std::to_string(src.size()) + ") to offset " +
                              std::to_string(r.dstOffset) + " (of " + std::to_string(dst.size()) + ")");
  barrier_before_command({&src}, {&dst});
  vkCmdCopyBuffer(commands_, src.handle(), dst.handle(), static_cast<uint32_t>(regions.size()), regions.data());
  after_command("copy");
}

void CommandSequence::zero(const Buffer& dst) {
  barrier_before_command({}, {&dst});
  vkCmdFillBuffer(commands_, dst.handle(), 0, VK_WHOLE_SIZE, 0);
  after_command("fill");
}

void CommandSequence::submit_and_wait(std::chrono::milliseconds timeout) {
  if (submitted_) throw std::logic_error("a command sequence is submitted only once");
  if (commands_recorded_ > 0) {  // every device write of the sequence made visible to the host
    VkMemoryBarrier b{};
    b.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
    b.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    b.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(commands_, kDeviceStages, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &b, 0, nullptr, 0, nullptr);
    ++barriers_;
  }
  check(vkEndCommandBuffer(commands_), "vkEndCommandBuffer");
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
  if (profiler_) profiler_->collect(dispatches_, barriers_);
}

}  // namespace fafo::vulkan
