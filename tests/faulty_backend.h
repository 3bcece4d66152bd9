// A backend with a deliberate bug, wrapping the CPU reference backend: the op-conformance
// table must catch it. Faults:
//   MatmulRowOffByOne   matmul reads weight row r + 1 for output row r (the last reads row 0)
//   RmsNormDependsOnT   rms_norm uses a larger epsilon in steps of more than 8 rows: right
//                       for small steps, wrong for large ones (breaks T-invariance)
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fafo/backend.h"
#include "fafo/tensor_type.h"

namespace fafo::test {

enum class Fault { MatmulRowOffByOne, RmsNormDependsOnT };

class FaultyBackend final : public Backend {
 public:
  explicit FaultyBackend(Fault fault) : fault_(fault), inner_(make_reference_backend(1)) {}

  std::string name() const override { return "faulty"; }
  std::string description() const override { return "the CPU backend with a deliberate bug"; }
  Weight upload_weight(TensorType type, int64_t rows, int64_t cols, const void* data) override {
    const Weight w = inner_->upload_weight(type, rows, cols, data);
    if (fault_ != Fault::MatmulRowOffByOne || rows < 2) return w;
    // The rows rotated by one, used by matmul only (embed stays right).
    const size_t row_bytes = tensor_row_bytes(type, cols);
    const auto* src = static_cast<const uint8_t*>(data);
    std::vector<uint8_t>& rotated = kept_.emplace_back(src + row_bytes, src + static_cast<size_t>(rows) * row_bytes);
    rotated.insert(rotated.end(), src, src + row_bytes);
    rotated_[w.id] = inner_->upload_weight(type, rows, cols, rotated.data());
    return w;
  }
  Activation alloc_activation(int64_t max_rows, int64_t cols) override { return inner_->alloc_activation(max_rows, cols); }
  std::unique_ptr<KvCache> create_kv_cache(const KvCacheShape& shape) override { return inner_->create_kv_cache(shape); }
  BackendCapabilities capabilities() const override {
    BackendCapabilities c = inner_->capabilities();
    c.latent_attention = false;  // no latent_attention here
    return c;
  }
  void embed(const Weight& table, Activation& out) override { inner_->embed(table, out); }
  void rms_norm(const Activation& x, const Weight& gain, float eps, Activation& out) override {
    inner_->rms_norm(x, gain, fault_ == Fault::RmsNormDependsOnT && step_size_ > 8 ? eps * 4.0f + 1e-3f : eps, out);
  }
  void head_norm(const Activation& x, int32_t n_heads, const Weight& gain, float eps, Activation& out) override {
    inner_->head_norm(x, n_heads, gain, eps, out);
  }
  void matmul(const Weight& w, const Activation& x, Activation& out) override {
    auto it = rotated_.find(w.id);
    inner_->matmul(it != rotated_.end() ? it->second : w, x, out);
  }
  void add_bias(const Weight& bias, Activation& x) override { inner_->add_bias(bias, x); }
  void rope(Activation& x, int32_t n_heads, int32_t head_dim, const RopeParams& p) override {
    inner_->rope(x, n_heads, head_dim, p);
  }
  void attention(int32_t layer, const Activation& q, const AttentionShape& shape, Activation& out) override {
    inner_->attention(layer, q, shape, out);
  }
  void gated(GatedActivation act, const Activation& gate, const Activation& up, Activation& out) override {
    inner_->gated(act, gate, up, out);
  }
  void map(ElementMap op, Activation& x, float value) override { inner_->map(op, x, value); }
  void add(Activation& x, const Activation& y) override { inner_->add(x, y); }
  void gather_rows(const Activation& src, const std::vector<int32_t>& rows, Activation& dst) override {
    inner_->gather_rows(src, rows, dst);
  }
  void scatter_add(const Activation& src, const std::vector<int32_t>& rows, const std::vector<float>& weights,
                   Activation& dst) override {
    inner_->scatter_add(src, rows, weights, dst);
  }
  void sync_step() override { inner_->sync_step(); }
  void argmax_rows(const Activation& x) override { inner_->argmax_rows(x); }
  std::vector<int32_t> read_argmax(int64_t n_rows) override { return inner_->read_argmax(n_rows); }
  void top_k_rows(const Activation& x, int32_t k) override { inner_->top_k_rows(x, k); }
  TopK read_top_k(int64_t n_rows) override { return inner_->read_top_k(n_rows); }
  void finish_step() override { inner_->finish_step(); }
  std::vector<float> read_rows(const Activation& x, int64_t n_rows) override { return inner_->read_rows(x, n_rows); }
  void write_rows(Activation& x, const std::vector<float>& rows) override { inner_->write_rows(x, rows); }

 protected:
  void start_step(const StepBatch& batch, std::span<KvCache* const> caches) override {
    step_size_ = batch.size();
    inner_->begin_step(batch, caches);
  }

 private:
  Fault fault_;
  std::unique_ptr<Backend> inner_;
  std::deque<std::vector<uint8_t>> kept_;
  std::map<int32_t, Weight> rotated_;
  int32_t step_size_ = 0;
};

}  // namespace fafo::test
