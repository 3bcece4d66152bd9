// Loading a model's weights onto a backend: every tensor's name, shape and type checked,
// the attention and gate/up projections stacked into one weight where the backend fuses
// them, the bytes reported as progress.
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

namespace {

// Uploads a named tensor after checking its type and shape ([cols] or [cols, rows] in ggml
// order), counting the bytes uploaded in `progress`.
class WeightLoader {
 public:
  WeightLoader(const GgufFile& f, Backend& b, ProgressTask& progress) : f_(f), b_(b), progress_(progress) {}

  Weight matrix(const std::string& name, int64_t cols, int64_t rows) { return load(f_.require_tensor(name), cols, rows); }
  Weight matrix(const GgufTensor& t, int64_t cols, int64_t rows) { return load(t, cols, rows); }
  Weight vector(const std::string& name, int64_t n) { return load(f_.require_tensor(name), n, 1); }
  // A matrix that only embed() reads (Backend::upload_table).
  Weight table(const std::string& name, int64_t cols, int64_t rows) {
    const GgufTensor& t = f_.require_tensor(name);
    check(t, cols, rows);
    const Weight w = b_.upload_table(t.type, rows, cols, t.data);
    progress_.advance(static_cast<uint64_t>(rows) * tensor_row_bytes(t.type, cols));
    return w;
  }
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
  // Expert `e` of a 3-D tensor of n_expert matrices of [cols, rows] (ggml order: cols,
  // rows, experts), as one weight.
  Weight expert(const GgufTensor& t, int64_t cols, int64_t rows, int64_t n_expert, int64_t e) {
    if (t.shape.size() != 3 || t.shape[0] != cols || t.shape[1] != rows || t.shape[2] != n_expert) {
      std::string got;
      for (int64_t d : t.shape) got += (got.empty() ? "" : ", ") + std::to_string(d);
      throw GgufError(f_.path(), "tensor '" + t.name + "' has shape [" + got + "], expected [" + std::to_string(cols) +
                                     ", " + std::to_string(rows) + ", " + std::to_string(n_expert) + "]");
    }
    check_type(t);
    const size_t matrix_bytes = static_cast<size_t>(rows) * tensor_row_bytes(t.type, cols);
    return upload(t.type, rows, cols, static_cast<const uint8_t*>(t.data) + static_cast<size_t>(e) * matrix_bytes);
  }
  // Row `e` of a [n, n_expert] tensor (an expert's bias), as a vector.
  Weight expert_vector(const GgufTensor& t, int64_t n, int64_t n_expert, int64_t e) {
    check(t, n, n_expert);
    return upload(t.type, 1, n, static_cast<const uint8_t*>(t.data) + static_cast<size_t>(e) * tensor_row_bytes(t.type, n));
  }
  // A vector whose values must be finite numbers (attention sinks).
  Weight finite_vector(const std::string& name, int64_t n) {
    const GgufTensor& t = f_.require_tensor(name);
    check(t, n, 1);
    std::vector<float> values(static_cast<size_t>(n));
    dequantize_row(t.type, t.data, values.data(), n);
    for (float v : values)
      if (!std::isfinite(v)) throw GgufError(f_.path(), "tensor '" + name + "' holds a value that is not a finite number");
    return upload(t.type, 1, n, t.data);
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
    check_type(t);
  }
  void check_type(const GgufTensor& t) const {
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

namespace {
std::vector<DevicePart> one_device(std::unique_ptr<Backend> backend) {
  std::vector<DevicePart> parts;
  parts.push_back(DevicePart{std::move(backend), 0});
  return parts;
}
}  // namespace

ModelWeights::ModelWeights(std::shared_ptr<const GgufFile> file, std::unique_ptr<Backend> backend)
    : ModelWeights(std::move(file), one_device(std::move(backend))) {}

ModelWeights::ModelWeights(std::shared_ptr<const GgufFile> file, std::vector<DevicePart> devices)
    : file_(std::move(file)), config_(ModelConfig::from_gguf(*file_)) {
  const ModelConfig& c = config_;
  if (devices.empty()) throw std::invalid_argument("ModelWeights: no device");
  int32_t placed = 0;
  for (size_t d = 0; d < devices.size(); ++d) {
    DevicePart& part = devices[d];
    if (!part.backend) throw std::invalid_argument("ModelWeights: device " + std::to_string(d) + " has no backend");
    if (part.layers == 0 && d + 1 == devices.size()) part.layers = c.n_layer - placed;  // the rest
    if (part.layers < 1 || placed + part.layers > c.n_layer)
      throw std::invalid_argument("a split of " + std::to_string(c.n_layer) + " layers gives device " + std::to_string(d) +
                                  " (" + part.backend->name() + ") " + std::to_string(part.layers) + " layers after " +
                                  std::to_string(placed) + ": every device needs at least one, and no more than the model has");
    first_layer_.push_back(placed);
    placed += part.layers;
    if (c.mla() && !part.backend->capabilities().latent_attention)
      throw std::runtime_error("the " + part.backend->name() + " backend cannot run multi-head latent attention (MLA) models " +
                               "such as " + file_->path() + " (made by fafo-care); use the cpu, reference or vulkan backend");
  }
  if (placed != c.n_layer)
    throw std::invalid_argument("a split places " + std::to_string(placed) + " of the " + std::to_string(c.n_layer) +
                                " layers of " + file_->path());
  first_layer_.push_back(placed);
  for (DevicePart& part : devices) backends_.push_back(std::move(part.backend));
  if (c.mla() && c.fused_tensors()) throw GgufError(file_->path(), "MLA files of a " + c.arch + " model are not supported");

  // Each backend prepares for the matrices' types at once (Vulkan: their pipelines),
  // then the weights load, reported by bytes.
  std::vector<TensorType> matrix_types;
  uint64_t weight_bytes = 0;
  for (const GgufTensor& t : file_->tensors()) {
    if (!uploaded_tensor(t.name) || (t.name == "output.weight" && c.tied_embeddings)) continue;
    weight_bytes += t.n_bytes;
    if (t.n_rows() > 1 && std::find(matrix_types.begin(), matrix_types.end(), t.type) == matrix_types.end())
      matrix_types.push_back(t.type);
  }
  std::string names;
  for (const auto& be : backends_) {
    be->prepare_weights(matrix_types);
    names += (names.empty() ? "" : " + ") + be->name();
  }
  ProgressTask progress("loading weights (" + names + ")", weight_bytes, ProgressUnit::Bytes);
  // The embedding on the first device (where a step begins), the output head on the last.
  WeightLoader first(*file_, *backends_.front(), progress);
  WeightLoader last(*file_, *backends_.back(), progress);
  // The embedding is multiplied too only where it is the output head on the same device.
  const bool embd_is_output = c.tied_embeddings && backends_.size() == 1;
  token_embd_ = embd_is_output ? first.matrix("token_embd.weight", c.n_embd, c.n_vocab)
                               : first.table("token_embd.weight", c.n_embd, c.n_vocab);
  output_norm_ = last.vector("output_norm.weight", c.n_embd);
  if (!c.tied_embeddings)
    output_ = last.matrix("output.weight", c.n_embd, c.n_vocab);
  else
    output_ = backends_.size() == 1 ? token_embd_ : last.matrix("token_embd.weight", c.n_embd, c.n_vocab);
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Backend& be = backend(device_of(l));
    WeightLoader load(*file_, be, progress);
    LayerWeights L;
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
      L.fused_qkv = fuses_qkv(be, qkv->type, q_dim, c.kv_dim(), c.n_embd);
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
                  fuses_qkv(be, wq.type, q_dim, c.kv_dim(), c.n_embd) &&
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
    if (c.attn_out_bias) L.bo = load.vector(p + "attn_output.bias", c.n_embd);
    if (c.attention_sinks) L.attn_sinks = load.finite_vector(p + "attn_sinks.weight", c.n_head);
    if (c.qk_norm) {
      L.q_norm = load.vector(p + "attn_q_norm.weight", c.head_dim);
      L.k_norm = load.vector(p + "attn_k_norm.weight", c.head_dim);
    }
    }
    L.ffn_norm = load.vector(p + c.ffn_norm_name + ".weight", c.n_embd);
    if (c.post_norms) {
      L.attn_post_norm = load.vector(p + "post_attention_norm.weight", c.n_embd);
      L.ffn_post_norm = load.vector(p + "post_ffw_norm.weight", c.n_embd);
    }
    if (c.moe()) {
      // Experts: each a weight of its own (the products run over the rows that chose it).
      L.ffn_gate_inp = load.matrix(p + "ffn_gate_inp.weight", c.n_embd, c.n_expert);
      const GgufTensor& gate = file_->require_tensor(p + "ffn_gate_exps.weight");
      const GgufTensor& up = file_->require_tensor(p + "ffn_up_exps.weight");
      const GgufTensor& down = file_->require_tensor(p + "ffn_down_exps.weight");
      // gpt-oss: the router's bias and each projection's, a row per expert.
      const GgufTensor* biases[3] = {nullptr, nullptr, nullptr};
      if (c.expert_biases) {
        L.ffn_gate_inp_b = load.vector(p + "ffn_gate_inp.bias", c.n_expert);
        biases[0] = &file_->require_tensor(p + "ffn_gate_exps.bias");
        biases[1] = &file_->require_tensor(p + "ffn_up_exps.bias");
        biases[2] = &file_->require_tensor(p + "ffn_down_exps.bias");
      }
      for (int32_t e = 0; e < c.n_expert; ++e) {
        LayerWeights::Expert x{load.expert(gate, c.n_embd, c.n_ff_exp, c.n_expert, e),
                               load.expert(up, c.n_embd, c.n_ff_exp, c.n_expert, e),
                               load.expert(down, c.n_ff_exp, c.n_embd, c.n_expert, e)};
        if (c.expert_biases) {
          x.gate_b = load.expert_vector(*biases[0], c.n_ff_exp, c.n_expert, e);
          x.up_b = load.expert_vector(*biases[1], c.n_ff_exp, c.n_expert, e);
          x.down_b = load.expert_vector(*biases[2], c.n_embd, c.n_expert, e);
        }
        L.experts.push_back(x);
      }
      layers_.push_back(L);
      continue;
    }
    if (c.fused_tensors() && !file_->find_tensor(p + "ffn_gate.weight")) {
      // Phi-3: ffn_up holds the gate's n_ff rows, then the up projection's.
      const GgufTensor& gate_up = file_->require_tensor(p + "ffn_up.weight");
      if (fuses_gate_up(be, gate_up.type, c.n_ff, c.n_embd)) {
        L.w_gate = load.matrix(gate_up, c.n_embd, 2 * int64_t{c.n_ff});
      } else {
        L.w_gate = load.matrix_rows(gate_up, c.n_embd, 2 * int64_t{c.n_ff}, 0, c.n_ff);
        L.w_up = load.matrix_rows(gate_up, c.n_embd, 2 * int64_t{c.n_ff}, c.n_ff, c.n_ff);
      }
      L.w_down = load.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd);
      layers_.push_back(L);
      continue;
    }
    const GgufTensor& gate = file_->require_tensor(p + "ffn_gate.weight");
    const GgufTensor& up = file_->require_tensor(p + "ffn_up.weight");
    // (The fused gate-and-up kernels apply SwiGLU: a GeGLU model keeps them apart.)
    if (!c.gelu_ffn && gate.type == up.type && fuses_gate_up(be, gate.type, c.n_ff, c.n_embd)) {
      L.w_gate = load.stacked({{&gate, c.n_ff}, {&up, c.n_ff}}, c.n_embd);  // one weight; L.w_up stays empty
    } else {
      L.w_gate = load.matrix(gate, c.n_embd, c.n_ff);
      L.w_up = load.matrix(up, c.n_embd, c.n_ff);
    }
    L.w_down = load.matrix(p + "ffn_down.weight", c.n_ff, c.n_embd);
    layers_.push_back(L);
  }
  progress.set_total(progress.done());  // what loaded, should a tensor counted above not be one the model uses
  progress.finish();

  file_->check_intact();  // the weights read while loading were the file's
}

ModelWeights::~ModelWeights() = default;

std::string ModelWeights::placement() const {
  if (n_devices() == 1) return "";
  std::string text = "layers ";
  for (int32_t d = 0; d < n_devices(); ++d) {
    const int32_t first = first_layer(d), last = first + layer_count(d) - 1;
    if (d > 0) text += ", ";
    text += std::to_string(first);
    if (last > first) text.append("-").append(std::to_string(last));
    text.append(" on ").append(device_label(d));
  }
  return text;
}

std::string ModelWeights::device_label(int32_t device) const {
  const std::string name = backend(device).name();
  int32_t same = 0, before = 0;
  for (int32_t d = 0; d < n_devices(); ++d)
    if (backend(d).name() == name) {
      ++same;
      if (d < device) ++before;
    }
  return same > 1 ? name + " #" + std::to_string(before + 1) : name;
}

int32_t ModelWeights::device_of(int32_t layer) const {
  for (int32_t d = 0; d + 1 < n_devices(); ++d)
    if (layer < first_layer_[static_cast<size_t>(d) + 1]) return d;
  return n_devices() - 1;
}

KvCacheShape ModelWeights::kv_cache_shape(int32_t n_ctx, KvCacheType type, int32_t device, int32_t ring_step) const {
  const int32_t first = first_layer(device), count = layer_count(device);
  KvCacheShape shape{count, n_ctx, config_.kv_dim(), type};
  if (config_.mla()) {
    shape.key_dims.assign(config_.mla_rank_k.begin() + first, config_.mla_rank_k.begin() + first + count);
    shape.value_dims.assign(config_.mla_rank_v.begin() + first, config_.mla_rank_v.begin() + first + count);
  }
  if (config_.sliding_window > 0) {
    for (int32_t l = 0; l < count; ++l) shape.windows.push_back(config_.window_of(first + l));
    if (!config_.mla() && backend(device).capabilities().window_rings) shape.ring_step = std::max(ring_step, 0);
  }
  return shape;
}

std::vector<float> ModelWeights::recover_keys(int32_t layer, const std::vector<float>& stored, int32_t first,
                                              int32_t count, const RopeParams& rope) const {
  // Latent keys: recovered as the host backends' latent_attention recovers them.
  const ModelConfig& c = config_;
  const int64_t rank = c.mla_rank_k[static_cast<size_t>(layer)], kv_dim = c.kv_dim();
  const float* up = layers_[static_cast<size_t>(layer)].k_up_host;
  std::vector<float> keys(static_cast<size_t>(count) * static_cast<size_t>(kv_dim));
  for (int32_t i = 0; i < count; ++i)
    scalar::recover_key(up, stored.data() + int64_t{i} * rank, rank, c.n_head_kv, c.head_dim, first + i, rope,
                        keys.data() + int64_t{i} * kv_dim);
  return keys;
}

}  // namespace fafo
