// Loading a Llama-family model's weights (tensor names, shapes, types) onto a backend,
// and the forward pass, written once against the Backend interface. The forward reads
// top to bottom like llama2.c: embed (scaled: Gemma 2), then per layer RMSNorm -> QKV
// (-> per-head Q/K RMSNorm: Qwen3) -> RoPE -> attention -> output projection (->
// RMSNorm: Gemma 2) -> residual -> RMSNorm -> SwiGLU (GeGLU: Gemma 2) FFN (-> RMSNorm:
// Gemma 2) -> residual; final norm and logits (soft-capped: Gemma 2).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

#include "fafo/model_weights.h"
#include "fafo/progress.h"
#include "util/fp32_loops.h"

namespace fafo {

struct ModelWeights::Weights {
  struct Layer {
    Weight attn_norm, wq, wk, wv, wo, bq, bk, bv, ffn_norm, w_gate, w_up, w_down;
    Weight q_norm, k_norm;  // ModelConfig::qk_norm: one head's gains each
    Weight attn_post_norm, ffn_post_norm;  // ModelConfig::post_norms
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

struct ModelWeights::Buffers {
  // qkv holds the [queries | keys | values] of the layers whose projections are fused;
  // q, k, v those of the others. Each set is allocated only where a layer uses it.
  Activation x, xn, qkv, q, k, v, attn, proj, gate, up, ffn, last, last_norm, logits;
  // The normalized queries and keys (ModelConfig::qk_norm).
  Activation q_normed, k_normed;
  // An MLA model's latent keys and values, one buffer per width its layers use.
  std::map<int64_t, Activation> k_latent, v_latent;
};

namespace {

// Uploads a named tensor after checking its type and shape ([cols] or [cols, rows] in ggml
// order), counting the bytes uploaded in `progress`.
class WeightLoader {
 public:
  WeightLoader(const GgufFile& f, Backend& b, ProgressTask& progress) : f_(f), b_(b), progress_(progress) {}

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
    return upload(parts.front().tensor->type, rows, cols, concatenated(parts).data());
  }
  Weight vectors_joined(const std::vector<Part>& parts) {
    int64_t cols = 0;
    for (const Part& p : parts) {
      check(*p.tensor, p.rows, 1);
      cols += p.rows;
    }
    return upload(parts.front().tensor->type, 1, cols, concatenated(parts).data());
  }
  // Rows [first, first + n) of a matrix of `rows` rows (a part of a fused tensor).
  Weight matrix_rows(const GgufTensor& t, int64_t cols, int64_t rows, int64_t first, int64_t n) {
    check(t, cols, rows);
    const auto* bytes = static_cast<const uint8_t*>(t.data) + static_cast<size_t>(first) * tensor_row_bytes(t.type, cols);
    return upload(t.type, n, cols, bytes);
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
    return upload(t.type, rows, cols, t.data);
  }

  Weight upload(TensorType type, int64_t rows, int64_t cols, const void* data) {
    const Weight w = b_.upload_weight(type, rows, cols, data);
    progress_.advance(static_cast<uint64_t>(rows) * tensor_row_bytes(type, cols));
    return w;
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
  ProgressTask& progress_;
};

// Whether a tensor is one of the weights the loader uploads (output.weight unless the
// embeddings are tied; the file's other tensors, rope_freqs.weight and LongRoPE's
// factors, are read into the configuration).
bool uploaded_tensor(const std::string& name) {
  return name.starts_with("token_embd.") || name.starts_with("output") || name.starts_with("blk.");
}

}  // namespace

namespace {
std::atomic<int64_t> g_loads_alive{0};
}  // namespace

ModelWeights::LoadCount::LoadCount() { ++g_loads_alive; }
ModelWeights::LoadCount::~LoadCount() { --g_loads_alive; }
int64_t ModelWeights::loads_alive() { return g_loads_alive.load(); }

ModelWeights::ModelWeights(std::shared_ptr<const GgufFile> file, std::unique_ptr<Backend> backend)
    : file_(std::move(file)), backend_(std::move(backend)), config_(ModelConfig::from_gguf(*file_)) {
  const ModelConfig& c = config_;
  if (c.mla() && !backend_->capabilities().latent_attention)
    throw std::runtime_error("the " + backend_->name() + " backend cannot run multi-head latent attention (MLA) models " +
                             "such as " + file_->path() + " (made by fafo-care); use the cpu, reference or vulkan backend");
  if (c.mla() && c.fused_tensors()) throw GgufError(file_->path(), "MLA files of a " + c.arch + " model are not supported");
  if (const GgufTensor* rf = file_->find_tensor("rope_freqs.weight")) {
    if (!c.rope_factors_short.empty())
      throw GgufError(file_->path(), "rope_freqs.weight and LongRoPE factors in one file");
    if (rf->type != TensorType::F32 || rf->n_elements() != c.rope.n_dims / 2)
      throw GgufError(file_->path(), "rope_freqs.weight must be F32 with rope.dimension_count/2 values");
    config_.rope.freq_factors.resize(static_cast<size_t>(c.rope.n_dims / 2));
    std::memcpy(config_.rope.freq_factors.data(), rf->data, rf->n_bytes);
    for (float v : config_.rope.freq_factors)
      if (!std::isfinite(v) || v <= 0.0f) throw GgufError(file_->path(), "rope_freqs.weight holds a value that is not a positive number");
  }

  // The backend prepares for the matrices' types at once (Vulkan: their pipelines), then
  // the weights load, reported by bytes.
  std::vector<TensorType> matrix_types;
  uint64_t weight_bytes = 0;
  for (const GgufTensor& t : file_->tensors()) {
    if (!uploaded_tensor(t.name) || (t.name == "output.weight" && c.tied_embeddings)) continue;
    weight_bytes += t.n_bytes;
    if (t.n_rows() > 1 && std::find(matrix_types.begin(), matrix_types.end(), t.type) == matrix_types.end())
      matrix_types.push_back(t.type);
  }
  backend_->prepare_weights(matrix_types);
  ProgressTask progress("loading weights (" + backend_->name() + ")", weight_bytes, ProgressUnit::Bytes);
  WeightLoader load(*file_, *backend_, progress);
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
    } else if (const GgufTensor* qkv = c.fused_tensors() ? file_->find_tensor(p + "attn_qkv.weight") : nullptr) {
      // Phi-3: the query, key and value rows in one tensor, one weight where the backend
      // fuses them, else three.
      const int64_t all = q_dim + 2 * c.kv_dim();
      if (c.qkv_bias) throw GgufError(file_->path(), "attention biases with a fused attn_qkv.weight are not supported");
      L.fused_qkv = fuses_qkv(*backend_, qkv->type, q_dim, c.kv_dim(), c.n_embd);
      if (L.fused_qkv) {
        L.wq = load.matrix(*qkv, c.n_embd, all);
      } else {
        L.wq = load.matrix_rows(*qkv, c.n_embd, all, 0, q_dim);
        L.wk = load.matrix_rows(*qkv, c.n_embd, all, q_dim, c.kv_dim());
        L.wv = load.matrix_rows(*qkv, c.n_embd, all, q_dim + c.kv_dim(), c.kv_dim());
      }
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
    // (Not where the queries and keys are normalized between the product and RoPE.)
    L.fused_qkv = !c.qk_norm && wq.type == wk.type && wk.type == wv.type &&
                  fuses_qkv(*backend_, wq.type, q_dim, c.kv_dim(), c.n_embd) &&
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
    if (c.qk_norm) {
      L.q_norm = load.vector(p + "attn_q_norm.weight", c.head_dim);
      L.k_norm = load.vector(p + "attn_k_norm.weight", c.head_dim);
    }
    }
    L.ffn_norm = load.vector(p + "ffn_norm.weight", c.n_embd);
    if (c.post_norms) {
      L.attn_post_norm = load.vector(p + "post_attention_norm.weight", c.n_embd);
      L.ffn_post_norm = load.vector(p + "post_ffw_norm.weight", c.n_embd);
    }
    if (c.fused_tensors() && !file_->find_tensor(p + "ffn_gate.weight")) {
      // Phi-3: ffn_up holds the gate's n_ff rows, then the up projection's.
      const GgufTensor& gate_up = file_->require_tensor(p + "ffn_up.weight");
      if (fuses_gate_up(*backend_, gate_up.type, c.n_ff, c.n_embd)) {
        L.w_gate = load.matrix(gate_up, c.n_embd, 2 * int64_t{c.n_ff});
      } else {
        L.w_gate = load.matrix_rows(gate_up, c.n_embd, 2 * int64_t{c.n_ff}, 0, c.n_ff);
        L.w_up = load.matrix_rows(gate_up, c.n_embd, 2 * int64_t{c.n_ff}, c.n_ff, c.n_ff);
      }
      L.w_down = load.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd);
      w.layers.push_back(L);
      continue;
    }
    const GgufTensor& gate = file_->require_tensor(p + "ffn_gate.weight");
    const GgufTensor& up = file_->require_tensor(p + "ffn_up.weight");
    // (The fused gate-and-up kernels apply SwiGLU: a GeGLU model keeps them apart.)
    if (!c.gelu_ffn && gate.type == up.type && fuses_gate_up(*backend_, gate.type, c.n_ff, c.n_embd)) {
      L.w_gate = load.stacked({{&gate, c.n_ff}, {&up, c.n_ff}}, c.n_embd);  // one weight; L.w_up stays empty
    } else {
      L.w_gate = load.matrix(gate, c.n_embd, c.n_ff);
      L.w_up = load.matrix(up, c.n_embd, c.n_ff);
    }
    L.w_down = load.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd);
    w.layers.push_back(L);
  }
  progress.set_total(progress.done());  // what loaded, should a tensor counted above not be one the model uses
  progress.finish();

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
  if (c.qk_norm) {
    b.q_normed = backend_->alloc_activation(T, q_dim);
    b.k_normed = backend_->alloc_activation(T, c.kv_dim());
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

ModelWeights::~ModelWeights() = default;

namespace {
// Whether a sequence of n_ctx entries takes LongRoPE's long factors: as llama.cpp picks
// them, from the context rounded up to a multiple of 256 (llama_context pads it so).
bool takes_long_factors(int32_t n_ctx, int32_t original_ctx) {
  return (int64_t{n_ctx} + 255) / 256 * 256 > original_ctx;
}
}  // namespace

void ModelWeights::use_context(int32_t n_ctx) {
  if (config_.rope_factors_short.empty()) return;
  const bool long_context = takes_long_factors(n_ctx, config_.rope_original_ctx);
  if (rope_factor_users_[long_context ? 0 : 1] > 0)
    throw std::invalid_argument("a context of " + std::to_string(n_ctx) + " needs the " +
                                (long_context ? "long" : "short") + " RoPE factors of " + file_->path() +
                                ", but a sequence on these weights uses the other ones (contexts of up to " +
                                std::to_string(config_.rope_original_ctx) +
                                ", rounded up to a multiple of 256, use the short factors)");
  if (rope_factor_users_[long_context ? 1 : 0]++ == 0)
    config_.rope.freq_factors = long_context ? config_.rope_factors_long : config_.rope_factors_short;
}

void ModelWeights::release_context(int32_t n_ctx) {
  if (config_.rope_factors_short.empty()) return;
  --rope_factor_users_[takes_long_factors(n_ctx, config_.rope_original_ctx) ? 1 : 0];
}

KvCacheShape ModelWeights::kv_cache_shape(int32_t n_ctx, KvCacheType type) const {
  KvCacheShape shape{config_.n_layer, n_ctx, config_.kv_dim(), type};
  shape.key_dims = config_.mla_rank_k;
  shape.value_dims = config_.mla_rank_v;
  return shape;
}

const Activation& ModelWeights::logits() const { return buffers_->logits; }

std::string ModelWeights::why_no_attention_input_tap() const {
  if (!backend_->capabilities().executes_immediately)
    return "the " + backend_->name() + " backend cannot show a step's attention inputs (use reference or cpu)";
  for (const Weights::Layer& L : weights_->layers)
    if (L.fused_qkv) return "the " + backend_->name() + " backend fuses the attention projections (use the reference backend)";
  return "";
}

std::vector<float> ModelWeights::recover_keys(int32_t layer, const std::vector<float>& stored, int32_t first,
                                              int32_t count) const {
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

void ModelWeights::record_step(const StepBatch& batch, std::span<KvCache* const> caches, const AttentionInputTap& tap) {
  const ModelConfig& c = config_;
  const Weights& w = *weights_;
  Buffers& b = *buffers_;
  Backend& be = *backend_;
  if (tap && caches.size() != 1) throw std::invalid_argument("record_step: an attention input tap in a joined step");
  // Each sequence's cache keeps its part's keys and values (and the queries its policy asked for).
  const auto store = [&](int32_t l, const Activation& k, const Activation& v, const Activation& q) {
    for (KvCache* kv : caches) {
      kv->store(l, k, v);
      if (!kv->captured_rows().empty()) kv->capture_queries(l, q);
    }
  };
  // Hands the step's attention inputs of layer l to tap.
  const auto tap_attention_input = [&](int32_t l) {
    const std::vector<float> xn = be.read_rows(b.xn, batch.size());
    tap(l, xn.data(), batch.size(), c.n_embd);
  };

  be.begin_step(batch, caches);
  be.embed(w.token_embd, b.x);
  if (c.embedding_scale > 0.0f) be.scale(b.x, c.embedding_scale);
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const Weights::Layer& L = w.layers[static_cast<size_t>(l)];
    const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, c.attention_scale(), c.attn_softcap, c.window_of(l)};
    const RopeParams& rope = c.rope_of(l);
    // Attention block.
    if (c.mla()) {
      // Multi-head latent attention: the cache keeps the latents; attention recovers
      // the keys (RoPE after the up-projection) and values.
      Activation& kl = b.k_latent.at(c.mla_rank_k[static_cast<size_t>(l)]);
      Activation& vl = b.v_latent.at(c.mla_rank_v[static_cast<size_t>(l)]);
      be.rms_norm(b.x, L.attn_norm, c.rms_eps, b.xn);
      if (tap) tap_attention_input(l);
      be.matmul(L.wq, b.xn, b.q);
      be.matmul(L.wk, b.xn, kl);
      be.matmul(L.wv, b.xn, vl);
      be.rope(b.q, c.n_head, c.head_dim, rope);
      store(l, kl, vl, b.q);
      be.latent_attention(l, b.q, shape, L.k_up, L.v_up, rope, b.attn);
    } else if (L.fused_qkv) {
      run_matmul_norm(be, L.wq, b.x, L.attn_norm, c.rms_eps, b.xn, b.qkv);
      if (c.qkv_bias) be.add_bias(L.bq, b.qkv);
      be.fusions()->rope_store(l, b.qkv, shape, rope);  // (fused_qkv: the backend said it fuses, at load)
    } else {
      be.rms_norm(b.x, L.attn_norm, c.rms_eps, b.xn);
      if (tap) tap_attention_input(l);
      be.matmul(L.wq, b.xn, b.q);
      be.matmul(L.wk, b.xn, b.k);
      be.matmul(L.wv, b.xn, b.v);
      if (c.qkv_bias) {
        be.add_bias(L.bq, b.q);
        be.add_bias(L.bk, b.k);
        be.add_bias(L.bv, b.v);
      }
      Activation& q = c.qk_norm ? b.q_normed : b.q;
      Activation& k = c.qk_norm ? b.k_normed : b.k;
      if (c.qk_norm) {
        be.head_norm(b.q, c.n_head, L.q_norm, c.rms_eps, q);
        be.head_norm(b.k, c.n_head_kv, L.k_norm, c.rms_eps, k);
      }
      be.rope(q, c.n_head, c.head_dim, rope);
      be.rope(k, c.n_head_kv, c.head_dim, rope);
      store(l, k, b.v, q);
    }
    if (!c.mla()) {
      const Activation& q = L.fused_qkv ? b.qkv : (c.qk_norm ? b.q_normed : b.q);  // the queries lead qkv's rows
      be.attention(l, q, shape, b.attn);
    }
    if (c.post_norms) {  // the block's output normalized before the residual
      be.matmul(L.wo, b.attn, b.proj);
      be.rms_norm(b.proj, L.attn_post_norm, c.rms_eps, b.xn);
      be.add(b.x, b.xn);
    } else {
      run_matmul_add(be, L.wo, b.attn, b.x, b.proj);
    }
    // Feed-forward block.
    if (c.gelu_ffn) {
      be.rms_norm(b.x, L.ffn_norm, c.rms_eps, b.xn);
      be.matmul(L.w_gate, b.xn, b.gate);
      be.matmul(L.w_up, b.xn, b.up);
      be.geglu(b.gate, b.up, b.gate);
    } else {
      run_matmul_swiglu_norm(be, L.w_gate, L.w_up, b.x, L.ffn_norm, c.rms_eps, b.xn, b.gate, b.up);
    }
    if (c.post_norms) {
      be.matmul(L.w_down, b.gate, b.ffn);
      be.rms_norm(b.ffn, L.ffn_post_norm, c.rms_eps, b.xn);
      be.add(b.x, b.xn);
    } else {
      run_matmul_add(be, L.w_down, b.gate, b.x, b.ffn);
    }
  }
  const auto& rows = batch.logit_rows();
  be.gather_rows(b.x, rows, b.last);
  run_matmul_norm(be, w.output, b.last, w.output_norm, c.rms_eps, b.last_norm, b.logits);
  if (c.final_softcap > 0.0f) be.softcap(b.logits, c.final_softcap);
}

}  // namespace fafo
