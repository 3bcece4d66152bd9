// The host-memory backend: executes each kernel as soon as the model issues it, parallel
// over rows (matmul, through the backend's HostKernels) and attention heads. Weights are
// used in place from the memory-mapped file.
#include "backend/host/host_backend.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <cstring>
#include <limits>
#include <span>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "backend/host/host_kv_cache.h"
#include "backend/host/scalar_kernels.h"
#include "fafo/backend.h"
#include "fafo/backend_registry.h"
#include "fafo/tensor_type.h"
#include "util/thread_pool.h"

namespace fafo::host {

namespace {

struct StoredWeight {
  HostWeight file;             // in place in the mapped file (and file.groups: arranged)
  std::vector<float> dense;    // dequantized copy for small vectors (norm gains, biases)
  std::vector<uint8_t> arranged;  // the kernels' copy of the rows (HostKernels::arrange)
};

class HostBackend final : public Backend, public BackendMemory, public StepRows {
 public:
  HostBackend(int n_threads, HostBackendTraits traits, std::unique_ptr<HostKernels> kernels)
      : pool_(n_threads), traits_(std::move(traits)), kernels_(std::move(kernels)) {}

  std::string name() const override { return traits_.name; }
  std::string description() const override {
    return traits_.description + ", " + std::to_string(pool_.size()) + (pool_.size() == 1 ? " thread" : " threads");
  }
  BackendNumerics numerics() const override { return traits_.numerics; }

  Weight upload_weight(TensorType type, int64_t rows, int64_t cols, const void* data) override {
    return upload(type, rows, cols, data, true);
  }
  Weight upload_table(TensorType type, int64_t rows, int64_t cols, const void* data) override {
    return upload(type, rows, cols, data, false);
  }

  Activation alloc_activation(int64_t max_rows, int64_t cols) override {
    check_usable();
    count_memory(static_cast<uint64_t>(max_rows) * static_cast<uint64_t>(cols) * sizeof(float), "activations");
    activations_.emplace_back(static_cast<size_t>(max_rows * cols));
    activation_rows_.push_back(max_rows);
    return Activation{static_cast<int32_t>(activations_.size() - 1), max_rows, cols};
  }

  std::unique_ptr<KvCache> create_kv_cache(const KvCacheShape& shape) override {
    check_usable();
    shape.validate();
    // A latent cache also needs the keys and values latent_attention recovers (every
    // slot of one layer at a time; the values only for layers that do not absorb their
    // up-projection, counted all the same): one buffer of each for the backend, sized
    // for its largest latent cache.
    const uint64_t recovered = shape.latent() ? 2ull * sizeof(float) * static_cast<uint64_t>(shape.capacity) *
                                                    static_cast<uint64_t>(shape.kv_dim)
                                              : 0;
    const uint64_t bytes = HostKvCache::bytes_for(shape) + recovered;
    count_memory(bytes, "the KV cache");
    std::unique_ptr<HostKvCache> kv;
    try {
      kv = std::make_unique<HostKvCache>(shape, *this);
    } catch (...) {
      memory_in_use_ -= bytes;
      throw;
    }
    const KvCache* made = kv.get();
    kv->set_owner(this, [this, bytes, made] {
      memory_in_use_ -= bytes;
      for (HostKvCache*& part_kv : kvs_)
        if (part_kv == made) part_kv = nullptr;  // a step over it fails
    });
    return kv;
  }

  // Any number of sequences per step: attention visits each row's own cache.
  BackendCapabilities capabilities() const override {
    return {.max_step_sequences = StepBatch::kMaxTokens, .latent_attention = true, .executes_immediately = true,
            .window_rings = true, .batches_matmuls = kernels_->batches_matmuls()};
  }
  BackendMemory* memory() override { return this; }

  void start_step(const StepBatch& batch, std::span<KvCache* const> caches) override {
    check_usable();
    gathered_rows_.clear();
    std::vector<HostKvCache*> kvs;
    for (KvCache* cache : caches) kvs.push_back(&own_kv_cache<HostKvCache>(*this, *cache));
    check_step_fits(batch, caches, std::numeric_limits<int64_t>::max());
    for (size_t k = 0; k < kvs.size(); ++k) {
      HostKvCache& kv = *kvs[k];
      kv.set_step_segment(static_cast<int32_t>(k));
      if (kv.shape().latent()) {
        const size_t recovered = static_cast<size_t>(kv.capacity()) * static_cast<size_t>(kv.shape().kv_dim);
        if (latent_keys_.size() < recovered) {
          latent_keys_.assign(recovered, 0.0f);
          latent_values_.assign(recovered, 0.0f);
        }
      }
    }
    kvs_ = std::move(kvs);
    batch_ = &batch;
  }

  void embed(const Weight& table, Activation& out) override {
    const HostWeight& w = weights_.at(static_cast<size_t>(table.id)).file;
    const int32_t T = batch_->size();
    check_tokens_in_vocabulary(*batch_, w.rows);
    pool_.parallel_for(T, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        const int32_t tok = batch_->tokens()[static_cast<size_t>(i)];
        dequantize_row(w.type, w.data + static_cast<size_t>(tok) * w.row_bytes, row(out, i), w.cols);
      }
    });
  }

  void rms_norm(const Activation& x, const Weight& gain, float eps, Activation& out) override {
    const float* g = weights_.at(static_cast<size_t>(gain.id)).dense.data();
    for (int64_t i = 0; i < rows_of(x); ++i) scalar::rms_norm_row(row(x, i), g, eps, row(out, i), x.cols);
    set_rows(out, rows_of(x));
  }

  void head_norm(const Activation& x, int32_t n_heads, const Weight& gain, float eps, Activation& out) override {
    const float* g = weights_.at(static_cast<size_t>(gain.id)).dense.data();
    const int64_t width = x.cols / n_heads;
    for (int64_t i = 0; i < rows_of(x); ++i)
      for (int64_t h = 0; h < n_heads; ++h)
        scalar::rms_norm_row(row(x, i) + h * width, g, eps, row(out, i) + h * width, width);
    set_rows(out, rows_of(x));
  }

  void matmul(const Weight& weight, const Activation& x, Activation& out) override {
    const StoredWeight& w = weights_.at(static_cast<size_t>(weight.id));
    const int64_t T = rows_of(x);
    kernels_->matmul(w.file, row(x, 0), x.cols, T, row(out, 0), out.cols, pool_);
    set_rows(out, T);
  }

  void matmuls(const std::vector<MatmulJob>& jobs) override {
    std::vector<HostKernels::Matmul> host;
    host.reserve(jobs.size());
    for (const MatmulJob& j : jobs)
      host.push_back({&weights_.at(static_cast<size_t>(j.w->id)).file, row(*j.x, 0), j.x->cols, rows_of(*j.x),
                      row(*j.out, 0), j.out->cols});
    kernels_->matmuls(host, pool_);
    for (const MatmulJob& j : jobs) set_rows(*j.out, rows_of(*j.x));
  }

  void add_bias(const Weight& bias, Activation& x) override {
    const float* b = weights_.at(static_cast<size_t>(bias.id)).dense.data();
    for (int64_t i = 0; i < rows_of(x); ++i)
      for (int64_t c = 0; c < x.cols; ++c) row(x, i)[c] += b[c];
  }

  void rope(Activation& x, int32_t n_heads, int32_t head_dim, const RopeParams& p) override {
    for (int64_t i = 0; i < batch_rows(); ++i)
      for (int32_t h = 0; h < n_heads; ++h)
        scalar::rope_head(row(x, i) + h * head_dim, batch_->positions()[static_cast<size_t>(i)], p);
  }

  void attention(int32_t layer, const Activation& q, const AttentionShape& s, Activation& out) override {
    std::vector<SegmentKeys> segs;
    for (HostKvCache* kv : kvs_) {
      if (!kv) throw std::logic_error("attention: a KV cache of the step was destroyed");
      if (layer < 0 || layer >= kv->shape().n_layer) throw std::out_of_range("attention: layer outside the KV cache");
      if (kv->shape().latent()) throw std::invalid_argument("attention: the KV cache is latent (use latent_attention)");
      check_ring_window(kv->shape(), layer, s);
      check_attention_sinks(s);
      const HostKvCache::Rows k = kv->keys(layer), v = kv->values(layer);
      segs.push_back({kv, k.f32, AttendValues{v.f32, kv->shape().kv_dim, s.head_dim, s.head_dim, nullptr, v}, k});
    }
    attend(layer, segs, q, s, out);
  }


  // The keys of the slots a step reads, [0, n_past + T), recovered from the latents
  // (up-projection, then RoPE at the entry's position, in plain fp32 loops, each slot's
  // result independent of the others and of the step's size), then attention. Values are recovered the same way, unless the backend
  // absorbs the layer's value up-projection: softmax(q K^T) (C_v B_v^T) =
  // (softmax(q K^T) C_v) B_v^T, so each head attends over the latent values and
  // up-projects its result once. Keys cannot be absorbed so cheaply: RoPE rotates each
  // recovered key by its own position.
  void latent_attention(int32_t layer, const Activation& q, const AttentionShape& s, const Weight& k_up,
                        const Weight& v_up, const RopeParams& rope, Activation& out) override {
    for (int32_t seg_index = 0; seg_index < static_cast<int32_t>(kvs_.size()); ++seg_index)
      latent_attention_of(seg_index, layer, q, s, k_up, v_up, rope, out);
  }

  // latent_attention for the rows of part `seg_index` of the step (the recovered keys
  // and values are one buffer, used by one part at a time).
  void latent_attention_of(int32_t seg_index, int32_t layer, const Activation& q, const AttentionShape& s,
                           const Weight& k_up, const Weight& v_up, const RopeParams& rope, Activation& out) {
    HostKvCache* kv = kvs_[static_cast<size_t>(seg_index)];
    if (!kv) throw std::logic_error("latent_attention: a KV cache of the step was destroyed");
    const KvCacheShape& shape = kv->shape();
    check_latent_attention(shape, layer, k_up, v_up);
    if (s.sinks) throw std::invalid_argument("latent_attention: attention sinks in a latent layer");
    const HostWeight& ku = weights_.at(static_cast<size_t>(k_up.id)).file;
    const HostWeight& vu = weights_.at(static_cast<size_t>(v_up.id)).file;
    const int32_t kv_dim = shape.kv_dim, rk = shape.key_dim(layer), rv = shape.value_dim(layer);
    if (int64_t{s.n_head_kv} * s.head_dim != kv_dim) throw std::invalid_argument("latent_attention: n_head_kv * head_dim != kv_dim");
    const bool absorb = traits_.absorbs_latent_values && absorbing_values_costs_less(s, rv);
    const StepSegment seg = batch_->segment(seg_index);
    const int32_t n_past = seg.n_past;
    const int32_t n_slots = n_past + seg.size;
    const HostKvCache::Rows lk = kv->keys(layer), lv = kv->values(layer);
    const auto* Ku = reinterpret_cast<const float*>(ku.data);
    const auto* Vu = reinterpret_cast<const float*>(vu.data);
    const KvLayout& layout = kv->layout();
    const int64_t slot_cost = int64_t{kv_dim} * (rk + (absorb ? 0 : rv));
    pool_.parallel_for(n_slots, grain_for(slot_cost), [&](int64_t b, int64_t e, int) {
      std::vector<float> key_latent, value_latent;  // an F16 cache's latents, widened
      for (int64_t slot = b; slot < e; ++slot) {
        // Entries the layout does not know yet (written with write()) are at their logical slots.
        const int32_t position = slot >= n_past ? batch_->positions()[static_cast<size_t>(seg.first + slot - n_past)]
                                 : slot < layout.size() ? layout.logical_of(static_cast<int32_t>(slot))
                                                        : static_cast<int32_t>(slot);
        const float* key = widened(lk, static_cast<int32_t>(slot), rk, key_latent);
        scalar::recover_key(Ku, key, rk, s.n_head_kv, s.head_dim, position, rope, latent_keys_.data() + slot * kv_dim);
        if (!absorb)
          scalar::up_project(Vu, widened(lv, static_cast<int32_t>(slot), rv, value_latent), kv_dim, rv,
                             latent_values_.data() + slot * kv_dim);
      }
    });
    std::vector<SegmentKeys> segs(kvs_.size());  // the other parts' rows are left alone
    if (absorb)
      segs[static_cast<size_t>(seg_index)] = {kv, latent_keys_.data(), AttendValues{lv.f32, rv, 0, rv, Vu, lv}};
    else
      segs[static_cast<size_t>(seg_index)] = {kv, latent_keys_.data(), AttendValues{latent_values_.data(), kv_dim, s.head_dim, s.head_dim}};
    attend(layer, segs, q, s, out);
  }

  // Per slot and step, recovering a layer's values costs rank x kv_dim multiply-adds
  // plus rows x n_head x head_dim to weigh them; absorbing costs rows x n_head x rank
  // (the head's result is then up-projected once per row, rank x head_dim, whatever the
  // context). The choice must not depend on the step's size (a row's arithmetic may not),
  // so it is made for a step of kAbsorbRows rows; one-token steps then gain the most.
  static bool absorbing_values_costs_less(const AttentionShape& s, int32_t rank) {
    constexpr int64_t kAbsorbRows = 8;
    const int64_t kv_dim = int64_t{s.n_head_kv} * s.head_dim;
    return kAbsorbRows * s.n_head * rank <= rank * kv_dim + kAbsorbRows * s.n_head * s.head_dim;
  }

  // Where attend() reads a KV head's values: `stride` floats per slot, the head's `width`
  // floats from kv_head * head_step. With `up` set they are an MLA layer's latent values
  // (head_step 0: every head shares them), and each head's weighted sum is up-projected
  // by its KV head's head_dim rows of `up` (kv_dim rows of `width` floats).
  // With data null: a cache's packed values (fp16 words, blocks), widened as they are read.
  struct AttendValues {
    const float* data;
    int64_t stride, head_step;
    int32_t width;
    const float* up = nullptr;
    HostKvCache::Rows packed{};
  };

  // The `n` values of slot `slot` of `rows`: the cache's own floats, or its packed ones
  // widened into `buffer` (exactly: every fp16 value and every block's value is a float).
  static const float* widened(const HostKvCache::Rows& rows, int32_t slot, int32_t n, std::vector<float>& buffer) {
    if (rows.f32) return rows.f32 + static_cast<int64_t>(slot) * n;
    buffer.resize(static_cast<size_t>(n));
    rows.widen(slot, 0, n, buffer.data());
    return buffer.data();
  }

  // The keys and values one part of the step attends: K (capacity rows of kv_dim, by
  // physical slot) and V of its cache `kv`. A part without a cache is not computed.
  struct SegmentKeys {
    HostKvCache* kv = nullptr;
    const float* K = nullptr;
    AttendValues V{nullptr, 0, 0, 0};
    HostKvCache::Rows K_packed{};  // with K null: the cache's packed keys
  };

  // One attention item's keys and values from a cache that packs them (fp16 words,
  // blocks): widened into floats, one row per key in the item's order (order: 0, 1, ...),
  // so the kernels read floats.
  struct PackedRows {
    std::vector<float> keys, values;
    std::vector<int32_t> order;
    // Widens the `n` slots' part of each side into floats and points `k` / `v` at the
    // copies: from `k_packed` / `v_packed` where those are set, else from the float rows
    // k / v name (an MLA step's recovered keys beside packed latent values).
    void widen(const HostKernels& kernels, const HostKvCache::Rows& k_packed, scalar::KvRows& k,
               const HostKvCache::Rows& v_packed, scalar::KvRows& v, const int32_t* slots, int32_t n) {
      order.resize(static_cast<size_t>(n));
      for (int32_t j = 0; j < n; ++j) order[static_cast<size_t>(j)] = j;
      gather(kernels, k_packed, k, slots, n, keys);
      gather(kernels, v_packed, v, slots, n, values);
    }
    static void gather(const HostKernels& kernels, const HostKvCache::Rows& packed, scalar::KvRows& rows,
                       const int32_t* slots, int32_t n, std::vector<float>& out) {
      const size_t w = static_cast<size_t>(rows.width);
      out.resize(static_cast<size_t>(n) * w);
      if (packed.packed) {
        kernels.widen_rows(packed, slots, n, static_cast<int32_t>(rows.offset), rows.width, out.data());
      } else {
        for (int32_t j = 0; j < n; ++j) std::copy_n(rows.row(slots[j]), w, out.data() + static_cast<size_t>(j) * w);
      }
      rows = scalar::KvRows{out.data(), rows.width, 0, rows.width};
    }
  };

  // Attention of q's rows over their parts' keys and values (segs[s] for part s).
  void attend(int32_t layer, const std::vector<SegmentKeys>& segs, const Activation& q, const AttentionShape& s,
              Activation& out) {
    const int32_t T = batch_->size();
    const int32_t group = s.n_head / s.n_head_kv;
    // Slots each batch token attends: its view of its part's committed prefix (FULL:
    // every entry in logical order; COMPRESSED: the region), then its visible batch
    // tokens (all in its part); in a sliding-window layer only those inside its window.
    // A ring layer (KvCacheShape::ring) holds each at the ring slot of its cache index
    // (a committed entry's logical index, a batch token's n_past + j).
    std::vector<std::vector<int32_t>> full(segs.size());
    for (size_t k = 0; k < segs.size(); ++k) {
      if (!segs[k].kv) continue;
      const int32_t n_past = batch_->segment(static_cast<int32_t>(k)).n_past;
      if (const int32_t ring = segs[k].kv->shape().ring(layer); ring > 0) {
        full[k].resize(static_cast<size_t>(n_past));
        for (int32_t j = 0, slot = 0; j < n_past; ++j, slot = slot + 1 == ring ? 0 : slot + 1)
          full[k][static_cast<size_t>(j)] = slot;  // j mod ring
      } else if (const std::vector<int32_t>* order = segs[k].kv->full_order()) {
        full[k].assign(order->begin(), order->begin() + n_past);
      } else {
        full[k].resize(static_cast<size_t>(n_past));
        for (int32_t j = 0; j < n_past; ++j) full[k][static_cast<size_t>(j)] = j;
      }
    }
    std::vector<std::vector<int32_t>> slots(static_cast<size_t>(T));
    int32_t longest = 1;
    for (int32_t i = 0; i < T; ++i) {
      const int32_t si = batch_->segment_of(i);
      const SegmentKeys& sk = segs[static_cast<size_t>(si)];
      if (!sk.kv) continue;
      const StepSegment seg = batch_->segment(si);
      auto& list = slots[static_cast<size_t>(i)];
      list.reserve(static_cast<size_t>(seg.n_past + i - seg.first + 1));
      // A sliding-window layer keeps the keys at positions position - window + 1 on
      // (a committed entry's position is its logical index).
      const int32_t position = batch_->positions()[static_cast<size_t>(i)];
      if (batch_->prefix(i) == PrefixView::Full || layer < sk.kv->dense_layers()) {
        const auto& prefix = full[static_cast<size_t>(si)];
        const int32_t start = s.window > 0 ? std::clamp(position - s.window + 1, 0, seg.n_past) : 0;
        list.assign(prefix.begin() + start, prefix.end());
      } else {
        const KvLayout& layout = sk.kv->layout();
        const bool ring = sk.kv->shape().ring(layer) > 0;
        const int32_t region = std::min(sk.kv->region_count(), seg.n_past);
        for (int32_t j = 0; j < region; ++j) {
          const int32_t logical = j < layout.size() ? layout.logical_of(j) : j;
          if (s.in_window(position, logical)) list.push_back(ring ? sk.kv->shape().ring_slot(layer, logical) : j);
        }
        if (traits_.mutation == AttentionMutation::WrongRegionSlot && !list.empty() && region < seg.n_past) {
          // (In a ring: another committed entry that no step of the case overwrites.)
          const int32_t newest = ring ? sk.kv->shape().ring_slot(layer, seg.n_past - 1) : region;
          list.back() = list.back() != newest ? newest : sk.kv->shape().ring_slot(layer, seg.n_past - 2);
        }
      }
      for (int32_t j = seg.first; j <= i; ++j)
        if (batch_->sees(i, j) && s.in_window(position, batch_->positions()[static_cast<size_t>(j)]))
          list.push_back(sk.kv->shape().ring_slot(layer, seg.n_past + j - seg.first));
      longest = std::max(longest, static_cast<int32_t>(list.size()));
    }
    // Work items: (row, KV head, part of the row's keys), each for the query heads that
    // share the KV head, so their keys and values are read once. Long rows are split into
    // parts of kKeysPerPart keys that run in parallel and are combined exactly
    // afterwards, so a single long row does not serialize the step. The split depends
    // only on the row's key count, so a token gets the same arithmetic in any batch.
    constexpr int32_t kKeysPerPart = 2048;
    struct Item {
      int32_t row, kv_head, first, count, part;  // part: the index of this part among the row's
    };
    std::vector<Item> items;
    std::vector<int32_t> first_part(static_cast<size_t>(T) * static_cast<size_t>(s.n_head));
    int32_t n_parts_total = 0;
    for (int32_t i = 0; i < T; ++i) {
      const int32_t n_keys = static_cast<int32_t>(slots[static_cast<size_t>(i)].size());
      const int32_t row_parts = (n_keys + kKeysPerPart - 1) / kKeysPerPart;  // 0 for a row not computed, else n_keys >= 1
      for (int32_t h = 0; h < s.n_head; ++h) {
        first_part[static_cast<size_t>(i) * static_cast<size_t>(s.n_head) + static_cast<size_t>(h)] = n_parts_total;
        n_parts_total += row_parts;
      }
      for (int32_t kvh = 0; kvh < s.n_head_kv; ++kvh)
        for (int32_t p = 0; p < row_parts; ++p)
          items.push_back({i, kvh, p * kKeysPerPart, std::min(kKeysPerPart, n_keys - p * kKeysPerPart), p});
    }
    std::vector<scalar::AttentionPart> parts(static_cast<size_t>(n_parts_total));
    int32_t widest = 1;
    for (const SegmentKeys& sk : segs) widest = std::max(widest, sk.V.width);
    const size_t width = static_cast<size_t>(widest);  // of every part's values (one part's in a latent step)
    std::vector<float> accs(static_cast<size_t>(n_parts_total) * width);
    const int64_t item_cost = static_cast<int64_t>(std::min(longest, kKeysPerPart)) * (s.head_dim + widest) * group;
    pool_.parallel_for(static_cast<int64_t>(items.size()), grain_for(item_cost), [&](int64_t b, int64_t e, int) {
      std::vector<float> scratch(static_cast<size_t>(kKeysPerPart) * static_cast<size_t>(group));
      PackedRows packed;  // a packed cache's rows of the item, widened
      std::vector<scalar::AttentionPart> group_parts(static_cast<size_t>(group));
      std::vector<float> group_accs(static_cast<size_t>(group) * width);
      for (int64_t k = b; k < e; ++k) {
        const Item& it = items[static_cast<size_t>(k)];
        const auto& list = slots[static_cast<size_t>(it.row)];
        const SegmentKeys& sk = segs[static_cast<size_t>(batch_->segment_of(it.row))];
        const float* K = sk.K;
        const AttendValues& V = sk.V;
        const int32_t kv_dim = sk.kv->shape().kv_dim;
        const int32_t h0 = it.kv_head * group;
        scalar::KvRows keys{K, kv_dim, static_cast<int64_t>(it.kv_head) * s.head_dim, s.head_dim};
        scalar::KvRows values{V.data, V.stride, it.kv_head * V.head_step, V.width};
        const int32_t* item_slots = list.data() + it.first;
        if (sk.K_packed.packed || V.packed.packed) {  // the same floats, gathered in the item's order
          packed.widen(*kernels_, sk.K_packed, keys, V.packed, values, item_slots, it.count);
          item_slots = packed.order.data();
        }
        kernels_->attend_group_part(row(q, it.row) + h0 * s.head_dim, group, keys, values, item_slots, it.count,
                                    scalar::ScoreMap{s.scale, s.softcap}, scratch.data(), group_parts.data(),
                                    group_accs.data());
        for (int32_t g = 0; g < group; ++g) {
          const size_t p = static_cast<size_t>(
              first_part[static_cast<size_t>(it.row) * static_cast<size_t>(s.n_head) + static_cast<size_t>(h0 + g)] + it.part);
          parts[p] = group_parts[static_cast<size_t>(g)];
          std::copy_n(group_accs.data() + static_cast<size_t>(g) * width, width, accs.data() + p * width);
        }
      }
    });
    // Each (row, head): its parts combined (with the head's sink), then (latent values)
    // up-projected.
    const float* sinks = s.sinks ? weights_.at(static_cast<size_t>(s.sinks.id)).dense.data() : nullptr;
    const int64_t combine_cost = int64_t{widest} * (s.head_dim + 1);
    pool_.parallel_for(int64_t{T} * s.n_head, grain_for(combine_cost), [&](int64_t b, int64_t e, int) {
      std::vector<float> latent(width);
      for (int64_t k = b; k < e; ++k) {
        const int32_t i = static_cast<int32_t>(k / s.n_head), h = static_cast<int32_t>(k % s.n_head);
        const int32_t p0 = first_part[static_cast<size_t>(k)];
        const int32_t p1 = k + 1 < int64_t{T} * s.n_head ? first_part[static_cast<size_t>(k) + 1] : n_parts_total;
        if (p0 == p1) continue;  // a row of a part not computed here
        const AttendValues& V = segs[static_cast<size_t>(batch_->segment_of(i))].V;
        float* o = row(out, i) + h * s.head_dim;
        const float* part_accs = accs.data() + static_cast<size_t>(p0) * width;
        if (!V.up) {
          scalar::combine_parts(parts.data() + p0, part_accs, p1 - p0, V.width, o, sinks ? sinks[h] : -INFINITY);
        } else {
          scalar::combine_parts(parts.data() + p0, part_accs, p1 - p0, V.width, latent.data());
          scalar::up_project(V.up + static_cast<int64_t>(h / group) * s.head_dim * V.width, latent.data(), s.head_dim, V.width, o);
        }
      }
    });
  }

  // Element by element, so split over the threads freely.
  void gated(GatedActivation act, const Activation& gate, const Activation& up, Activation& out) override {
    const int64_t cols = gate.cols;
    pool_.parallel_for(rows_of(gate) * cols, 2048, [&](int64_t b, int64_t e, int) {
      for (int64_t k = b; k < e;) {
        const int64_t i = k / cols, c0 = k % cols, c1 = std::min(cols, c0 + (e - k));
        const float* g = row(gate, i);
        const float* u = row(up, i);
        float* o = row(out, i);
        kernels_->gated(act, g + c0, u + c0, o + c0, c1 - c0);
        k += c1 - c0;
      }
    });
    set_rows(out, rows_of(gate));
  }

  void map(ElementMap op, Activation& x, float value) override {
    for (int64_t i = 0; i < rows_of(x); ++i) {
      float* r = row(x, i);
      if (op == ElementMap::Scale)
        for (int64_t c = 0; c < x.cols; ++c) r[c] *= value;
      else
        for (int64_t c = 0; c < x.cols; ++c) r[c] = scalar::soft_cap(r[c], value);
    }
  }

  void add(Activation& x, const Activation& y) override {
    for (int64_t i = 0; i < rows_of(x); ++i)
      for (int64_t c = 0; c < x.cols; ++c) row(x, i)[c] += row(y, i)[c];
  }

  void gather_rows(const Activation& src, const std::vector<int32_t>& rows, Activation& dst) override {
    if (static_cast<int64_t>(rows.size()) > dst.rows) throw std::out_of_range("gather_rows: destination too small");
    for (size_t k = 0; k < rows.size(); ++k)
      std::memcpy(row(dst, static_cast<int64_t>(k)), row(src, rows[k]), sizeof(float) * static_cast<size_t>(src.cols));
    gathered_rows_[dst.id] = static_cast<int64_t>(rows.size());
  }

  void scatter_add(const Activation& src, const std::vector<int32_t>& rows, const std::vector<float>& weights,
                   Activation& dst) override {
    check_scatter_add(src, rows, weights, dst, batch_rows());
    for (size_t k = 0; k < rows.size(); ++k)
      scalar::add_scaled(row(dst, rows[k]), row(src, static_cast<int64_t>(k)), weights[k], dst.cols);
  }

  void argmax_rows(const Activation& x) override {
    argmax_.clear();
    for (int64_t i = 0; i < rows_of(x); ++i) argmax_.push_back(scalar::argmax_row(row(x, i), x.cols));
  }
  std::vector<int32_t> read_argmax(int64_t n_rows) override {
    if (n_rows < 0 || n_rows > static_cast<int64_t>(argmax_.size())) throw std::out_of_range("read_argmax: more rows than argmax_rows computed");
    return std::vector<int32_t>(argmax_.begin(), argmax_.begin() + n_rows);
  }

  void top_k_rows(const Activation& x, int32_t k) override {
    if (k < 1 || k > kMaxTopK || k > x.cols) throw std::invalid_argument("top_k_rows: k out of range");
    const int64_t rows = rows_of(x);
    top_k_ = TopK{};
    top_k_.k = k;
    top_k_.ids.resize(static_cast<size_t>(rows * k));
    top_k_.values.resize(static_cast<size_t>(rows * k));
    top_k_.has_nan.resize(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i)
      top_k_.has_nan[static_cast<size_t>(i)] = !top_k_row(row(x, i), static_cast<int32_t>(x.cols), k,
                                                          top_k_.ids.data() + i * k, top_k_.values.data() + i * k);
  }
  TopK read_top_k(int64_t n_rows) override {
    if (n_rows < 0 || n_rows > top_k_.rows()) throw std::out_of_range("read_top_k: more rows than top_k_rows computed");
    TopK out = top_k_;
    out.ids.resize(static_cast<size_t>(n_rows * out.k));
    out.values.resize(static_cast<size_t>(n_rows * out.k));
    out.has_nan.resize(static_cast<size_t>(n_rows));
    return out;
  }

  void finish_step() override {
    gathered_rows_.clear();
    if (const std::optional<DeviceError::Kind> fault = injected_fault_due()) {
      if (*fault == DeviceError::Kind::Lost) {
        lost_ = true;
        throw DeviceError(*fault, "the " + traits_.name + " backend's device was lost (injected by FAFO_INJECT_FAULT)");
      }
      throw DeviceError(*fault, "the " + traits_.name + " backend ran out of memory in a step (injected by FAFO_INJECT_FAULT)");
    }
  }

  void set_memory_limit(uint64_t bytes) override {
    if (memory_in_use_ > 0) throw std::logic_error("set_memory_limit after memory was allocated");
    memory_limit_ = bytes;
  }
  uint64_t memory_in_use() const override { return memory_in_use_; }
  uint64_t memory_free() const override {
    return memory_limit_ == 0 ? std::numeric_limits<uint64_t>::max() : memory_limit_ - std::min(memory_limit_, memory_in_use_);
  }

  std::vector<float> read_rows(const Activation& x, int64_t n_rows) override {
    const float* p = row(x, 0);
    return std::vector<float>(p, p + n_rows * x.cols);
  }

  void write_rows(Activation& x, const std::vector<float>& rows) override {
    check_rows_fit(x, rows.size());
    std::copy(rows.begin(), rows.end(), row(x, 0));
  }

 private:
  // A weight, and (arrange) the kernels' copy of its rows where they keep one.
  Weight upload(TensorType type, int64_t rows, int64_t cols, const void* data, bool arrange) {
    check_usable();
    // Counted as the bytes a device would hold, though the file's pages are used in place.
    const uint64_t bytes = static_cast<uint64_t>(rows) * tensor_row_bytes(type, cols) +
                           (rows == 1 ? static_cast<uint64_t>(cols) * sizeof(float) : 0);
    count_memory(bytes, "a weight");
    uint64_t counted = bytes;
    try {
      StoredWeight w{HostWeight{type, rows, cols, static_cast<const uint8_t*>(data), tensor_row_bytes(type, cols)}, {}, {}};
      if (rows == 1) {
        w.dense.resize(static_cast<size_t>(cols));
        dequantize_row(type, data, w.dense.data(), cols);
      } else if (arrange) {
        // The kernels' copy is memory of its own, beside the file's pages (which the
        // embedding gather still reads).
        std::vector<uint8_t> arranged = kernels_->arrange(w.file, pool_);
        if (!arranged.empty()) {
          count_memory(arranged.size(), "a copy of a weight's rows in groups (none with --no-repack)");
          counted += arranged.size();
          w.arranged = std::move(arranged);
          w.file.groups = w.arranged.data();
        }
      }
      weights_.push_back(std::move(w));
    } catch (...) {
      memory_in_use_ -= counted;  // the weight is not kept (a limit reached, or no memory for the copy)
      throw;
    }
    return Weight{static_cast<int32_t>(weights_.size() - 1), type, rows, cols};
  }

  const StepBatch& step_batch() const override { return *batch_; }
  const float* data_of(const Activation& a) const override {
    return activations_.at(static_cast<size_t>(a.id)).data();
  }

  // Counts `bytes` more against the memory limit, or throws DeviceError naming `what`.
  void count_memory(uint64_t bytes, const char* what) {
    if (memory_limit_ > 0 && bytes > memory_limit_ - std::min(memory_limit_, memory_in_use_))
      throw DeviceError(DeviceError::Kind::OutOfMemory,
                        "out of memory on the " + traits_.name + " backend: " + what + " needs " + format_bytes(bytes) +
                            " with " + format_bytes(memory_in_use_) + " in use of the " + format_bytes(memory_limit_) +
                            " --memory-limit allows");
    memory_in_use_ += bytes;
  }
  void check_usable() const {
    if (lost_)
      throw DeviceError(DeviceError::Kind::Lost, "the " + traits_.name + " backend's device was lost; open the model again");
  }

  // Items per parallel chunk so that a chunk does at least ~64K multiply-adds: below
  // that, waking threads costs more than it saves (small models run single-threaded).
  static int64_t grain_for(int64_t cost_per_item) { return std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, cost_per_item)); }

  // Gathered buffers hold fewer rows than the batch; every other buffer holds one row per batch token.
  int64_t rows_of(const Activation& a) const {
    auto it = gathered_rows_.find(a.id);
    return it != gathered_rows_.end() ? it->second : batch_rows();
  }
  int64_t batch_rows() const { return batch_->size(); }
  // An op's output has as many rows as its input: results of gathered rows stay gathered.
  void set_rows(const Activation& out, int64_t rows) {
    if (rows != batch_rows())
      gathered_rows_[out.id] = rows;
    else
      gathered_rows_.erase(out.id);
  }
  float* row(const Activation& a, int64_t i) {
    return activations_.at(static_cast<size_t>(a.id)).data() + static_cast<size_t>(i * a.cols);
  }

  ThreadPool pool_;
  HostBackendTraits traits_;
  std::unique_ptr<HostKernels> kernels_;
  std::vector<StoredWeight> weights_;
  // Zeroed by calloc: a large buffer is fresh pages the system maps on first touch, so
  // rows a step never writes (the logits of all but the last prompt row during prefill:
  // 64 MiB at a 32,000-token vocabulary) take no memory. The floats start on a cache
  // line (so does every row whose width is a multiple of 16 floats).
  struct ZeroedFloats {
    std::unique_ptr<float, void (*)(void*)> block;
    float* p = nullptr;
    explicit ZeroedFloats(size_t n)
        : block(static_cast<float*>(std::calloc(std::max<size_t>(n, 1) + 16, sizeof(float))), std::free) {
      if (!block) throw std::bad_alloc();
      const auto at = reinterpret_cast<uintptr_t>(block.get());
      p = block.get() + ((64 - at % 64) % 64) / sizeof(float);
    }
    float* data() const { return p; }
  };

  std::vector<ZeroedFloats> activations_;
  std::vector<int64_t> activation_rows_;
  std::vector<HostKvCache*> kvs_;  // the caches of the step begun last, one per part
  std::vector<float> latent_keys_, latent_values_;  // latent_attention's recovered keys and values
  std::unordered_map<int32_t, int64_t> gathered_rows_;
  const StepBatch* batch_ = nullptr;
  std::vector<int32_t> argmax_;
  TopK top_k_;
  uint64_t memory_limit_ = 0;  // 0: none
  uint64_t memory_in_use_ = 0;
  bool lost_ = false;
};

}  // namespace

std::unique_ptr<Backend> make_host_backend(int n_threads, HostBackendTraits traits, std::unique_ptr<HostKernels> kernels) {
  return std::make_unique<HostBackend>(n_threads, std::move(traits), std::move(kernels));
}

}  // namespace fafo::host

namespace fafo {

BackendDevice host_cpu_device() {
  BackendDevice d;
  d.index = 0;
  d.name = "host CPU";
  d.kind = "cpu";
  d.details.emplace_back("type", "cpu");
  d.details.emplace_back("hardware threads", std::to_string(std::max(1u, std::thread::hardware_concurrency())));
  return d;
}

void check_host_device(const std::string& backend, const std::string& device) {
  if (!device.empty() && device != "0")
    throw std::runtime_error("the " + backend + " backend has one device, 0 (the host CPU); --device '" + device +
                             "' does not name it");
}

}  // namespace fafo
