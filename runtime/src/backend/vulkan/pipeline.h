// A compute pipeline built from an embedded SPIR-V shader: its bindings are
// `n_buffers` storage buffers (binding 0..n-1 of set 0) and it takes
// `push_constant_bytes` of push constants. Created once (at load time), reused by
// every CommandSequence. Which bindings the shader may write is read from its SPIR-V
// (spirv_bindings.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "backend/vulkan/embedded_shaders.h"

namespace fafo::vulkan {

class Context;

// How to specialize a shader at pipeline creation.
struct PipelineOptions {
  // Values of the 32-bit specialization constants: element i is constant_id i (the
  // shader's default is used for ids past the end).
  std::vector<uint32_t> spec_constants;
  // VK_PIPELINE_SHADER_STAGE_CREATE_REQUIRE_FULL_SUBGROUPS_BIT: every subgroup of a
  // workgroup is full. The device must have computeFullSubgroups enabled
  // (Context::features().full_subgroups) and the workgroup width must be a multiple of
  // the subgroup size.
  bool require_full_subgroups = false;
};

class ComputePipeline {
 public:
  ComputePipeline(const Context& context, const EmbeddedShader& shader, uint32_t n_buffers,
                  uint32_t push_constant_bytes, const PipelineOptions& options = {});
  ~ComputePipeline();
  ComputePipeline(const ComputePipeline&) = delete;
  ComputePipeline& operator=(const ComputePipeline&) = delete;

  VkPipeline handle() const { return pipeline_; }
  VkPipelineLayout layout() const { return layout_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  uint32_t n_buffers() const { return n_buffers_; }
  uint32_t push_constant_bytes() const { return push_constant_bytes_; }
  const std::string& name() const { return name_; }
  // Whether the shader may write the buffer at `binding` (GLSL: not `readonly`).
  // (A binding past the shader's n_buffers counts as written.)
  bool writes(uint32_t binding) const { return binding >= written_.size() || written_[binding]; }

 private:
  void destroy() noexcept;

  VkDevice device_ = VK_NULL_HANDLE;
  std::string name_;
  uint32_t n_buffers_ = 0;
  uint32_t push_constant_bytes_ = 0;
  std::vector<bool> written_;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  VkPipeline pipeline_ = VK_NULL_HANDLE;
};

}  // namespace fafo::vulkan
