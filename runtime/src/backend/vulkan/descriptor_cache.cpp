#include "backend/vulkan/descriptor_cache.h"

#include "backend/vulkan/context.h"
#include "backend/vulkan/vulkan_error.h"

namespace fafo::vulkan {

namespace {
constexpr uint32_t kSetsPerPool = 1024;
constexpr uint32_t kBuffersPerSet = 8;  // the most any fafo shader binds
}  // namespace

DescriptorCache::DescriptorCache(const Context& context) : context_(context) {}

DescriptorCache::~DescriptorCache() {
  for (VkDescriptorPool pool : pools_) vkDestroyDescriptorPool(context_.device(), pool, nullptr);
}

VkDescriptorSet DescriptorCache::allocate(VkDescriptorSetLayout layout) {
  if (sets_left_in_pool_ == 0) {
    VkDescriptorPoolSize size{};
    size.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    size.descriptorCount = kSetsPerPool * kBuffersPerSet;
    VkDescriptorPoolCreateInfo info{};
    info.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
    info.flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT;
    info.maxSets = kSetsPerPool;
    info.poolSizeCount = 1;
    info.pPoolSizes = &size;
    VkDescriptorPool pool = VK_NULL_HANDLE;
    check(vkCreateDescriptorPool(context_.device(), &info, nullptr, &pool), "vkCreateDescriptorPool");
    pools_.push_back(pool);
    sets_left_in_pool_ = kSetsPerPool;
  }
  VkDescriptorSetAllocateInfo alloc{};
  alloc.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
  alloc.descriptorPool = pools_.back();
  alloc.descriptorSetCount = 1;
  alloc.pSetLayouts = &layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  check(vkAllocateDescriptorSets(context_.device(), &alloc, &set), "vkAllocateDescriptorSets");
  --sets_left_in_pool_;
  return set;
}

void write_descriptor_set(VkDevice device, VkDescriptorSet set, const std::vector<VkBuffer>& buffers) {
  std::vector<VkDescriptorBufferInfo> infos;
  infos.reserve(buffers.size());
  for (VkBuffer b : buffers) infos.push_back({b, 0, VK_WHOLE_SIZE});
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
}

VkDescriptorSet DescriptorCache::get(VkDescriptorSetLayout layout, const std::vector<VkBuffer>& buffers) {
  auto key = std::make_pair(layout, buffers);
  if (auto it = sets_.find(key); it != sets_.end()) return it->second;
  if (buffers.size() > kBuffersPerSet) throw VulkanError("a dispatch binds more than 8 buffers");
  const VkDescriptorSet set = allocate(layout);
  write_descriptor_set(context_.device(), set, buffers);
  sets_.emplace(std::move(key), set);
  return set;
}

void DescriptorCache::forget(VkBuffer buffer) {
  // The sets stay allocated in their pool (freed with it); only the lookup goes.
  ++generation_;
  for (auto it = sets_.begin(); it != sets_.end();) {
    bool binds = false;
    for (VkBuffer b : it->first.second) binds = binds || b == buffer;
    it = binds ? sets_.erase(it) : std::next(it);
  }
}

}  // namespace fafo::vulkan
