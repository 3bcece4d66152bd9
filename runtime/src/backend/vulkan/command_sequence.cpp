#include "backend/vulkan/command_sequence.h"

#include <stdexcept>
#include <string>
#include <vector>

#include "backend/vulkan/buffer.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/pipeline.h"
#include "backend/vulkan/vulkan_error.h"

namespace fafo::vulkan {

namespace {

// Storage-buffer descriptors the pool holds per dispatch.
constexpr uint32_t kMaxBuffersPerDispatch = 8;

void memory_barrier(VkCommandBuffer commands, VkPipelineStageFlags dst_stage, VkAccessFlags dst_access) {
  VkMemoryBarrier barrier{};
  barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
  barrier.dstAccessMask = dst_access;
  vkCmdPipelineBarrier(commands, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, dst_stage, 0, 1, &barrier, 0, nullptr, 0,
                       nullptr);
}

}  // namespace

CommandSequence::CommandSequence(const Context& context, uint32_t max_dispatches)
    : context_(context), max_dispatches_(max_dispatches) {
  const VkDevice device = context.device();
  try {
    VkDescriptorPoolSize size{};
    size.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    size.descriptorCount = max_dispatches * kMaxBuffersPerDispatch;
    VkDescriptorPoolCreateInfo pool_info{};
    pool_info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
    pool_info.maxSets = max_dispatches;
    pool_info.poolSizeCount = 1;
    pool_info.pPoolSizes = &size;
    check(vkCreateDescriptorPool(device, &pool_info, nullptr, &pool_), "vkCreateDescriptorPool");

    VkCommandBufferAllocateInfo alloc{};
    alloc.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
    alloc.commandPool = context.command_pool();
    alloc.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    alloc.commandBufferCount = 1;
    check(vkAllocateCommandBuffers(device, &alloc, &commands_), "vkAllocateCommandBuffers");

    VkFenceCreateInfo fence_info{};
    fence_info.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
    check(vkCreateFence(device, &fence_info, nullptr, &fence_), "vkCreateFence");

    VkCommandBufferBeginInfo begin{};
    begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(vkBeginCommandBuffer(commands_, &begin), "vkBeginCommandBuffer");
  } catch (...) {
    destroy();
    throw;
  }
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

  const VkDevice device = context_.device();
  VkDescriptorSet set = VK_NULL_HANDLE;
  const VkDescriptorSetLayout set_layout = pipeline.set_layout();
  VkDescriptorSetAllocateInfo alloc{};
  alloc.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
  alloc.descriptorPool = pool_;
  alloc.descriptorSetCount = 1;
  alloc.pSetLayouts = &set_layout;
  check(vkAllocateDescriptorSets(device, &alloc, &set), "vkAllocateDescriptorSets");

  std::vector<VkDescriptorBufferInfo> infos;
  infos.reserve(buffers.size());
  for (const Buffer* b : buffers) {
    if (b == nullptr || b->handle() == VK_NULL_HANDLE)
      throw std::invalid_argument("shader " + pipeline.name() + ": an empty buffer was bound");
    infos.push_back({b->handle(), 0, VK_WHOLE_SIZE});
  }
  std::vector<VkWriteDescriptorSet> writes(infos.size());
  for (size_t i = 0; i < infos.size(); ++i) {
    writes[i] = {};
    writes[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
    writes[i].dstSet = set;
    writes[i].dstBinding = static_cast<uint32_t>(i);
    writes[i].descriptorCount = 1;
    writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    writes[i].pBufferInfo = &infos[i];
  }
  vkUpdateDescriptorSets(device, static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);

  if (dispatches_ > 0)
    memory_barrier(commands_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
  vkCmdBindPipeline(commands_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.handle());
  vkCmdBindDescriptorSets(commands_, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline.layout(), 0, 1, &set, 0, nullptr);
  if (push_bytes > 0)
    vkCmdPushConstants(commands_, pipeline.layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  vkCmdDispatch(commands_, groups_x, groups_y, groups_z);
  ++dispatches_;
}

void CommandSequence::submit_and_wait(std::chrono::milliseconds timeout) {
  if (submitted_) throw std::logic_error("a command sequence is submitted only once");
  if (dispatches_ > 0) memory_barrier(commands_, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_READ_BIT);
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
}

}  // namespace fafo::vulkan
