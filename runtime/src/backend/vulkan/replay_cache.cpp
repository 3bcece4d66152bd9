#include "backend/vulkan/replay_cache.h"

#include "backend/vulkan/context.h"

namespace fafo::vulkan {

ReplayCache::ReplayCache(const Context& context, size_t capacity) : context_(context), capacity_(capacity) {}

ReplayCache::~ReplayCache() { clear(); }

void ReplayCache::free(VkCommandBuffer commands) const {
  vkFreeCommandBuffers(context_.device(), context_.command_pool(), 1, &commands);
}

void ReplayCache::clear() {
  for (const Entry& e : entries_) free(e.commands);
  entries_.clear();
}

VkCommandBuffer ReplayCache::take(const std::vector<uint64_t>& key, uint64_t generation) {
  if (generation != generation_) {
    clear();
    generation_ = generation;
    return VK_NULL_HANDLE;
  }
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->key != key) continue;
    const VkCommandBuffer commands = it->commands;
    entries_.erase(it);
    ++replays_;
    return commands;
  }
  return VK_NULL_HANDLE;
}

void ReplayCache::add(std::vector<uint64_t> key, VkCommandBuffer commands, uint64_t generation) {
  if (generation != generation_) {
    clear();
    generation_ = generation;
  }
  entries_.push_front(Entry{std::move(key), commands});
  while (entries_.size() > capacity_) {
    free(entries_.back().commands);
    entries_.pop_back();
  }
}

}  // namespace fafo::vulkan
