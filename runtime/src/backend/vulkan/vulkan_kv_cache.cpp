#include "backend/vulkan/vulkan_kv_cache.h"

#include <algorithm>
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
  shape.validate();
  // Attention reads a plain fp16 cache as kv_dim halves per entry, with no padding.
  if (f16() && !shape.latent() && shape.kv_dim % 2 != 0)
    throw std::invalid_argument("an f16 KV cache needs an even KV width; this model's is " + std::to_string(shape.kv_dim));
  // A block cache's entries are whole pairs of blocks, so each store writes whole words.
  if (blocks() != Kernels::KvBlocks::None && shape.kv_dim % 64 != 0)
    throw std::invalid_argument(std::string("the vulkan backend's ") + kv_cache_type_name(shape.type) +
                                " KV cache needs a KV width that is a multiple of 64; this model's is " +
                                std::to_string(shape.kv_dim) + ": use --cache-type f32 or f16, or --backend cpu");
  // Attention indexes a layer's values with 32-bit integers (a block cache's 4 GiB buffer
  // could hold more).
  if (blocks() != Kernels::KvBlocks::None && uint64_t{static_cast<uint32_t>(shape.capacity)} * static_cast<uint32_t>(shape.kv_dim) >= (uint64_t{1} << 32))
    throw std::invalid_argument("the vulkan backend's " + std::string(kv_cache_type_name(shape.type)) + " KV cache holds at most " +
                                std::to_string((uint64_t{1} << 32) / static_cast<uint64_t>(shape.kv_dim) - 1) +
                                " tokens of this model; use a smaller --ctx-size");
  const uint64_t capacity = static_cast<uint64_t>(shape.capacity);
  const uint64_t recovered = shape.latent() ? capacity * static_cast<uint64_t>(shape.kv_dim) * sizeof(float) : 0;
  uint64_t largest = recovered, total = 2 * recovered;
  for (int32_t l = 0; l < shape.n_layer; ++l) {  // a ring layer holds its ring's entries
    const uint64_t entries = static_cast<uint64_t>(shape.entries(l));
    const uint64_t k_bytes = entries * key_words(l) * sizeof(uint32_t), v_bytes = entries * value_words(l) * sizeof(uint32_t);
    largest = std::max({largest, k_bytes, v_bytes});
    total += k_bytes + v_bytes;
  }
  if (largest > s_.allocator.max_range())
    throw std::runtime_error("one layer's KV cache for a context of " + std::to_string(shape.capacity) + " tokens needs " +
                             std::to_string(largest) + " bytes, more than the device's maxStorageBufferRange (" +
                             std::to_string(s_.allocator.max_range()) + " bytes); use a smaller --ctx-size");
  if (total > s_.allocator.free_bytes())
    throw std::runtime_error("the KV cache for a context of " + std::to_string(shape.capacity) + " tokens needs " +
                             gib(total) + " but only " + gib(s_.allocator.free_bytes()) + " of " +
                             gib(s_.allocator.heap_bytes()) +
                             " device memory is left after the weights; use a smaller --ctx-size");
  for (int32_t l = 0; l < shape.n_layer; ++l) {
    const uint64_t entries = static_cast<uint64_t>(shape.entries(l));
    keys_.push_back(s_.allocator.device(entries * key_words(l) * sizeof(uint32_t), "the KV cache"));
    values_.push_back(s_.allocator.device(entries * value_words(l) * sizeof(uint32_t), "the KV cache"));
  }
  if (shape.latent()) {
    recovered_keys_ = s_.allocator.device(recovered, "the KV cache (recovered MLA keys)");
    recovered_values_ = s_.allocator.device(recovered, "the KV cache (recovered MLA values)");
  }
}

VulkanKvCache::~VulkanKvCache() {
  for (Buffer& b : keys_) s_.allocator.release(b, s_.descriptors);
  for (Buffer& b : values_) s_.allocator.release(b, s_.descriptors);
  s_.allocator.release(recovered_keys_, s_.descriptors);
  s_.allocator.release(recovered_values_, s_.descriptors);
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

const Buffer& VulkanKvCache::recovered_keys() const {
  if (!shape().latent()) throw std::logic_error("latent_attention: the KV cache is not latent");
  return recovered_keys_;
}
const Buffer& VulkanKvCache::recovered_values() const {
  if (!shape().latent()) throw std::logic_error("latent_attention: the KV cache is not latent");
  return recovered_values_;
}

void VulkanKvCache::store(int32_t layer, const Activation& k, const Activation& v) {
  check_layer(layer, "store");
  const int32_t k_width = shape().key_dim(layer), v_width = shape().value_dim(layer);
  if (k.cols != k_width || v.cols != v_width)
    throw std::invalid_argument("store: rows are not as wide as the cache's layer " + std::to_string(layer));
  const StepSegment seg = s_.step.step_batch().segment(part_);  // this cache's rows of the step
  const size_t l = static_cast<size_t>(layer);
  // A kernel rather than copies: it reads n_past and the part's first row from the
  // part's header, so the step replays at the next n_past.
  s_.kernels.kv_store(s_.step.recording(), s_.step.buffer_of(k), s_.step.buffer_of(v), keys_[l], values_[l],
                      s_.step.step_info(part_), static_cast<uint32_t>(seg.size), static_cast<uint32_t>(k_width),
                      static_cast<uint32_t>(v_width), static_cast<uint32_t>(seg.n_past), f16(),
                      static_cast<uint32_t>(seg.first), blocks(), static_cast<uint32_t>(shape().ring(layer)));
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
  const StepSegment seg = s_.step.step_batch().segment(part_);  // captured_rows() count from its first row
  std::vector<VkBufferCopy> regions;
  for (int32_t r : captured_rows())
    if (r >= 0 && r < seg.size)
      regions.push_back(VkBufferCopy{static_cast<VkDeviceSize>(seg.first + r) * stride_bytes, regions.size() * row_bytes,
                                     row_bytes});
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

namespace {

// `count` entries of `width` floats as an fp16 cache holds them: each entry's halves,
// two per word, low half first, padded to `words` words.
std::vector<uint32_t> packed_halves(const float* src, int32_t count, int32_t width, uint32_t words) {
  std::vector<uint32_t> out(static_cast<size_t>(count) * words, 0);
  for (size_t e = 0; e < static_cast<size_t>(count); ++e)
    for (size_t i = 0; i < static_cast<size_t>(width); ++i)
      out[e * words + i / 2] |= static_cast<uint32_t>(fp32_to_fp16(src[e * static_cast<size_t>(width) + i])) << ((i % 2) * 16);
  return out;
}

// `count` entries of `width` values as a block cache holds them: each entry's blocks
// (fafo::quantize_row), one after another, in `words` words.
std::vector<uint32_t> packed_blocks(KvCacheType type, const float* src, int32_t count, int32_t width, uint32_t words) {
  std::vector<uint32_t> out(static_cast<size_t>(count) * words, 0);
  const TensorType blocks = type == KvCacheType::Q8_0 ? TensorType::Q8_0 : TensorType::Q4_0;
  for (size_t e = 0; e < static_cast<size_t>(count); ++e)
    quantize_row(blocks, src + e * static_cast<size_t>(width), reinterpret_cast<uint8_t*>(out.data() + e * words), width);
  return out;
}

}  // namespace

void VulkanKvCache::write(int32_t layer, int32_t first, int32_t count, const float* k, const float* v) {
  if (layer < 0 || layer >= shape().n_layer || first < 0 || count < 0 || first + count > capacity())
    throw std::out_of_range("write_kv: outside the cache");
  if (count == 0) return;
  note_written(first + count);
  if (shape().ring(layer) > 0) {  // entry by entry, each at its ring slot (later ones over earlier)
    const size_t kw = static_cast<size_t>(shape().key_dim(layer)), vw = static_cast<size_t>(shape().value_dim(layer));
    for (int32_t i = std::max(0, count - shape().ring(layer)); i < count; ++i)
      write_entries(layer, shape().ring_slot(layer, first + i), 1, k + static_cast<size_t>(i) * kw,
                    v + static_cast<size_t>(i) * vw);
    return;
  }
  write_entries(layer, first, count, k, v);
}

void VulkanKvCache::write_entries(int32_t layer, int32_t first, int32_t count, const float* k, const float* v) {
  const size_t l = static_cast<size_t>(layer), n = static_cast<size_t>(count), at = static_cast<size_t>(first);
  const size_t k_words = key_words(layer), v_words = value_words(layer);
  if (!f16() && blocks() == Kernels::KvBlocks::None) {  // an entry is its floats
    s_.transfer.upload(keys_[l], k, n * k_words * sizeof(float), at * k_words * sizeof(float));
    s_.transfer.upload(values_[l], v, n * v_words * sizeof(float), at * v_words * sizeof(float));
    return;
  }
  const bool in_blocks = blocks() != Kernels::KvBlocks::None;
  const std::vector<uint32_t> keys = in_blocks ? packed_blocks(shape().type, k, count, shape().key_dim(layer), key_words(layer))
                                               : packed_halves(k, count, shape().key_dim(layer), key_words(layer));
  const std::vector<uint32_t> values = in_blocks
                                           ? packed_blocks(shape().type, v, count, shape().value_dim(layer), value_words(layer))
                                           : packed_halves(v, count, shape().value_dim(layer), value_words(layer));
  s_.transfer.upload(keys_[l], keys.data(), keys.size() * sizeof(uint32_t), at * k_words * sizeof(uint32_t));
  s_.transfer.upload(values_[l], values.data(), values.size() * sizeof(uint32_t), at * v_words * sizeof(uint32_t));
}

std::vector<float> VulkanKvCache::read_keys(int32_t layer, const std::vector<int32_t>& slots) {
  check_layer(layer, "read_keys");
  const size_t width = static_cast<size_t>(shape().key_dim(layer)), words = key_words(layer);
  const VkDeviceSize entry_bytes = static_cast<VkDeviceSize>(words) * sizeof(uint32_t);
  std::vector<VkBufferCopy> regions;
  for (int32_t s : slots) {
    if (s < 0 || s >= capacity()) throw std::out_of_range("read_keys: slot outside the cache");
    const VkDeviceSize at = static_cast<VkDeviceSize>(shape().ring_slot(layer, s));
    regions.push_back(VkBufferCopy{at * entry_bytes, regions.size() * entry_bytes, entry_bytes});
  }
  std::vector<float> out(slots.size() * width);
  if (regions.empty()) return out;
  if (!f16() && blocks() == Kernels::KvBlocks::None) {
    s_.transfer.download_regions(keys_[static_cast<size_t>(layer)], regions, out.data());
    return out;
  }
  std::vector<uint32_t> entries(slots.size() * words);
  s_.transfer.download_regions(keys_[static_cast<size_t>(layer)], regions, entries.data());
  if (blocks() != Kernels::KvBlocks::None) {
    const TensorType type = blocks() == Kernels::KvBlocks::Q8_0 ? TensorType::Q8_0 : TensorType::Q4_0;
    for (size_t e = 0; e < slots.size(); ++e)
      dequantize_row(type, reinterpret_cast<const uint8_t*>(entries.data() + e * words), &out[e * width],
                     static_cast<int64_t>(width));
    return out;
  }
  for (size_t e = 0; e < slots.size(); ++e)
    for (size_t i = 0; i < width; ++i)
      out[e * width + i] = fp16_to_fp32(static_cast<uint16_t>(entries[e * words + i / 2] >> ((i % 2) * 16)));
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
  for (int32_t l = 0; l < shape().n_layer; ++l) {
    // A ring holds entries by cache index: the region's exchanges leave it alone, a move
    // goes from ring slot to ring slot.
    const uint32_t ring = static_cast<uint32_t>(shape().ring(l));
    if (ring > 0 && swap) continue;
    const size_t i = static_cast<size_t>(l);
    s_.kernels.kv_permute(seq, keys_[i], pairs_buffer, static_cast<uint32_t>(pairs.size()), key_words(l), swap, ring);
    s_.kernels.kv_permute(seq, values_[i], pairs_buffer, static_cast<uint32_t>(pairs.size()), value_words(l), swap, ring);
  }
  seq.submit_and_wait();
}

}  // namespace fafo::vulkan
