// The CUDA backend's kernels, each a functor over a flat index space: `op(i)` for every
// i < n computes one independent piece of the op (an output, a row, a head of a row).
// They are `__host__ __device__`: the CUDA device (cuda_device.cuh) runs them as grids
// of threads; the host device (host_device.h) runs the very same code in a loop, which
// is how CI, without a GPU, runs the backend's whole step logic and the conformance
// table against the reference (tests/test_backend_ops.cpp: the "cuda-emulated" target).
//
// These are the plain kernels: correct for every shape, one thread per output or row.
// Their arithmetic is the Vulkan backend's (block_decode.h, dot_order.h).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "block_decode.h"
#include "dot_order.h"
#include "kv_blocks.h"

namespace fafo::cuda {

FAFO_HD float exp_f(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

// float -> bfloat16 bits, rounded to nearest even (fafo::fp32_to_bf16's result):
// overflow to infinity, NaN kept a quiet NaN.
FAFO_HD uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// ---- weights ----

// out[t][c] = the table row of token t, for tokens in [first_row, first_row + n_rows);
// i over T x chunks (16 values each).
template <Format F>
struct EmbedOp {
  const uint8_t* table;
  const int32_t* tokens;
  float* out;
  uint32_t cols, first_row, n_rows, chunks;
  uint64_t row_bytes;
  FAFO_HD void operator()(uint32_t i) const {
    const uint32_t t = i / chunks, chunk = i % chunks;
    const int64_t row = static_cast<int64_t>(tokens[t]) - first_row;
    if (row < 0 || row >= n_rows) return;
    const uint8_t* src = table + static_cast<uint64_t>(row) * row_bytes;
    float* dst = out + static_cast<uint64_t>(t) * cols + 16 * chunk;
    if (16 * chunk + 16 <= cols) {
      float v[16];
      decode_chunk<F>(src, chunk, v);
      for (uint32_t k = 0; k < 16; ++k) dst[k] = v[k];
    } else if constexpr (is_plain_float<F>) {
      for (uint32_t c = 16 * chunk; c < cols; ++c) out[static_cast<uint64_t>(t) * cols + c] = decode_value<F>(src, c);
    }
  }
};

// out[t * out_stride + out_offset + r] (+)= W[r] . x[t]; i over T x rows.
template <Format F>
struct MatmulOp {
  const uint8_t* w;
  const float* x;
  float* out;
  uint32_t rows, cols, x_stride, out_stride, out_offset;
  uint64_t row_bytes;
  bool accumulate;
  FAFO_HD void operator()(uint32_t i) const {
    const uint32_t t = i / rows, r = i % rows;
    const float sum = row_dot<F>(w + static_cast<uint64_t>(r) * row_bytes, x + static_cast<uint64_t>(t) * x_stride, cols);
    float* o = out + static_cast<uint64_t>(t) * out_stride + out_offset + r;
    *o = accumulate ? add_rn(*o, sum) : sum;
  }
};

// ---- rows ----

// RMSNorm of row i (n values, rows contiguous): dot_order.h's lane sums and tree.
struct RmsNormOp {
  const float* x;
  const float* gain;
  float* out;
  uint32_t n;
  float eps;
  FAFO_HD void operator()(uint32_t i) const {
    const float* row = x + static_cast<uint64_t>(i) * n;
    float sums[kLanes];
    for (uint32_t l = 0; l < kLanes; ++l) sums[l] = lane_sum_squares(row, n, l);
    const float scale = rms_scale(tree32(sums), n, eps);
    for (uint32_t c = 0; c < n; ++c) out[static_cast<uint64_t>(i) * n + c] = rms_apply(row[c], scale, gain[c]);
  }
};

// Element-wise over n floats: x[i] += y[i] (Add), x[i] += b[i % cols] (Bias),
// out[i] = silu(g[i]) * u[i] (Swiglu).
struct AddOp {
  float* x;
  const float* y;
  FAFO_HD void operator()(uint32_t i) const { x[i] = add_rn(x[i], y[i]); }
};
struct BiasOp {
  float* x;
  const float* b;
  uint32_t cols;
  FAFO_HD void operator()(uint32_t i) const { x[i] = add_rn(x[i], b[i % cols]); }
};
// silu(a) * u, as every SwiGLU kernel computes it.
FAFO_HD float swiglu_value(float a, float u) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(__fdiv_rn(a, __fadd_rn(1.0f, exp_f(-a))), u);
#else
  return a / (1.0f + exp_f(-a)) * u;
#endif
}
struct SwigluOp {
  const float* g;
  const float* u;
  float* out;
  FAFO_HD void operator()(uint32_t i) const { out[i] = swiglu_value(g[i], u[i]); }
};
// gpt-oss's clamped SwiGLU (GatedActivation::SwigluOai): g / (1 + exp(-1.702 g)) * (u + 1)
// with g = min(gate, 7), u = clamp(up, -7, 7).
struct SwigluOaiOp {
  const float* g;
  const float* u;
  float* out;
  static constexpr float kAlpha = 1.702f, kLimit = 7.0f;  // fafo::kSwigluOaiAlpha, kSwigluOaiLimit
  FAFO_HD void operator()(uint32_t i) const {
    // (As std::min and std::clamp: a NaN stays NaN.)
    const float gate = kLimit < g[i] ? kLimit : g[i];
    const float up = u[i] < -kLimit ? -kLimit : kLimit < u[i] ? kLimit : u[i];
#if defined(__CUDA_ARCH__)
    out[i] = __fmul_rn(__fdiv_rn(gate, __fadd_rn(1.0f, exp_f(__fmul_rn(-kAlpha, gate)))), __fadd_rn(up, 1.0f));
#else
    out[i] = gate / (1.0f + exp_f(-kAlpha * gate)) * (up + 1.0f);
#endif
  }
};

FAFO_HD float tanh_f(float x) {
#if defined(__CUDA_ARCH__)
  return tanhf(x);
#else
  return std::tanh(x);
#endif
}
FAFO_HD float clamp_f(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }
// gelu(g) * u, GELU by its tanh form, tanh's argument clamped to [-10, 10].
struct GegluOp {
  const float* g;
  const float* u;
  float* out;
  FAFO_HD void operator()(uint32_t i) const {
    const float x = g[i], inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanh_f(clamp_f(inner, -10.0f, 10.0f))) * u[i];
  }
};
struct ScaleOp {
  float* x;
  float factor;
  FAFO_HD void operator()(uint32_t i) const { x[i] = mul_rn(x[i], factor); }
};
// cap * tanh(x / cap), tanh's argument clamped to [-10, 10].
FAFO_HD float soft_cap(float x, float cap) { return cap * tanh_f(clamp_f(x / cap, -10.0f, 10.0f)); }
struct SoftcapOp {
  float* x;
  float cap;
  FAFO_HD void operator()(uint32_t i) const { x[i] = soft_cap(x[i], cap); }
};

// Rotates pair p of head h of row t by the step's table (cos, sin per row and pair,
// computed on the host by RopeParams::angle as the reference does); i over
// T x n_heads x n_pairs.
struct RopeOp {
  float* x;
  const float* table;  // [T][n_pairs][2]
  uint32_t n_heads, head_dim, n_pairs, stride;
  bool neox;
  FAFO_HD void operator()(uint32_t i) const {
    const uint32_t p = i % n_pairs, h = (i / n_pairs) % n_heads, t = i / (n_pairs * n_heads);
    float* head = x + static_cast<uint64_t>(t) * stride + static_cast<uint64_t>(h) * head_dim;
    const uint32_t a = neox ? p : 2 * p, b = neox ? p + n_pairs : 2 * p + 1;
    const float c = table[(static_cast<uint64_t>(t) * n_pairs + p) * 2], s = table[(static_cast<uint64_t>(t) * n_pairs + p) * 2 + 1];
    const float x0 = head[a], x1 = head[b];
    head[a] = sub_rn(mul_rn(x0, c), mul_rn(x1, s));
    head[b] = add_rn(mul_rn(x0, s), mul_rn(x1, c));
  }
};

// dst row k = src row rows[k]; i over n x cols.
struct GatherOp {
  const float* src;
  float* dst;
  const int32_t* rows;
  uint32_t cols, src_stride, dst_stride;
  FAFO_HD void operator()(uint32_t i) const {
    const uint32_t k = i / cols, c = i % cols;
    dst[static_cast<uint64_t>(k) * dst_stride + c] = src[static_cast<uint64_t>(rows[k]) * src_stride + c];
  }
};

// dst row rows[k] += weights[k] * src row k, the product and the sum each rounded (the
// reference's scatter_add); i over rows.size() x cols.
struct ScatterAddOp {
  const float* src;
  float* dst;
  const int32_t* rows;
  const float* weights;
  uint32_t cols;
  FAFO_HD void operator()(uint32_t i) const {
    const uint32_t k = i / cols, c = i % cols;
    float& d = dst[static_cast<uint64_t>(rows[k]) * cols + c];
    d = add_rn(d, mul_rn(weights[k], src[static_cast<uint64_t>(k) * cols + c]));
  }
};

// The index of each row's largest value (scalar::argmax_row: the first of equal ones; -1
// for a row holding a NaN, -2 for an empty row or one of -inf only); i over rows.
struct ArgmaxOp {
  const float* x;
  int32_t* out;
  uint32_t cols, stride;
  FAFO_HD void operator()(uint32_t i) const {
    const float* row = x + static_cast<uint64_t>(i) * stride;
    int32_t best = 0;
    for (uint32_t c = 0; c < cols; ++c) {
      if (row[c] != row[c]) {
        out[i] = -1;
        return;
      }
      if (row[c] > row[best]) best = static_cast<int32_t>(c);
    }
    out[i] = cols == 0 || row[best] == -INFINITY ? -2 : best;
  }
};

// ---- the KV cache ----

// Stores rows of kv_dim values at slots first_slot.. in the cache's format
// (kv_blocks.h); i over T x kv_dim for fp32 and fp16, T x kv_dim / 32 blocks for the
// block formats (each quantized from its 32 values by one thread).
struct KvStoreOp {
  const float* src;
  void* dst;
  uint32_t kv_dim, src_stride, src_offset, first_slot;
  KvFormat format;
  uint32_t ring = 0;  // > 0: a ring layer's entries (KvCacheShape::ring): row t goes to slot (first_slot + t) mod ring
  FAFO_HD uint64_t slot(uint32_t t) const { return ring > 0 ? (first_slot + t) % ring : first_slot + t; }
  // The op's index space for `rows` rows.
  uint64_t size(uint32_t rows) const { return uint64_t{rows} * (kv_blocks(format) ? kv_dim / 32 : kv_dim); }
  FAFO_HD void operator()(uint32_t i) const {
    if (kv_blocks(format)) {
      const uint32_t per_row = kv_dim / 32, t = i / per_row, b = i % per_row;
      const float* x = src + static_cast<uint64_t>(t) * src_stride + src_offset + 32 * b;
      float v[32];
      for (uint32_t j = 0; j < 32; ++j) v[j] = x[j];
      const uint64_t block = slot(t) * per_row + b;
      quantize_kv_block(v, static_cast<uint8_t*>(dst) + block * kv_block_bytes(format), format);
      return;
    }
    const uint32_t t = i / kv_dim, c = i % kv_dim;
    const float v = src[static_cast<uint64_t>(t) * src_stride + src_offset + c];
    const uint64_t at = slot(t) * kv_dim + c;
    if (format == KvFormat::F16) static_cast<uint16_t*>(dst)[at] = float_to_half_bits(v);
    else static_cast<float*>(dst)[at] = v;
  }
};

// Exchanges (swap) or copies (move: first -> second) entries of kv_dim Elements each
// (the entry's 16- or 32-bit units, whatever the cache's format), pair after pair in
// order; i over those units (columns are independent, so each runs every pair in order).
template <typename Element>
struct SlotOp {
  Element* base;
  const int32_t* pairs;  // [n][2]
  uint32_t n, kv_dim;
  bool swap;
  uint32_t ring = 0;  // > 0: a ring layer, the pairs' cache indices at their slots mod ring (moves only)
  FAFO_HD uint64_t slot(int32_t index) const {
    return ring > 0 ? static_cast<uint32_t>(index) % ring : static_cast<uint64_t>(index);
  }
  FAFO_HD void operator()(uint32_t i) const {
    for (uint32_t k = 0; k < n; ++k) {
      Element* a = base + slot(pairs[2 * k]) * kv_dim + i;
      Element* b = base + slot(pairs[2 * k + 1]) * kv_dim + i;
      if (swap) {
        const Element t = *a;
        *a = *b;
        *b = t;
      } else {
        *b = *a;
      }
    }
  }
};

// Attention of head h of row t over the keys its row sees: first its view of the
// committed entries (FULL rows: every one, in logical order; COMPRESSED rows: the region
// [0, region), or every entry in a dense layer), then the batch tokens its mask row lets
// it see; in a sliding-window layer only the keys inside the row's window (a FULL row's
// committed keys start at its window's first, prefix_skip). Two passes over the keys (the largest score, then the exponentials and the
// weighted values, accumulated into `acc`); i over T x n_head.
struct AttentionOp {
  const float* q;
  float* out;
  float* acc;  // [T x n_head x head_dim] scratch
  const void* keys;
  const void* values;
  const uint64_t* mask;       // [T][mask_words]: bit j of row t: row t sees batch token j
  const uint8_t* compressed;  // [T]: 1 for a COMPRESSED row
  const int32_t* order;       // [n_past] physical slots in logical order, or null (identity)
  uint32_t T, n_past, n_head, n_head_kv, head_dim, kv_dim, q_stride, out_stride, mask_words, region;
  float scale;
  bool dense;
  KvFormat format;  // the cache's (kv_blocks.h)
  float softcap = 0.0f;  // > 0: scores soft-capped (AttentionShape::softcap)
  // A sliding-window layer (AttentionShape::window > 0): the rows' positions ([T]) and
  // each region slot's entry (its logical index, [region]); null without a window.
  const int32_t* positions = nullptr;
  const int32_t* region_positions = nullptr;
  int32_t window = 0;
  // > 0: a ring layer (KvCacheShape::ring, a window layer's): the entry of cache index i
  // (a committed entry's logical index, batch token j's n_past + j) at slot i mod ring.
  uint32_t ring = 0;
  // The heads' sinks (AttentionShape::sinks, [n_head]): one more logit per row's
  // softmax, with no value; null without.
  const float* sinks = nullptr;

  // A key's score from its dot product with the query.
  FAFO_HD float score_of(float dot) const {
    const float s = mul_rn(dot, scale);
    return softcap > 0.0f ? soft_cap(s, softcap) : s;
  }

  FAFO_HD float key(uint32_t slot, uint32_t d) const { return kv_value(keys, static_cast<uint64_t>(slot) * kv_dim + d, format); }
  FAFO_HD float value(uint32_t slot, uint32_t d) const {
    return kv_value(values, static_cast<uint64_t>(slot) * kv_dim + d, format);
  }
  // Committed entries row t skips: in a sliding-window layer, a FULL row's entries
  // before its window (logical indices below its position - window + 1).
  FAFO_HD uint32_t prefix_skip(uint32_t t) const {
    if (window <= 0 || (compressed[t] && !dense) || positions[t] < window) return 0;
    const uint32_t first = static_cast<uint32_t>(positions[t] - window + 1);
    return first < n_past ? first : n_past;
  }
  // The committed keys row t visits, and the slot of the k-th, k < prefix_count(t).
  FAFO_HD uint32_t prefix_count(uint32_t t) const {
    if (compressed[t] && !dense) return region < n_past ? region : n_past;
    return n_past - prefix_skip(t);
  }
  FAFO_HD uint32_t prefix_slot(uint32_t t, uint32_t k) const {
    if (compressed[t] && !dense) return ring > 0 ? static_cast<uint32_t>(region_positions[k]) % ring : k;
    k += prefix_skip(t);
    if (ring > 0) return k % ring;
    return order ? static_cast<uint32_t>(order[k]) : k;
  }
  // The slot of batch token j.
  FAFO_HD uint32_t batch_slot(uint32_t j) const { return ring > 0 ? (n_past + j) % ring : n_past + j; }
  FAFO_HD bool sees(uint32_t t, uint32_t j) const { return (mask[static_cast<uint64_t>(t) * mask_words + j / 64] >> (j % 64)) & 1u; }
  // Whether row t's key `key` (counted over its keys: the `prefix` committed ones first,
  // from prefix_skip(t) on, then batch token key - prefix) is inside its sliding window
  // (always without one). A committed entry's position is its logical index (a region
  // slot's, its entry's).
  FAFO_HD bool in_window(uint32_t t, uint32_t key, uint32_t prefix) const {
    if (window <= 0) return true;
    const int32_t at = key < prefix ? (compressed[t] && !dense ? region_positions[key]
                                                               : static_cast<int32_t>(key + prefix_skip(t)))
                                    : positions[key - prefix];
    return positions[t] - at < window;
  }

  FAFO_HD float score(const float* qh, uint32_t slot, uint32_t kv_off) const {
    float s = 0.0f;
    for (uint32_t d = 0; d < head_dim; ++d) s = fma_rn(qh[d], key(slot, kv_off + d), s);
    return score_of(s);
  }

  FAFO_HD void operator()(uint32_t i) const {
    const uint32_t t = i / n_head, h = i % n_head;
    const uint32_t kv_off = (h / (n_head / n_head_kv)) * head_dim;
    const float* qh = q + static_cast<uint64_t>(t) * q_stride + static_cast<uint64_t>(h) * head_dim;
    float* a = acc + static_cast<uint64_t>(i) * head_dim;
    const uint32_t n_prefix = prefix_count(t);
    float m = sinks ? sinks[h] : -INFINITY;
    for (uint32_t k = 0; k < n_prefix; ++k) {
      if (!in_window(t, k, n_prefix)) continue;
      const float s = score(qh, prefix_slot(t, k), kv_off);
      m = s > m ? s : m;
    }
    for (uint32_t j = 0; j <= t; ++j)
      if (sees(t, j) && in_window(t, n_prefix + j, n_prefix)) {
        const float s = score(qh, batch_slot(j), kv_off);
        m = s > m ? s : m;
      }
    for (uint32_t d = 0; d < head_dim; ++d) a[d] = 0.0f;
    float l = sinks ? exp_f(sub_rn(sinks[h], m)) : 0.0f;
    auto add_key = [&](uint32_t slot) {
      const float e = exp_f(sub_rn(score(qh, slot, kv_off), m));
      l = add_rn(l, e);
      for (uint32_t d = 0; d < head_dim; ++d) a[d] = fma_rn(e, value(slot, kv_off + d), a[d]);
    };
    for (uint32_t k = 0; k < n_prefix; ++k)
      if (in_window(t, k, n_prefix)) add_key(prefix_slot(t, k));
    for (uint32_t j = 0; j <= t; ++j)
      if (sees(t, j) && in_window(t, n_prefix + j, n_prefix)) add_key(batch_slot(j));
    float* o = out + static_cast<uint64_t>(t) * out_stride + static_cast<uint64_t>(h) * head_dim;
    for (uint32_t d = 0; d < head_dim; ++d) {
#if defined(__CUDA_ARCH__)
      o[d] = __fdiv_rn(a[d], l);
#else
      o[d] = a[d] / l;
#endif
    }
  }
};

}  // namespace fafo::cuda
