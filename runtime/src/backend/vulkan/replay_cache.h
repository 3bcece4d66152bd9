// Recorded command buffers of the steps already seen, for replay: a step whose
// commands (pipelines, descriptor sets, push constants, workgroup counts, copies,
// barriers; CommandSequence::key()) equal an earlier step's is submitted from that
// step's command buffer instead of being recorded again. Every AR step after the first
// is such a step: what changes with n_past is in buffers the host writes each step
// (the step header, masks, tokens, RoPE table), not in the commands.
//
// A recorded buffer names buffers and descriptor sets by handle, so it is valid only
// while they live: an entry is kept with the DescriptorCache generation it was
// recorded under, and every entry is freed, unused, at the first take() or add() after
// that generation moved on (a buffer was freed; DescriptorCache::forget).
#pragma once

#include <cstdint>
#include <list>
#include <vector>

#include <vulkan/vulkan.h>

namespace fafo::vulkan {

class Context;

class ReplayCache {
 public:
  // Keeps at most `capacity` command buffers (the least recently used goes first).
  explicit ReplayCache(const Context& context, size_t capacity = 8);
  ~ReplayCache();
  ReplayCache(const ReplayCache&) = delete;
  ReplayCache& operator=(const ReplayCache&) = delete;

  // Removes and returns the command buffer recorded for `key` under `generation`
  // (VK_NULL_HANDLE when there is none); the caller gives it back with add() once it
  // has run, or frees it. Entries of an older generation are freed first.
  VkCommandBuffer take(const std::vector<uint64_t>& key, uint64_t generation);
  // Keeps `commands` (recorded for repeated submission) for `key`; the cache owns it.
  void add(std::vector<uint64_t> key, VkCommandBuffer commands, uint64_t generation);
  // Frees every entry.
  void clear();

  size_t size() const { return entries_.size(); }
  uint64_t replays() const { return replays_; }  // take() calls that found a buffer

 private:
  struct Entry {
    std::vector<uint64_t> key;
    VkCommandBuffer commands;
  };
  void free(VkCommandBuffer commands) const;

  const Context& context_;
  size_t capacity_;
  uint64_t generation_ = 0;
  uint64_t replays_ = 0;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace fafo::vulkan
