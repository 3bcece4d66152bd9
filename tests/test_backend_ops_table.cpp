// The op-conformance table's cases (run by test_backend_ops.cpp): every op of the backend
// contract over odd shapes, each weight format, rope and attention variant, at step sizes T.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "backend_ops_table.h"
#include "fafo/top_k.h"

using namespace fafo;
using namespace fafo::test;

namespace {

const std::vector<int32_t> kSteps = {1, 2, 3, 8, 9, 31, 64, 257};
// For the costlier shapes (long contexts, wide rows).
const std::vector<int32_t> kShortSteps = {1, 2, 3, 8, 9, 31};

constexpr TensorType kFormats[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q8_0,
                                   TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                   TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                                   TensorType::Q6_K, TensorType::IQ4_NL, TensorType::IQ4_XS, TensorType::MXFP4, TensorType::IQ2_XXS, TensorType::IQ2_XS, TensorType::IQ3_XXS, TensorType::IQ3_S};

// --- the table -------------------------------------------------------------------------

void add_embed_and_matmul(std::vector<OpCase>& cases) {
  for (const TensorType type : kFormats) {
    const int64_t block = tensor_type_info(type).block_size;
    const std::string fmt = lower(tensor_type_name(type));
    // Shapes: a few blocks, odd row counts; one wide shape of 2 x 256-value superblocks.
    struct Shape {
      int64_t rows, cols;
    };
    std::vector<Shape> shapes = {{67, block == 1 ? 45 : (block == 32 ? 96 : 256)}, {5, block == 1 ? 300 : 512}};
    for (const Shape s : shapes) {
      const std::string shape = std::to_string(s.rows) + "x" + std::to_string(s.cols);
      cases.push_back({"matmul", fmt + " " + shape, kSteps, [=](OpEnv& env, int32_t T, uint32_t salt) {
                         env.ensure_cache(T + 1);
                         Backend& be = env.be();
                         const Weight w = quantized_weight(env, type, s.rows, s.cols, 11);
                         StepBatch b = causal_batch(T, 0);
                         be.begin_step(b, env.kv());
                         Activation x = input(env, "x", s.cols, 1, T, salt);
                         Activation out = env.activation("out", s.rows);
                         be.matmul(w, x, out);
                         be.finish_step();
                         return OpOutputs{rows_of(be, "matmul", out, T)};
                       },
                       block > 1, type == TensorType::F16, type == TensorType::BF16});
    }
    // matmul_add: a residual add after the product (fused by backends that can), for the
    // formats models store their output projections in (each format's kernel compiles
    // in its own pipeline on Vulkan, which costs seconds on lavapipe).
    const bool residual_format = type == TensorType::F32 || type == TensorType::F16 || type == TensorType::Q8_0 ||
                                 type == TensorType::Q4_K || type == TensorType::Q6_K;
    if (residual_format)
      cases.push_back({"matmul_add", fmt + " 67x" + std::to_string(shapes[0].cols), kSteps,
                     [=](OpEnv& env, int32_t T, uint32_t salt) {
                       env.ensure_cache(T + 1);
                       Backend& be = env.be();
                       const Weight w = quantized_weight(env, type, 67, shapes[0].cols, 11);
                       StepBatch b = causal_batch(T, 0);
                       be.begin_step(b, env.kv());
                       Activation x = input(env, "x", shapes[0].cols, 1, T, salt);
                       Activation acc = input(env, "acc", 67, 2, T, salt);
                       Activation scratch = env.activation("out", 67);
                       run_matmul_add(be, w, x, acc, scratch);
                       be.finish_step();
                       return OpOutputs{rows_of(be, "matmul_add", acc, T)};
                     },
                     block > 1, type == TensorType::F16, type == TensorType::BF16});
    // matmul_swiglu: the feed-forward gate (one kernel where the backend fuses it).
    if (residual_format || type == TensorType::Q5_K) {
      cases.push_back({"matmul_swiglu", fmt + " 2 x 19x" + std::to_string(shapes[0].cols), kSteps,
                       [=](OpEnv& env, int32_t T, uint32_t salt) {
                         env.ensure_cache(T + 1);
                         Backend& be = env.be();
                         const int64_t rows = 19, cols = shapes[0].cols;
                         const auto [gate, up] = gate_and_up(env, type, rows, cols, fuses_gate_up(be, type, rows, cols));
                         StepBatch b = causal_batch(T, 0);
                         be.begin_step(b, env.kv());
                         // Small inputs: the error of the product of two products (each with
                         // 8-bit activations on the cpu backend) then stays within the
                         // tolerance of one, measured against max(1, |reference|).
                         Activation x = input(env, "x", cols, 1, T, salt, -0.25f, 0.25f);
                         Activation out = env.activation("out", rows);
                         Activation scratch = env.activation("scratch", rows);
                         run_matmul_swiglu(be, gate, up, x, out, scratch);
                         be.finish_step();
                         return OpOutputs{rows_of(be, "matmul_swiglu", out, T)};
                       },
                       block > 1, type == TensorType::F16, type == TensorType::BF16});
    }
    // embed: tokens are hashed rows of a 97-row table (repeats included).
    const int64_t cols = block == 1 ? 45 : 2 * block;
    cases.push_back({"embed", fmt + " 97x" + std::to_string(cols), kSteps, [=](OpEnv& env, int32_t T, uint32_t salt) {
                       env.ensure_cache(T + 1);
                       Backend& be = env.be();
                       const Weight table = quantized_weight(env, type, 97, cols, 12);
                       std::vector<int32_t> tokens;
                       for (int32_t i = 0; i < T; ++i)
                         tokens.push_back(static_cast<int32_t>(hashed_int(salt && i >= T / 2 ? 14 : 13, i) % 97));
                       StepBatch b = StepBatch::causal(tokens, 0, true);
                       be.begin_step(b, env.kv());
                       Activation out = env.activation("out", cols);
                       be.embed(table, out);
                       be.finish_step();
                       return OpOutputs{rows_of(be, "embed", out, T)};
                     }});
  }
}

void add_elementwise(std::vector<OpCase>& cases) {
  for (const int64_t n : {45, 1000}) {
    const std::string shape = "n=" + std::to_string(n);
    cases.push_back({"rms_norm", shape, kSteps, [=](OpEnv& env, int32_t T, uint32_t salt) {
                       env.ensure_cache(T + 1);
                       Backend& be = env.be();
                       const Weight gain = vector_weight(env, n, 3, 0.5f, 1.5f);
                       StepBatch b = causal_batch(T, 0);
                       be.begin_step(b, env.kv());
                       Activation x = input(env, "x", n, 1, T, salt, -2.0f, 2.0f);
                       Activation out = env.activation("out", n);
                       be.rms_norm(x, gain, 1e-5f, out);
                       be.finish_step();
                       return OpOutputs{rows_of(be, "rms_norm", out, T)};
                     }});
  }
  // head_norm: each head of a row normalized alone (Qwen3's Q and K norms), heads of a
  // width past one warp's 32 lanes and of an odd width.
  for (const std::pair<int32_t, int64_t>& heads : {std::pair<int32_t, int64_t>{3, 128}, {5, 45}}) {
    const int32_t n_heads = heads.first;
    const int64_t width = heads.second;
    const std::string shape = std::to_string(n_heads) + " heads of " + std::to_string(width);
    cases.push_back({"head_norm", shape, kSteps, [=](OpEnv& env, int32_t T, uint32_t salt) {
                       env.ensure_cache(T + 1);
                       Backend& be = env.be();
                       const int64_t n = n_heads * width;
                       const Weight gain = vector_weight(env, width, 5, 0.5f, 1.5f);
                       StepBatch b = causal_batch(T, 0);
                       be.begin_step(b, env.kv());
                       Activation x = input(env, "x", n, 1, T, salt, -2.0f, 2.0f);
                       Activation out = env.activation("out", n);
                       be.head_norm(x, n_heads, gain, 1e-6f, out);
                       be.finish_step();
                       return OpOutputs{rows_of(be, "head_norm", out, T)};
                     }});
  }
  cases.push_back({"add_bias", "n=45", kSteps, [](OpEnv& env, int32_t T, uint32_t salt) {
                     env.ensure_cache(T + 1);
                     Backend& be = env.be();
                     const Weight bias = vector_weight(env, 45, 4, -1.0f, 1.0f);
                     StepBatch b = causal_batch(T, 0);
                     be.begin_step(b, env.kv());
                     Activation x = input(env, "x", 45, 1, T, salt);
                     be.add_bias(bias, x);
                     be.finish_step();
                     return OpOutputs{rows_of(be, "add_bias", x, T)};
                   }});
  // A gated activation of 45 gates in [-gate, gate] and ups in [-up, up].
  const auto gated = [&](const char* op, GatedActivation act, float gate, float up) {
    cases.push_back({op, "n=45", kSteps, [=](OpEnv& env, int32_t T, uint32_t salt) {
                       env.ensure_cache(T + 1);
                       Backend& be = env.be();
                       StepBatch b = causal_batch(T, 0);
                       be.begin_step(b, env.kv());
                       Activation g = input(env, "x", 45, 1, T, salt, -gate, gate);
                       Activation u = input(env, "y", 45, 2, T, salt, -up, up);
                       Activation out = env.activation("out", 45);
                       be.gated(act, g, u, out);
                       be.finish_step();
                       return OpOutputs{rows_of(be, op, out, T)};
                     }});
  };
  gated("swiglu", GatedActivation::Silu, 6.0f, 1.0f);
  // gpt-oss's clamped SwiGLU: gates and ups past the clamps at 7 both ways.
  gated("swiglu_oai", GatedActivation::SwigluOai, 12.0f, 9.0f);
  // Gemma's ops: the GeGLU gate over the tanh's saturation (|x| up to 12), the
  // embedding scale, and soft-capping of values far past the cap and near it.
  gated("geglu", GatedActivation::GeluTanh, 12.0f, 1.0f);
  cases.push_back({"scale", "n=45 by 48", kSteps, [](OpEnv& env, int32_t T, uint32_t salt) {
                     env.ensure_cache(T + 1);
                     Backend& be = env.be();
                     StepBatch b = causal_batch(T, 0);
                     be.begin_step(b, env.kv());
                     Activation x = input(env, "x", 45, 1, T, salt);
                     be.map(ElementMap::Scale, x, std::sqrt(2304.0f));
                     be.finish_step();
                     return OpOutputs{rows_of(be, "scale", x, T)};
                   }});
  cases.push_back({"softcap", "n=45 at 30", kSteps, [](OpEnv& env, int32_t T, uint32_t salt) {
                     env.ensure_cache(T + 1);
                     Backend& be = env.be();
                     StepBatch b = causal_batch(T, 0);
                     be.begin_step(b, env.kv());
                     Activation x = input(env, "x", 45, 1, T, salt, -400.0f, 400.0f);
                     be.map(ElementMap::Softcap, x, 30.0f);
                     be.finish_step();
                     return OpOutputs{rows_of(be, "softcap", x, T)};
                   }});
  cases.push_back({"add", "n=45", kSteps, [](OpEnv& env, int32_t T, uint32_t salt) {
                     env.ensure_cache(T + 1);
                     Backend& be = env.be();
                     StepBatch b = causal_batch(T, 0);
                     be.begin_step(b, env.kv());
                     Activation x = input(env, "x", 45, 1, T, salt);
                     Activation y = input(env, "y", 45, 2, T, salt);
                     be.add(x, y);
                     be.finish_step();
                     return OpOutputs{rows_of(be, "add", x, T)};
                   }});
  // gather: chosen rows (last, first, middle) then ops that read the gathered rows.
  cases.push_back({"gather", "n=45 -> rms_norm, matmul q8_0 33x64", kSteps, [](OpEnv& env, int32_t T, uint32_t salt) {
                     env.ensure_cache(T + 1);
                     Backend& be = env.be();
                     const Weight gain = vector_weight(env, 64, 3, 0.5f, 1.5f);
                     const Weight w = quantized_weight(env, TensorType::Q8_0, 33, 64, 5);
                     const std::vector<int32_t> rows = {T - 1, 0, T / 2};
                     StepBatch b = causal_batch(T, 0);
                     be.begin_step(b, env.kv());
                     Activation x = input(env, "x", 64, 1, T, salt);
                     Activation g = env.activation("gathered", 64);
                     Activation n = env.activation("gathered_norm", 64);
                     Activation m = env.activation("gathered_matmul", 33);
                     be.gather_rows(x, rows, g);
                     be.rms_norm(g, gain, 1e-5f, n);
                     be.matmul(w, n, m);
                     be.finish_step();
                     return OpOutputs{rows_of(be, "gathered", g, 3, false), rows_of(be, "rms_norm", n, 3, false),
                                      rows_of(be, "matmul", m, 3, false)};
                   },
                   true});
  // scatter_add as a mixture-of-experts layer runs it: a product read back inside the
  // step (sync_step), then four experts' SwiGLU blocks (gate and up, down), each over the
  // rows routed to it (gathered into one buffer again and again in the step; one
  // expert's rows in descending order; the last expert's every row, after experts of
  // fewer), added into the residual weighted. Rows route by their index, so a row's
  // result depends on nothing else.
  cases.push_back({"scatter_add", "4 experts q8_0 32x64 / 40x32 over routed rows, after sync_step", kSteps,
                   [](OpEnv& env, int32_t T, uint32_t salt) {
                     env.ensure_cache(T + 1);
                     Backend& be = env.be();
                     const Weight router = quantized_weight(env, TensorType::F32, 3, 64, 40);
                     StepBatch b = causal_batch(T, 0);
                     be.begin_step(b, env.kv());
                     // (Inputs small enough that the SwiGLU blocks stay near 1: the 8-bit
                     // rounding of the integer products then stays within their tolerance.)
                     Activation x = input(env, "x", 64, 1, T, salt, -0.125f, 0.125f);
                     Activation residual = input(env, "residual", 40, 2, T, salt);
                     Activation logits = env.activation("router", 3);
                     be.matmul(router, x, logits);
                     be.sync_step();
                     OpOutput read;
                     read.name = "router read inside the step";
                     read.rows = T;
                     read.cols = 3;
                     read.values = be.read_rows(logits, T);
                     Activation in = env.activation("expert_in", 64);
                     Activation gate = env.activation("expert_gate", 32);
                     Activation up = env.activation("expert_up", 32);
                     Activation out = env.activation("expert_out", 40);
                     for (int32_t e = 0; e < 4; ++e) {
                       std::vector<int32_t> rows;
                       std::vector<float> weights;
                       for (int32_t r = 0; r < T; ++r)
                         if (e == 3 || r % 3 != e) {
                           rows.push_back(r);
                           weights.push_back(0.25f + 0.125f * static_cast<float>((r + e) % 5));
                         }
                       if (rows.empty()) continue;
                       if (e == 0) {
                         std::reverse(rows.begin(), rows.end());
                         std::reverse(weights.begin(), weights.end());
                       }
                       const auto seed = static_cast<uint32_t>(50 + 3 * e);
                       be.gather_rows(x, rows, in);
                       run_matmul_swiglu(be, quantized_weight(env, TensorType::Q8_0, 32, 64, seed),
                                         quantized_weight(env, TensorType::Q8_0, 32, 64, seed + 1), in, gate, up);
                       be.matmul(quantized_weight(env, TensorType::Q8_0, 40, 32, seed + 2), gate, out);
                       be.scatter_add(out, rows, weights, residual);
                     }
                     be.finish_step();
                     return OpOutputs{read, rows_of(be, "scatter_add", residual, T)};
                   },
                   true});
}

void add_rope(std::vector<OpCase>& cases) {
  struct Variant {
    const char* name;
    int32_t n_heads, head_dim, n_dims;
    bool neox;
    float freq_base, freq_scale;
    bool factors;
    float attn_factor = 1.0f;
  };
  const Variant variants[] = {
      {"normal 3x16", 3, 16, 16, false, 10000.0f, 1.0f, false},
      {"neox partial 3x32 (24 rotated), LongRoPE factors, attention factor 1.19 (Phi-4-mini)", 3, 32, 24, true, 10000.0f,
       1.0f, true, 1.19f},
      {"neox partial 2x20 (12 rotated), linear scaling 0.25", 2, 20, 12, true, 1000000.0f, 0.25f, false},
      {"normal 5x64 with rope_freqs (llama 3.1)", 5, 64, 64, false, 500000.0f, 1.0f, true},
      {"neox 1x128 with rope_freqs", 1, 128, 128, true, 500000.0f, 1.0f, true},
  };
  for (const Variant v : variants) {
    cases.push_back({"rope", v.name, kSteps, [=](OpEnv& env, int32_t T, uint32_t salt) {
                       env.ensure_cache(T + 1);
                       Backend& be = env.be();
                       RopeParams p;
                       p.n_dims = v.n_dims;
                       p.freq_base = v.freq_base;
                       p.freq_scale = v.freq_scale;
                       p.neox = v.neox;
                       p.attn_factor = v.attn_factor;
                       if (v.factors)
                         for (int32_t i = 0; i < v.n_dims / 2; ++i) p.freq_factors.push_back(hashed_value(4, i, 0, 1.0f, 8.0f));
                       // Positions far from the row index (FAFO's guesses sit at any position).
                       StepBatch b;
                       for (int32_t i = 0; i < T; ++i) {
                         b.add(i, static_cast<int32_t>(hashed_int(salt && i >= T / 2 ? 6 : 5, i) % 30000), {}, true);
                       }
                       be.begin_step(b, env.kv());
                       const int64_t cols = int64_t{v.n_heads} * v.head_dim;
                       Activation x = input(env, "x", cols, 9, T, salt, -2.0f, 2.0f);
                       be.rope(x, v.n_heads, v.head_dim, p);
                       be.finish_step();
                       return OpOutputs{rows_of(be, "rope", x, T)};
                     }});
  }
}

// Attention over a cache of n_past committed entries written with KvCache::write, after
// a step that stores its own rows' keys; two layers, so dense-layer cases read both ways.
struct AttentionVariant {
  std::string name;
  int32_t n_past, n_head, n_head_kv, head_dim;
  bool random_masks, compressed, permuted;
  int32_t region, dense_layers;
  KvCacheType type;
  std::vector<int32_t> steps;
  float softcap = 0.0f;  // AttentionShape::softcap (Gemma 2's soft-capped scores)
  int32_t window = 0;    // AttentionShape::window (sliding-window layers)
  // > 0: layer 0's cache is a ring for steps of this many tokens (KvCacheShape::ring; a
  // window of `window`), layer 1's the whole context with the same window.
  int32_t ring_step = 0;
  bool sinks = false;  // AttentionShape::sinks (gpt-oss): a hashed sink per head, from -1 to 3
};

OpOutputs run_attention(OpEnv& env, const AttentionVariant& v, int32_t T, uint32_t salt) {
  Backend& be = env.be();
  const int32_t kv_dim = v.n_head_kv * v.head_dim, q_dim = v.n_head * v.head_dim;
  KvCacheShape cache_shape{2, v.n_past + 260, kv_dim, v.type};
  if (v.ring_step > 0) {
    cache_shape.windows = {v.window, 0};
    cache_shape.ring_step = v.ring_step;
  }
  KvCache& kv = env.make_cache(cache_shape);
  for (int32_t layer = 0; layer < 2 && v.n_past > 0; ++layer) {
    std::vector<float> k(static_cast<size_t>(v.n_past) * kv_dim), val(k.size());
    for (int32_t j = 0; j < v.n_past; ++j)
      for (int32_t c = 0; c < kv_dim; ++c) {
        k[static_cast<size_t>(j) * kv_dim + c] = hashed_value(100 + layer, j, c, -1.5f, 1.5f);
        val[static_cast<size_t>(j) * kv_dim + c] = hashed_value(200 + layer, j, c);
      }
    kv.write(layer, 0, v.n_past, k.data(), val.data());
  }
  kv.reset_layout(v.region, v.dense_layers, v.n_past);
  if (v.permuted) {
    // A hashed choice of entries into the region: exchanges slots, so the logical
    // order FULL rows visit differs from the physical one.
    std::vector<int32_t> order(static_cast<size_t>(v.n_past));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [](int32_t a, int32_t b) { return hashed_int(8, a) < hashed_int(8, b); });
    order.resize(static_cast<size_t>(std::min(v.region, v.n_past)));
    kv.select(order);
  }
  // Row i's mask, prefix view and position depend on i only, so a row sees the same at every T.
  StepBatch b;
  for (int32_t i = 0; i < T; ++i) {
    std::vector<int32_t> sees;
    for (int32_t j = 0; j < i; ++j)
      if (!v.random_masks || hashed_int(21, i, j) % 3 != 0) sees.push_back(j);
    const PrefixView view = v.compressed && hashed_int(22, i) % 2 == 0 ? PrefixView::Compressed : PrefixView::Full;
    const int32_t pos = v.n_past + (v.random_masks ? static_cast<int32_t>(hashed_int(23, i) % 7) + i / 2 : i);
    b.add(i, pos, sees, true, view);
  }
  b.set_n_past(v.n_past);
  const AttentionShape shape{v.n_head,  v.n_head_kv, v.head_dim, 1.0f / std::sqrt(static_cast<float>(v.head_dim)),
                             v.softcap, v.window,    v.sinks ? vector_weight(env, v.n_head, 31, -1.0f, 3.0f) : Weight{}};
  be.begin_step(b, env.kv());
  Activation q = input(env, "q", q_dim, 7, T, salt, -1.5f, 1.5f);
  Activation k = input(env, "k", kv_dim, 8, T, salt, -1.5f, 1.5f);
  Activation val = input(env, "v", kv_dim, 9, T, salt);
  Activation o0 = env.activation("attn0", q_dim), o1 = env.activation("attn1", q_dim);
  kv.store(0, k, val);
  kv.store(1, k, val);
  be.attention(0, q, shape, o0);
  be.attention(1, q, shape, o1);
  be.finish_step();
  return {rows_of(be, "layer 0", o0, T), rows_of(be, "layer 1", o1, T)};
}

void add_attention(std::vector<OpCase>& cases) {
  std::vector<AttentionVariant> variants = {
      {"first tokens, MHA 4x16", 0, 4, 4, 16, false, false, false, 0, 0, KvCacheType::F32, kSteps},
      {"prefill after 13, GQA 6/2 x 20", 13, 6, 2, 20, false, false, false, 0, 0, KvCacheType::F32, kSteps},
      {"random in-step masks, 6/3 x 8", 37, 6, 3, 8, true, false, false, 0, 0, KvCacheType::F32, kSteps},
      {"FAFO-like: COMPRESSED rows, region 68 of 300", 300, 4, 1, 64, true, true, false, 68, 0, KvCacheType::F32, kShortSteps},
      {"permuted logical order, dense first layer", 300, 4, 2, 32, true, true, true, 40, 1, KvCacheType::F32, kSteps},
      {"region larger than the prefix, head 256", 90, 2, 2, 256, true, true, true, 200, 0, KvCacheType::F32, kShortSteps},
      // A region of 100, so the selection permutes the logical order the FULL rows visit
      // (with no region nothing is exchanged).
      // T = 64 too: a split of the keys that depended on T would differ from T = 1's here.
      {"long context split into parts, permuted, 8/2 x 128", 2500, 8, 2, 128, false, false, true, 100, 0, KvCacheType::F32,
       {1, 2, 3, 8, 9, 64}},
      {"tiny region, both layers dense", 1200, 3, 1, 24, true, true, false, 1, 2, KvCacheType::F32, kShortSteps},
  };
  // The same with an f16 cache (every backend computes with the same rounded values).
  for (size_t i : {1u, 3u, 4u, 5u, 6u}) {
    AttentionVariant v = variants[i];
    v.name += ", f16 cache";
    v.type = KvCacheType::F16;
    variants.push_back(v);
  }
  // The same with block caches, where the entries are whole pairs of blocks (kv_dim a
  // multiple of 64): heads of 16 (a block spans heads), 64, 32, 256 and 128.
  for (const KvCacheType type : {KvCacheType::Q8_0, KvCacheType::Q4_0})
    for (size_t i : {0u, 3u, 4u, 5u, 6u}) {
      AttentionVariant v = variants[i];
      v.name += std::string(", ") + kv_cache_type_name(type) + " cache";
      v.type = type;
      variants.push_back(v);
    }
  // Soft-capped scores (a cap of 0.5 or 1 bends most of these scores: |s| is up to ~1).
  AttentionVariant capped = variants[1];
  capped.name = "soft-capped at 0.5, prefill after 13, GQA 6/2 x 20";
  capped.softcap = 0.5f;
  variants.push_back(capped);
  capped = variants[4];
  capped.name = "soft-capped at 1, permuted, COMPRESSED rows, f16 cache";
  capped.softcap = 1.0f;
  capped.type = KvCacheType::F16;
  variants.push_back(capped);
  // Sliding windows: rows whose window starts inside the committed entries (FULL rows
  // through a permuted logical order; COMPRESSED rows keep the region's entries inside
  // it), batch tokens masked by position (the random cases' rows have gaps and repeats),
  // and, at 2500, whole parts of a long row outside the window.
  AttentionVariant windowed = variants[2];
  windowed.name = "sliding window of 7, random in-step masks, 6/3 x 8";
  windowed.window = 7;
  variants.push_back(windowed);
  windowed = variants[4];
  windowed.name = "sliding window of 64, permuted, COMPRESSED rows, dense first layer";
  windowed.window = 64;
  variants.push_back(windowed);
  windowed.name += ", f16 cache";
  windowed.type = KvCacheType::F16;
  variants.push_back(windowed);
  windowed.name = "sliding window of 64, permuted, COMPRESSED rows, dense first layer, q4_0 cache";
  windowed.type = KvCacheType::Q4_0;
  variants.push_back(windowed);
  windowed = variants[6];
  windowed.name = "sliding window of 1000, long context split into parts, permuted";
  windowed.window = 1000;
  variants.push_back(windowed);
  // Attention sinks (gpt-oss; scores here are within about 1 of 0, so sinks from -1 to 3
  // take from none to most of the weight): one step's keys, a long row split into parts
  // (combined with the sink once), and COMPRESSED rows in a window over a q8_0 cache.
  for (size_t i : {1u, 6u}) {
    AttentionVariant v = variants[i];
    v.name = "sinks, " + v.name;
    v.sinks = true;
    variants.push_back(v);
  }
  AttentionVariant sunk = variants[4];
  sunk.name = "sinks, sliding window of 64, permuted, COMPRESSED rows, q8_0 cache";
  sunk.sinks = true;
  sunk.window = 64;
  sunk.type = KvCacheType::Q8_0;
  variants.push_back(sunk);
  // COMPRESSED rows over a hashed region of 68 entries in a window of 32, no dense layer: on
  // layer 0 a ring of 62 that the 300 entries have turned over (below), the region's
  // entries inside the window found by their logical indices.
  windowed = variants[3];
  windowed.name = "sliding window of 32, COMPRESSED rows, region 68 of 300, permuted";
  windowed.window = 32;
  windowed.permuted = true;  // a hashed region: some of its entries inside the window
  variants.push_back(windowed);
  // The windowed ones with layer 0 a ring (window + the longest step - 1 entries): the
  // same keys at their ring slots.
  // (Not the f16 one, nor 1000 over 2,500 keys: the window-32 case turns its ring over
  // for FULL and COMPRESSED rows at a fraction of their time.)
  for (size_t i = 0, n = variants.size(); i < n; ++i) {
    if (variants[i].window == 0 || variants[i].window == 1000 || variants[i].type == KvCacheType::F16) continue;
    AttentionVariant v = variants[i];
    v.name += ", layer 0 a ring";
    v.ring_step = *std::max_element(v.steps.begin(), v.steps.end());
    variants.push_back(v);
  }
  for (const AttentionVariant& v : variants)
    cases.push_back({"attention", v.name, v.steps, [v](OpEnv& env, int32_t T, uint32_t salt) { return run_attention(env, v, T, salt); }});
}

// Multi-head latent attention over a latent cache of two layers with their own (odd)
// key and value widths: n_past committed latents written with KvCache::write, a step
// that stores its own rows' latents, and random F32 up-projections. The recovered keys
// are rotated at each entry's position: a committed entry's logical index (through a
// permuted order where the case selects a region) and a step token's batch position
// (with gaps, and repeats).
struct LatentVariant {
  std::string name;
  int32_t n_past, n_head, n_head_kv, head_dim;
  std::vector<int32_t> key_dims, value_dims;  // per layer
  int32_t n_dims;                            // rotated dimensions per head
  bool neox, freq_factors, random_masks, compressed, permuted;
  int32_t region, dense_layers;
  KvCacheType type;
  std::vector<int32_t> steps;
  float softcap = 0.0f;  // AttentionShape::softcap (Gemma 2's soft-capped scores)
};

OpOutputs run_latent_attention(OpEnv& env, const LatentVariant& v, int32_t T, uint32_t salt) {
  Backend& be = env.be();
  const int32_t kv_dim = v.n_head_kv * v.head_dim, q_dim = v.n_head * v.head_dim;
  KvCacheShape cache_shape{2, v.n_past + 260, kv_dim, v.type};
  cache_shape.key_dims = v.key_dims;
  cache_shape.value_dims = v.value_dims;
  KvCache& kv = env.make_cache(cache_shape);
  for (int32_t layer = 0; layer < 2 && v.n_past > 0; ++layer) {
    const int32_t rk = v.key_dims[static_cast<size_t>(layer)], rv = v.value_dims[static_cast<size_t>(layer)];
    std::vector<float> k(static_cast<size_t>(v.n_past) * rk), val(static_cast<size_t>(v.n_past) * rv);
    for (int32_t j = 0; j < v.n_past; ++j) {
      for (int32_t c = 0; c < rk; ++c) k[static_cast<size_t>(j) * rk + c] = hashed_value(300 + layer, j, c, -1.5f, 1.5f);
      for (int32_t c = 0; c < rv; ++c) val[static_cast<size_t>(j) * rv + c] = hashed_value(400 + layer, j, c);
    }
    kv.write(layer, 0, v.n_past, k.data(), val.data());
  }
  kv.reset_layout(v.region, v.dense_layers, v.n_past);
  if (v.permuted) {
    std::vector<int32_t> order(static_cast<size_t>(v.n_past));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [](int32_t a, int32_t b) { return hashed_int(18, a) < hashed_int(18, b); });
    order.resize(static_cast<size_t>(std::min(v.region, v.n_past)));
    kv.select(order);
  }
  RopeParams rope;
  rope.n_dims = v.n_dims;
  rope.neox = v.neox;
  rope.freq_base = 10000.0f;
  if (v.freq_factors)
    for (int32_t i = 0; i < v.n_dims / 2; ++i) rope.freq_factors.push_back(hashed_value(19, i, 0, 1.0f, 8.0f));
  // Row i's mask, prefix view and position depend on i only.
  StepBatch b;
  for (int32_t i = 0; i < T; ++i) {
    std::vector<int32_t> sees;
    for (int32_t j = 0; j < i; ++j)
      if (!v.random_masks || hashed_int(25, i, j) % 3 != 0) sees.push_back(j);
    const PrefixView view = v.compressed && hashed_int(26, i) % 2 == 0 ? PrefixView::Compressed : PrefixView::Full;
    b.add(i, v.n_past + i / 2 + static_cast<int32_t>(hashed_int(27, i) % 9), sees, true, view);
  }
  b.set_n_past(v.n_past);
  const AttentionShape shape{v.n_head, v.n_head_kv, v.head_dim, 1.0f / std::sqrt(static_cast<float>(v.head_dim)), v.softcap};
  be.begin_step(b, env.kv());
  Activation q = input(env, "q", q_dim, 7, T, salt, -1.5f, 1.5f);
  OpOutputs out;
  std::vector<Activation> results;
  for (int32_t layer = 0; layer < 2; ++layer) {
    const int32_t rk = v.key_dims[static_cast<size_t>(layer)], rv = v.value_dims[static_cast<size_t>(layer)];
    const Weight k_up = env.table(kv_dim, rk, 500 + static_cast<uint32_t>(layer), 0, 0, -0.5f, 0.5f);
    const Weight v_up = env.table(kv_dim, rv, 600 + static_cast<uint32_t>(layer), 0, 0, -0.5f, 0.5f);
    Activation k = input(env, "latent k" + std::to_string(layer), rk, 8 + static_cast<uint32_t>(layer), T, salt, -1.5f, 1.5f);
    Activation val = input(env, "latent v" + std::to_string(layer), rv, 10 + static_cast<uint32_t>(layer), T, salt);
    kv.store(layer, k, val);
    results.push_back(env.activation("attn" + std::to_string(layer), q_dim));
    be.latent_attention(layer, q, shape, k_up, v_up, rope, results.back());
  }
  be.finish_step();
  for (int32_t layer = 0; layer < 2; ++layer)
    out.push_back(rows_of(be, "layer " + std::to_string(layer), results[static_cast<size_t>(layer)], T));
  return out;
}

void add_latent_attention(std::vector<OpCase>& cases) {
  std::vector<LatentVariant> variants = {
      {"first tokens, MHA 4x16, widths k 7/9 v 12/5", 0, 4, 4, 16, {7, 9}, {12, 5}, 16, false, false, false, false,
       false, 0, 0, KvCacheType::F32, kSteps},
      {"after 13, GQA 6/2 x 20, neox rotating 12, k 13/6 v 3/17", 13, 6, 2, 20, {13, 6}, {3, 17}, 12, true, false,
       true, false, false, 0, 0, KvCacheType::F32, kSteps},
      {"COMPRESSED rows, region 40 of 300, permuted, dense first layer", 300, 4, 2, 32, {21, 64}, {11, 33}, 32, false,
       false, true, true, true, 40, 1, KvCacheType::F32, kShortSteps},
      {"long context in parts, rope_freqs, permuted FULL rows", 1100, 4, 1, 64, {31, 8}, {17, 45}, 64, false, true,
       false, false, true, 200, 0, KvCacheType::F32, {1, 2, 3, 8, 9}},
      // Many heads on a narrow cache: the cpu backend recovers layer 0's values (rank 12)
      // and absorbs layer 1's (rank 5) up-projection.
      {"after 50, 16/2 x 8, k 9/16 v 12/5", 50, 16, 2, 8, {9, 16}, {12, 5}, 8, false, false, true, false, false, 0, 0,
       KvCacheType::F32, kSteps},
  };
  // The same with an f16 cache (odd widths: the last word of an entry holds one half).
  for (size_t i = 0, n = variants.size(); i < n; ++i) {
    LatentVariant v = variants[i];
    v.name += ", f16 cache";
    v.type = KvCacheType::F16;
    variants.push_back(v);
  }
  for (const LatentVariant& v : variants)
    cases.push_back({"latent_attention", v.name, v.steps,
                     [v](OpEnv& env, int32_t T, uint32_t salt) { return run_latent_attention(env, v, T, salt); }});
}

void add_kv_ops(std::vector<OpCase>& cases) {
  for (const KvCacheType type : {KvCacheType::F32, KvCacheType::F16, KvCacheType::Q8_0, KvCacheType::Q4_0}) {
    const std::string t = kv_cache_type_name(type);
    // Block caches hold whole pairs of blocks per entry (64 values).
    const int32_t width = kv_cache_type_quantized(type) ? 64 : 12;
    const std::string w = std::to_string(width);
    // store: a step's rows land at slots n_past..; read back by read_keys (a block
    // cache's values: the blocks quantized from them, the same on every backend).
    // With `ring`, layer 2 is a ring of 264 (KvCacheShape::ring: a window of 8, steps of
    // 257), which the rows from n_past = 200 wrap around from T = 65 on.
    for (const bool ring : {false, true})
    cases.push_back({"kv_store", t + " kv_dim " + w + (ring ? ", a ring" : ""), kSteps, [=](OpEnv& env, int32_t T, uint32_t salt) {
                       Backend& be = env.be();
                       const int32_t kv_dim = width, n_past = ring ? 200 : 5;
                       KvCacheShape shape{3, n_past + 260, kv_dim, type};
                       if (ring) shape.windows = {0, 0, 8}, shape.ring_step = 257;
                       KvCache& kv = env.make_cache(shape);
                       kv.reset_layout(0, 0, n_past);
                       StepBatch b = causal_batch(T, n_past);
                       be.begin_step(b, env.kv());
                       Activation k = input(env, "k", kv_dim, 31, T, salt, -70000.0f, 70000.0f);  // overflows fp16 too
                       Activation v = input(env, "v", kv_dim, 32, T, salt);
                       kv.store(2, k, v);
                       be.finish_step();
                       std::vector<int32_t> slots;
                       for (int32_t i = 0; i < T; ++i) slots.push_back(n_past + i);
                       OpOutput o{"keys", T, kv_dim, true, kv.read_keys(2, slots), {}};
                       return OpOutputs{o};
                     }});
    // capture: the listed rows' queries (rows outside the step skipped).
    cases.push_back({"capture_queries", t + " q 24, kv_dim " + w, kSteps, [=](OpEnv& env, int32_t T, uint32_t salt) {
                       Backend& be = env.be();
                       KvCache& kv = env.make_cache(KvCacheShape{2, 300, width, type});
                       kv.reset_layout(0, 0, 0);
                       kv.set_captured_rows({0, 2, 5, 9, T - 1, 400});
                       StepBatch b = causal_batch(T, 0);
                       be.begin_step(b, env.kv());
                       Activation q = input(env, "q", 24, 33, T, salt);
                       kv.capture_queries(1, q);
                       be.finish_step();
                       std::vector<float> got = kv.captured_queries(1);
                       OpOutput o{"captured", static_cast<int64_t>(got.size() / 24), 24, false, got, {}};
                       return OpOutputs{o};
                     }});
    // write, then swaps and moves that chain through shared slots (order matters),
    // region selection and truncation; every slot of every layer read back.
    // With `ring`, layer 1 is a ring of 12 (a window of 4, steps of 9): the swaps leave it
    // alone, the moves go from ring slot to ring slot, a read finds index i at i mod 12.
    for (const bool ring : {false, true})
    cases.push_back({"kv_swap_move", t + " 3 layers x 40 x " + w + (ring ? ", layer 1 a ring" : ""), {1}, [=](OpEnv& env, int32_t, uint32_t) {
                       const int32_t kv_dim = width, n_ctx = 40;
                       KvCacheShape shape{3, n_ctx, kv_dim, type};
                       if (ring) shape.windows = {0, 4, 0}, shape.ring_step = 9;
                       KvCache& kv = env.make_cache(shape);
                       for (int32_t layer = 0; layer < 3; ++layer) {
                         std::vector<float> k(30u * kv_dim), v(k.size());
                         for (size_t i = 0; i < k.size(); ++i) {
                           k[i] = hashed_value(40 + layer, static_cast<int64_t>(i), 0, -3.0f, 3.0f);
                           v[i] = hashed_value(50 + layer, static_cast<int64_t>(i), 0);
                         }
                         kv.write(layer, 0, 30, k.data(), v.data());
                       }
                       kv.swap_slots({{0, 25}, {25, 3}, {3, 0}, {7, 19}});
                       kv.move_slots({{21, 2}, {2, 30}, {30, 21}, {5, 5}});
                       kv.reset_layout(6, 0, 30);
                       kv.select({29, 3, 17, 8, 22, 11});
                       std::vector<int32_t> slots(n_ctx);
                       std::iota(slots.begin(), slots.end(), 0);
                       OpOutputs out;
                       for (int32_t layer = 0; layer < 3; ++layer)
                         out.push_back({"layer " + std::to_string(layer) + " keys", n_ctx, kv_dim, false, kv.read_keys(layer, slots), {}});
                       kv.truncate(30);
                       out.push_back({"keys after truncate", n_ctx, kv_dim, false, kv.read_keys(1, slots), {}});
                       out.push_back({"repeated slots", 3, kv_dim, false, kv.read_keys(1, {26, 2, 2}), {}});
                       return out;
                     }});
  }
}

// Rows with ties, NaN, -inf only, +inf; a row's content depends on its index only.
float logit(int32_t row, int32_t col, int32_t n, uint32_t salt) {
  const uint32_t seed = salt ? 61 : 60;
  switch (row % 6) {
    case 1: return col == n - 1 ? 9.0f : hashed_value(seed, row, col, -5, 5);       // the last wins
    case 2: return col == n / 2 || col == n - 1 ? 9.0f : hashed_value(seed, row, col, -5, 5);  // a tie
    case 3: return col == n / 3 ? std::nanf("") : hashed_value(seed, row, col, -5, 5);
    case 4: return -INFINITY;
    case 5: return col == 0 ? INFINITY : static_cast<float>(static_cast<int32_t>(hashed_int(seed, row, col) % 5));  // many ties
    default: return hashed_value(seed, row, col, -5, 5);
  }
}

Weight logit_table(OpEnv& env, int32_t n, uint32_t salt, int32_t salt_from) {
  return env.weight("logits/" + std::to_string(n) + "/" + std::to_string(salt) + "/" + std::to_string(salt_from),
                    TensorType::F32, OpEnv::kMaxRows, n, [&] {
                      std::vector<uint8_t> out(static_cast<size_t>(OpEnv::kMaxRows) * n * sizeof(float));
                      float* v = reinterpret_cast<float*>(out.data());
                      for (int32_t r = 0; r < OpEnv::kMaxRows; ++r)
                        for (int32_t c = 0; c < n; ++c)
                          v[static_cast<size_t>(r) * n + c] = logit(r, c, n, salt != 0 && r >= salt_from ? salt : 0);
                      return out;
                    });
}

void add_selection(std::vector<OpCase>& cases) {
  for (const int32_t n : {1, 7, 1000, 32003}) {
    const std::vector<int32_t> steps = n > 1000 ? kShortSteps : kSteps;
    cases.push_back({"argmax", "n=" + std::to_string(n), steps, [=](OpEnv& env, int32_t T, uint32_t salt) {
                       env.ensure_cache(T + 1);
                       Backend& be = env.be();
                       const Weight table = logit_table(env, n, salt, T / 2);
                       StepBatch b = causal_batch(T, 0);
                       be.begin_step(b, env.kv());
                       Activation x = env.activation("logits", n);
                       Activation g = env.activation("gathered logits", n);
                       be.embed(table, x);
                       be.argmax_rows(x);
                       be.finish_step();
                       OpOutput all{"argmax", T, 1, true, {}, be.read_argmax(T)};
                       // And of gathered rows.
                       be.begin_step(b, env.kv());
                       be.embed(table, x);
                       be.gather_rows(x, {T - 1, 0}, g);
                       be.argmax_rows(g);
                       be.finish_step();
                       OpOutput gathered{"argmax of gathered rows", 2, 1, false, {}, be.read_argmax(2)};
                       return OpOutputs{all, gathered};
                     }});
  }
  for (const int32_t n : {7, 1000, 32003}) {
    const int32_t k = std::min(n, 40);
    const std::vector<int32_t> steps = n > 1000 ? kShortSteps : kSteps;
    cases.push_back({"top_k", "n=" + std::to_string(n) + " k=" + std::to_string(k), steps,
                     [=](OpEnv& env, int32_t T, uint32_t salt) {
                       env.ensure_cache(T + 1);
                       Backend& be = env.be();
                       const Weight table = logit_table(env, n, salt, T / 2);
                       StepBatch b = causal_batch(T, 0);
                       auto as_output = [&](const TopK& top, const std::string& name, bool per_row) {
                         OpOutput o{name, top.rows(), k, per_row, top.values, top.ids};
                         // A NaN row's ids and values are unspecified: compare only its flag.
                         for (int64_t r = 0; r < top.rows(); ++r)
                           if (top.has_nan[static_cast<size_t>(r)])
                             for (int32_t j = 0; j < k; ++j) {
                               o.ids[static_cast<size_t>(r * k + j)] = -7;
                               o.values[static_cast<size_t>(r * k + j)] = 0.0f;
                             }
                         OpOutput flags{name + " NaN flags", top.rows(), 1, per_row, {}, {}};
                         for (uint8_t f : top.has_nan) flags.ids.push_back(f);
                         return std::vector<OpOutput>{o, flags};
                       };
                       be.begin_step(b, env.kv());
                       Activation x = env.activation("logits", n);
                       Activation g = env.activation("gathered logits", n);
                       be.embed(table, x);
                       be.top_k_rows(x, k);
                       be.finish_step();
                       OpOutputs out = as_output(be.read_top_k(T), "top-k", true);
                       be.begin_step(b, env.kv());
                       be.embed(table, x);
                       be.gather_rows(x, {T - 1, 0}, g);
                       be.top_k_rows(g, k);
                       be.finish_step();
                       for (OpOutput& o : as_output(be.read_top_k(2), "top-k of gathered rows", false)) out.push_back(o);
                       return out;
                     }});
  }
}

}  // namespace

namespace fafo::test {

const std::vector<OpCase>& op_table() {
  static const std::vector<OpCase> table = [] {
    std::vector<OpCase> cases;
    add_embed_and_matmul(cases);
    add_elementwise(cases);
    add_rope(cases);
    add_kv_ops(cases);
    add_attention(cases);
    add_latent_attention(cases);
    add_selection(cases);
    return cases;
  }();
  return table;
}

}  // namespace fafo::test
