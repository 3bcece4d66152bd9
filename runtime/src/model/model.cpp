// Loading a Llama-family model (tensor names, shapes, types) and its forward pass,
// written once against the Backend interface. The forward reads top to bottom like
// llama2.c: embed, then per layer RMSNorm -> QKV -> RoPE -> attention -> output
// projection -> residual -> RMSNorm -> SwiGLU FFN -> residual; final norm and logits.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

#include "backend/host/scalar_kernels.h"
#include "fafo/model.h"

namespace fafo {

struct Model::Weights {
  struct Layer {
    Weight attn_norm, wq, wk, wv, wo, bq, bk, bv, ffn_norm, w_gate, w_up, w_down;
    // fused_qkv: wq and bq hold all three projections (and biases) stacked, and wk,
    // wv, bk, bv stay empty.
    bool fused_qkv = false;
    // MLA layers (ModelConfig::mla): wk and wv are the latent down-projections (rank x
    // n_embd), k_up and v_up the F32 up-projections (kv_dim x rank); k_up_host is
    // k_up's floats in the file.
    Weight k_up, v_up;
    const float* k_up_host = nullptr;
  };
  Weight token_embd, output_norm, output;
  std::vector<Layer> layers;
};

struct Model::Buffers {
  // qkv holds the [queries | keys | values] of the layers whose projections are fused;
  // q, k, v those of the others. Each set is allocated only where a layer uses it.
  Activation x, xn, qkv, q, k, v, attn, proj, gate, up, ffn, last, last_norm, logits;
  // An MLA model's latent keys and values, one buffer per width its layers use.
  std::map<int64_t, Activation> k_latent, v_latent;
};

namespace {

// Uploads a named tensor after checking its type and shape ([cols] or [cols, rows] in ggml order).
class WeightLoader {
 public:
  WeightLoader(const GgufFile& f, Backend& b) : f_(f), b_(b) {}

  Weight matrix(const std::string& name, int64_t cols, int64_t rows) { return load(f_.require_tensor(name), cols, rows); }
  Weight matrix(const GgufTensor& t, int64_t cols, int64_t rows) { return load(t, cols, rows); }
  Weight vector(const std::string& name, int64_t n) { return load(f_.require_tensor(name), n, 1); }
  // Tensors of one type, each `cols` wide, as one weight: their rows in the order given
  // (a vector counts as one row of its own width, and vectors are joined into one row).
  struct Part {
    const GgufTensor* tensor;
    int64_t rows;
  };
  Weight stacked(const std::vector<Part>& parts, int64_t cols) {
    int64_t rows = 0;
    for (const Part& p : parts) {
      check(*p.tensor, cols, p.rows);
      rows += p.rows;
    }
    return b_.upload_weight(parts.front().tensor->type, rows, cols, concatenated(parts).data());
  }
  Weight vectors_joined(const std::vector<Part>& parts) {
    int64_t cols = 0;
    for (const Part& p : parts) {
      check(*p.tensor, p.rows, 1);
      cols += p.rows;
    }
    return b_.upload_weight(parts.front().tensor->type, 1, cols, concatenated(parts).data());
  }
  // An F32 matrix (an MLA up-projection, which attention reads as floats).
  Weight f32_matrix(const std::string& name, int64_t cols, int64_t rows) {
    const GgufTensor& t = f_.require_tensor(name);
    if (t.type != TensorType::F32)
      throw GgufError(f_.path(), "tensor '" + name + "' has type " + std::string(tensor_type_name(t.type)) +
                                     "; MLA up-projections must be F32");
    return load(t, cols, rows);
  }
  Weight optional_vector(const std::string& name, int64_t n) {
    const GgufTensor* t = f_.find_tensor(name);
    return t ? load(*t, n, 1) : Weight{};
  }

 private:
  // The parts' bytes one after another.
  static std::vector<uint8_t> concatenated(const std::vector<Part>& parts) {
    std::vector<uint8_t> all;
    for (const Part& p : parts) {
      const auto* bytes = static_cast<const uint8_t*>(p.tensor->data);
      all.insert(all.end(), bytes, bytes + p.tensor->n_bytes);
    }
    return all;
  }

  Weight load(const GgufTensor& t, int64_t cols, int64_t rows) {
    check(t, cols, rows);
    return b_.upload_weight(t.type, rows, cols, t.data);
  }

  // Throws unless t has that shape and a type fafo computes with.
  void check(const GgufTensor& t, int64_t cols, int64_t rows) const {
    const int64_t t_rows = t.n_rows();
    const bool shape_ok = t.shape[0] == cols && t_rows == rows && (rows == 1 ? t.shape.size() <= 2 : t.shape.size() == 2);
    if (!shape_ok) {
      std::string got;
      for (int64_t d : t.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
      throw GgufError(f_.path(), "tensor '" + t.name + "' has shape [" + got + "], expected [" + std::to_string(cols) +
                                     (rows == 1 ? "" : ", " + std::to_string(rows)) + "]");
    }
    if (!tensor_type_info(t.type).has_dequantize)
      throw GgufError(f_.path(), "tensor '" + t.name + "' has type " + std::string(tensor_type_name(t.type)) +
                                     ", which fafo cannot compute with");
  }

  const GgufFile& f_;
  Backend& b_;
};

}  // namespace

Model::Model(std::shared_ptr<const GgufFile> file, std::unique_ptr<Backend> backend, const ModelOptions& options)
    : file_(std::move(file)), backend_(std::move(backend)), config_(ModelConfig::from_gguf(*file_)) {
  const ModelConfig& c = config_;
  if (c.mla() && !backend_->runs_latent_attention())
    throw std::runtime_error("the " + backend_->name() + " backend cannot run multi-head latent attention (MLA) models " +
                             "such as " + file_->path() + " (made by fafo-care); use the cpu, reference or vulkan backend");
  if (const GgufTensor* rf = file_->find_tensor("rope_freqs.weight")) {
    if (rf->type != TensorType::F32 || rf->n_elements() != c.rope.n_dims / 2)
      throw GgufError(file_->path(), "rope_freqs.weight must be F32 with rope.dimension_count/2 values");
    config_.rope.freq_factors.resize(static_cast<size_t>(c.rope.n_dims / 2));
    std::memcpy(config_.rope.freq_factors.data(), rf->data, rf->n_bytes);
    for (float v : config_.rope.freq_factors)
      if (!std::isfinite(v) || v <= 0.0f) throw GgufError(file_->path(), "rope_freqs.weight holds a value that is not a positive number");
  }

  WeightLoader load(*file_, *backend_);
  weights_ = std::make_unique<Weights>();
  Weights& w = *weights_;
  w.token_embd = load.matrix("token_embd.weight", c.n_embd, c.n_vocab);
  w.output_norm = load.vector("output_norm.weight", c.n_embd);
  w.output = c.tied_embeddings ? w.token_embd : load.matrix("output.weight", c.n_embd, c.n_vocab);
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Weights::Layer L;
    L.attn_norm = load.vector(p + "attn_norm.weight", c.n_embd);
    if (c.mla()) {
      const int64_t rk = c.mla_rank_k[static_cast<size_t>(l)], rv = c.mla_rank_v[static_cast<size_t>(l)];
      L.wq = load.matrix(p + "attn_q.weight", c.n_embd, q_dim);
      L.wk = load.matrix(p + "attn_k_a.weight", c.n_embd, rk);
      L.wv = load.matrix(p + "attn_v_a.weight", c.n_embd, rv);
      L.k_up = load.f32_matrix(p + "attn_k_b.weight", rk, c.kv_dim());
      L.v_up = load.f32_matrix(p + "attn_v_b.weight", rv, c.kv_dim());
      L.k_up_host = reinterpret_cast<const float*>(file_->require_tensor(p + "attn_k_b.weight").data);
      L.wo = load.matrix(p + "attn_output.weight", q_dim, c.n_embd);
    } else {
    const GgufTensor& wq = file_->require_tensor(p + "attn_q.weight");
    const GgufTensor& wk = file_->require_tensor(p + "attn_k.weight");
    const GgufTensor& wv = file_->require_tensor(p + "attn_v.weight");
    const GgufTensor* bias[3] = {nullptr, nullptr, nullptr};
    if (c.qkv_bias) {
      bias[0] = &file_->require_tensor(p + "attn_q.bias");
      bias[1] = &file_->require_tensor(p + "attn_k.bias");
      bias[2] = &file_->require_tensor(p + "attn_v.bias");
    }
    // A layer's three projections (and biases) become one weight where they share a
    // type and the backend fuses them; a Q4_K_M file, whose attn_v is Q6_K in some
    // layers, fuses the others.
    L.fused_qkv = wq.type == wk.type && wk.type == wv.type && backend_->fuses_qkv(wq.type, q_dim, c.kv_dim(), c.n_embd) &&
                  (!c.qkv_bias || (bias[0]->type == bias[1]->type && bias[1]->type == bias[2]->type));
    if (L.fused_qkv) {
      L.wq = load.stacked({{&wq, q_dim}, {&wk, c.kv_dim()}, {&wv, c.kv_dim()}}, c.n_embd);
      if (c.qkv_bias) L.bq = load.vectors_joined({{bias[0], q_dim}, {bias[1], c.kv_dim()}, {bias[2], c.kv_dim()}});
    } else {
      L.wq = load.matrix(wq, c.n_embd, q_dim);
      L.wk = load.matrix(wk, c.n_embd, c.kv_dim());
      L.wv = load.matrix(wv, c.n_embd, c.kv_dim());
      if (c.qkv_bias) {
        L.bq = load.matrix(*bias[0], q_dim, 1);
        L.bk = load.matrix(*bias[1], c.kv_dim(), 1);
        L.bv = load.matrix(*bias[2], c.kv_dim(), 1);
      }
    }
    L.wo = load.matrix(p + "attn_output.weight", q_dim, c.n_embd);
    }
    L.ffn_norm = load.vector(p + "ffn_norm.weight", c.n_embd);
    const GgufTensor& gate = file_->require_tensor(p + "ffn_gate.weight");
    const GgufTensor& up = file_->require_tensor(p + "ffn_up.weight");
    if (gate.type == up.type && backend_->fuses_gate_up(gate.type, c.n_ff, c.n_embd)) {
      L.w_gate = load.stacked({{&gate, c.n_ff}, {&up, c.n_ff}}, c.n_embd);  // one weight; L.w_up stays empty
    } else {
      L.w_gate = load.matrix(gate, c.n_embd, c.n_ff);
      L.w_up = load.matrix(up, c.n_embd, c.n_ff);
    }
    L.w_down = load.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd);
    w.layers.push_back(L);
  }

  n_ctx_ = options.n_ctx > 0 ? options.n_ctx : std::min(c.n_ctx_train, 4096);
  KvCacheShape kv_shape{c.n_layer, n_ctx_, c.kv_dim(), options.kv_type};
  kv_shape.key_dims = c.mla_rank_k;
  kv_shape.value_dims = c.mla_rank_v;
  kv_ = &backend_->create_kv_cache(kv_shape);

  buffers_ = std::make_unique<Buffers>();
  Buffers& b = *buffers_;
  const int64_t T = kMaxStepTokens;
  b.x = backend_->alloc_activation(T, c.n_embd);
  b.xn = backend_->alloc_activation(T, c.n_embd);
  const bool any_fused = std::any_of(w.layers.begin(), w.layers.end(), [](const auto& L) { return L.fused_qkv; });
  const bool any_apart = std::any_of(w.layers.begin(), w.layers.end(), [](const auto& L) { return !L.fused_qkv; });
  if (any_fused) b.qkv = backend_->alloc_activation(T, q_dim + 2 * c.kv_dim());
  if (any_apart) b.q = backend_->alloc_activation(T, q_dim);
  if (any_apart && !c.mla()) {  // an MLA model's keys and values are latents (k_latent, v_latent)
    b.k = backend_->alloc_activation(T, c.kv_dim());
    b.v = backend_->alloc_activation(T, c.kv_dim());
  }
  if (c.mla()) {
    for (int32_t r : c.mla_rank_k)
      if (!b.k_latent.count(r)) b.k_latent[r] = backend_->alloc_activation(T, r);
    for (int32_t r : c.mla_rank_v)
      if (!b.v_latent.count(r)) b.v_latent[r] = backend_->alloc_activation(T, r);
  }
  b.attn = backend_->alloc_activation(T, q_dim);
  b.proj = backend_->alloc_activation(T, c.n_embd);
  b.gate = backend_->alloc_activation(T, c.n_ff);
  b.up = backend_->alloc_activation(T, c.n_ff);
  b.ffn = backend_->alloc_activation(T, c.n_embd);
  b.last = backend_->alloc_activation(T, c.n_embd);
  b.last_norm = backend_->alloc_activation(T, c.n_embd);
  // A step's logits are computed only for its logit rows; where a device buffer cannot
  // hold 512 rows of a large vocabulary (lavapipe: 128 MiB, 261 rows of 128256 floats),
  // steps are limited to the rows it can hold.
  max_logit_rows_ = static_cast<int32_t>(std::min<int64_t>(T, backend_->max_activation_rows(c.n_vocab)));
  if (max_logit_rows_ < 1)
    throw std::runtime_error("one row of " + std::to_string(c.n_vocab) + " logits does not fit in a buffer of the " +
                             backend_->name() + " backend");
  b.logits = backend_->alloc_activation(max_logit_rows_, c.n_vocab);
  file_->check_intact();  // the weights read while loading were the file's
}

Model::~Model() = default;

void Model::finish_step() {
  backend_->finish_step();
  file_->check_intact();  // a step that read a shrunk file's zeros is not used
}

std::vector<float> Model::forward(StepBatch& batch) {
  record_step(batch);
  finish_step();
  last_step_size_ = batch.size();
  return backend_->read_rows(buffers_->logits, static_cast<int64_t>(batch.logit_rows().size()));
}

std::vector<int32_t> Model::forward_argmax(StepBatch& batch) {
  record_step(batch);
  backend_->argmax_rows(buffers_->logits);
  finish_step();
  last_step_size_ = batch.size();
  std::vector<int32_t> ids = backend_->read_argmax(static_cast<int64_t>(batch.logit_rows().size()));
  for (int32_t id : ids) {
    if (id == -1) throw std::runtime_error("the model produced non-finite logits (NaN): the weights or the computation are broken");
    if (id < 0) throw std::runtime_error("every logit is -inf: the model rules out every token");
  }
  return ids;
}

TopK Model::forward_top_k(StepBatch& batch, int32_t k) {
  if (k < 1 || k > kMaxTopK)
    throw std::invalid_argument("forward_top_k: k = " + std::to_string(k) + " is outside [1, " + std::to_string(kMaxTopK) + "]");
  k = std::min(k, config_.n_vocab);
  record_step(batch);
  backend_->top_k_rows(buffers_->logits, k);
  finish_step();
  last_step_size_ = batch.size();
  TopK top = backend_->read_top_k(static_cast<int64_t>(batch.logit_rows().size()));
  for (uint8_t nan : top.has_nan)
    if (nan) throw std::runtime_error("the model produced non-finite logits (NaN): the weights or the computation are broken");
  return top;
}

// Issues the whole forward pass of `batch` to the backend, up to (not including) finish_step.
void Model::record_step(StepBatch& batch) {
  const ModelConfig& c = config_;
  const Weights& w = *weights_;
  Buffers& b = *buffers_;
  Backend& be = *backend_;
  if (batch.size() == 0) throw std::invalid_argument("forward: empty batch");
  file_->check_intact();  // a file that changed is never read again
  if (batch.size() > kMaxStepTokens)
    throw std::invalid_argument("forward: " + std::to_string(batch.size()) + " tokens in one step (at most " +
                                std::to_string(kMaxStepTokens) + ")");
  if (n_past_ + batch.size() > n_ctx_)
    throw std::length_error("the context is full: " + std::to_string(n_past_) + " + " + std::to_string(batch.size()) +
                            " tokens exceed the context length " + std::to_string(n_ctx_));
  if (static_cast<int64_t>(batch.logit_rows().size()) > max_logit_rows_)
    throw std::invalid_argument("forward: " + std::to_string(batch.logit_rows().size()) +
                                " rows want logits in one step, but the device holds at most " +
                                std::to_string(max_logit_rows_) + " rows of " + std::to_string(config_.n_vocab) +
                                " logits");
  batch.set_n_past(n_past_);
  last_positions_ = batch.positions();
  if (drop_ && prompt_end_ > 0) batch.compress_all();
  KvCache& kv = *kv_;
  kv.set_captured_rows(policy_ ? policy_->wanted_query_rows(batch.size()) : std::vector<int32_t>{});
  const bool capture = !kv.captured_rows().empty();

  const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
  be.begin_step(batch);
  be.embed(w.token_embd, b.x);
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const Weights::Layer& L = w.layers[static_cast<size_t>(l)];
    // Attention block.
    if (c.mla()) {
      // Multi-head latent attention: the cache keeps the latents; attention recovers
      // the keys (RoPE after the up-projection) and values.
      Activation& kl = b.k_latent.at(c.mla_rank_k[static_cast<size_t>(l)]);
      Activation& vl = b.v_latent.at(c.mla_rank_v[static_cast<size_t>(l)]);
      be.rms_norm(b.x, L.attn_norm, c.rms_eps, b.xn);
      if (tap_) tap_attention_input(l, batch.size());
      be.matmul(L.wq, b.xn, b.q);
      be.matmul(L.wk, b.xn, kl);
      be.matmul(L.wv, b.xn, vl);
      be.rope(b.q, c.n_head, c.head_dim, c.rope);
      kv.store(l, kl, vl);
      if (capture) kv.capture_queries(l, b.q);
      be.latent_attention(l, b.q, shape, L.k_up, L.v_up, c.rope, b.attn);
    } else if (L.fused_qkv) {
      be.matmul_norm(L.wq, b.x, L.attn_norm, c.rms_eps, b.xn, b.qkv);
      if (c.qkv_bias) be.add_bias(L.bq, b.qkv);
      be.rope_store(l, b.qkv, shape, c.rope);
    } else {
      be.rms_norm(b.x, L.attn_norm, c.rms_eps, b.xn);
      if (tap_) tap_attention_input(l, batch.size());
      be.matmul(L.wq, b.xn, b.q);
      be.matmul(L.wk, b.xn, b.k);
      be.matmul(L.wv, b.xn, b.v);
      if (c.qkv_bias) {
        be.add_bias(L.bq, b.q);
        be.add_bias(L.bk, b.k);
        be.add_bias(L.bv, b.v);
      }
      be.rope(b.q, c.n_head, c.head_dim, c.rope);
      be.rope(b.k, c.n_head_kv, c.head_dim, c.rope);
      kv.store(l, b.k, b.v);
      if (capture) kv.capture_queries(l, b.q);
    }
    if (!c.mla()) be.attention(l, L.fused_qkv ? b.qkv : b.q, shape, b.attn);  // the queries lead qkv's rows
    be.matmul_add(L.wo, b.attn, b.x, b.proj);
    // Feed-forward block.
    be.matmul_swiglu_norm(L.w_gate, L.w_up, b.x, L.ffn_norm, c.rms_eps, b.xn, b.gate, b.up);
    be.matmul_add(L.w_down, b.gate, b.x, b.ffn);
  }
  const auto& rows = batch.logit_rows();
  be.gather_rows(b.x, rows, b.last);
  be.matmul_norm(w.output, b.last, w.output_norm, c.rms_eps, b.last_norm, b.logits);
}

void Model::commit(int32_t n) {
  if (n < 0 || n > last_step_size_) throw std::invalid_argument("commit: more tokens than the last step had");
  for (int32_t i = 0; i < n; ++i) check_committed_position(i, i);
  n_past_ += n;
  last_step_size_ = 0;
  kv_->append(n);
  after_commit();
}

// Lets a policy look at committed keys (by logical index) and the captured queries.
class Model::Inspector final : public KvInspector {
 public:
  explicit Inspector(Model& m) : m_(m) {}
  int32_t n_layer() const override { return m_.config_.n_layer; }
  int32_t n_head() const override { return m_.config_.n_head; }
  int32_t n_head_kv() const override { return m_.config_.n_head_kv; }
  int32_t head_dim() const override { return m_.config_.head_dim; }
  std::vector<float> keys(int32_t layer, int32_t first, int32_t count) const override {
    return m_.committed_keys(layer, first, count);
  }
  std::vector<float> captured_queries(int32_t layer) const override { return m_.kv_->captured_queries(layer); }

 private:
  Model& m_;
};

void Model::after_commit() {
  ++steps_;
  if (!policy_) return;
  Inspector inspector(*this);
  const KvPolicyEvent event{KvPolicyEvent::Committed, n_past_, prompt_end_, steps_};
  if (auto chosen = policy_->choose(event, inspector)) kv_->select(*chosen);
}

void Model::end_prefill() {
  prompt_end_ = n_past_;
  if (!policy_) return;
  Inspector inspector(*this);
  const KvPolicyEvent event{KvPolicyEvent::Prefilled, n_past_, prompt_end_, steps_};
  if (auto chosen = policy_->choose(event, inspector)) kv_->select(*chosen);
}

void Model::set_step_costs(StepCosts costs) {
  if (step_cost_cache_ && costs.source == "measured") {
    const std::string why = step_cost_cache_->store(costs);
    costs.source = why.empty() ? "measured, kept in " + step_cost_cache_->file().string() : "measured (not kept: " + why + ")";
  }
  step_costs_ = std::move(costs);
}

void Model::set_step_cost_cache(std::optional<StepCostCache> cache) {
  step_cost_cache_ = std::move(cache);
  if (step_cost_cache_)
    if (std::optional<StepCosts> kept = step_cost_cache_->load()) step_costs_ = std::move(*kept);
}

std::unique_ptr<KvInspector> Model::inspector() { return std::make_unique<Inspector>(*this); }

void Model::set_kv_policy(std::unique_ptr<KvPolicy> policy, bool drop) {
  policy_ = std::move(policy);
  drop_ = drop && policy_;
  kv_->reset_layout(policy_ ? policy_->budget() : 0, policy_ ? policy_->dense_layers() : 0, n_past_);
  if (policy_ && n_past_ > 0) end_prefill();
}

std::vector<float> Model::committed_keys(int32_t layer, int32_t first, int32_t count) {
  if (layer < 0 || layer >= config_.n_layer || first < 0 || count < 0 || first + count > n_past_)
    throw std::out_of_range("committed_keys: outside the committed context");
  std::vector<int32_t> slots;
  for (int32_t l = first; l < first + count; ++l) slots.push_back(kv_->layout().physical_of(l));
  std::vector<float> stored = kv_->read_keys(layer, slots);
  if (!config_.mla()) return stored;
  // Latent keys: recovered as the host backends' latent_attention recovers them.
  const ModelConfig& c = config_;
  const int64_t rank = c.mla_rank_k[static_cast<size_t>(layer)], kv_dim = c.kv_dim();
  const float* up = weights_->layers[static_cast<size_t>(layer)].k_up_host;
  std::vector<float> keys(static_cast<size_t>(count) * static_cast<size_t>(kv_dim));
  for (int32_t i = 0; i < count; ++i)
    scalar::recover_key(up, stored.data() + int64_t{i} * rank, rank, c.n_head_kv, c.head_dim, first + i, c.rope,
                     keys.data() + int64_t{i} * kv_dim);
  return keys;
}

void Model::check_committed_position(int32_t row, int32_t k) const {
  // An MLA model's cache holds no positions: a committed entry's is its logical index.
  if (config_.mla() && (row >= static_cast<int32_t>(last_positions_.size()) ||
                        last_positions_[static_cast<size_t>(row)] != n_past_ + k))
    throw std::logic_error("an MLA model commits a step's token only at the position that continues the context: row " +
                           std::to_string(row) + " is at position " +
                           (row < static_cast<int32_t>(last_positions_.size())
                                ? std::to_string(last_positions_[static_cast<size_t>(row)])
                                : std::string("(none)")) +
                           ", committed as entry " + std::to_string(n_past_ + k));
}

void Model::set_attention_input_tap(AttentionInputTap tap) {
  if (tap) {
    if (!backend_->executes_immediately())
      throw std::invalid_argument("the " + backend_->name() + " backend cannot show a step's attention inputs (use reference or cpu)");
    for (const Weights::Layer& L : weights_->layers)
      if (L.fused_qkv)
        throw std::invalid_argument("the " + backend_->name() + " backend fuses the attention projections (use the reference backend)");
  }
  tap_ = std::move(tap);
}

void Model::tap_attention_input(int32_t layer, int32_t rows) {
  const std::vector<float> xn = backend_->read_rows(buffers_->xn, rows);
  tap_(layer, xn.data(), rows, config_.n_embd);
}

void Model::commit_rows(const std::vector<int32_t>& rows) {
  std::vector<std::pair<int32_t, int32_t>> moves;
  for (size_t k = 0; k < rows.size(); ++k) {
    const int32_t row = rows[k];
    if (row < 0 || row >= last_step_size_) throw std::invalid_argument("commit_rows: row outside the last step");
    if (k > 0 && row <= rows[k - 1]) throw std::invalid_argument("commit_rows: rows must be increasing");
    check_committed_position(row, static_cast<int32_t>(k));
    if (row != static_cast<int32_t>(k)) moves.emplace_back(n_past_ + row, n_past_ + static_cast<int32_t>(k));
  }
  if (!moves.empty()) kv_->move_slots(moves);
  n_past_ += static_cast<int32_t>(rows.size());
  last_step_size_ = 0;
  kv_->append(static_cast<int32_t>(rows.size()));
  after_commit();
}

void Model::truncate(int32_t n) {
  if (n < 0 || n > n_past_) throw std::invalid_argument("truncate: beyond the committed context");
  kv_->truncate(n);
  n_past_ = n;
  if (prompt_end_ > n) prompt_end_ = n;
  if (n == 0) steps_ = 0;
}

}  // namespace fafo
