#include "backend/host/host_kv_cache.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <unistd.h>

#include "fafo/tensor_type.h"

namespace fafo::host {

uint64_t HostKvCache::bytes_for(const KvCacheShape& shape) {
  return shape.bytes();
}

namespace {

TensorType block_type(KvCacheType t) { return t == KvCacheType::Q8_0 ? TensorType::Q8_0 : TensorType::Q4_0; }

}  // namespace

void HostKvCache::Rows::widen(int32_t slot, int32_t first, int32_t n, float* out) const {
  if (f32) {
    std::memcpy(out, f32 + static_cast<size_t>(slot) * (row_bytes / sizeof(float)) + first, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const uint8_t* row = packed + static_cast<size_t>(slot) * row_bytes;
  if (type == KvCacheType::F16) {
    // fp16_to_fp32's values without its branches, so the loop vectorizes: the half's
    // exponent and mantissa placed in a float's and scaled by 2^112 (exact for normals,
    // subnormals and zeros: a power of two), infinities and NaNs given the top exponent.
    const uint8_t* src = row + 2 * static_cast<size_t>(first);
    for (int32_t i = 0; i < n; ++i) {
      uint16_t h = 0;
      std::memcpy(&h, src + 2 * static_cast<size_t>(i), sizeof h);
      const uint32_t em = static_cast<uint32_t>(h & 0x7fffu) << 13;
      uint32_t bits = std::bit_cast<uint32_t>(std::bit_cast<float>(em) * 0x1p112f);
      bits = (h & 0x7c00u) == 0x7c00u ? (em | 0x7f800000u) : bits;
      out[i] = std::bit_cast<float>(bits | (static_cast<uint32_t>(h & 0x8000u) << 16));
    }
    return;
  }
  // The blocks that hold [first, first + n), decoded here (attention reads every key's
  // blocks, so no per-call dispatch): q * d (Q8_0) and (q - 8) * d (Q4_0), as
  // fafo::dequantize_row computes them (each product is exact, so the floats are its).
  const bool q8 = type == KvCacheType::Q8_0;
  const size_t block_bytes = q8 ? 34 : 18;
  for (int32_t b = first / 32, end = first + n; b * 32 < end; ++b) {
    const uint8_t* block = row + static_cast<size_t>(b) * block_bytes;
    uint16_t h = 0;
    std::memcpy(&h, block, sizeof h);
    const float d = fp16_to_fp32(h);
    float values[32];
    if (q8) {
      for (int j = 0; j < 32; ++j) values[j] = static_cast<float>(static_cast<int8_t>(block[2 + j])) * d;
    } else {
      for (int j = 0; j < 16; ++j) {
        values[j] = static_cast<float>((block[2 + j] & 0x0f) - 8) * d;
        values[j + 16] = static_cast<float>((block[2 + j] >> 4) - 8) * d;
      }
    }
    const int32_t lo = std::max(first, b * 32), hi = std::min(end, b * 32 + 32);
    std::memcpy(out + (lo - first), values + (lo - b * 32), static_cast<size_t>(hi - lo) * sizeof(float));
  }
}

HostKvCache::HostKvCache(const KvCacheShape& shape, const StepRows& step) : KvCache(shape), step_(step) {
  shape.validate();
  const double need = static_cast<double>(bytes_for(shape));
  const double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (have > 0 && need > 0.8 * have)
    throw std::runtime_error("the KV cache for a context of " + std::to_string(shape.capacity) + " tokens needs " +
                             std::to_string(need / (1 << 30)) + " GiB, more than this machine's memory (" +
                             std::to_string(have / (1 << 30)) + " GiB); use a smaller --ctx-size");
  for (int32_t l = 0; l < shape.n_layer; ++l) {
    const size_t entries = static_cast<size_t>(shape.entries(l));  // a ring layer: its ring's
    if (packed()) {
      packed_keys_.emplace_back(entries * kv_row_bytes(shape.type, shape.key_dim(l)), uint8_t{0});
      packed_values_.emplace_back(entries * kv_row_bytes(shape.type, shape.value_dim(l)), uint8_t{0});
    } else {
      keys_.emplace_back(entries * key_floats(l), 0.0f);
      values_.emplace_back(entries * value_floats(l), 0.0f);
    }
  }
}

void HostKvCache::check_layer(int32_t layer, const char* what) const {
  if (layer < 0 || layer >= shape().n_layer) throw std::out_of_range(std::string(what) + ": layer outside the KV cache");
}

void HostKvCache::check_slot(int32_t slot, const char* what) const {
  if (slot < 0 || slot >= capacity()) throw std::out_of_range(std::string(what) + ": slot outside the cache");
}

void HostKvCache::store_rows(bool keys, int32_t layer, size_t index, const float* src, size_t count) {
  const size_t width = keys ? key_floats(layer) : value_floats(layer);
  if (const size_t ring = static_cast<size_t>(shape().ring(layer)); ring > 0) {  // in runs up to the ring's end
    for (size_t done = 0; done < count;) {
      const size_t slot = (index + done) % ring, n = std::min(count - done, ring - slot);
      store_slots(keys, layer, slot, src + done * width, n);
      done += n;
    }
    return;
  }
  store_slots(keys, layer, index, src, count);
}

void HostKvCache::store_slots(bool keys, int32_t layer, size_t slot, const float* src, size_t count) {
  const size_t l = static_cast<size_t>(layer);
  const size_t width = keys ? key_floats(layer) : value_floats(layer);
  if (!packed()) {
    std::memcpy((keys ? keys_ : values_)[l].data() + slot * width, src, count * width * sizeof(float));
    return;
  }
  const size_t row_bytes = kv_row_bytes(shape().type, static_cast<int32_t>(width));
  uint8_t* dst = (keys ? packed_keys_ : packed_values_)[l].data() + slot * row_bytes;
  for (size_t r = 0; r < count; ++r, dst += row_bytes, src += width) {
    if (shape().type == KvCacheType::F16) {
      for (size_t i = 0; i < width; ++i) {
        const uint16_t h = fp32_to_fp16(src[i]);
        std::memcpy(dst + 2 * i, &h, sizeof h);
      }
    } else {
      quantize_row(block_type(shape().type), src, dst, static_cast<int64_t>(width));
    }
  }
}

void HostKvCache::store(int32_t layer, const Activation& k, const Activation& v) {
  check_layer(layer, "store");
  if (k.cols != shape().key_dim(layer) || v.cols != shape().value_dim(layer))
    throw std::invalid_argument("store: rows are not as wide as the cache's layer " + std::to_string(layer));
  const StepSegment seg = step_.step_batch().segment(segment_);
  const size_t rows = static_cast<size_t>(seg.size), at = static_cast<size_t>(seg.n_past), first = static_cast<size_t>(seg.first);
  store_rows(true, layer, at, step_.data_of(k) + first * key_floats(layer), rows);
  store_rows(false, layer, at, step_.data_of(v) + first * value_floats(layer), rows);
}

void HostKvCache::capture_queries(int32_t layer, const Activation& q) {
  check_layer(layer, "capture_queries");
  if (captured_.size() < static_cast<size_t>(shape().n_layer)) captured_.resize(static_cast<size_t>(shape().n_layer));
  auto& dst = captured_[static_cast<size_t>(layer)];
  dst.clear();
  const float* src = step_.data_of(q);
  const size_t cols = static_cast<size_t>(q.cols);
  const StepSegment seg = step_.step_batch().segment(segment_);  // captured_rows() count from its first row
  for (int32_t r : captured_rows())
    if (r >= 0 && r < seg.size)
      dst.insert(dst.end(), src + static_cast<size_t>(seg.first + r) * cols, src + static_cast<size_t>(seg.first + r + 1) * cols);
}

void HostKvCache::write(int32_t layer, int32_t first, int32_t count, const float* k, const float* v) {
  if (layer < 0 || layer >= shape().n_layer || first < 0 || count < 0 || first + count > capacity())
    throw std::out_of_range("write_kv: outside the cache");
  const size_t n = static_cast<size_t>(count), at = static_cast<size_t>(first);
  store_rows(true, layer, at, k, n);
  store_rows(false, layer, at, v, n);
  note_written(first + count);
}

std::vector<float> HostKvCache::read_keys(int32_t layer, const std::vector<int32_t>& slots) {
  check_layer(layer, "read_keys");
  const size_t n = key_floats(layer);
  std::vector<float> out(slots.size() * n);
  const Rows rows = keys(layer);
  for (size_t k = 0; k < slots.size(); ++k) {
    check_slot(slots[k], "read_keys");
    const int32_t at = shape().ring_slot(layer, slots[k]);
    if (rows.f32) std::memcpy(&out[k * n], rows.f32 + static_cast<size_t>(at) * n, n * sizeof(float));
    else rows.widen(at, 0, static_cast<int32_t>(n), &out[k * n]);
  }
  return out;
}

std::vector<float> HostKvCache::captured_queries(int32_t layer) {
  return layer >= 0 && layer < static_cast<int32_t>(captured_.size()) ? captured_[static_cast<size_t>(layer)] : std::vector<float>{};
}

namespace {

// Calls f(data, n, layer) for every layer's keys and values (n: the bytes a slot holds
// there), the ring layers' only with `rings`.
template <class T, class F>
void each_store(std::vector<std::vector<T>>& keys, std::vector<std::vector<T>>& values, const KvCacheShape& shape,
                bool rings, F f) {
  const KvCacheType type = std::is_same_v<T, float> ? KvCacheType::F32 : shape.type;
  for (size_t l = 0; l < keys.size(); ++l) {
    const int32_t layer = static_cast<int32_t>(l);
    if (shape.ring(layer) > 0 && !rings) continue;
    f(reinterpret_cast<uint8_t*>(keys[l].data()), kv_row_bytes(type, shape.key_dim(layer)), layer);
    f(reinterpret_cast<uint8_t*>(values[l].data()), kv_row_bytes(type, shape.value_dim(layer)), layer);
  }
}

}  // namespace

void HostKvCache::swap_slots(const SlotPairs& pairs) {
  for (const auto& [a, b] : pairs) {
    check_slot(a, "swap_kv");
    check_slot(b, "swap_kv");
    const auto swap = [a = static_cast<size_t>(a), b = static_cast<size_t>(b)](auto* data, size_t n, int32_t) {
      std::swap_ranges(data + a * n, data + (a + 1) * n, data + b * n);
    };
    each_store(keys_, values_, shape(), false, swap);  // a ring holds entries by logical index
    each_store(packed_keys_, packed_values_, shape(), false, swap);
  }
}

void HostKvCache::move_slots(const SlotPairs& moves) {
  for (const auto& [src, dst] : moves) {
    check_slot(src, "move_kv");
    check_slot(dst, "move_kv");
    const auto move = [this, from = src, to = dst](auto* data, size_t n, int32_t layer) {
      const size_t s = static_cast<size_t>(shape().ring_slot(layer, from)), d = static_cast<size_t>(shape().ring_slot(layer, to));
      std::memmove(data + d * n, data + s * n, n);
    };
    each_store(keys_, values_, shape(), true, move);
    each_store(packed_keys_, packed_values_, shape(), true, move);
  }
}

}  // namespace fafo::host
