// The op-conformance table (ctest label backend-ops), in the spirit of ggml's
// test-backend-ops: one table of cases covering every op of the backend contract
// (fafo/backend.h, fafo/kv_cache.h) — embed and matmul for all 13 weight formats,
// rms_norm, add_bias, rope in every variant the models use, KV store / write / swap /
// move / read keys / query capture, attention over StepBatches (in-step masks, FULL and
// COMPRESSED prefixes, a permuted logical order, dense layers, contexts long enough to
// be split into parts, f32 and f16 caches), multi-head latent attention over latent
// caches (odd per-layer widths, keys rotated at each entry's position; on the backends
// that run MLA models), swiglu, add, gather, argmax and top-k — over
// odd shapes and step sizes T in {1, 2, 3, 8, 9, 31, 64, 257}. It runs on every backend
// of the registry and every device each finds, against the CPU reference:
//   - conformance: each result equals the reference bit for bit when the backend
//     declares exact numerics, else within its declared tolerance (the largest error
//     is printed per case);
//   - T-invariance, whatever the numerics: a row's result is bit-identical at every T
//     and when the other rows of the step hold other values.
// The table checks itself: backends with a deliberate bug (tests/faulty_backend.h)
// must fail it.
//
// `test_backend_ops --perf` prints per-op time and GB/s per backend instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <string_view>

#include "backend/cpu/simd_matmul.h"
#include "backend_ops_harness.h"
#include "faulty_backend.h"
#include "backend/cpu/cpu_backend.h"
#include "fafo/backend_registry.h"
#include "fafo/cuda_backend.h"
#include "fafo/top_k.h"
#if FAFO_HAVE_VULKAN
#include "backend/vulkan/vulkan_backend.h"
#endif

using namespace fafo;
using namespace fafo::test;

namespace {

const std::vector<int32_t> kSteps = {1, 2, 3, 8, 9, 31, 64, 257};
// For the costlier shapes (long contexts, wide rows).
const std::vector<int32_t> kShortSteps = {1, 2, 3, 8, 9, 31};

constexpr TensorType kFormats[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q8_0,
                                   TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                   TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                                   TensorType::Q6_K};

std::string lower(std::string_view v) {
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// --- building blocks of a case --------------------------------------------------------

// A causal batch of T tokens 0..T-1 at positions n_past.. (tokens index the input tables).
StepBatch causal_batch(int32_t T, int32_t n_past) {
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  std::iota(tokens.begin(), tokens.end(), 0);
  StepBatch b = StepBatch::causal(tokens, n_past, true);
  b.set_n_past(n_past);
  return b;
}

// Packed rows of `type` quantized from hashed values (rows of different scales).
std::vector<uint8_t> quantized_rows(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  const size_t row_bytes = tensor_row_bytes(type, cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows) * row_bytes);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = hashed_value(seed, r, -1, 0.05f, 3.0f);
    for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] = hashed_value(seed, r, c) * scale;
    quantize_row(type, row.data(), out.data() + static_cast<size_t>(r) * row_bytes, cols);
  }
  return out;
}

Weight quantized_weight(OpEnv& env, TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  return env.weight("w/" + std::string(tensor_type_name(type)) + "/" + std::to_string(rows) + "x" + std::to_string(cols) +
                        "/" + std::to_string(seed),
                    type, rows, cols, [&] { return quantized_rows(type, rows, cols, seed); });
}

// A 1 x n F32 vector (norm gain, bias) of hashed values in [lo, hi].
Weight vector_weight(OpEnv& env, int64_t n, uint32_t seed, float lo, float hi) {
  return env.table(1, n, seed, 0, 0, lo, hi);
}

OpOutput rows_of(Backend& be, const std::string& name, const Activation& a, int64_t rows, bool per_row = true) {
  OpOutput o;
  o.name = name;
  o.rows = rows;
  o.cols = a.cols;
  o.per_row = per_row;
  o.values = be.read_rows(a, rows);
  return o;
}

// Fills activation `name` (cols wide) with rows 0..T-1 of a hashed table, in the current step.
Activation input(OpEnv& env, const std::string& name, int64_t cols, uint32_t seed, int32_t T, uint32_t salt,
                 float lo = -1.0f, float hi = 1.0f) {
  Activation a = env.activation(name, cols);
  Weight t = env.table(OpEnv::kMaxRows, cols, seed, salt, T / 2, lo, hi);
  env.be().embed(t, a);
  return a;
}

// The gate and up projections of a feed-forward block, as the backend takes them: one
// weight (up's rows after gate's) where it fuses them, else two.
std::pair<Weight, Weight> gate_and_up(OpEnv& env, TensorType type, int64_t rows, int64_t cols, bool fused) {
  if (!fused) return {quantized_weight(env, type, rows, cols, 31), quantized_weight(env, type, rows, cols, 32)};
  const Weight both = env.weight("gate_up/" + std::string(tensor_type_name(type)) + "/" + std::to_string(rows) + "x" +
                                     std::to_string(cols),
                                 type, 2 * rows, cols, [&] {
                                   std::vector<uint8_t> out = quantized_rows(type, rows, cols, 31);
                                   const std::vector<uint8_t> up = quantized_rows(type, rows, cols, 32);
                                   out.insert(out.end(), up.begin(), up.end());
                                   return out;
                                 });
  return {both, Weight{}};
}

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
  cases.push_back({"swiglu", "n=45", kSteps, [](OpEnv& env, int32_t T, uint32_t salt) {
                     env.ensure_cache(T + 1);
                     Backend& be = env.be();
                     StepBatch b = causal_batch(T, 0);
                     be.begin_step(b, env.kv());
                     Activation g = input(env, "x", 45, 1, T, salt, -6.0f, 6.0f);
                     Activation u = input(env, "y", 45, 2, T, salt);
                     Activation out = env.activation("out", 45);
                     be.swiglu(g, u, out);
                     be.finish_step();
                     return OpOutputs{rows_of(be, "swiglu", out, T)};
                   }});
  // Gemma's ops: the GeGLU gate over the tanh's saturation (|x| up to 12), the
  // embedding scale, and soft-capping of values far past the cap and near it.
  cases.push_back({"geglu", "n=45", kSteps, [](OpEnv& env, int32_t T, uint32_t salt) {
                     env.ensure_cache(T + 1);
                     Backend& be = env.be();
                     StepBatch b = causal_batch(T, 0);
                     be.begin_step(b, env.kv());
                     Activation g = input(env, "x", 45, 1, T, salt, -12.0f, 12.0f);
                     Activation u = input(env, "y", 45, 2, T, salt);
                     Activation out = env.activation("out", 45);
                     be.geglu(g, u, out);
                     be.finish_step();
                     return OpOutputs{rows_of(be, "geglu", out, T)};
                   }});
  cases.push_back({"scale", "n=45 by 48", kSteps, [](OpEnv& env, int32_t T, uint32_t salt) {
                     env.ensure_cache(T + 1);
                     Backend& be = env.be();
                     StepBatch b = causal_batch(T, 0);
                     be.begin_step(b, env.kv());
                     Activation x = input(env, "x", 45, 1, T, salt);
                     be.scale(x, std::sqrt(2304.0f));
                     be.finish_step();
                     return OpOutputs{rows_of(be, "scale", x, T)};
                   }});
  cases.push_back({"softcap", "n=45 at 30", kSteps, [](OpEnv& env, int32_t T, uint32_t salt) {
                     env.ensure_cache(T + 1);
                     Backend& be = env.be();
                     StepBatch b = causal_batch(T, 0);
                     be.begin_step(b, env.kv());
                     Activation x = input(env, "x", 45, 1, T, salt, -400.0f, 400.0f);
                     be.softcap(x, 30.0f);
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
};

OpOutputs run_attention(OpEnv& env, const AttentionVariant& v, int32_t T, uint32_t salt) {
  Backend& be = env.be();
  const int32_t kv_dim = v.n_head_kv * v.head_dim, q_dim = v.n_head * v.head_dim;
  KvCache& kv = env.make_cache(KvCacheShape{2, v.n_past + 260, kv_dim, v.type});
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
                             v.softcap, v.window};
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
  windowed = variants[6];
  windowed.name = "sliding window of 1000, long context split into parts, permuted";
  windowed.window = 1000;
  variants.push_back(windowed);
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
  for (const KvCacheType type : {KvCacheType::F32, KvCacheType::F16}) {
    const std::string t = kv_cache_type_name(type);
    // store: a step's rows land at slots n_past..; read back by read_keys.
    cases.push_back({"kv_store", t + " kv_dim 12", kSteps, [=](OpEnv& env, int32_t T, uint32_t salt) {
                       Backend& be = env.be();
                       const int32_t kv_dim = 12, n_past = 5;
                       KvCache& kv = env.make_cache(KvCacheShape{3, n_past + 260, kv_dim, type});
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
    cases.push_back({"capture_queries", t + " q 24", kSteps, [=](OpEnv& env, int32_t T, uint32_t salt) {
                       Backend& be = env.be();
                       KvCache& kv = env.make_cache(KvCacheShape{2, 300, 12, type});
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
    cases.push_back({"kv_swap_move", t + " 3 layers x 40 x 12", {1}, [=](OpEnv& env, int32_t, uint32_t) {
                       const int32_t kv_dim = 12, n_ctx = 40;
                       KvCache& kv = env.make_cache(KvCacheShape{3, n_ctx, kv_dim, type});
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

// --- running the table -------------------------------------------------------------------

// What the table found for one case on one backend.
struct CaseReport {
  OpDiff conformance;   // vs the reference
  OpDiff invariance;    // vs itself at other T and with other rows
  int comparisons = 0;
};

CaseReport check_case(const OpCase& c, OpEnv& target, OpEnv& reference, double tolerance) {
  CaseReport report;
  const int32_t t_max = *std::max_element(c.steps.begin(), c.steps.end());
  const OpOutputs at_max = c.run(target, t_max, 0);
  for (const int32_t T : c.steps) {
    const OpOutputs got = T == t_max ? at_max : c.run(target, T, 0);
    const OpOutputs want = c.run(reference, T, 0);
    OpDiff d = compare_outputs(got, want, tolerance);
    report.conformance.max_error = std::max(report.conformance.max_error, d.max_error);
    if (!d.ok) report.conformance.fail("T=" + std::to_string(T) + ": " + d.first);
    ++report.comparisons;
    // T-invariance: the first T rows equal the same rows of the largest step, bit for bit.
    if (T != t_max) {
      OpDiff inv = compare_outputs(got, at_max, -1.0, T);
      if (!inv.ok) report.invariance.fail("T=" + std::to_string(T) + " vs T=" + std::to_string(t_max) + ": " + inv.first);
    }
  }
  // Other rows holding other values leave the first half of the step unchanged.
  if (t_max > 1) {
    const OpOutputs salted = c.run(target, t_max, 1);
    OpDiff inv = compare_outputs(salted, at_max, -1.0, t_max / 2);
    if (!inv.ok) report.invariance.fail("T=" + std::to_string(t_max) + " with other rows changed: " + inv.first);
  }
  return report;
}

// A backend and device of this build, as the table runs it.
struct Target {
  std::string backend;
  int device = 0;
  std::string device_name;
  std::string label() const { return backend + "_" + std::to_string(device); }
};

// Every backend and device of the registry, each Vulkan device also with its integer
// products on ("vulkan_int8": the default on GPUs, off on CPU devices such as lavapipe)
// and with them in the matrix tiles' plain-loop form for steps over 8 tokens
// ("vulkan_tiles": GPUs with cooperative matrices run the instructions in vulkan_int8;
// only the products' ops), and the CUDA backend's code with its kernels run on the host
// ("cuda_emulated": the CUDA backend's step logic, where no GPU exists).
std::vector<Target> all_targets() {
  std::vector<Target> out;
  for (const BackendInfo& b : backend_registry())
    for (const BackendDevice& d : b.devices()) {
      out.push_back({b.name, d.index, d.name});
      if (b.name == "vulkan") {
        out.push_back({"vulkan_int8", d.index, d.name});
        out.push_back({"vulkan_tiles", d.index, d.name});
      }
    }
  out.push_back({"cuda_emulated", 0, "host"});
  return out;
}

std::unique_ptr<Backend> make_target(const Target& t) {
  if (t.backend == "cuda_emulated") return cuda::make_emulated_backend();
#if FAFO_HAVE_VULKAN
  if (t.backend == "vulkan_int8" || t.backend == "vulkan_tiles") {
    vulkan::VulkanBackendOptions options;
    options.device = std::to_string(t.device);
    options.int8_products = true;
    if (t.backend == "vulkan_tiles") options.matrix_tiles = vulkan::MatrixTilesUse::Loops;
    return vulkan::make_backend(options);
  }
#endif
  return make_backend(BackendSpec{t.backend, std::to_string(t.device), 2});
}

class BackendOps : public ::testing::TestWithParam<Target> {
 protected:
  static void SetUpTestSuite() { reference_ = std::make_unique<OpEnv>(make_reference_backend(2)); }
  static void TearDownTestSuite() {
    reference_.reset();
    targets_.clear();
  }
  OpEnv& target() {
    auto& env = targets_[GetParam().label()];
    if (!env) env = std::make_unique<OpEnv>(make_target(GetParam()));
    return *env;
  }
  // Runs every case of `op` and fails with the first mismatch of each case.
  void run_op(const std::string& op) {
    if (GetParam().backend == "vulkan_tiles" && op.rfind("matmul", 0) != 0)
      GTEST_SKIP() << "vulkan_tiles differs from vulkan_int8 only in its products";
    OpEnv& env = target();
    const BackendNumerics numerics = env.be().numerics();
    int n_cases = 0;
    for (const OpCase& c : op_table()) {
      if (c.op != op) continue;
      ++n_cases;
      const double tolerance =
          numerics.exact ? -1.0 : numerics.tolerance_for(c.rounded_matmul, c.half_matmul, c.bf16_matmul);
      const CaseReport r = check_case(c, env, *reference_, tolerance);
      std::printf("  %-10s %-16s %-52s %zu step sizes  %s  max error %.3g%s\n", GetParam().label().c_str(), c.op.c_str(),
                  c.name.c_str(), c.steps.size(), numerics.exact ? "exact" : "tolerance", r.conformance.max_error,
                  r.conformance.ok && r.invariance.ok ? "" : "  FAILED");
      EXPECT_TRUE(r.conformance.ok) << c.op << " " << c.name << " differs from the CPU reference: " << r.conformance.first;
      EXPECT_TRUE(r.invariance.ok) << c.op << " " << c.name << " is not T-invariant: " << r.invariance.first;
    }
    EXPECT_GT(n_cases, 0) << "no case for op " << op;
  }

  static inline std::unique_ptr<OpEnv> reference_;
  static inline std::map<std::string, std::unique_ptr<OpEnv>> targets_;
};

TEST_P(BackendOps, Embed) { run_op("embed"); }
TEST_P(BackendOps, Matmul) { run_op("matmul"); }
TEST_P(BackendOps, RmsNorm) { run_op("rms_norm"); }
TEST_P(BackendOps, HeadNorm) { run_op("head_norm"); }
TEST_P(BackendOps, AddBias) { run_op("add_bias"); }
TEST_P(BackendOps, Rope) { run_op("rope"); }
TEST_P(BackendOps, KvStore) { run_op("kv_store"); }
TEST_P(BackendOps, KvSwapMove) { run_op("kv_swap_move"); }
TEST_P(BackendOps, CaptureQueries) { run_op("capture_queries"); }
TEST_P(BackendOps, Attention) { run_op("attention"); }


// On the backends that run MLA models; the reference, cpu and vulkan backends must.
TEST_P(BackendOps, LatentAttention) {
  const std::string& backend = GetParam().backend;
  if (!target().be().capabilities().latent_attention) {
    ASSERT_TRUE(backend != "reference" && backend != "cpu" && backend != "vulkan") << backend << " must run MLA models";
    GTEST_SKIP() << "the " << backend << " backend does not run multi-head latent attention (MLA) models";
  }
  run_op("latent_attention");
}
TEST_P(BackendOps, Swiglu) { run_op("swiglu"); }
TEST_P(BackendOps, Geglu) { run_op("geglu"); }
TEST_P(BackendOps, Scale) { run_op("scale"); }
TEST_P(BackendOps, Softcap) { run_op("softcap"); }
TEST_P(BackendOps, Add) { run_op("add"); }
TEST_P(BackendOps, Gather) { run_op("gather"); }
TEST_P(BackendOps, MatmulAdd) { run_op("matmul_add"); }
TEST_P(BackendOps, MatmulSwiglu) { run_op("matmul_swiglu"); }

// A fused op's outputs against the unfused ops': bit for bit, naming the first difference.
::testing::AssertionResult same_bits_everywhere(const std::vector<float>& fused, const std::vector<float>& plain) {
  if (fused.size() != plain.size())
    return ::testing::AssertionFailure() << fused.size() << " values fused vs " << plain.size() << " unfused";
  for (size_t i = 0; i < fused.size(); ++i)
    if (!same_bits(fused[i], plain[i]))
      return ::testing::AssertionFailure() << "value " << i << ": " << fused[i] << " fused vs " << plain[i];
  return ::testing::AssertionSuccess();
}

// Where a backend fuses the feed-forward gate, the fused kernel gives the bits of the two
// products and the SwiGLU, for a format of each kind and for one- and multi-token steps.
TEST_P(BackendOps, FusedGateIsTheTwoProductsThenTheSwiglu) {
  OpEnv& env = target();
  Backend& be = env.be();
  const int64_t cols = 256, rows = 37;
  int checked = 0;
  for (const TensorType type : {TensorType::F16, TensorType::Q8_0, TensorType::Q4_K}) {
    if (!fuses_gate_up(be, type, rows, cols)) continue;
    // Plain variables: clang 14 cannot capture structured bindings in the lambda below.
    const auto fused_pair = gate_and_up(env, type, rows, cols, true);
    const auto plain_pair = gate_and_up(env, type, rows, cols, false);
    const auto& both = fused_pair.first;
    const auto& none = fused_pair.second;
    const auto& gate = plain_pair.first;
    const auto& up = plain_pair.second;
    for (const int32_t T : {1, 5, 12}) {
      env.ensure_cache(T + 1);
      auto run = [&](bool fused) {
        StepBatch b = causal_batch(T, 0);
        be.begin_step(b, env.kv());
        Activation x = input(env, "x", cols, 1, T, 0);
        Activation out = env.activation("out", rows);
        Activation scratch = env.activation("scratch", rows);
        if (fused) {
          run_matmul_swiglu(be, both, none, x, out, scratch);
        } else {
          be.matmul(gate, x, out);
          be.matmul(up, x, scratch);
          be.swiglu(out, scratch, out);
        }
        be.finish_step();
        return be.read_rows(out, T);
      };
      ASSERT_TRUE(same_bits_everywhere(run(true), run(false))) << tensor_type_name(type) << " T=" << T;
      ++checked;
    }
  }
  std::printf("  %s: %d fused gate steps checked\n", GetParam().label().c_str(), checked);
  if (GetParam().backend == "vulkan" && be.description().find("CPU") != std::string::npos) {
    EXPECT_GT(checked, 0) << "a CPU Vulkan device (whole-rows matmul) fuses the gate";
  }
}

// matmul_norm and matmul_swiglu_norm (an RMSNorm fused into the product where the
// backend can) give the bits of rms_norm then the product(s), on every backend, for a
// format of each kind (plain floats with a partial last chunk, 32-value blocks,
// superblocks) and steps of one, several and more than one tile of tokens.
TEST_P(BackendOps, NormedProductsAreTheNormThenTheProduct) {
  OpEnv& env = target();
  Backend& be = env.be();
  for (const TensorType type : {TensorType::F16, TensorType::Q8_0, TensorType::Q4_K}) {
    const int64_t cols = type == TensorType::F16 ? 200 : 256, rows = 37;
    const Weight w = quantized_weight(env, type, rows, cols, 41);
    const Weight gain = vector_weight(env, cols, 42, 0.5f, 1.5f);
    const auto fused_pair = gate_and_up(env, type, rows, cols, fuses_gate_up(be, type, rows, cols));
    const auto plain_pair = gate_and_up(env, type, rows, cols, false);
    for (const int32_t T : {1, 5, 12}) {
      env.ensure_cache(T + 1);
      for (const bool gated : {false, true}) {
        auto run = [&](bool fused) {
          StepBatch b = causal_batch(T, 0);
          be.begin_step(b, env.kv());
          Activation x = input(env, "x", cols, 1, T, 0, -2.0f, 2.0f);
          Activation normed = env.activation("normed", cols);
          Activation out = env.activation("out", rows);
          Activation scratch = env.activation("scratch", rows);
          if (fused && gated) {
            run_matmul_swiglu_norm(be, fused_pair.first, fused_pair.second, x, gain, 1e-5f, normed, out, scratch);
          } else if (fused) {
            run_matmul_norm(be, w, x, gain, 1e-5f, normed, out);
          } else {
            be.rms_norm(x, gain, 1e-5f, normed);
            if (gated) {
              be.matmul(plain_pair.first, normed, out);
              be.matmul(plain_pair.second, normed, scratch);
              be.swiglu(out, scratch, out);
            } else {
              be.matmul(w, normed, out);
            }
          }
          be.finish_step();
          return be.read_rows(out, T);
        };
        ASSERT_TRUE(same_bits_everywhere(run(true), run(false)))
            << tensor_type_name(type) << " T=" << T << (gated ? " gated" : "");
      }
    }
  }
}

// A fused matmul_add gives the bits of the product followed by the add, on every
// backend, for a format of each kind (plain floats, 32-value blocks, superblocks).
TEST_P(BackendOps, MatmulAddIsTheProductThenTheAdd) {
  OpEnv& env = target();
  Backend& be = env.be();
  for (const TensorType type : {TensorType::F16, TensorType::Q8_0, TensorType::Q4_K}) {
    const int64_t cols = 256, rows = 37;
    const Weight w = quantized_weight(env, type, rows, cols, 21);
    for (const int32_t T : {1, 5}) {
      env.ensure_cache(T + 1);
      auto run = [&](bool fused) {
        StepBatch b = causal_batch(T, 0);
        be.begin_step(b, env.kv());
        Activation x = input(env, "x", cols, 1, T, 0);
        Activation acc = input(env, "acc", rows, 2, T, 0);
        Activation scratch = env.activation("out", rows);
        if (fused) {
          run_matmul_add(be, w, x, acc, scratch);
        } else {
          be.matmul(w, x, scratch);
          be.add(acc, scratch);
        }
        be.finish_step();
        return be.read_rows(acc, T);
      };
      ASSERT_TRUE(same_bits_everywhere(run(true), run(false))) << tensor_type_name(type) << " T=" << T;
    }
  }
}
TEST_P(BackendOps, Argmax) { run_op("argmax"); }
TEST_P(BackendOps, TopK) { run_op("top_k"); }

INSTANTIATE_TEST_SUITE_P(EveryBackendAndDevice, BackendOps, ::testing::ValuesIn(all_targets()),
                         [](const ::testing::TestParamInfo<Target>& p) { return p.param.label(); });

// --- CUDA against Vulkan, bit for bit ------------------------------------------------------
// The CUDA kernels and the Vulkan shaders share their arithmetic: the block decoders and
// the summation orders of cuda_backend/src/dot_order.h, with the multiply-add fused on
// NVIDIA (CUDA's __fmaf_rn and the NVIDIA driver's GLSL fma()). So on one NVIDIA GPU the
// two backends must give the same bits for every op whose arithmetic is only products and
// sums. Ops that call exp, sin/cos, sqrt or a division may differ in the last bits (the
// drivers' versions of those are not CUDA's): the pair check reports their largest
// difference and does not fail on them. Nor does it on products with block-quantized
// weights where one backend rounds their activations to 8 bits and the other does not
// (where both do, the CUDA backend's and Vulkan's integer products, they share their
// arithmetic and must match), or with F16 weights where one rounds them to halves (the
// CUDA backend's tensor-core products: the GPU run compares the pair with
// FAFO_CUDA_KERNELS=warp too, where CUDA multiplies in floats).

// The ops whose results must be bit-identical across the pair ("gather" is not: its case
// normalizes the gathered rows, and the backends' RMSNorms sum the squares in different
// orders).
bool same_bits_expected(const std::string& op) {
  static const std::set<std::string> ops = {"embed",    "matmul",       "matmul_add",      "add",    "add_bias", "kv_store",
                                            "kv_swap_move", "capture_queries", "argmax", "top_k", "scale"};
  return ops.count(op) != 0;
}

// What comparing two backends case by case found.
struct PairReport {
  int cases = 0, identical = 0;
  std::vector<std::string> must_match_but_differ;  // op, case and the first difference
  std::map<std::string, std::pair<int, double>> differing_per_op;  // op -> (cases, largest difference)
};

// Every case both backends run (MLA only where both run it), compared bit for bit at each step size.
PairReport compare_pair(OpEnv& a, OpEnv& b, const std::string& label) {
  PairReport report;
  const bool mla = a.be().capabilities().latent_attention && b.be().capabilities().latent_attention;
  const bool rounds = (a.be().numerics().rounded_matmul_tolerance > 0) != (b.be().numerics().rounded_matmul_tolerance > 0);
  const bool halves = a.be().numerics().half_matmul_tolerance > 0 || b.be().numerics().half_matmul_tolerance > 0;
  const bool bf16s = a.be().numerics().bf16_matmul_tolerance > 0 || b.be().numerics().bf16_matmul_tolerance > 0;
  for (const OpCase& c : op_table()) {
    if (c.op == "latent_attention" && !mla) continue;
    ++report.cases;
    const CaseReport r = check_case(c, a, b, -1.0);
    if (r.conformance.ok) {
      ++report.identical;
      continue;
    }
    auto& [n, largest] = report.differing_per_op[c.op];
    ++n;
    largest = std::max(largest, r.conformance.max_error);
    if (same_bits_expected(c.op) && !(rounds && c.rounded_matmul) && !(halves && c.half_matmul) &&
        !(bf16s && c.bf16_matmul))
      report.must_match_but_differ.push_back(c.op + " " + c.name + ": " + r.conformance.first);
  }
  std::printf("  pair %s: %d of %d cases bit-identical", label.c_str(), report.identical, report.cases);
  for (const auto& [op, d] : report.differing_per_op)
    std::printf("; %s differs in %d (largest %.3g%s)", op.c_str(), d.first, d.second,
                same_bits_expected(op) ? ", must be identical" : "");
  std::printf("\n");
  return report;
}

// Every CUDA GPU against every Vulkan GPU of the machine (lavapipe is left out: it rounds
// the product before the add, as Vulkan allows, where NVIDIA fuses them).
TEST(BackendPairs, CudaAndVulkanOnTheSameGpuGiveTheSameBits) {
  std::vector<Target> cuda, vulkan;
  for (const Target& t : all_targets()) {
    if (t.backend == "cuda") cuda.push_back(t);
    if (t.backend == "vulkan" && t.device_name.find("llvmpipe") == std::string::npos) vulkan.push_back(t);
  }
  if (cuda.empty() || vulkan.empty()) GTEST_SKIP() << "needs a CUDA GPU and a Vulkan GPU (this machine has "
                                                   << cuda.size() << " and " << vulkan.size() << ")";
  for (const Target& c : cuda)
    for (const Target& v : vulkan) {
      OpEnv a(make_target(c)), b(make_target(v));
      const PairReport r = compare_pair(a, b, c.label() + " (" + c.device_name + ") vs " + v.label() + " (" + v.device_name + ")");
      EXPECT_GT(r.cases, 80);  // 91 on the H200 (no MLA on cuda), 101 where both run MLA
      for (const std::string& d : r.must_match_but_differ) ADD_FAILURE() << c.label() << " vs " << v.label() << ": " << d;
    }
}

// The pair check can fail: a backend is identical to another instance of itself
// everywhere, and a backend with one wrong row in its matrix products fails it.
TEST(BackendPairs, ThePairCheckSeesAWrongRow) {
  OpEnv a(make_reference_backend(1)), b(make_reference_backend(1));
  const PairReport same = compare_pair(a, b, "reference vs reference");
  EXPECT_EQ(same.identical, same.cases);
  EXPECT_TRUE(same.must_match_but_differ.empty());
  OpEnv faulty(std::make_unique<FaultyBackend>(Fault::MatmulRowOffByOne)), reference(make_reference_backend(1));
  const PairReport off = compare_pair(faulty, reference, "off-by-one matmul vs reference");
  ASSERT_EQ(off.differing_per_op.count("matmul"), 1u);
  EXPECT_GT(off.differing_per_op.at("matmul").first, 0);
  EXPECT_FALSE(off.must_match_but_differ.empty());
}

TEST(BackendOpsTable, CoversEveryOpOfTheContractAndEveryWeightFormat) {
  std::map<std::string, int> per_op;
  for (const OpCase& c : op_table()) ++per_op[c.op];
  for (const char* op : {"embed", "matmul", "rms_norm", "head_norm", "add_bias", "rope", "kv_store", "kv_swap_move",
                         "capture_queries", "attention", "latent_attention", "swiglu", "geglu", "scale", "softcap", "add",
                         "matmul_add", "matmul_swiglu", "gather", "argmax", "top_k"})
    EXPECT_GT(per_op[op], 0) << op;
  EXPECT_EQ(per_op["embed"], 13);
  EXPECT_EQ(per_op["matmul"], 26);
  std::printf("  %zu cases\n", op_table().size());
}

TEST(BackendOpsTable, EveryBackendOfTheBuildIsATarget) {
  const std::vector<Target> targets = all_targets();
  for (const std::string& name : available_backends())
    EXPECT_TRUE(std::any_of(targets.begin(), targets.end(), [&](const Target& t) { return t.backend == name; }) ||
                name != "cpu")
        << name;
  for (const Target& t : targets) std::printf("  target %s: %s\n", t.label().c_str(), t.device_name.c_str());
}

// The cpu backend splits matrix products over its threads by rows: one thread or two
// must give the same bits for every case of every op (T-invariance across thread counts).
TEST(BackendOpsTable, CpuResultsDoNotDependOnTheThreadCount) {
  OpEnv one(make_cpu_backend(1)), two(make_cpu_backend(2));
  int cases = 0;
  for (const OpCase& c : op_table()) {
    if (c.op != "matmul" && c.op != "attention" && c.op != "latent_attention" && c.op != "gather") continue;
    ++cases;
    const CaseReport r = check_case(c, one, two, -1.0);
    EXPECT_TRUE(r.conformance.ok) << c.op << " " << c.name << ": " << r.conformance.first;
  }
  EXPECT_GT(cases, 26);
}

// The cpu backend runs on every instruction set Highway compiled that this CPU has
// (down to the portable scalar emulation a CPU without SIMD gets): each must pass the
// matrix-product cases within the declared tolerance, T-invariant.
TEST(BackendOpsTable, CpuMatmulOnEveryInstructionSet) {
  OpEnv reference(make_reference_backend(2));
  cpu::use_simd_target("");
  const std::vector<std::string> targets = cpu::simd_targets();
#ifndef HWY_COMPILE_ONLY_STATIC  // the sanitizer build compiles the baseline target only
  EXPECT_GE(targets.size(), 2u) << "expected a SIMD target and the scalar fallback";
#endif
  for (const std::string& target : targets) {
    cpu::use_simd_target(target);
    OpEnv env(make_cpu_backend(2));
    double worst = 0.0;
    for (const OpCase& c : op_table()) {
      if (c.op != "matmul") continue;
      const double tolerance = env.be().numerics().tolerance_for(c.rounded_matmul, c.half_matmul, c.bf16_matmul);
      const CaseReport r = check_case(c, env, reference, tolerance);
      worst = std::max(worst, r.conformance.max_error);
      EXPECT_TRUE(r.conformance.ok) << target << " " << c.name << ": " << r.conformance.first;
      EXPECT_TRUE(r.invariance.ok) << target << " " << c.name << ": " << r.invariance.first;
    }
    std::printf("  cpu on %-8s matmul cases within %.3g of the reference (largest relative error)\n", target.c_str(), worst);
  }
  cpu::use_simd_target("");
  EXPECT_THROW(cpu::use_simd_target("no-such-isa"), std::invalid_argument);
}

// F16 products take the activations rounded to fp16: on every instruction set the bits
// of fp32_to_fp16 (nearest even, ties included; infinity past the largest half; NaN stays
// NaN), in the vector part of a row and in its tail.
TEST(BackendOpsTable, CpuRoundsActivationsToHalfAlikeOnEveryInstructionSet) {
  std::vector<float> x = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -1.0f - 0x1p-11f, 65504.0f, 65519.0f, 65520.0f,
                          1e6f, -1e6f, INFINITY, -INFINITY, NAN, 1e-6f, 3e-8f, -6e-8f, 0.0f, -0.0f, 2049.0f, 2051.0f};
  for (int i = 0; x.size() < 53; ++i) x.push_back(hashed_value(7, i, 0, -300.0f, 300.0f));
  std::vector<uint16_t> half(x.size());
  std::vector<float> rounded(x.size());
  for (const std::string& target : cpu::simd_targets()) {
    cpu::use_simd_target(target);
    cpu::round_to_half(x.data(), static_cast<int64_t>(x.size()), half.data(), rounded.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t want = fp32_to_fp16(x[i]);
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(fp16_to_fp32(half[i])) && std::isnan(rounded[i])) << target << " value " << i;
        continue;
      }
      EXPECT_EQ(half[i], want) << target << " value " << i << " = " << x[i];
      EXPECT_TRUE(same_bits(rounded[i], fp16_to_fp32(want))) << target << " value " << i << " = " << x[i];
    }
  }
  cpu::use_simd_target("");
}

// The table must fail a wrong kernel: a backend whose matmul reads the next weight row.
TEST(BackendOpsTable, AnOffByOneRowMatmulFailsConformance) {
  OpEnv faulty(std::make_unique<FaultyBackend>(Fault::MatmulRowOffByOne));
  OpEnv reference(make_reference_backend(1));
  int caught = 0, cases = 0;
  for (const OpCase& c : op_table()) {
    if (c.op != "matmul") continue;
    ++cases;
    const CaseReport r = check_case(c, faulty, reference, -1.0);
    if (!r.conformance.ok) ++caught;
    EXPECT_TRUE(r.invariance.ok) << c.name << ": the fault does not depend on T";
  }
  EXPECT_EQ(caught, cases) << "every matmul case must catch the off-by-one row";
}

// The oracle shares no attention code with the cpu backend (backend/reference/), so a
// mistake in cpu's choice of slots shows: one wrong slot in the region of COMPRESSED rows
// must fail conformance in every case with COMPRESSED rows, a region smaller than the
// prefix and a layer that is not dense, and only there (T-invariance cannot see it).
TEST(BackendOpsTable, AWrongRegionSlotInCpuAttentionFailsConformance) {
  OpEnv mutated(cpu::make_cpu_backend(2, host::AttentionMutation::WrongRegionSlot));
  OpEnv reference(make_reference_backend());
  const double tolerance = mutated.be().numerics().tolerance_for(false, false);
  const std::set<std::string> must_catch = {
      "FAFO-like: COMPRESSED rows, region 68 of 300", "FAFO-like: COMPRESSED rows, region 68 of 300, f16 cache",
      "permuted logical order, dense first layer", "permuted logical order, dense first layer, f16 cache",
      "COMPRESSED rows, region 40 of 300, permuted, dense first layer",
      "COMPRESSED rows, region 40 of 300, permuted, dense first layer, f16 cache",
      "soft-capped at 1, permuted, COMPRESSED rows, f16 cache",
      "sliding window of 64, permuted, COMPRESSED rows, dense first layer",
      "sliding window of 64, permuted, COMPRESSED rows, dense first layer, f16 cache"};
  std::set<std::string> caught;
  for (const OpCase& c : op_table()) {
    if (c.op != "attention" && c.op != "latent_attention") continue;
    const CaseReport r = check_case(c, mutated, reference, tolerance);
    if (!r.conformance.ok) caught.insert(c.name);
    EXPECT_TRUE(r.invariance.ok) << c.name << ": the mutation does not depend on T";
  }
  EXPECT_EQ(caught, must_catch);
}

// ... and a kernel whose result depends on the step size, even where it happens to be
// right at small T: T-invariance fails on the backend alone.
TEST(BackendOpsTable, AKernelThatDependsOnTFailsTInvariance) {
  OpEnv faulty(std::make_unique<FaultyBackend>(Fault::RmsNormDependsOnT));
  OpEnv reference(make_reference_backend(1));
  for (const OpCase& c : op_table()) {
    if (c.op != "rms_norm") continue;
    const CaseReport r = check_case(c, faulty, reference, -1.0);
    EXPECT_FALSE(r.invariance.ok) << c.name;
    EXPECT_FALSE(r.conformance.ok) << c.name;
    EXPECT_NE(r.conformance.first.find("T=9"), std::string::npos) << r.conformance.first;  // T <= 8 still agree
  }
}

// --- --perf: per-op time and GB/s per backend ----------------------------------------------

struct PerfOp {
  std::string op, shape;
  int32_t T;
  double bytes;  // bytes one step of the op reads and writes
  std::function<void(OpEnv&)> setup;
  std::function<void(OpEnv&)> step;  // one step: begin_step .. finish_step
};

std::vector<PerfOp> perf_ops() {
  std::vector<PerfOp> ops;
  const int64_t n = 2048;
  for (const TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0,
                                TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    for (const int32_t T : {1, 8, 64}) {
      const double weight_bytes = static_cast<double>(tensor_row_bytes(type, n)) * n;
      auto batch = std::make_shared<StepBatch>(causal_batch(T, 0));
      ops.push_back({"matmul", lower(tensor_type_name(type)) + " " + std::to_string(n) + "x" + std::to_string(n), T,
                     weight_bytes + 2.0 * T * n * sizeof(float),
                     [=](OpEnv& env) { env.ensure_cache(T + 1); quantized_weight(env, type, n, n, 1); },
                     [=](OpEnv& env) {
                       Backend& be = env.be();
                       const Weight w = quantized_weight(env, type, n, n, 1);
                       Activation x = env.activation("x", n), out = env.activation("out", n);
                       be.begin_step(*batch, env.kv());
                       be.matmul(w, x, out);
                       be.finish_step();
                     }});
    }
  }
  for (const int32_t T : {1, 64}) {
    auto batch = std::make_shared<StepBatch>(causal_batch(T, 0));
    ops.push_back({"rms_norm", "n=4096", T, 2.0 * T * 4096 * sizeof(float), [=](OpEnv& env) { env.ensure_cache(T + 1); },
                   [=](OpEnv& env) {
                     Backend& be = env.be();
                     const Weight g = vector_weight(env, 4096, 3, 0.5f, 1.5f);
                     Activation x = env.activation("x", 4096), out = env.activation("out", 4096);
                     be.begin_step(*batch, env.kv());
                     be.rms_norm(x, g, 1e-5f, out);
                     be.finish_step();
                   }});
    ops.push_back({"swiglu", "n=11008", T, 3.0 * T * 11008 * sizeof(float), [=](OpEnv& env) { env.ensure_cache(T + 1); },
                   [=](OpEnv& env) {
                     Backend& be = env.be();
                     Activation g = env.activation("x", 11008), u = env.activation("y", 11008);
                     be.begin_step(*batch, env.kv());
                     be.swiglu(g, u, g);
                     be.finish_step();
                   }});
  }
  for (const int32_t T : {1, 8}) {
    const int32_t n_past = 2048, kv_dim = 8 * 64, q_dim = 32 * 64;
    auto batch = std::make_shared<StepBatch>(causal_batch(T, n_past));
    ops.push_back({"attention", "ctx 2048, 32/8 heads x 64, f32 cache", T,
                   2.0 * (n_past + T) * kv_dim * sizeof(float) + 2.0 * T * q_dim * sizeof(float),
                   [=](OpEnv& env) {
                     KvCache& kv = env.make_cache(KvCacheShape{1, n_past + 64, kv_dim, KvCacheType::F32});
                     std::vector<float> k(static_cast<size_t>(n_past) * kv_dim);
                     for (size_t i = 0; i < k.size(); ++i) k[i] = hashed_value(1, static_cast<int64_t>(i), 0);
                     kv.write(0, 0, n_past, k.data(), k.data());
                     kv.reset_layout(0, 0, n_past);
                   },
                   [=](OpEnv& env) {
                     Backend& be = env.be();
                     Activation q = env.activation("q", q_dim), out = env.activation("out", q_dim);
                     be.begin_step(*batch, env.kv());
                     be.attention(0, q, AttentionShape{32, 8, 64, 0.125f}, out);
                     be.finish_step();
                   }});
  }
  {
    auto batch = std::make_shared<StepBatch>(causal_batch(1, 0));
    ops.push_back({"argmax", "n=128256", 1, 128256.0 * sizeof(float), [](OpEnv& env) { env.ensure_cache(2); },
                   [=](OpEnv& env) {
                     Backend& be = env.be();
                     Activation x = env.activation("logits", 128256);
                     be.begin_step(*batch, env.kv());
                     be.argmax_rows(x);
                     be.finish_step();
                     be.read_argmax(1);
                   }});
  }
  return ops;
}

int run_perf() {
  std::printf("| backend | op | shape | T | us per step | GB/s |\n|---|---|---|---:|---:|---:|\n");
  std::vector<Target> targets = all_targets();
  for (const Target& t : targets) {
    std::unique_ptr<OpEnv> env;
    try {
      env = std::make_unique<OpEnv>(make_target(t));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", t.label().c_str(), e.what());
      continue;
    }
    for (const PerfOp& op : perf_ops()) {
      try {
        op.setup(*env);
        op.step(*env);  // warm-up (pipelines, descriptor sets)
        std::vector<double> us;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (us.size() < 5 || (us.size() < 200 && std::chrono::steady_clock::now() < deadline)) {
          const auto t0 = std::chrono::steady_clock::now();
          op.step(*env);
          us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(us.begin(), us.end());
        const double median = us[us.size() / 2];
        std::printf("| %s (%s) | %s | %s | %d | %.1f | %.2f |\n", t.label().c_str(), t.device_name.c_str(), op.op.c_str(),
                    op.shape.c_str(), op.T, median, op.bytes / (median * 1e3));
        std::fflush(stdout);
      } catch (const std::exception& e) {
        std::printf("| %s | %s | %s | %d | error: %s | |\n", t.label().c_str(), op.op.c_str(), op.shape.c_str(), op.T, e.what());
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--perf") return run_perf();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
