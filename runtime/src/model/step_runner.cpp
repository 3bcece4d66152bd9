// The forward pass, written once against the Backend interface, and the step state it
// needs (StepRunner, fafo/step_runner.h). It reads top to bottom like llama2.c: embed
// (scaled: Gemma), then per layer RMSNorm -> QKV (-> per-head Q/K RMSNorm: Qwen3, Gemma 3)
// -> RoPE -> attention -> output projection (-> RMSNorm: Gemma) -> residual -> RMSNorm ->
// SwiGLU (GeGLU: Gemma) FFN (-> RMSNorm: Gemma) -> residual (a mixture of experts:
// Qwen3-MoE, gpt-oss); final norm and logits (soft-capped: Gemma 2).
#include <algorithm>
#include <chrono>
#include <map>
#include <stdexcept>
#include <vector>

#include "fafo/moe_routing.h"
#include "fafo/step_runner.h"

namespace fafo {

// One expert's rows of a step: its input (gathered), gate, up and output.
struct ExpertActivations {
  Activation in, gate, up, out;
};

namespace {

// The largest step whose experts run in groups (smaller ones are where a product per
// expert costs the most next to its work).
constexpr int64_t kGroupedRows = 16;

// A mixture-of-experts block in groups of sets.size() experts: each group's gate and up
// products handed to the backend at once (Backend::matmuls), then its down products;
// the same ops per expert as one by one, and the outputs added into x in the same
// (ascending expert) order, so the same values.
void run_expert_groups(Backend& be, const ModelConfig& c, const LayerWeights& L, const Activation& xn, Activation& x,
                       std::vector<ExpertActivations>& sets, const std::vector<ExpertRows>& experts) {
  std::vector<Backend::MatmulJob> jobs;
  for (size_t e0 = 0; e0 < experts.size(); e0 += sets.size()) {
    const size_t n = std::min(sets.size(), experts.size() - e0);
    jobs.clear();
    for (size_t i = 0; i < n; ++i) {
      const LayerWeights::Expert& expert = L.experts[static_cast<size_t>(experts[e0 + i].expert)];
      be.gather_rows(xn, experts[e0 + i].rows, sets[i].in);
      jobs.push_back({&expert.gate, &sets[i].in, &sets[i].gate});
      jobs.push_back({&expert.up, &sets[i].in, &sets[i].up});
    }
    be.matmuls(jobs);
    jobs.clear();
    for (size_t i = 0; i < n; ++i) {
      const LayerWeights::Expert& expert = L.experts[static_cast<size_t>(experts[e0 + i].expert)];
      if (c.expert_biases) {
        be.add_bias(expert.gate_b, sets[i].gate);
        be.add_bias(expert.up_b, sets[i].up);
      }
      be.gated(c.swiglu_oai_ffn ? GatedActivation::SwigluOai : GatedActivation::Silu, sets[i].gate, sets[i].up,
               sets[i].gate);
      jobs.push_back({&expert.down, &sets[i].gate, &sets[i].out});
    }
    be.matmuls(jobs);
    for (size_t i = 0; i < n; ++i) {
      const LayerWeights::Expert& expert = L.experts[static_cast<size_t>(experts[e0 + i].expert)];
      if (c.expert_biases) be.add_bias(expert.down_b, sets[i].out);
      be.scatter_add(sets[i].out, experts[e0 + i].rows, experts[e0 + i].weights, x);
    }
  }
}

}  // namespace

struct StepRunner::Buffers {
  // qkv holds the [queries | keys | values] of the layers whose projections are fused;
  // q, k, v those of the others. Each set is allocated only where a layer uses it.
  Activation x, xn, qkv, q, k, v, attn, proj, gate, up, ffn, last, last_norm, logits;
  // The normalized queries and keys (ModelConfig::qk_norm).
  Activation q_normed, k_normed;
  // An MLA model's latent keys and values, one buffer per width its layers use.
  std::map<int64_t, Activation> k_latent, v_latent;
  // A mixture-of-experts model's router logits, and one expert's rows: its input
  // (gathered), gate, up and output.
  Activation router, expert_in, expert_gate, expert_up, expert_out;
  // Where the backend batches products (BackendCapabilities::batches_matmuls): one set
  // of rows for each expert of a group (n_expert_used sets of kGroupedRows rows: its
  // input, gate, up and output), used in steps of up to kGroupedRows tokens, so that a
  // group's products go to the backend at once.
  std::vector<ExpertActivations> expert_sets;
};

StepRunner::StepRunner(std::shared_ptr<const GgufFile> file, std::unique_ptr<Backend> backend)
    : StepRunner(std::make_unique<ModelWeights>(std::move(file), std::move(backend))) {}

StepRunner::StepRunner(std::unique_ptr<ModelWeights> weights) : weights_(std::move(weights)) {
  if (!weights_) throw std::invalid_argument("StepRunner: no weights");
  const ModelConfig& c = config();
  const ModelWeights& w = *weights_;
  rope_ = c.rope;
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  const int64_t T = kMaxStepTokens;
  // Each device holds the activations of its layers' kinds; the last one the logits.
  for (int32_t d = 0; d < w.n_devices(); ++d) {
    Backend& be = w.backend(d);
    const auto first = w.layers().begin() + w.first_layer(d), end = first + w.layer_count(d);
    Buffers& b = *buffers_.emplace_back(std::make_unique<Buffers>());
    b.x = be.alloc_activation(T, c.n_embd);
    b.xn = be.alloc_activation(T, c.n_embd);
    const bool any_fused = std::any_of(first, end, [](const auto& L) { return L.fused_qkv; });
    const bool any_apart = std::any_of(first, end, [](const auto& L) { return !L.fused_qkv; });
    if (any_fused) b.qkv = be.alloc_activation(T, q_dim + 2 * c.kv_dim());
    if (any_apart) b.q = be.alloc_activation(T, q_dim);
    if (any_apart && !c.mla()) {  // an MLA model's keys and values are latents (k_latent, v_latent)
      b.k = be.alloc_activation(T, c.kv_dim());
      b.v = be.alloc_activation(T, c.kv_dim());
    }
    if (c.mla()) {
      for (int32_t l = w.first_layer(d); l < w.first_layer(d) + w.layer_count(d); ++l) {
        const int32_t rk = c.mla_rank_k[static_cast<size_t>(l)], rv = c.mla_rank_v[static_cast<size_t>(l)];
        if (!b.k_latent.count(rk)) b.k_latent[rk] = be.alloc_activation(T, rk);
        if (!b.v_latent.count(rv)) b.v_latent[rv] = be.alloc_activation(T, rv);
      }
    }
    if (c.qk_norm) {
      b.q_normed = be.alloc_activation(T, q_dim);
      b.k_normed = be.alloc_activation(T, c.kv_dim());
    }
    b.attn = be.alloc_activation(T, q_dim);
    b.proj = be.alloc_activation(T, c.n_embd);
    if (c.moe()) {
      b.router = be.alloc_activation(T, c.n_expert);
      b.expert_in = be.alloc_activation(T, c.n_embd);
      b.expert_gate = be.alloc_activation(T, c.n_ff_exp);
      b.expert_up = be.alloc_activation(T, c.n_ff_exp);
      b.expert_out = be.alloc_activation(T, c.n_embd);
      if (be.capabilities().batches_matmuls)
        for (int32_t i = 0; i < c.n_expert_used; ++i)
          b.expert_sets.push_back({be.alloc_activation(kGroupedRows, c.n_embd), be.alloc_activation(kGroupedRows, c.n_ff_exp),
                                   be.alloc_activation(kGroupedRows, c.n_ff_exp),
                                   be.alloc_activation(kGroupedRows, c.n_embd)});
    } else {
      b.gate = be.alloc_activation(T, c.n_ff);
      b.up = be.alloc_activation(T, c.n_ff);
      b.ffn = be.alloc_activation(T, c.n_embd);
    }
  }
  Backend& be = w.backend();
  Buffers& b = *buffers_.back();
  b.last = be.alloc_activation(T, c.n_embd);
  b.last_norm = be.alloc_activation(T, c.n_embd);
  // A step's logits are computed only for its logit rows; where a device buffer cannot
  // hold 512 rows of a large vocabulary (lavapipe: 128 MiB, 261 rows of 128256 floats),
  // steps are limited to the rows it can hold.
  max_logit_rows_ = static_cast<int32_t>(std::min<int64_t>(T, be.max_activation_rows(c.n_vocab)));
  if (max_logit_rows_ < 1)
    throw std::runtime_error("one row of " + std::to_string(c.n_vocab) + " logits does not fit in a buffer of the " +
                             be.name() + " backend");
  b.logits = be.alloc_activation(max_logit_rows_, c.n_vocab);
}

StepRunner::~StepRunner() = default;

namespace {
// Whether a sequence of n_ctx entries takes LongRoPE's long factors: as llama.cpp picks
// them, from the context rounded up to a multiple of 256 (llama_context pads it so).
bool takes_long_factors(int32_t n_ctx, int32_t original_ctx) {
  return (int64_t{n_ctx} + 255) / 256 * 256 > original_ctx;
}
}  // namespace

void StepRunner::use_context(int32_t n_ctx) {
  const ModelConfig& c = config();
  if (c.rope_factors_short.empty()) return;
  const bool long_context = takes_long_factors(n_ctx, c.rope_original_ctx);
  if (rope_factor_users_[long_context ? 0 : 1] > 0)
    throw std::invalid_argument("a context of " + std::to_string(n_ctx) + " needs the " +
                                (long_context ? "long" : "short") + " RoPE factors of " + weights_->file().path() +
                                ", but a sequence on these weights uses the other ones (contexts of up to " +
                                std::to_string(c.rope_original_ctx) +
                                ", rounded up to a multiple of 256, use the short factors)");
  if (rope_factor_users_[long_context ? 1 : 0]++ == 0)
    rope_.freq_factors = long_context ? c.rope_factors_long : c.rope_factors_short;
}

void StepRunner::release_context(int32_t n_ctx) {
  const ModelConfig& c = config();
  if (c.rope_factors_short.empty()) return;
  --rope_factor_users_[takes_long_factors(n_ctx, c.rope_original_ctx) ? 1 : 0];
}

const RopeParams& StepRunner::rope_of(int32_t layer) const {
  return config().window_layer(layer) ? config().rope_swa : rope_;
}

const Activation& StepRunner::logits() const { return buffers_.back()->logits; }

BackendCapabilities StepRunner::capabilities() const {
  BackendCapabilities all = backend().capabilities();
  for (int32_t d = 0; d + 1 < weights_->n_devices(); ++d) {
    const BackendCapabilities c = weights_->backend(d).capabilities();
    all.max_step_sequences = std::min(all.max_step_sequences, c.max_step_sequences);
    all.latent_attention = all.latent_attention && c.latent_attention;
    all.executes_immediately = all.executes_immediately && c.executes_immediately;
    all.batches_matmuls = all.batches_matmuls && c.batches_matmuls;
  }
  return all;
}

std::string StepRunner::why_no_attention_input_tap() const {
  for (int32_t d = 0; d < weights_->n_devices(); ++d)
    if (!weights_->backend(d).capabilities().executes_immediately)
      return "the " + weights_->backend(d).name() + " backend cannot show a step's attention inputs (use reference or cpu)";
  for (int32_t l = 0; l < config().n_layer; ++l)
    if (weights_->layer(l).fused_qkv)
      return "the " + weights_->backend(weights_->device_of(l)).name() +
             " backend fuses the attention projections (use the reference backend)";
  return "";
}

std::vector<float> StepRunner::recover_keys(int32_t layer, const std::vector<float>& stored, int32_t first,
                                            int32_t count) const {
  return weights_->recover_keys(layer, stored, first, count, rope_of(layer));
}

void StepRunner::record_step(const StepBatch& batch, std::span<const std::vector<KvCache*>> parts,
                             const AttentionInputTap& tap) {
  const ModelConfig& c = config();
  const ModelWeights& w = *weights_;
  if (tap && parts.size() != 1) throw std::invalid_argument("record_step: an attention input tap in a joined step");
  for (const std::vector<KvCache*>& p : parts)
    if (p.size() != static_cast<size_t>(w.n_devices()))
      throw std::invalid_argument("record_step: a sequence without a KV cache on every device of the split");
  std::vector<KvCache*> caches(parts.size());
  std::vector<float> hidden;  // the residual stream crossing to the next device
  split_seconds_.assign(static_cast<size_t>(w.n_devices() - 1), 0.0);
  experts_run_ = 0;
  for (int32_t d = 0; d < w.n_devices(); ++d) {
    const auto device_start = std::chrono::steady_clock::now();
    Backend& be = w.backend(d);
    Buffers& b = *buffers_[static_cast<size_t>(d)];
    const int32_t first = w.first_layer(d);
    for (size_t s = 0; s < parts.size(); ++s) caches[s] = parts[s][static_cast<size_t>(d)];
    // Each sequence's cache keeps its part's keys and values (and the queries its policy
    // asked for), in the device's cache at the layer's index there.
    const auto store = [&](int32_t l, const Activation& k, const Activation& v, const Activation& q) {
      for (KvCache* kv : caches) {
        kv->store(l - first, k, v);
        if (!kv->captured_rows().empty()) kv->capture_queries(l - first, q);
      }
    };
    // Hands the step's attention inputs of layer l to tap.
    const auto tap_attention_input = [&](int32_t l) {
      const std::vector<float> xn = be.read_rows(b.xn, batch.size());
      tap(l, xn.data(), batch.size(), c.n_embd);
    };

    if (d > 0) be.write_rows(b.x, hidden);
    be.begin_step(batch, caches);
    if (d == 0) {
      be.embed(w.token_embd(), b.x);
      if (c.embedding_scale > 0.0f) be.map(ElementMap::Scale, b.x, c.embedding_scale);
    }
    for (int32_t l = first; l < first + w.layer_count(d); ++l) {
      const LayerWeights& L = w.layer(l);
      const AttentionShape shape{c.n_head,        c.n_head_kv,     c.head_dim, c.attention_scale(),
                                 c.attn_softcap,  c.window_of(l),  L.attn_sinks};
      const RopeParams& rope = rope_of(l);
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
        be.latent_attention(l - first, b.q, shape, L.k_up, L.v_up, rope, b.attn);
      } else if (L.fused_qkv) {
        run_matmul_norm(be, L.wq, b.x, L.attn_norm, c.rms_eps, b.xn, b.qkv);
        if (c.qkv_bias) be.add_bias(L.bq, b.qkv);
        be.fusions()->rope_store(l - first, b.qkv, shape, rope);  // (fused_qkv: the backend said it fuses, at load)
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
        be.attention(l - first, q, shape, b.attn);
      }
      if (c.post_norms) {  // the block's output normalized before the residual
        be.matmul(L.wo, b.attn, b.proj);
        be.rms_norm(b.proj, L.attn_post_norm, c.rms_eps, b.xn);
        be.add(b.x, b.xn);
      } else if (c.attn_out_bias) {
        be.matmul(L.wo, b.attn, b.proj);
        be.add_bias(L.bo, b.proj);
        be.add(b.x, b.proj);
      } else {
        run_matmul_add(be, L.wo, b.attn, b.x, b.proj);
      }
      // Feed-forward block.
      if (c.moe()) {
        // A mixture of experts: the router's logits are read back (the step runs to
        // here), each row picks its experts on the host, and each chosen expert's
        // products run over the rows that chose it, added into the residual stream
        // weighted by the router.
        // (gpt-oss: the router and every projection add a bias, the k largest logits
        // are weighted by their softmax, and the activation is the clamped SwiGLU.)
        be.rms_norm(b.x, L.ffn_norm, c.rms_eps, b.xn);
        be.matmul(L.ffn_gate_inp, b.xn, b.router);
        if (c.expert_biases) be.add_bias(L.ffn_gate_inp_b, b.router);
        be.sync_step();
        const std::vector<float> router = be.read_rows(b.router, batch.size());
        const MoeRoute route = c.moe_softmax_of_chosen ? route_top_k_then_softmax(router, c.n_expert, c.n_expert_used)
                                                       : route_top_k_softmax(router, c.n_expert, c.n_expert_used);
        const std::vector<ExpertRows> experts = rows_by_expert(route);
        experts_run_ += static_cast<int64_t>(experts.size());
        if (!b.expert_sets.empty() && static_cast<int64_t>(batch.size()) <= kGroupedRows) {
          run_expert_groups(be, c, L, b.xn, b.x, b.expert_sets, experts);
          continue;
        }
        for (const ExpertRows& e : experts) {
          const LayerWeights::Expert& expert = L.experts[static_cast<size_t>(e.expert)];
          be.gather_rows(b.xn, e.rows, b.expert_in);
          if (c.expert_biases || c.swiglu_oai_ffn) {
            be.matmul(expert.gate, b.expert_in, b.expert_gate);
            be.matmul(expert.up, b.expert_in, b.expert_up);
            if (c.expert_biases) {
              be.add_bias(expert.gate_b, b.expert_gate);
              be.add_bias(expert.up_b, b.expert_up);
            }
            be.gated(c.swiglu_oai_ffn ? GatedActivation::SwigluOai : GatedActivation::Silu, b.expert_gate, b.expert_up,
                     b.expert_gate);
            be.matmul(expert.down, b.expert_gate, b.expert_out);
            if (c.expert_biases) be.add_bias(expert.down_b, b.expert_out);
          } else {
            run_matmul_swiglu(be, expert.gate, expert.up, b.expert_in, b.expert_gate, b.expert_up);
            be.matmul(expert.down, b.expert_gate, b.expert_out);
          }
          be.scatter_add(b.expert_out, e.rows, e.weights, b.x);
        }
        continue;
      }
      if (c.gelu_ffn) {
        be.rms_norm(b.x, L.ffn_norm, c.rms_eps, b.xn);
        be.matmul(L.w_gate, b.xn, b.gate);
        be.matmul(L.w_up, b.xn, b.up);
        be.gated(GatedActivation::GeluTanh, b.gate, b.up, b.gate);
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
    if (d + 1 < w.n_devices()) {  // the residual stream goes on to the next device
      be.finish_step();
      hidden = be.read_rows(b.x, batch.size());
      split_seconds_[static_cast<size_t>(d)] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - device_start).count();
      continue;
    }
    const auto& rows = batch.logit_rows();
    be.gather_rows(b.x, rows, b.last);
    run_matmul_norm(be, w.output(), b.last, w.output_norm(), c.rms_eps, b.last_norm, b.logits);
    if (c.final_softcap > 0.0f) be.map(ElementMap::Softcap, b.logits, c.final_softcap);
  }
}

}  // namespace fafo
