// Descriptor sets that live as long as the backend: one set per distinct (pipeline
// layout, bound buffers) combination, written once and reused by every later step.
// A model's forward pass binds the same buffers to the same pipelines step after
// step, so after the first step no descriptor set is allocated or written again.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include <vulkan/vulkan.h>

namespace fafo::vulkan {

class Context;

// Writes `buffers` (whole buffers) into bindings 0..n-1 of `set` as storage buffers.
void write_descriptor_set(VkDevice device, VkDescriptorSet set, const std::vector<VkBuffer>& buffers);

class DescriptorCache {
 public:
  explicit DescriptorCache(const Context& context);
  ~DescriptorCache();
  DescriptorCache(const DescriptorCache&) = delete;
  DescriptorCache& operator=(const DescriptorCache&) = delete;

  // The set for `layout` with `buffers` at bindings 0..n-1 (whole buffers), creating
  // and writing it the first time this combination is asked for.
  VkDescriptorSet get(VkDescriptorSetLayout layout, const std::vector<VkBuffer>& buffers);
  // Drops every set that binds `buffer` (call before destroying a buffer that may be
  // bound again later under a recycled handle).
  void forget(VkBuffer buffer);
  size_t size() const { return sets_.size(); }
  // Moves on with every forget(): a command buffer recorded under an older generation
  // may name a buffer that is gone (ReplayCache).
  uint64_t generation() const { return generation_; }

 private:
  VkDescriptorSet allocate(VkDescriptorSetLayout layout);

  const Context& context_;
  std::vector<VkDescriptorPool> pools_;
  uint32_t sets_left_in_pool_ = 0;
  uint64_t generation_ = 0;
  std::map<std::pair<VkDescriptorSetLayout, std::vector<VkBuffer>>, VkDescriptorSet> sets_;
};

}  // namespace fafo::vulkan
