// The CUDA backend's KV cache, written once over a Device as its backend is
// (ops_backend.h): per layer, keys and values of every slot in device memory in the
// cache's KvCacheType (kv_blocks.h: fp32, fp16 words, or Q8_0 / Q4_0 blocks), stored
// from a step's activations by the backend's kernels (a block format quantized there),
// swapped and moved slot by slot as bytes (nothing re-quantized), and the queries of
// the rows a KV policy asks for; with the device memory and host staging both use.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fafo/backend.h"
#include "fafo/kv_cache.h"
#include "fafo/step_batch.h"
#include "ops.h"

namespace fafo::cuda {

// Device memory owned by one object.
template <class Device>
class DeviceMemory {
 public:
  DeviceMemory() = default;
  // Counted in the device's MemoryBudget (memory_budget.h) before it is allocated.
  DeviceMemory(Device& device, size_t bytes) : device_(&device), bytes_(bytes) {
    device.budget().take(bytes);
    try {
      data_ = device.alloc(bytes);
    } catch (...) {
      device.budget().give(bytes);
      throw;
    }
  }
  DeviceMemory(DeviceMemory&& o) noexcept { *this = std::move(o); }
  DeviceMemory& operator=(DeviceMemory&& o) noexcept {
    std::swap(device_, o.device_);
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceMemory() {
    if (data_) device_->release(data_, bytes_);  // gives the bytes back to the budget once freed
  }
  void* get() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  Device* device_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A buffer that grows to what a step needs and uploads host data into it.
template <class Device>
class Staging {
 public:
  template <typename T>
  const T* put(Device& device, const std::vector<T>& v) {
    const size_t bytes = std::max<size_t>(v.size() * sizeof(T), sizeof(T));
    if (memory_.bytes() < bytes) memory_ = DeviceMemory<Device>(device, bytes);
    if (!v.empty()) device.upload(memory_.get(), v.data(), v.size() * sizeof(T));
    return memory_.template as<T>();
  }
  template <typename T>
  T* reserve(Device& device, size_t n) {
    const size_t bytes = std::max<size_t>(n * sizeof(T), sizeof(T));
    if (memory_.bytes() < bytes) memory_ = DeviceMemory<Device>(device, bytes);
    return memory_.template as<T>();
  }

 private:
  DeviceMemory<Device> memory_;
};

// What the KV cache needs from its backend during a step.
class StepAccess {
 public:
  virtual ~StepAccess() = default;
  virtual const StepBatch& step_batch() const = 0;
  virtual float* data_of(const Activation& a) const = 0;
  // Runs what a capture still open has recorded (FAFO_CUDA_GRAPHS): before a download or
  // a wait, which a captured step cannot hold.
  virtual void run_open_capture() = 0;
};

template <class Device>
class OpsKvCache final : public KvCache {
 public:
  OpsKvCache(const KvCacheShape& shape, Device& device, StepAccess& step)
      : KvCache(shape), device_(device), step_(step), format_(format_of(shape.type)) {
    if (shape.n_layer < 1 || shape.capacity < 1 || shape.kv_dim < 1)
      throw std::invalid_argument("a KV cache needs at least one layer, one entry and one value per entry");
    shape.validate();  // a block format's entries are whole blocks
    for (int32_t l = 0; l < shape.n_layer; ++l) {  // a ring layer: its ring's entries
      const size_t bytes = static_cast<size_t>(shape.entries(l)) * entry_bytes();
      keys_.emplace_back(device, bytes);
      values_.emplace_back(device, bytes);
    }
    captured_.resize(static_cast<size_t>(shape.n_layer));
  }

  // The part of the step begun last this cache is for (StepBatch::segment).
  void set_step_part(int32_t part) { part_ = part; }

  void store(int32_t layer, const Activation& k, const Activation& v) override {
    check_layer(layer, "store");
    if (k.cols != shape().kv_dim || v.cols != shape().kv_dim) throw std::invalid_argument("store: rows are not kv_dim wide");
    store_rows(layer, step_.data_of(k), static_cast<uint32_t>(k.cols), 0, step_.data_of(v), static_cast<uint32_t>(v.cols), 0);
  }
  // The step's keys and values from columns of wider rows (the fused qkv).
  void store_rows(int32_t layer, const float* k, uint32_t k_stride, uint32_t k_offset, const float* v, uint32_t v_stride,
                  uint32_t v_offset) {
    const StepSegment part = step_.step_batch().segment(part_);
    const uint32_t kv_dim = static_cast<uint32_t>(shape().kv_dim);
    const uint32_t first = static_cast<uint32_t>(part.n_past), rows = static_cast<uint32_t>(part.size);
    const uint64_t row = static_cast<uint64_t>(part.first);  // the part's rows start here
    const uint32_t ring = static_cast<uint32_t>(shape().ring(layer));
    const KvStoreOp store_k{k + row * k_stride, keys(layer), kv_dim, k_stride, k_offset, first, format_, ring};
    const KvStoreOp store_v{v + row * v_stride, values(layer), kv_dim, v_stride, v_offset, first, format_, ring};
    device_.launch(store_k, store_k.size(rows), "kv_store");
    device_.launch(store_v, store_v.size(rows), "kv_store");
  }

  void capture_queries(int32_t layer, const Activation& q) override {
    capture_columns(layer, step_.data_of(q), static_cast<uint32_t>(q.cols), static_cast<uint32_t>(q.cols));
  }
  // The same from the first `cols` columns of rows `stride` floats apart (the fused qkv).
  void capture_columns(int32_t layer, const float* src, uint32_t cols, uint32_t stride) {
    check_layer(layer, "capture_queries");
    std::vector<int32_t> rows;
    const StepSegment part = step_.step_batch().segment(part_);  // captured rows count from its first row
    for (int32_t r : captured_rows())
      if (r >= 0 && r < part.size) rows.push_back(part.first + r);
    Captured& c = captured_[static_cast<size_t>(layer)];
    c.rows = static_cast<uint32_t>(rows.size());
    c.cols = cols;
    if (rows.empty()) return;
    const size_t bytes = size_t{c.rows} * c.cols * sizeof(float);
    if (c.memory.bytes() < bytes) c.memory = DeviceMemory<Device>(device_, bytes);
    float* dst = c.memory.template as<float>();
    const int32_t* index = c.index.put(device_, rows);
    device_.launch(GatherOp{src, dst, index, c.cols, stride, c.cols}, uint64_t{c.rows} * c.cols, "capture");
  }

  void write(int32_t layer, int32_t first, int32_t count, const float* k, const float* v) override {
    if (layer < 0 || layer >= shape().n_layer || first < 0 || count < 0 || first + count > capacity())
      throw std::out_of_range("write_kv: outside the cache");
    const size_t kv_dim = static_cast<size_t>(shape().kv_dim);
    if (shape().ring(layer) > 0) {  // entry by entry, each at its ring slot
      for (int32_t i = 0; i < count; ++i) {
        const size_t at = static_cast<size_t>(shape().ring_slot(layer, first + i)) * entry_bytes();
        upload_values(static_cast<uint8_t*>(keys(layer)) + at, k + static_cast<size_t>(i) * kv_dim, kv_dim);
        upload_values(static_cast<uint8_t*>(values(layer)) + at, v + static_cast<size_t>(i) * kv_dim, kv_dim);
      }
    } else {
      const size_t n = static_cast<size_t>(count) * kv_dim;
      const size_t at = static_cast<size_t>(first) * entry_bytes();
      upload_values(static_cast<uint8_t*>(keys(layer)) + at, k, n);
      upload_values(static_cast<uint8_t*>(values(layer)) + at, v, n);
    }
    note_written(first + count);
  }

  std::vector<float> read_keys(int32_t layer, const std::vector<int32_t>& slots) override {
    step_.run_open_capture();
    check_layer(layer, "read_keys");
    const size_t kv_dim = static_cast<size_t>(shape().kv_dim);
    std::vector<float> out(slots.size() * kv_dim);
    std::vector<uint8_t> entry(entry_bytes());
    for (size_t s = 0; s < slots.size(); ++s) {
      if (slots[s] < 0 || slots[s] >= capacity()) throw std::out_of_range("read_keys: slot outside the cache");
      const uint8_t* src =
          static_cast<const uint8_t*>(keys(layer)) + static_cast<size_t>(shape().ring_slot(layer, slots[s])) * entry_bytes();
      if (format_ == KvFormat::F32) {
        device_.download(&out[s * kv_dim], src, kv_dim * sizeof(float));
      } else {
        device_.download(entry.data(), src, entry.size());
        for (size_t c = 0; c < kv_dim; ++c) out[s * kv_dim + c] = kv_value(entry.data(), c, format_);
      }
    }
    return out;
  }

  std::vector<float> captured_queries(int32_t layer) override {
    step_.run_open_capture();
    if (layer < 0 || layer >= shape().n_layer) return {};
    const Captured& c = captured_[static_cast<size_t>(layer)];
    std::vector<float> out(size_t{c.rows} * c.cols);
    if (!out.empty()) device_.download(out.data(), c.memory.get(), out.size() * sizeof(float));
    return out;
  }

  void swap_slots(const SlotPairs& pairs) override {
    step_.run_open_capture();
    slots(pairs, true, "swap_kv");
  }
  void move_slots(const SlotPairs& moves) override {
    step_.run_open_capture();
    slots(moves, false, "move_kv");
  }

  void* keys(int32_t layer) const { return keys_[static_cast<size_t>(layer)].get(); }
  void* values(int32_t layer) const { return values_[static_cast<size_t>(layer)].get(); }
  KvFormat format() const { return format_; }

 private:
  struct Captured {
    DeviceMemory<Device> memory;
    Staging<Device> index;
    uint32_t rows = 0, cols = 0;
  };
  static KvFormat format_of(KvCacheType t) {
    switch (t) {
      case KvCacheType::F16: return KvFormat::F16;
      case KvCacheType::Q8_0: return KvFormat::Q8_0;
      case KvCacheType::Q4_0: return KvFormat::Q4_0;
      default: return KvFormat::F32;
    }
  }
  // The bytes of one slot's keys (or values).
  size_t entry_bytes() const { return static_cast<size_t>(kv_bytes(format_, static_cast<uint64_t>(shape().kv_dim))); }
  void check_layer(int32_t layer, const char* what) const {
    if (layer < 0 || layer >= shape().n_layer) throw std::out_of_range(std::string(what) + ": layer outside the KV cache");
  }
  // n values (whole entries), in the cache's format: quantized here as the device would.
  void upload_values(void* dst, const float* src, size_t n) {
    if (format_ == KvFormat::F32) {
      device_.upload(dst, src, n * sizeof(float));
      return;
    }
    std::vector<uint8_t> bytes(kv_bytes(format_, n));
    if (format_ == KvFormat::F16) {
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = float_to_half_bits(src[i]);
        std::memcpy(&bytes[2 * i], &h, sizeof h);
      }
    } else {
      for (size_t b = 0; b < n / 32; ++b) quantize_kv_block(src + 32 * b, &bytes[b * kv_block_bytes(format_)], format_);
    }
    device_.upload(dst, bytes.data(), bytes.size());
  }
  void slots(const SlotPairs& pairs, bool swap, const char* what) {
    if (pairs.empty()) return;
    std::vector<int32_t> flat;
    for (const auto& [a, b] : pairs) {
      if (a < 0 || a >= capacity() || b < 0 || b >= capacity()) throw std::out_of_range(std::string(what) + ": slot outside the cache");
      flat.push_back(a);
      flat.push_back(b);
    }
    const int32_t* p = pair_staging_.put(device_, flat);
    // An entry is whole 4-byte words in fp32, whole 2-byte ones otherwise (a block is 34 or 18 bytes).
    const uint32_t n = static_cast<uint32_t>(pairs.size());
    const uint32_t words = static_cast<uint32_t>(entry_bytes() / 4), halves = static_cast<uint32_t>(entry_bytes() / 2);
    for (int32_t l = 0; l < shape().n_layer; ++l) {
      // A ring holds its entries by cache index: the region's exchanges leave it alone, a
      // move goes from ring slot to ring slot.
      const uint32_t ring = static_cast<uint32_t>(shape().ring(l));
      if (ring > 0 && swap) continue;
      for (void* base : {keys(l), values(l)}) {
        if (format_ == KvFormat::F32)
          device_.launch(SlotOp<uint32_t>{static_cast<uint32_t*>(base), p, n, words, swap, ring}, words, what);
        else
          device_.launch(SlotOp<uint16_t>{static_cast<uint16_t*>(base), p, n, halves, swap, ring}, halves, what);
      }
    }
    device_.sync();  // outside a step: done before the call returns
  }

  Device& device_;
  StepAccess& step_;
  KvFormat format_;
  int32_t part_ = 0;
  std::vector<DeviceMemory<Device>> keys_, values_;
  std::vector<Captured> captured_;
  Staging<Device> pair_staging_;
};

}  // namespace fafo::cuda
