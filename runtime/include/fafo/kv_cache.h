// The KV cache a backend provides beside its compute ops (fafo/backend.h).
//
// It holds, per layer, `capacity` entries of kv_dim keys and values in the backend's
// memory (a sliding-window layer's ring fewer: KvCacheShape::ring), and everything about
// where the committed entries are:
//   - storage: a step's keys and values stored at slots n_past.. (a ring: their ring
//     slots), entries written,
//     exchanged (region <-> rest) and moved (accepted rows into place), keys read back;
//   - the layout (fafo/kv_layout.h): which physical slots form the compressed region
//     that COMPRESSED rows read, and the logical order FULL rows visit;
//   - query capture: the rows of a step whose queries a compression policy asked for
//     (KvPolicy::wanted_query_rows), kept per layer until the next capture.
// Compute ops never see a policy: attention asks the cache for its region count, the
// dense layers and the logical order. Policies see the cache through KvInspector
// (fafo/kv_policy.h), which the model builds on it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "fafo/kv_layout.h"

namespace fafo {

struct Activation;
class Backend;

// What the KV cache stores. F16 halves its memory and the bytes attention reads; every
// backend rounds keys and values to fp16 (nearest even) as they are stored, so all
// backends compute with the same cached values. Q8_0 and Q4_0 store each entry's keys
// and values as GGUF's Q8_0 / Q4_0 blocks of 32 values (an fp16 scale and 32 8-bit or
// 4-bit integers: 34 or 18 bytes for 128 of f32), quantized as llama.cpp quantizes
// those weight formats; attention computes with the blocks' exact dequantized values,
// and exchanges and moves copy whole blocks, so nothing is quantized twice. They need
// key and value widths of whole blocks, and are not offered for a latent (MLA) cache.
// Backends with quantized caches: reference and cpu; Vulkan and CUDA refuse them when
// the cache is made, naming the types they hold.
enum class KvCacheType { F32, F16, Q8_0, Q4_0 };
const char* kv_cache_type_name(KvCacheType t);
// "f32" / "f16" / "q8_0" / "q4_0"; throws std::invalid_argument naming the accepted words.
KvCacheType parse_kv_cache_type(const std::string& name);
bool kv_cache_type_quantized(KvCacheType t);
// Bytes `width` values of an entry take in a cache of type `t` (whole blocks for the
// quantized types).
uint64_t kv_row_bytes(KvCacheType t, int32_t width);

struct KvCacheShape {
  KvCacheShape() = default;
  KvCacheShape(int32_t layers, int32_t entries, int32_t width, KvCacheType cache_type = KvCacheType::F32)
      : n_layer(layers), capacity(entries), kv_dim(width), type(cache_type) {}

  int32_t n_layer = 0;
  int32_t capacity = 0;  // entries per layer (the context length; a ring layer holds ring(l))
  int32_t kv_dim = 0;    // n_head_kv * head_dim
  KvCacheType type = KvCacheType::F32;
  // A latent cache (multi-head latent attention, MLA models): each layer's entries are
  // latent keys of key_dims[layer] and latent values of value_dims[layer] floats
  // instead of kv_dim each. Empty: every layer stores kv_dim keys and values.
  std::vector<int32_t> key_dims, value_dims;

  // Sliding-window layers held as rings (llama.cpp's SWA cache): windows[l] > 0 is layer
  // l's attention window (AttentionShape::window; empty: no window layers), and with
  // ring_step > 0 such a layer keeps only ring(l) = windows[l] + ring_step - 1 entries
  // where that is below capacity. There the entry of cache index i (a committed entry's
  // logical index; token j of a step, n_past + j) lives at slot i mod ring(l), whatever
  // the layout's order: the region's exchanges leave a ring alone, and attention finds a
  // committed entry by its logical index. A step of at most ring_step tokens whose rows
  // sit at n_past or later then finds every key inside its rows' windows
  // (KvCache::check_rings says when a truncated context no longer does).
  std::vector<int32_t> windows;
  int32_t ring_step = 0;

  bool latent() const { return !key_dims.empty(); }
  // Entries of layer `layer`'s ring, or 0 where it holds capacity entries.
  int32_t ring(int32_t layer) const {
    if (ring_step <= 0 || static_cast<size_t>(layer) >= windows.size() || windows[static_cast<size_t>(layer)] <= 0) return 0;
    const int64_t r = int64_t{windows[static_cast<size_t>(layer)]} + ring_step - 1;
    return r < capacity ? static_cast<int32_t>(r) : 0;
  }
  bool has_rings() const {
    for (int32_t l = 0; l < n_layer; ++l)
      if (ring(l) > 0) return true;
    return false;
  }
  // Slots layer `layer` holds: its ring, or capacity.
  int32_t entries(int32_t layer) const {
    const int32_t r = ring(layer);
    return r > 0 ? r : capacity;
  }
  // Where the entry of cache index `index` lives in a ring layer (index mod ring); in a
  // layer of capacity entries, `index` itself.
  int32_t ring_slot(int32_t layer, int32_t index) const {
    const int32_t r = ring(layer);
    return r > 0 ? index % r : index;
  }
  int32_t key_dim(int32_t layer) const { return latent() ? key_dims[static_cast<size_t>(layer)] : kv_dim; }
  int32_t value_dim(int32_t layer) const { return latent() ? value_dims[static_cast<size_t>(layer)] : kv_dim; }
  // Floats one entry takes over all layers (keys and values).
  int64_t floats_per_entry() const;
  // Bytes one entry takes as `type` stores it over the layers whose memory grows with
  // the context (every layer but the rings).
  uint64_t bytes_per_entry() const;
  // Bytes the rings take (each ring's entries over its layer), whatever the context.
  uint64_t ring_bytes() const;
  // Bytes the whole cache takes: capacity x bytes_per_entry() + ring_bytes().
  uint64_t bytes() const { return static_cast<uint64_t>(capacity) * bytes_per_entry() + ring_bytes(); }
  // Bytes one entry of layer `layer` takes (keys and values).
  uint64_t layer_entry_bytes(int32_t layer) const;
  // Throws std::invalid_argument unless the per-layer widths are absent or one positive
  // width per layer for both keys and values, and, for a quantized type, the cache is
  // not latent and kv_dim is a whole number of 32-value blocks; windows must be absent or
  // one per layer, and a latent cache has no rings.
  void validate() const;
};

using SlotPairs = std::vector<std::pair<int32_t, int32_t>>;

class KvCache {
 public:
  virtual ~KvCache() {
    if (on_destroy_) on_destroy_();
  }
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvCacheShape& shape() const { return shape_; }
  int32_t capacity() const { return shape_.capacity; }

  // The backend that made the cache (Backend::create_kv_cache): only its steps compute
  // with it, and the cache must be destroyed before it. `on_destroy` runs when the
  // cache is destroyed (the backend's memory accounting). For backends.
  const Backend* owner() const { return owner_; }
  void set_owner(const Backend* owner, std::function<void()> on_destroy) {
    owner_ = owner;
    on_destroy_ = std::move(on_destroy);
  }

  // --- storage (implemented by each backend) ----------------------------------------
  // In a step over this cache (between Backend::begin_step and finish_step): writes the
  // k and v rows of its part of the step (StepBatch::segment: all of a step over one
  // cache; key_dim(layer) and value_dim(layer) wide) into layer `layer` at slots
  // n_past + i, i counted from the part's first row (a ring layer: at ring_slot(n_past + i)).
  virtual void store(int32_t layer, const Activation& k, const Activation& v) = 0;
  // In a step: keeps the rows captured_rows() of q (after RoPE; counted from its part's
  // first row) for layer `layer`; captured_queries(layer) returns them after the step.
  // Rows outside the part are skipped.
  virtual void capture_queries(int32_t layer, const Activation& q) = 0;
  // Outside a step: writes `count` entries of one layer at physical slots first..
  // (count x key_dim(layer) and count x value_dim(layer) floats; a ring layer: cache
  // indices first.., each at its ring slot, later ones over earlier); benchmarks and
  // tests set up long contexts with it (each backend's write calls note_written).
  virtual void write(int32_t layer, int32_t first, int32_t count, const float* keys, const float* values) = 0;
  // Keys of the listed physical slots of one layer (a ring layer: cache indices, each
  // read at its ring slot), as floats (slots.size() x key_dim(layer): latent keys in a
  // latent cache).
  virtual std::vector<float> read_keys(int32_t layer, const std::vector<int32_t>& slots) = 0;
  // The queries captured in the last step for `layer` (captured rows x q width).
  virtual std::vector<float> captured_queries(int32_t layer) = 0;
  // Exchanges the entries of two physical slots in every layer but the rings (which
  // hold entries by logical index), pair by pair.
  virtual void swap_slots(const SlotPairs& pairs) = 0;
  // Copies entries src -> dst in every layer, applied in order: slots past the committed
  // entries (a step's rows into place), so their cache indices, at their ring slots in a
  // ring layer.
  virtual void move_slots(const SlotPairs& moves) = 0;

  // --- rings (KvCacheShape::ring): what they still hold ---------------------------------
  // One past the highest cache index stored on the rings so far (0 after truncate(0)):
  // a ring holds the entries of indices [rings_end() - ring(l), rings_end()).
  int32_t rings_end() const { return rings_end_; }
  // Throws std::length_error unless a step over this cache of `size` tokens at `n_past`,
  // whose rows sit at positions `min_position` or later, finds every key inside its
  // rows' windows on the rings (after storing its own). Backend::begin_step calls it,
  // then note_step.
  void check_rings(int32_t n_past, int32_t size, int32_t min_position) const;
  // Records that a step stored cache indices [n_past, n_past + size).
  void note_step(int32_t n_past, int32_t size) { rings_end_ = std::max(rings_end_, n_past + size); }
  // Records entries written with write() up to cache index `end`.
  void note_written(int32_t end) { rings_end_ = std::max(rings_end_, end); }
  // The longest context of at most n entries a step can continue from: n, or 0 where
  // the rings were overwritten past what a step after entry n reads (then the whole
  // context must be fed again). n with no rings.
  int32_t reusable(int32_t n) const;

  // --- layout: where the committed entries are --------------------------------------
  const KvLayout& layout() const { return layout_; }
  // Region slots in use ([0, region_count) is what COMPRESSED rows read).
  int32_t region_count() const { return layout_.region_count(); }
  // Physical slots in logical order for FULL rows, or nullptr while that is 0..n-1.
  const std::vector<int32_t>* full_order() const { return layout_.is_identity() ? nullptr : &layout_.full_order(); }
  // Layers whose COMPRESSED rows read every entry like FULL rows.
  int32_t dense_layers() const { return dense_layers_; }
  // Restores logical order for the first `committed` entries and starts a layout with
  // a region of `region_size` entries (0: none) holding them.
  void reset_layout(int32_t region_size, int32_t dense_layers, int32_t committed);
  // Appends n committed entries at the next physical slots.
  void append(int32_t n) { layout_.append(n); }
  // Makes the region hold the logical entries `chosen`, exchanging slots as needed.
  void select(const std::vector<int32_t>& chosen) { exchange(layout_.select(chosen)); }
  // Forgets the entries from n on; the region keeps what it held of the first n
  // (KvLayout::truncate). Throws std::invalid_argument where reusable(n) < n.
  void truncate(int32_t n);
  // Entries exchanged between the region and the rest so far.
  int64_t exchanges() const { return exchanges_; }

  // --- query capture -----------------------------------------------------------------
  // Batch rows of the coming steps whose queries capture_queries keeps (empty: none).
  void set_captured_rows(std::vector<int32_t> rows) { captured_rows_ = std::move(rows); }
  const std::vector<int32_t>& captured_rows() const { return captured_rows_; }

 protected:
  explicit KvCache(const KvCacheShape& shape) : shape_(shape) {}

 private:
  void exchange(const SlotPairs& pairs) {
    if (pairs.empty()) return;
    swap_slots(pairs);
    exchanges_ += static_cast<int64_t>(pairs.size());
  }

  KvCacheShape shape_;
  const Backend* owner_ = nullptr;
  std::function<void()> on_destroy_;
  KvLayout layout_;
  int32_t dense_layers_ = 0;
  int64_t exchanges_ = 0;
  int32_t rings_end_ = 0;
  std::vector<int32_t> captured_rows_;
};

}  // namespace fafo
