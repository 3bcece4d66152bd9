#include "backend/reference/oracle_backend.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/reference/reference_attention.h"
#include "backend/reference/reference_kv_cache.h"
#include "backend/reference/reference_math.h"
#include "fafo/device_error.h"
#include "fafo/tensor_type.h"
#include "fafo/top_k.h"

namespace fafo::reference {

namespace {

class OracleBackend final : public Backend, public BackendMemory {
 public:
  std::string name() const override { return "reference"; }
  std::string description() const override { return "reference backend (fp32, single-threaded: the oracle)"; }

  // --- memory: counted as a device would hold it (the file's weights are used in place) ---

  Weight upload_weight(TensorType type, int64_t rows, int64_t cols, const void* data) override {
    check_usable();
    count_memory(static_cast<uint64_t>(rows) * tensor_row_bytes(type, cols) +
                     (rows == 1 ? static_cast<uint64_t>(cols) * sizeof(float) : 0),
                 "a weight");
    Stored w{type, rows, cols, static_cast<const uint8_t*>(data), tensor_row_bytes(type, cols), {}};
    if (rows == 1) {  // norm gains and biases, read as floats
      w.vector.resize(static_cast<size_t>(cols));
      dequantize_row(type, data, w.vector.data(), cols);
    }
    weights_.push_back(std::move(w));
    return Weight{static_cast<int32_t>(weights_.size() - 1), type, rows, cols};
  }

  Activation alloc_activation(int64_t max_rows, int64_t cols) override {
    check_usable();
    count_memory(static_cast<uint64_t>(max_rows * cols) * sizeof(float), "activations");
    activations_.emplace_back(static_cast<size_t>(max_rows * cols), 0.0f);
    return Activation{static_cast<int32_t>(activations_.size() - 1), max_rows, cols};
  }

  std::unique_ptr<KvCache> create_kv_cache(const KvCacheShape& shape) override {
    check_usable();
    shape.validate();
    // A latent cache also holds one layer's recovered keys and values (every slot).
    const uint64_t recovered = shape.latent() ? 2ull * sizeof(float) * static_cast<uint64_t>(shape.capacity) *
                                                    static_cast<uint64_t>(shape.kv_dim)
                                              : 0;
    uint64_t floats = 0;  // each layer's entries (a ring layer's ring)
    for (int32_t l = 0; l < shape.n_layer; ++l)
      floats += static_cast<uint64_t>(shape.entries(l)) * static_cast<uint64_t>(shape.key_dim(l) + shape.value_dim(l));
    const uint64_t bytes = sizeof(float) * floats + recovered;
    const double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    if (have > 0 && static_cast<double>(bytes) > 0.8 * have)
      throw std::runtime_error("the KV cache for a context of " + std::to_string(shape.capacity) + " tokens needs " +
                               format_bytes(bytes) + ", more than this machine's memory (" +
                               format_bytes(static_cast<uint64_t>(have)) + "); use a smaller --ctx-size");
    count_memory(bytes, "the KV cache");
    std::unique_ptr<ReferenceKvCache> kv;
    try {
      kv = std::make_unique<ReferenceKvCache>(
          shape, [this]() -> const StepBatch& { return *batch_; },
          [this](const Activation& a) -> const float* { return activations_.at(static_cast<size_t>(a.id)).data(); });
    } catch (...) {
      memory_in_use_ -= bytes;
      throw;
    }
    const KvCache* made = kv.get();
    kv->set_owner(this, [this, bytes, made] {
      memory_in_use_ -= bytes;
      for (ReferenceKvCache*& part_kv : kvs_)
        if (part_kv == made) part_kv = nullptr;  // a step over it fails
    });
    return kv;
  }

  void set_memory_limit(uint64_t bytes) override {
    if (memory_in_use_ > 0) throw std::logic_error("set_memory_limit after memory was allocated");
    memory_limit_ = bytes;
  }
  uint64_t memory_in_use() const override { return memory_in_use_; }
  uint64_t memory_free() const override {
    return memory_limit_ == 0 ? std::numeric_limits<uint64_t>::max() : memory_limit_ - std::min(memory_limit_, memory_in_use_);
  }

  // --- a step ---

  BackendCapabilities capabilities() const override {
    return {.max_step_sequences = StepBatch::kMaxTokens, .latent_attention = true, .executes_immediately = true,
            .window_rings = true};
  }
  BackendMemory* memory() override { return this; }

  void start_step(const StepBatch& batch, std::span<KvCache* const> caches) override {
    check_usable();
    std::vector<ReferenceKvCache*> kvs;
    for (int32_t s = 0; s < batch.n_segments(); ++s) {
      ReferenceKvCache& kv = own_kv_cache<ReferenceKvCache>(*this, *caches[static_cast<size_t>(s)]);
      const StepSegment part = batch.segment(s);
      if (part.n_past + part.size > kv.capacity())
        throw std::length_error("step needs KV slots up to " + std::to_string(part.n_past + part.size) +
                                " but the cache holds " + std::to_string(kv.capacity()));
      kv.set_step_part(s);
      kvs.push_back(&kv);
    }
    gathered_.clear();
    kvs_ = std::move(kvs);
    batch_ = &batch;
  }

  void embed(const Weight& table, Activation& out) override {
    const Stored& w = weight(table);
    check_tokens_in_vocabulary(*batch_, w.rows);
    for (int32_t i = 0; i < batch_->size(); ++i)
      dequantize_row(w.type, w.data + static_cast<size_t>(batch_->tokens()[static_cast<size_t>(i)]) * w.row_bytes,
                     row(out, i), w.cols);
  }

  void rms_norm(const Activation& x, const Weight& gain, float eps, Activation& out) override {
    for (int64_t i = 0; i < rows_of(x); ++i) rms_norm_row(row(x, i), weight(gain).vector.data(), eps, row(out, i), x.cols);
    set_rows(out, rows_of(x));
  }

  void head_norm(const Activation& x, int32_t n_heads, const Weight& gain, float eps, Activation& out) override {
    const int64_t width = x.cols / n_heads;
    for (int64_t i = 0; i < rows_of(x); ++i)
      for (int64_t h = 0; h < n_heads; ++h)
        rms_norm_row(row(x, i) + h * width, weight(gain).vector.data(), eps, row(out, i) + h * width, width);
    set_rows(out, rows_of(x));
  }

  // out[t][r] = dot(weight row r, dequantized, x[t]).
  void matmul(const Weight& weight_id, const Activation& x, Activation& out) override {
    const Stored& w = weight(weight_id);
    std::vector<float> dense(static_cast<size_t>(w.cols));
    for (int64_t r = 0; r < w.rows; ++r) {
      dequantize_row(w.type, w.data + static_cast<size_t>(r) * w.row_bytes, dense.data(), w.cols);
      for (int64_t t = 0; t < rows_of(x); ++t) row(out, t)[r] = dot(dense.data(), row(x, t), w.cols);
    }
    set_rows(out, rows_of(x));
  }

  void add_bias(const Weight& bias, Activation& x) override {
    const float* b = weight(bias).vector.data();
    for (int64_t i = 0; i < rows_of(x); ++i)
      for (int64_t c = 0; c < x.cols; ++c) row(x, i)[c] += b[c];
  }

  void rope(Activation& x, int32_t n_heads, int32_t head_dim, const RopeParams& p) override {
    for (int32_t i = 0; i < batch_->size(); ++i)
      for (int32_t h = 0; h < n_heads; ++h) rope_head(row(x, i) + int64_t{h} * head_dim, batch_->positions()[static_cast<size_t>(i)], p);
  }

  // Each row and query head over the slots the row sees; query head h reads KV head
  // h / (n_head / n_head_kv).
  void attention(int32_t layer, const Activation& q, const AttentionShape& s, Activation& out) override {
    for (int32_t i = 0; i < batch_->size(); ++i) {
      const ReferenceKvCache& kv = cache_of(i);
      if (layer < 0 || layer >= kv.shape().n_layer) throw std::out_of_range("attention: layer outside the KV cache");
      if (kv.shape().latent()) throw std::invalid_argument("attention: the KV cache is latent (use latent_attention)");
      check_ring_window(kv.shape(), layer, s);
      check_attention_sinks(s);
      const int32_t kv_dim = kv.shape().kv_dim;
      const float* K = kv.key(layer, 0);
      const float* V = kv.value(layer, 0);
      const std::vector<int32_t> slots = keys_seen(*batch_, kv, layer, i, s.window);
      const float* sinks = s.sinks ? weight(s.sinks).vector.data() : nullptr;
      for (int32_t h = 0; h < s.n_head; ++h) {
        const int64_t kv_head = h / (s.n_head / s.n_head_kv);
        attend_head(row(q, i) + int64_t{h} * s.head_dim, HeadRows{K, kv_dim, kv_head * s.head_dim, s.head_dim},
                    HeadRows{V, kv_dim, kv_head * s.head_dim, s.head_dim}, slots, s.scale, s.softcap,
                    row(out, i) + int64_t{h} * s.head_dim, sinks ? sinks[h] : -INFINITY);
      }
    }
  }

  // MLA: every slot a part of the step may read, [0, n_past + its rows), gets its key and
  // value back from its latents (key: k_up times the latent key, then each KV head
  // rotated at the entry's position; value: v_up times the latent value), then
  // attention as above; part by part.
  void latent_attention(int32_t layer, const Activation& q, const AttentionShape& s, const Weight& k_up,
                        const Weight& v_up, const RopeParams& rope, Activation& out) override {
    for (int32_t part = 0; part < batch_->n_segments(); ++part) {
      const ReferenceKvCache& kv = cache_of(batch_->segment(part).first);
      const StepSegment seg = batch_->segment(part);
      const KvCacheShape& shape = kv.shape();
      check_latent_attention(shape, layer, k_up, v_up);
      if (s.sinks) throw std::invalid_argument("latent_attention: attention sinks in a latent layer");
      const int32_t kv_dim = shape.kv_dim, key_rank = shape.key_dim(layer), value_rank = shape.value_dim(layer);
      if (int64_t{s.n_head_kv} * s.head_dim != kv_dim) throw std::invalid_argument("latent_attention: n_head_kv * head_dim != kv_dim");
      const auto* Ku = reinterpret_cast<const float*>(weight(k_up).data);
      const auto* Vu = reinterpret_cast<const float*>(weight(v_up).data);
      const int32_t n_past = seg.n_past, n_slots = n_past + seg.size;
      std::vector<float> keys(static_cast<size_t>(n_slots) * static_cast<size_t>(kv_dim));
      std::vector<float> values(keys.size());
      const KvLayout& layout = kv.layout();
      for (int32_t slot = 0; slot < n_slots; ++slot) {
        const int32_t position = slot >= n_past         ? batch_->positions()[static_cast<size_t>(seg.first + slot - n_past)]
                                 : slot < layout.size() ? layout.logical_of(slot)
                                                        : slot;  // written with write(), unknown to the layout
        float* k = keys.data() + static_cast<size_t>(slot) * static_cast<size_t>(kv_dim);
        float* v = values.data() + static_cast<size_t>(slot) * static_cast<size_t>(kv_dim);
        for (int32_t r = 0; r < kv_dim; ++r) {
          k[r] = dot(Ku + int64_t{r} * key_rank, kv.key(layer, slot), key_rank);
          v[r] = dot(Vu + int64_t{r} * value_rank, kv.value(layer, slot), value_rank);
        }
        for (int32_t h = 0; h < s.n_head_kv; ++h) rope_head(k + int64_t{h} * s.head_dim, position, rope);
      }
      for (int32_t i = seg.first; i < seg.first + seg.size; ++i) {
        const std::vector<int32_t> slots = keys_seen(*batch_, kv, layer, i, s.window);
        for (int32_t h = 0; h < s.n_head; ++h) {
          const int64_t kv_head = h / (s.n_head / s.n_head_kv);
          attend_head(row(q, i) + int64_t{h} * s.head_dim, HeadRows{keys.data(), kv_dim, kv_head * s.head_dim, s.head_dim},
                      HeadRows{values.data(), kv_dim, kv_head * s.head_dim, s.head_dim}, slots, s.scale, s.softcap,
                      row(out, i) + int64_t{h} * s.head_dim);
        }
      }
    }
  }

  void gated(GatedActivation act, const Activation& gate, const Activation& up, Activation& out) override {
    for (int64_t i = 0; i < rows_of(gate); ++i)
      for (int64_t c = 0; c < gate.cols; ++c) {
        const float g = row(gate, i)[c], u = row(up, i)[c];
        row(out, i)[c] = act == GatedActivation::SwigluOai ? swiglu_oai(g, u)
                                                           : (act == GatedActivation::Silu ? silu(g) : gelu_tanh(g)) * u;
      }
    set_rows(out, rows_of(gate));
  }

  void map(ElementMap op, Activation& x, float value) override {
    for (int64_t i = 0; i < rows_of(x); ++i)
      for (int64_t c = 0; c < x.cols; ++c) {
        float& v = row(x, i)[c];
        v = op == ElementMap::Scale ? v * value : soft_cap(v, value);
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
    gathered_[dst.id] = static_cast<int64_t>(rows.size());
  }

  void scatter_add(const Activation& src, const std::vector<int32_t>& rows, const std::vector<float>& weights,
                   Activation& dst) override {
    check_scatter_add(src, rows, weights, dst, batch_->size());
    for (size_t k = 0; k < rows.size(); ++k) {
      float* d = row(dst, rows[k]);
      const float* s = row(src, static_cast<int64_t>(k));
      for (int64_t c = 0; c < dst.cols; ++c) d[c] += weights[k] * s[c];  // -ffp-contract=off: two roundings
    }
  }

  void argmax_rows(const Activation& x) override {
    argmax_.clear();
    for (int64_t i = 0; i < rows_of(x); ++i) argmax_.push_back(argmax_row(row(x, i), x.cols));
  }
  std::vector<int32_t> read_argmax(int64_t n_rows) override {
    if (n_rows < 0 || n_rows > static_cast<int64_t>(argmax_.size()))
      throw std::out_of_range("read_argmax: more rows than argmax_rows computed");
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
    gathered_.clear();
    if (const std::optional<DeviceError::Kind> fault = injected_fault_due()) {
      if (*fault == DeviceError::Kind::Lost) {
        lost_ = true;
        throw DeviceError(*fault, "the reference backend's device was lost (injected by FAFO_INJECT_FAULT)");
      }
      throw DeviceError(*fault, "the reference backend ran out of memory in a step (injected by FAFO_INJECT_FAULT)");
    }
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
  struct Stored {
    TensorType type;
    int64_t rows, cols;
    const uint8_t* data;  // the file's rows, used in place
    size_t row_bytes;
    std::vector<float> vector;  // a one-row weight as floats
  };

  const Stored& weight(const Weight& w) const { return weights_.at(static_cast<size_t>(w.id)); }
  // The cache of row i's part of the step.
  const ReferenceKvCache& cache_of(int32_t i) const {
    const ReferenceKvCache* kv = kvs_.at(static_cast<size_t>(batch_->segment_of(i)));
    if (!kv) throw std::logic_error("a KV cache of the step was destroyed");
    return *kv;
  }
  float* row(const Activation& a, int64_t i) {
    return activations_.at(static_cast<size_t>(a.id)).data() + static_cast<size_t>(i * a.cols);
  }
  // Rows an activation holds in this step: the batch's, or what gather_rows put there
  // (and every op's output computed from gathered rows).
  int64_t rows_of(const Activation& a) const {
    const auto it = gathered_.find(a.id);
    return it != gathered_.end() ? it->second : batch_->size();
  }
  void set_rows(const Activation& out, int64_t rows) {
    if (rows != batch_->size())
      gathered_[out.id] = rows;
    else
      gathered_.erase(out.id);
  }

  void count_memory(uint64_t bytes, const char* what) {
    if (memory_limit_ > 0 && bytes > memory_limit_ - std::min(memory_limit_, memory_in_use_))
      throw DeviceError(DeviceError::Kind::OutOfMemory,
                        "out of memory on the reference backend: " + std::string(what) + " needs " + format_bytes(bytes) +
                            " with " + format_bytes(memory_in_use_) + " in use of the " + format_bytes(memory_limit_) +
                            " --memory-limit allows");
    memory_in_use_ += bytes;
  }
  void check_usable() const {
    if (lost_) throw DeviceError(DeviceError::Kind::Lost, "the reference backend's device was lost; open the model again");
  }

  std::vector<Stored> weights_;
  std::vector<std::vector<float>> activations_;
  std::vector<ReferenceKvCache*> kvs_;  // the caches of the step begun last, one per part
  std::unordered_map<int32_t, int64_t> gathered_;
  const StepBatch* batch_ = nullptr;
  std::vector<int32_t> argmax_;
  TopK top_k_;
  uint64_t memory_limit_ = 0;  // 0: none
  uint64_t memory_in_use_ = 0;
  bool lost_ = false;
};

}  // namespace

std::unique_ptr<Backend> make_oracle_backend() { return std::make_unique<OracleBackend>(); }

}  // namespace fafo::reference
