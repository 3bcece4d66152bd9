#include "backend/vulkan/pipeline.h"

#include <vector>

#include "backend/vulkan/context.h"
#include "backend/vulkan/spirv_bindings.h"
#include "backend/vulkan/vulkan_error.h"

namespace fafo::vulkan {

ComputePipeline::ComputePipeline(const Context& context, const EmbeddedShader& shader, uint32_t n_buffers,
                                 uint32_t push_constant_bytes, const PipelineOptions& options)
    : device_(context.device()),
      name_(shader.name),
      n_buffers_(n_buffers),
      push_constant_bytes_(push_constant_bytes),
      written_(spirv_written_bindings(shader.words, shader.word_count, n_buffers)) {
  const uint32_t max_push = context.properties().limits.maxPushConstantsSize;
  if (push_constant_bytes > max_push)
    throw VulkanError("shader " + name_ + " needs " + std::to_string(push_constant_bytes) +
                      " bytes of push constants; the device allows " + std::to_string(max_push));
  if (options.require_full_subgroups && !context.features().full_subgroups)
    throw VulkanError("shader " + name_ + " asks for full subgroups, which the device does not have enabled");
  VkShaderModule module = VK_NULL_HANDLE;
  try {
    std::vector<VkDescriptorSetLayoutBinding> bindings(n_buffers);
    for (uint32_t b = 0; b < n_buffers; ++b) {
      bindings[b] = {};
      bindings[b].binding = b;
      bindings[b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      bindings[b].descriptorCount = 1;
      bindings[b].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    }
    VkDescriptorSetLayoutCreateInfo set_info{};
    set_info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
    set_info.bindingCount = n_buffers;
    set_info.pBindings = bindings.data();
    check(vkCreateDescriptorSetLayout(device_, &set_info, nullptr, &set_layout_), "vkCreateDescriptorSetLayout");

    VkPushConstantRange push{};
    push.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
    push.offset = 0;
    push.size = push_constant_bytes;
    VkPipelineLayoutCreateInfo layout_info{};
    layout_info.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
    layout_info.setLayoutCount = 1;
    layout_info.pSetLayouts = &set_layout_;
    layout_info.pushConstantRangeCount = push_constant_bytes > 0 ? 1 : 0;
    layout_info.pPushConstantRanges = &push;
    check(vkCreatePipelineLayout(device_, &layout_info, nullptr, &layout_), "vkCreatePipelineLayout");

    VkShaderModuleCreateInfo module_info{};
    module_info.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    module_info.codeSize = shader.word_count * sizeof(uint32_t);
    module_info.pCode = shader.words;
    check(vkCreateShaderModule(device_, &module_info, nullptr, &module), "vkCreateShaderModule");

    std::vector<VkSpecializationMapEntry> entries(options.spec_constants.size());
    for (uint32_t i = 0; i < entries.size(); ++i) entries[i] = {i, i * uint32_t{sizeof(uint32_t)}, sizeof(uint32_t)};
    VkSpecializationInfo specialization{};
    specialization.mapEntryCount = static_cast<uint32_t>(entries.size());
    specialization.pMapEntries = entries.data();
    specialization.dataSize = options.spec_constants.size() * sizeof(uint32_t);
    specialization.pData = options.spec_constants.data();

    VkComputePipelineCreateInfo info{};
    info.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    info.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    info.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    if (options.require_full_subgroups) info.stage.flags = VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT;
    info.stage.module = module;
    info.stage.pName = "main";
    if (!entries.empty()) info.stage.pSpecializationInfo = &specialization;
    info.layout = layout_;
    check(vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &info, nullptr, &pipeline_),
          ("vkCreateComputePipelines (" + name_ + ")").c_str());
    vkDestroyShaderModule(device_, module, nullptr);
  } catch (...) {
    if (module != VK_NULL_HANDLE) vkDestroyShaderModule(device_, module, nullptr);
    destroy();
    throw;
  }
}

ComputePipeline::~ComputePipeline() { destroy(); }

void ComputePipeline::destroy() noexcept {
  if (pipeline_ != VK_NULL_HANDLE) vkDestroyPipeline(device_, pipeline_, nullptr);
  if (layout_ != VK_NULL_HANDLE) vkDestroyPipelineLayout(device_, layout_, nullptr);
  if (set_layout_ != VK_NULL_HANDLE) vkDestroyDescriptorSetLayout(device_, set_layout_, nullptr);
  pipeline_ = VK_NULL_HANDLE;
  layout_ = VK_NULL_HANDLE;
  set_layout_ = VK_NULL_HANDLE;
}

}  // namespace fafo::vulkan
