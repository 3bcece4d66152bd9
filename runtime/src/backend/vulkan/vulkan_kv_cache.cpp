#include "backend/vulkan/vulkan_kv_cache.h"

#include <stdexcept>
#include <string>

#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/descriptor_cache.h"
#include "backend/vulkan/kernels.h"
#include "backend/vulkan/transfer.h"
#include "fafo/tensor_type.h"

namespace fafo::vulkan {

VulkanKvCache::VulkanKvCache(const KvCacheShape& shape, const KvCacheServices& services)
    : KvCache(shape), s_(services) {
  if (shape.n_layer < 1 || shape.capacity < 1 || shape.kv_dim < 1)
    throw std::invalid_argument("a KV cache needs at least one layer, one entry and one value per entry");
  if (shape.latent())
    throw std::invalid_argument("the vulkan backend cannot run multi-head latent attention (MLA) models yet");
  if (f16() && shape.kv_dim % 2 != 0)
    throw std::invalid_argument("an f16 KV cache needs an even KV width; this model's is " + std::to_string(shape.kv_dim));
  const uint64_t bytes = static_cast<uint64_t>(shape.capacity) * static_cast<uint64_t>(shape.kv_dim) * value_bytes();
  if (bytes > s_.allocator.max_range())
    throw std::runtime_error("one layer's KV cache for a context of " + std::to_string(shape.capacity) + " tokens needs " +
                             std::to_string(bytes) + " bytes, more than the device's maxStorageBufferRange (" +
                             std::to_string(s_.allocator.max_range()) + " bytes); use a smaller --ctx-size");
  const uint64_t total = 2 * bytes * static_cast<uint64_t>(shape.n_layer);
  if (total > s_.allocator.free_bytes())
    throw std::runtime_error("the KV cache for a context of " + std::to_string(shape.capacity) + " tokens needs " +
                             gib(total) + " but only " + gib(s_.allocator.free_bytes()) + " of " +
                             gib(s_.allocator.heap_bytes()) +
                             " device memory is left after the weights; use a smaller --ctx-size");
  for (int32_t l = 0; l < shape.n_layer; ++l) {
    keys_.push_back(s_.allocator.device(bytes, "the KV cache"));
    values_.push_back(s_.allocator.device(bytes, "the KV cache"));
  }
}

VulkanKvCache::~VulkanKvCache() {
  for (Buffer& b : keys_) s_.allocator.release(b, s_.descriptors);
  for (Buffer& b : values_) s_.allocator.release(b, s_.descriptors);
  if (pairs_.get().handle() != VK_NULL_HANDLE) s_.descriptors.forget(pairs_.get().handle());
  for (const Capture& c : captures_)  // named by recorded steps' copies: no replay may use them
    if (c.buffer.handle() != VK_NULL_HANDLE) s_.descriptors.forget(c.buffer.handle());
}

void VulkanKvCache::check_layer(int32_t layer, const char* what) const {
  if (layer < 0 || layer >= shape().n_layer) throw std::out_of_range(std::string(what) + ": layer outside the KV cache");
}

const Buffer& VulkanKvCache::keys(int32_t layer) const {
  check_layer(layer, "attention");
  return keys_[static_cast<size_t>(layer)];
}
const Buffer& VulkanKvCache::values(int32_t layer) const {
  check_layer(layer, "attention");
  return values_[static_cast<size_t>(layer)];
}

void VulkanKvCache::store(int32_t layer, const Activation& k, const Activation& v) {
  check_layer(layer, "store");
  const int32_t kv_dim = shape().kv_dim;
  if (k.cols != kv_dim || v.cols != kv_dim) throw std::invalid_argument("store: rows are not kv_dim wide");
  const StepBatch& batch = s_.step.step_batch();
  const size_t l = static_cast<size_t>(layer);
  // A kernel rather than copies: it reads n_past from the step's header, so the step
  // replays at the next n_past.
  s_.kernels.kv_store(s_.step.recording(), s_.step.buffer_of(k), s_.step.buffer_of(v), keys_[l], values_[l],
                      s_.step.step_info(), static_cast<uint32_t>(batch.size()), static_cast<uint32_t>(kv_dim),
                      static_cast<uint32_t>(batch.n_past()), f16());
}

void VulkanKvCache::capture_queries(int32_t layer, const Activation& q) {
  capture_queries(layer, s_.step.buffer_of(q), static_cast<uint32_t>(q.cols), static_cast<uint32_t>(q.cols));
}

void VulkanKvCache::capture_queries(int32_t layer, const Buffer& rows, uint32_t q_cols, uint32_t stride) {
  check_layer(layer, "capture_queries");
  if (captures_.size() < static_cast<size_t>(shape().n_layer)) captures_.resize(static_cast<size_t>(shape().n_layer));
  Capture& c = captures_[static_cast<size_t>(layer)];
  const VkDeviceSize row_bytes = static_cast<VkDeviceSize>(q_cols) * sizeof(float);
  const VkDeviceSize stride_bytes = static_cast<VkDeviceSize>(stride) * sizeof(float);
  const int32_t T = s_.step.step_batch().size();
  std::vector<VkBufferCopy> regions;
  for (int32_t r : captured_rows())
    if (r >= 0 && r < T)
      regions.push_back(VkBufferCopy{static_cast<VkDeviceSize>(r) * stride_bytes, regions.size() * row_bytes, row_bytes});
  c.rows = static_cast<uint32_t>(regions.size());
  c.cols = q_cols;
  if (regions.empty()) return;
  if (c.buffer.size() < regions.size() * row_bytes) {
    if (c.buffer.handle() != VK_NULL_HANDLE) s_.descriptors.forget(c.buffer.handle());
    c.buffer = Buffer(s_.context, regions.size() * row_bytes, Memory::HostVisible);
  }
  s_.step.recording().copy(rows, c.buffer, regions);
}

std::vector<float> VulkanKvCache::captured_queries(int32_t layer) {
  if (layer < 0 || layer >= static_cast<int32_t>(captures_.size())) return {};
  const Capture& c = captures_[static_cast<size_t>(layer)];
  std::vector<float> out(static_cast<size_t>(c.rows) * static_cast<size_t>(c.cols));
  if (!out.empty()) s_.transfer.download(c.buffer, out.data(), out.size() * sizeof(float));
  return out;
}

void VulkanKvCache::write(int32_t layer, int32_t first, int32_t count, const float* k, const float* v) {
  if (layer < 0 || layer >= shape().n_layer || first < 0 || count < 0 || first + count > capacity())
    throw std::out_of_range("write_kv: outside the cache");
  const size_t values = static_cast<size_t>(count) * static_cast<size_t>(shape().kv_dim);
  const size_t n = values * value_bytes();
  const size_t at = static_cast<size_t>(first) * static_cast<size_t>(shape().kv_dim) * value_bytes();
  const size_t l = static_cast<size_t>(layer);
  if (f16()) {
    std::vector<uint16_t> halves(values);
    for (size_t i = 0; i < values; ++i) halves[i] = fp32_to_fp16(k[i]);
    s_.transfer.upload(keys_[l], halves.data(), n, at);
    for (size_t i = 0; i < values; ++i) halves[i] = fp32_to_fp16(v[i]);
    s_.transfer.upload(values_[l], halves.data(), n, at);
    return;
  }
  s_.transfer.upload(keys_[l], k, n, at);
  s_.transfer.upload(values_[l], v, n, at);
}

std::vector<float> VulkanKvCache::read_keys(int32_t layer, const std::vector<int32_t>& slots) {
  check_layer(layer, "read_keys");
  const VkDeviceSize row_bytes = static_cast<VkDeviceSize>(shape().kv_dim) * value_bytes();
  std::vector<VkBufferCopy> regions;
  for (int32_t s : slots) {
    if (s < 0 || s >= capacity()) throw std::out_of_range("read_keys: slot outside the cache");
    regions.push_back(VkBufferCopy{static_cast<VkDeviceSize>(s) * row_bytes, regions.size() * row_bytes, row_bytes});
  }
  std::vector<float> out(slots.size() * static_cast<size_t>(shape().kv_dim));
  if (regions.empty()) return out;
  if (f16()) {
    std::vector<uint16_t> halves(out.size());
    s_.transfer.download_regions(keys_[static_cast<size_t>(layer)], regions, halves.data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = fp16_to_fp32(halves[i]);
  } else {
    s_.transfer.download_regions(keys_[static_cast<size_t>(layer)], regions, out.data());
  }
  return out;
}

void VulkanKvCache::permute(const SlotPairs& pairs, bool swap, const char* what) {
  if (pairs.empty()) return;
  std::vector<int32_t> flat;
  flat.reserve(pairs.size() * 2);
  for (const auto& [a, b] : pairs) {
    if (a < 0 || b < 0 || a >= capacity() || b >= capacity()) throw std::out_of_range(std::string(what) + ": slot outside the cache");
    flat.push_back(a);
    flat.push_back(b);
  }
  const size_t bytes = flat.size() * sizeof(int32_t);
  Buffer& pairs_buffer = pairs_.ensure(s_.context, s_.descriptors, std::max<size_t>(bytes, 4096));
  pairs_buffer.upload(flat.data(), bytes);
  CommandSequence seq(s_.context, s_.descriptors);
  const uint32_t words = static_cast<uint32_t>(f16() ? shape().kv_dim / 2 : shape().kv_dim);
  for (size_t l = 0; l < keys_.size(); ++l) {
    s_.kernels.kv_permute(seq, keys_[l], pairs_buffer, static_cast<uint32_t>(pairs.size()), words, swap);
    s_.kernels.kv_permute(seq, values_[l], pairs_buffer, static_cast<uint32_t>(pairs.size()), words, swap);
  }
  seq.submit_and_wait();
}

}  // namespace fafo::vulkan
