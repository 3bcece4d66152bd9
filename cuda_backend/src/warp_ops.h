// The CUDA backend's warp kernels (the default kernel set; `FAFO_CUDA_KERNELS=plain`
// selects ops.h's one-thread-per-output kernels instead): a warp of 32 lanes per piece
// of work, written as two per-lane phases around one warp primitive so that the host
// runs the very code a GPU runs:
//   1. lane_values(warp, lane, v): lane `lane` of warp `warp` computes its share of each
//      of the op's kValues sums;
//   2. the warp adds the 32 shares of each sum by dot_order.h's fixed tree (tree32:
//      lane l + 16, then + 8, + 4, + 2, + 1) and every lane receives the sums;
//   3. finish(warp, lane, sums): each lane writes its part of the results.
// Attention, whose warps reduce inside a loop, is written instead over a Warp (warp.h:
// `run(warp, index)`), which a GPU runs lane per thread and the host lane by lane.
// A GPU does step 2 with warp shuffles (cuda_device.cuh: warp_tree); the host device
// (host_device.h: launch_warps) runs the lanes of a warp one after another, then
// tree32 over their shares: the same additions in the same order, so the bits are the
// same, and they are the plain kernels' bits (dot_order.h's order is a warp's order).
#pragma once

#include <cstdint>

#include "block_decode.h"
#include "dot_order.h"
#include "ops.h"
#include "warp.h"

namespace fafo::cuda {

// out[t * out_stride + out_offset + r] (+)= W[r] . x[t] for a tile of up to kTile tokens:
// warp w computes row w % rows for tokens [kTile * (w / rows), + kTile) of the step's
// T. Lane l decodes its chunks l, l + 32, ... of the row once for every token of the
// tile (one read of the weights per tile instead of one per token), and adds each
// token's products in column order: each (row, token) sum is row_dot's, bit for bit
// MatmulOp's, whatever T and the tile (T-invariant).
template <Format F, MulAdd M = MulAdd::Fused>
struct MatmulWarpOp {
  static constexpr uint32_t kTile = 8;
  static constexpr uint32_t kValues = kTile;
  const uint8_t* w;
  const float* x;
  float* out;
  uint32_t rows, cols, T, x_stride, out_stride, out_offset;
  uint64_t row_bytes;
  bool accumulate;

  // Warps for a step of T tokens.
  static uint64_t warps(uint32_t rows, uint32_t T) { return uint64_t{rows} * ((T + kTile - 1) / kTile); }

  FAFO_HD void lane_values(uint32_t warp, uint32_t lane, float v[kValues]) const {
    const uint32_t r = warp % rows, t0 = (warp / rows) * kTile;
    const uint32_t n = T - t0 < kTile ? T - t0 : kTile;
    const uint8_t* row = w + static_cast<uint64_t>(r) * row_bytes;
    const float* xt = x + static_cast<uint64_t>(t0) * x_stride;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (uint32_t t = 0; t < kTile; ++t) v[t] = 0.0f;
    const uint32_t full_chunks = cols / 16;
    for (uint32_t chunk = lane; chunk < full_chunks; chunk += kLanes) {
      float wv[16];
      decode_chunk<F>(row, chunk, wv);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
      for (uint32_t t = 0; t < kTile; ++t) {
        if (t >= n) break;
        const float* xc = xt + static_cast<uint64_t>(t) * x_stride + 16 * chunk;
        float acc = v[t];
        for (uint32_t k = 0; k < 16; ++k) acc = mul_add<M>(wv[k], xc[k], acc);
        v[t] = acc;
      }
    }
    if constexpr (is_plain_float<F>) {
      if (cols % 16 != 0 && lane == full_chunks % kLanes)
        for (uint32_t t = 0; t < n; ++t)
          for (uint32_t c = 16 * full_chunks; c < cols; ++c)
            v[t] = mul_add<M>(decode_value<F>(row, c), xt[static_cast<uint64_t>(t) * x_stride + c], v[t]);
    }
  }

  // Lane t writes token t's result.
  FAFO_HD void finish(uint32_t warp, uint32_t lane, const float sums[kValues]) const {
    const uint32_t r = warp % rows, t0 = (warp / rows) * kTile;
    if (lane >= kTile || t0 + lane >= T) return;
    float* o = out + static_cast<uint64_t>(t0 + lane) * out_stride + out_offset + r;
    *o = accumulate ? add_rn(*o, sums[lane]) : sums[lane];
  }
};

// The fused products, over a Warp (warp.h): out = W rms_norm(x) (with `gain`: the RMSNorm
// fused into the product), and the feed-forward gate out = silu(W_gate x') * (W_up x')
// (Gated: W is the gate's `rows` rows then the up projection's, one weight; x' = x or
// rms_norm(x)). Warp w computes row w % rows for a tile of up to kTile tokens, as
// MatmulWarpOp: first each token's norm scale (lane_sum_squares, the tree, rms_scale,
// as RmsNormWarpOp), then each lane's chunks, normalizing each x value as it reads it
// (rms_apply, RmsNormWarpOp's value), the tree per token, and the SwiGLU
// (swiglu_value): the bits of rms_norm, matmul (twice) and swiglu apart, with one read
// of x and none of a normalized copy.
template <Format F, bool Gated>
struct FusedProductWarpOp {
  static constexpr uint32_t kTile = 8;
  static constexpr bool gated = Gated;  // a template parameter: the plain products keep no up accumulators
  const uint8_t* w;
  const float* x;
  float* out;
  const float* gain;  // null: no norm
  float eps;
  uint32_t rows, cols, T, x_stride, out_stride;
  uint64_t row_bytes;

  static uint64_t warps(uint32_t rows, uint32_t T) { return uint64_t{rows} * ((T + kTile - 1) / kTile); }

  template <class W>
  FAFO_HD void run(W& warp, uint32_t index) const {
    const uint32_t r = index % rows, t0 = (index / rows) * kTile;
    const uint32_t n = T - t0 < kTile ? T - t0 : kTile;
    const float* xt = x + static_cast<uint64_t>(t0) * x_stride;
    float scale[kTile];
    for (uint32_t t = 0; t < kTile; ++t) {
      scale[t] = 1.0f;
      if (gain == nullptr || t >= n) continue;
      typename W::template Vec<float> squares;
      warp.each([&](uint32_t lane) { squares[lane] = lane_sum_squares(xt + static_cast<uint64_t>(t) * x_stride, cols, lane); });
      scale[t] = rms_scale(warp.sum(squares), cols, eps);
    }
    typename W::template Vec<float> acc[kTile], acc_up[Gated ? kTile : 1];
    const uint8_t* gate_row = w + static_cast<uint64_t>(r) * row_bytes;
    const uint8_t* up_row = w + static_cast<uint64_t>(r + rows) * row_bytes;
    warp.each([&](uint32_t lane) {
      for (uint32_t t = 0; t < kTile; ++t) acc[t][lane] = 0.0f;
      if constexpr (Gated)
        for (uint32_t t = 0; t < kTile; ++t) acc_up[t][lane] = 0.0f;
      const uint32_t full_chunks = cols / 16;
      // x value c of token t, normalized when the norm is fused.
      const auto input = [&](uint32_t t, uint32_t c) {
        const float v = xt[static_cast<uint64_t>(t) * x_stride + c];
        return gain != nullptr ? rms_apply(v, scale[t], gain[c]) : v;
      };
      for (uint32_t chunk = lane; chunk < full_chunks; chunk += kLanes) {
        float wg[16], wu[Gated ? 16 : 1];
        decode_chunk<F>(gate_row, chunk, wg);
        if constexpr (Gated) decode_chunk<F>(up_row, chunk, wu);
        for (uint32_t t = 0; t < kTile; ++t) {
          if (t >= n) break;
          float a = acc[t][lane];
          if constexpr (Gated) {
            float b = acc_up[t][lane];
            for (uint32_t k = 0; k < 16; ++k) {
              const float v = input(t, 16 * chunk + k);
              a = fma_rn(wg[k], v, a);
              b = fma_rn(wu[k], v, b);
            }
            acc_up[t][lane] = b;
          } else {
            for (uint32_t k = 0; k < 16; ++k) a = fma_rn(wg[k], input(t, 16 * chunk + k), a);
          }
          acc[t][lane] = a;
        }
      }
      if constexpr (is_plain_float<F>) {
        if (cols % 16 != 0 && lane == full_chunks % kLanes)
          for (uint32_t t = 0; t < n; ++t)
            for (uint32_t c = 16 * full_chunks; c < cols; ++c) {
              const float v = input(t, c);
              acc[t][lane] = fma_rn(decode_value<F>(gate_row, c), v, acc[t][lane]);
              if constexpr (Gated) acc_up[t][lane] = fma_rn(decode_value<F>(up_row, c), v, acc_up[t][lane]);
            }
      }
    });
    for (uint32_t t = 0; t < kTile; ++t) {
      if (t >= n) break;
      const float g = warp.sum(acc[t]);
      float result = g;
      if constexpr (Gated) result = swiglu_value(g, warp.sum(acc_up[t]));
      warp.each([&](uint32_t lane) {
        if (lane == t) out[static_cast<uint64_t>(t0 + t) * out_stride + r] = result;
      });
    }
  }
};

// RMSNorm of rows of n values (rows contiguous; out must not be x when parts > 1), `parts` warps a row: warp w takes row
// w / parts and writes its part w % parts of the columns (parts of 32 x ceil(n / (32
// parts)) columns); every warp of a row computes the row's lane sums of squares
// (lane_sum_squares) and the tree itself, so each value is RmsNormOp's bits whatever
// `parts` is. parts_for(n) spreads a long row over warps of 512 columns or more.
struct RmsNormWarpOp {
  static constexpr uint32_t kValues = 1;
  const float* x;
  const float* gain;
  float* out;
  uint32_t n;
  float eps;
  uint32_t parts = 1;

  static uint32_t parts_for(uint32_t n) { return n >= 1024 ? n / 512 : 1; }

  FAFO_HD void lane_values(uint32_t warp, uint32_t lane, float v[kValues]) const {
    v[0] = lane_sum_squares(x + static_cast<uint64_t>(warp / parts) * n, n, lane);
  }
  FAFO_HD void finish(uint32_t warp, uint32_t lane, const float sums[kValues]) const {
    const float scale = rms_scale(sums[0], n, eps);
    const uint64_t row_at = static_cast<uint64_t>(warp / parts) * n;
    const uint32_t span = (n + kLanes * parts - 1) / (kLanes * parts) * kLanes, first = (warp % parts) * span;
    const uint32_t end = first + span < n ? first + span : n;
    const float* row = x + row_at;
    float* o = out + row_at;
    for (uint32_t c = first + lane; c < end; c += kLanes) o[c] = rms_apply(row[c], scale, gain[c]);
  }
};

// Attention split over the context (flash-decoding), for one part of a step (its rows
// over its cache): warp (p, g, t) computes, for the `group` query heads g * group, ...
// of row t (heads that share one KV head), the softmax statistics and the unnormalised
// weighted sum of values over keys [p * part_keys, (p + 1) * part_keys) of the row's
// keys (AttentionOp's order: its view of the committed entries, then the batch tokens
// its mask lets it see), and writes each head's (max, sum of exp, acc[head_dim]) to
// partials; AttentionCombineOp merges the parts. part_keys depends on n_past and the
// backend's largest step only (OpsBackend::attention), so a row's arithmetic does not
// depend on T or the other rows (T-invariant).
//
// Keys go 32 at a time, one per lane: the lane reads its key once and scores it for
// every head of the group (each score a dot with the head's query, fused multiply-adds
// in dimension order), each head's chunk max (exact) and sum of exponentials by the
// tree; then each lane owns dimensions lane, lane + 32, ... of every head's accumulator
// and adds the chunk's keys' weighted values in key order, each value read once for
// the group (coalesced reads of each value row). A head's arithmetic is the same
// whatever the group (a group only saves reads), and not AttentionOp's (the softmax sums
// in another order): within the backend's tolerance of the reference.
// The query heads one attention warp takes: the largest count that divides the heads
// sharing a KV head, up to 4 (each adds 8 accumulators per lane).
constexpr uint32_t kMaxAttentionGroup = 4;
inline uint32_t attention_group_for(uint32_t n_head, uint32_t n_head_kv) {
  const uint32_t sharing = n_head_kv > 0 ? n_head / n_head_kv : 1;
  uint32_t best = 1;
  for (uint32_t g = 1; g <= sharing && g <= kMaxAttentionGroup; ++g)
    if (sharing % g == 0) best = g;
  return best;
}

// The keys of one attention part for a step whose rows see n_past committed entries:
// 32 (one chunk of a warp) up to n_past = 32 kAttentionParts, then n_past /
// kAttentionParts rounded up to a whole chunk, so that a one-token step gives each head
// group up to kAttentionParts + 1 warps. A function of n_past alone (T-invariant).
constexpr uint32_t kAttentionParts = 32;
inline uint32_t attention_part_keys(uint32_t n_past) {
  const uint32_t per_part = (n_past + kAttentionParts - 1) / kAttentionParts;
  return per_part <= kLanes ? kLanes : (per_part + kLanes - 1) / kLanes * kLanes;
}

template <uint32_t Group>
struct AttentionSplitOp {
  static constexpr uint32_t kDimsPerLane = 8;  // head_dim <= 256
  static_assert(Group >= 1 && Group <= kMaxAttentionGroup);
  AttentionOp a;  // the part's rows, cache, masks and shape, as the plain kernel takes them
  float* partials;  // [rows from t0][n_head][n_parts][head_dim + 2]
  uint32_t part_keys, n_parts;
  uint32_t t0;    // the first row of this launch
  uint32_t rows;  // its rows: warp i takes row t0 + i % rows, part (i / rows) % n_parts
                      // and head group i / (rows * n_parts), so the warps of a block (rows
                      // of one part and group) read the same keys and values together

  template <class W>
  FAFO_HD void run(W& warp, uint32_t index) const {
    const uint32_t t = t0 + index % rows, rest = index / rows;
    const uint32_t part = rest % n_parts, h0 = (rest / n_parts) * Group;
    const uint32_t dims = (a.head_dim + kLanes - 1) / kLanes;  // accumulators per head and lane
    const uint32_t kv_off = (h0 / (a.n_head / a.n_head_kv)) * a.head_dim;
    const float* q0 = a.q + static_cast<uint64_t>(t) * a.q_stride + static_cast<uint64_t>(h0) * a.head_dim;
    const uint32_t prefix = a.prefix_count(t), n_keys = prefix + t + 1;
    const uint32_t first = part * part_keys;
    const uint32_t last = first + part_keys < n_keys ? first + part_keys : n_keys;
    float m[Group], l[Group];
    for (uint32_t g = 0; g < Group; ++g) m[g] = -INFINITY, l[g] = 0.0f;
    typename W::template Vec<float> acc[Group * kDimsPerLane];  // [g * 8 + k]: head h0 + g, dimension lane + 32 k
    warp.each([&](uint32_t lane) {
      for (uint32_t k = 0; k < Group * kDimsPerLane; ++k) acc[k][lane] = 0.0f;
    });
    for (uint32_t chunk = first; chunk < last; chunk += kLanes) {
      typename W::template Vec<float> score[Group], weight[Group];
      typename W::template Vec<uint32_t> slot;
      warp.each([&](uint32_t lane) {
        const uint32_t key = chunk + lane;
        uint32_t at = 0;
        bool visible = false;
        if (key < last) {
          visible = true;
          if (key < prefix) {
            at = a.prefix_slot(t, key);
          } else {
            at = a.n_past + (key - prefix);
            visible = a.sees(t, key - prefix);
          }
          visible = visible && a.in_window(t, key, prefix);
        }
        float s[Group];
        for (uint32_t g = 0; g < Group; ++g) s[g] = 0.0f;
        if (visible)
          for (uint32_t d = 0; d < a.head_dim; ++d) {
            const float k = a.key(at, kv_off + d);
            for (uint32_t g = 0; g < Group; ++g) s[g] = fma_rn(q0[g * a.head_dim + d], k, s[g]);
          }
        for (uint32_t g = 0; g < Group; ++g) score[g][lane] = visible ? a.score_of(s[g]) : -INFINITY;
        slot[lane] = at;
      });
      float correction[Group];
      bool any = false;
      for (uint32_t g = 0; g < Group; ++g) {
        correction[g] = 1.0f;
        const float m_new = max_f(m[g], warp.max(score[g]));
        if (m_new == -INFINITY) {  // nothing visible yet for this head (the same on every lane)
          warp.each([&](uint32_t lane) { weight[g][lane] = 0.0f; });
          continue;
        }
        any = true;
        warp.each([&](uint32_t lane) {
          weight[g][lane] = score[g][lane] == -INFINITY ? 0.0f : exp_f(sub_rn(score[g][lane], m_new));
        });
        correction[g] = m[g] == -INFINITY ? 0.0f : exp_f(sub_rn(m[g], m_new));
        l[g] = add_rn(mul_rn(l[g], correction[g]), warp.sum(weight[g]));
        m[g] = m_new;
      }
      if (!any) continue;
      warp.each([&](uint32_t lane) {
        for (uint32_t g = 0; g < Group; ++g) {
          if (m[g] == -INFINITY) continue;
          for (uint32_t k = 0; k < kDimsPerLane; ++k) {
            if (k >= dims) break;
            acc[g * kDimsPerLane + k][lane] = mul_rn(acc[g * kDimsPerLane + k][lane], correction[g]);
          }
        }
      });
      const uint32_t count = last - chunk < kLanes ? last - chunk : kLanes;
      for (uint32_t j = 0; j < count; ++j) {
        float w[Group];
        bool seen = false;
        for (uint32_t g = 0; g < Group; ++g) {
          w[g] = warp.at(weight[g], j);
          seen = seen || w[g] != 0.0f;
        }
        const uint32_t at = warp.at(slot, j);
        if (!seen) continue;  // the same on every lane
        warp.each([&](uint32_t lane) {
          for (uint32_t k = 0; k < kDimsPerLane; ++k) {
            const uint32_t d = lane + k * kLanes;
            if (k >= dims || d >= a.head_dim) break;
            const float v = a.value(at, kv_off + d);
            for (uint32_t g = 0; g < Group; ++g)
              if (w[g] != 0.0f) acc[g * kDimsPerLane + k][lane] = fma_rn(w[g], v, acc[g * kDimsPerLane + k][lane]);
          }
        });
      }
    }
    for (uint32_t g = 0; g < Group; ++g) {
      float* out = partials + ((static_cast<uint64_t>(t - t0) * a.n_head + h0 + g) * n_parts + part) * (a.head_dim + 2);
      warp.each([&](uint32_t lane) {
        if (lane == 0) {
          out[0] = m[g];
          out[1] = l[g];
        }
        for (uint32_t k = 0; k < kDimsPerLane; ++k) {
          const uint32_t d = lane + k * kLanes;
          if (k >= dims || d >= a.head_dim) break;
          out[2 + d] = acc[g * kDimsPerLane + k][lane];
        }
      });
    }
  }
};

// Merges AttentionSplitOp's parts of each (row, head): with M the largest max of the
// parts that saw a key, out[d] = sum_p acc_p[d] e_p / sum_p l_p e_p, e_p = exp(m_p - M),
// in part order; i over rows x n_head x head_dim, the rows from t0.
struct AttentionCombineOp {
  const float* partials;  // AttentionSplitOp's, for the rows from t0
  float* out;
  uint32_t n_head, head_dim, n_parts, out_stride;
  uint32_t t0 = 0;
  FAFO_HD void operator()(uint32_t i) const {
    const uint32_t d = i % head_dim, h = (i / head_dim) % n_head, r = i / (head_dim * n_head), t = t0 + r;
    const uint32_t stride = head_dim + 2;
    const float* p = partials + (static_cast<uint64_t>(r) * n_head + h) * n_parts * stride;
    float m = -INFINITY;
    for (uint32_t k = 0; k < n_parts; ++k)
      if (p[k * stride + 1] > 0.0f) m = max_f(m, p[k * stride]);
    float total = 0.0f, sum = 0.0f;
    for (uint32_t k = 0; k < n_parts; ++k) {
      const float l = p[k * stride + 1];
      if (!(l > 0.0f)) continue;
      const float e = exp_f(sub_rn(p[k * stride], m));
      total = fma_rn(l, e, total);
      sum = fma_rn(p[k * stride + 2 + d], e, sum);
    }
    float* o = out + static_cast<uint64_t>(t) * out_stride + static_cast<uint64_t>(h) * head_dim + d;
#if defined(__CUDA_ARCH__)
    *o = total > 0.0f ? __fdiv_rn(sum, total) : 0.0f;
#else
    *o = total > 0.0f ? sum / total : 0.0f;
#endif
  }
};

}  // namespace fafo::cuda
