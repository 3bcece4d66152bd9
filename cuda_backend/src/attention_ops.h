// The CUDA backend's attention with the warp kernel sets (the plain set has ops.h's
// AttentionOp): split over the context (flash-decoding) into parts of keys, a block of
// warps per (tile of rows, part, group of query heads sharing a KV head), then a merge
// of the parts.
//
// AttentionBlockOp: warp w of a block takes row r0 + w of its tile (up to
// kMaxBlockWarps rows) and computes, for the `Group` query heads h0, ... of its head
// group, the softmax statistics and the unnormalised weighted sum of values over keys
// [p * part_keys, (p + 1) * part_keys) of the row's keys (AttentionOp's order: its view
// of the committed entries, then the batch tokens its mask lets it see), and writes each
// head's (max, sum of exp, acc[head_dim]) to partials. part_keys depends on n_past only
// (attention_part_keys), so a row's arithmetic does not depend on T or on the other rows
// (T-invariant).
//
// Keys go 32 at a time (a chunk). The block stages each chunk's keys and values in
// shared memory once for all its warps, read from memory by whole rows (16-byte loads
// where the head's bytes allow): the entries of the tile's last row's keys at those
// indices (its view of the committed entries, then the batch tokens). A warp whose row
// has the same entry at an index (the same slot: every row of one kind without a
// window) reads it there, any other reads it from memory: the same values either way.
// Within a chunk, one key per lane: the lane scores its key for every head of the group
// (each score a dot with the head's query, fused multiply-adds in dimension order), each
// head's chunk max (exact) and sum of exponentials by the warp's tree; then each lane
// owns dimensions lane, lane + 32, ... of every head's accumulator and adds the chunk's
// keys' weighted values in key order. A head's arithmetic is the same whatever the
// group, the tile and where its keys were read (they only save reads), and not
// AttentionOp's (the softmax sums in another order): within the backend's tolerance of
// the reference.
//
// AttentionCombineOp merges the parts of each (row, head).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "block.h"
#include "ops.h"
#include "warp.h"

namespace fafo::cuda {

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
// 32 (one chunk) up to n_past = 32 kAttentionParts, then n_past / kAttentionParts
// rounded up to a whole chunk, so that a one-token step gives each head group up to
// kAttentionParts + 1 blocks. A function of n_past alone (T-invariant).
constexpr uint32_t kAttentionParts = 32;
inline uint32_t attention_part_keys(uint32_t n_past) {
  const uint32_t per_part = (n_past + kAttentionParts - 1) / kAttentionParts;
  return per_part <= kLanes ? kLanes : (per_part + kLanes - 1) / kLanes * kLanes;
}

template <uint32_t Group>
struct AttentionBlockOp {
  static constexpr uint32_t kDimsPerLane = 8;  // head_dim <= 256
  static constexpr uint32_t kNoSlot = 0xffffffffu;
  static_assert(Group >= 1 && Group <= kMaxAttentionGroup);
  AttentionOp a;    // the rows, cache, masks and shape, as the plain kernel takes them
  float* partials;  // [rows from t0][n_head][n_parts][head_dim + 2]
  uint32_t part_keys, n_parts;
  uint32_t t0;          // the first row of this launch
  uint32_t rows;        // its rows
  uint32_t tile_rows;   // the rows of a block (its warps, 1 to kMaxBlockWarps): block i
                        // takes tile i % tiles(), part (i / tiles()) % n_parts and head
                        // group i / (tiles() n_parts)

  FAFO_HD uint32_t tiles() const { return (rows + tile_rows - 1) / tile_rows; }
  uint64_t blocks() const { return uint64_t{tiles()} * n_parts * (a.n_head / Group); }
  // A staged key's (or value's) bytes: its head's part of the entry in the cache's format
  // (kv_blocks.h; whole blocks, as head_dim is a multiple of 32 with the block formats),
  // padded to an odd number of words (the lanes' reads of one dimension of 32 keys hit
  // 32 banks).
  static FAFO_HD uint32_t row_bytes(uint32_t head_dim, KvFormat format) {
    const uint32_t words = static_cast<uint32_t>((kv_bytes(format, head_dim) + 3) / 4);
    return (words | 1u) * 4;
  }
  // The staged slots (32 words), then 32 keys, then 32 values.
  static size_t shared_bytes(uint32_t head_dim, KvFormat format) {
    return kLanes * 4 + size_t{2} * kLanes * row_bytes(head_dim, format);
  }

  template <class B>
  FAFO_HD void run(B& block, uint32_t index) const {
    const uint32_t tile = index % tiles(), rest = index / tiles();
    const uint32_t part = rest % n_parts, h0 = (rest / n_parts) * Group;
    const uint32_t r0 = t0 + tile * tile_rows;
    const uint32_t r_end = r0 + tile_rows < t0 + rows ? r0 + tile_rows : t0 + rows;
    const uint32_t first = part * part_keys;
    // The block's keys: up to the largest of its rows' ends in this part.
    uint32_t block_last = first;
    for (uint32_t r = r0; r < r_end; ++r) {
      const uint32_t n_keys = a.prefix_count(r) + r + 1;
      const uint32_t last = first + part_keys < n_keys ? first + part_keys : n_keys;
      block_last = last > block_last ? last : block_last;
    }
    const uint32_t ref = r_end - 1, ref_prefix = a.prefix_count(ref);  // the staged row
    const uint32_t stride = row_bytes(a.head_dim, a.format);
    const uint32_t key_bytes = static_cast<uint32_t>(kv_bytes(a.format, a.head_dim));
    const uint32_t kv_off = (h0 / (a.n_head / a.n_head_kv)) * a.head_dim;
    uint32_t* staged_slot = reinterpret_cast<uint32_t*>(block.shared());
    uint8_t* staged_keys = block.shared() + kLanes * 4;
    uint8_t* staged_values = staged_keys + kLanes * stride;
    const uint32_t dims = (a.head_dim + kLanes - 1) / kLanes;  // accumulators per head and lane

    // The slots of the chunk's keys, then their keys and values, the whole block.
    const auto stage = [&](uint32_t chunk) {
      block.collective([&](uint32_t thread) {
        if (thread >= kLanes) return;
        const uint32_t key = chunk + thread;
        uint32_t slot = kNoSlot;
        if (key < block_last) {
          if (key < ref_prefix) slot = a.prefix_slot(ref, key);
          else if (key - ref_prefix < a.T) slot = a.batch_slot(key - ref_prefix);
        }
        staged_slot[thread] = slot;
      });
      block.collective([&](uint32_t thread) {
        // 16-byte loads where every key row starts 16-byte aligned (each layer's cache is
        // its own allocation), else 4- or 2-byte ones.
        const uint32_t row_bytes_all = static_cast<uint32_t>(kv_bytes(a.format, a.kv_dim));
        const uint32_t unit = key_bytes % 16 == 0 && row_bytes_all % 16 == 0 ? 16
                              : key_bytes % 4 == 0 && row_bytes_all % 4 == 0 ? 4 : 2;
        const uint32_t per_key = key_bytes / unit, n = 2 * kLanes * per_key;
        for (uint32_t i = thread; i < n; i += block.threads()) {
          const uint32_t which = i / (kLanes * per_key), j = (i / per_key) % kLanes, u = i % per_key;
          const uint32_t slot = staged_slot[j];
          if (slot == kNoSlot) continue;
          const uint8_t* src = static_cast<const uint8_t*>(which == 0 ? a.keys : a.values) +
                               kv_bytes(a.format, static_cast<uint64_t>(slot) * a.kv_dim + kv_off) + u * unit;
          uint8_t* dst = (which == 0 ? staged_keys : staged_values) + j * stride + u * unit;
#if defined(__CUDA_ARCH__)
          if (unit == 16) {
            const uint4 v = *reinterpret_cast<const uint4*>(src);
            uint32_t* d = reinterpret_cast<uint32_t*>(dst);
            d[0] = v.x, d[1] = v.y, d[2] = v.z, d[3] = v.w;
          } else if (unit == 4) {
            *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(src);
          } else {
            *reinterpret_cast<uint16_t*>(dst) = *reinterpret_cast<const uint16_t*>(src);
          }
#else
          std::memcpy(dst, src, unit);
#endif
        }
      });
    };
    const auto staged = [&](const uint8_t* base, uint32_t j, uint32_t d) {
      return kv_value(base + j * stride, d, a.format);
    };

    block.each_warp([&](auto& warp, uint32_t w) {
      using W = std::remove_reference_t<decltype(warp)>;
      const uint32_t t = r0 + w;
      const bool active = t < r_end;
      const uint32_t prefix = active ? a.prefix_count(t) : 0, n_keys = prefix + t + 1;
      const uint32_t last = !active ? first : first + part_keys < n_keys ? first + part_keys : n_keys;
      const float* q0 = a.q + static_cast<uint64_t>(active ? t : r0) * a.q_stride + static_cast<uint64_t>(h0) * a.head_dim;
      float m[Group], l[Group];
      for (uint32_t g = 0; g < Group; ++g) m[g] = -INFINITY, l[g] = 0.0f;
      typename W::template Vec<float> acc[Group * kDimsPerLane];  // [g * 8 + k]: head h0 + g, dimension lane + 32 k
      warp.each([&](uint32_t lane) {
        for (uint32_t k = 0; k < Group * kDimsPerLane; ++k) acc[k][lane] = 0.0f;
      });
      for (uint32_t chunk = first; chunk < block_last; chunk += kLanes) {
        stage(chunk);
        if (chunk >= last) continue;  // the same on every lane of the warp
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
              at = a.batch_slot(key - prefix);
              visible = a.sees(t, key - prefix);
            }
            visible = visible && a.in_window(t, key, prefix);
          }
          float s[Group];
          for (uint32_t g = 0; g < Group; ++g) s[g] = 0.0f;
          if (visible && staged_slot[lane] == at) {
            for (uint32_t d = 0; d < a.head_dim; ++d) {
              const float k = staged(staged_keys, lane, d);
              for (uint32_t g = 0; g < Group; ++g) s[g] = fma_rn(q0[g * a.head_dim + d], k, s[g]);
            }
          } else if (visible) {
            for (uint32_t d = 0; d < a.head_dim; ++d) {
              const float k = a.key(at, kv_off + d);
              for (uint32_t g = 0; g < Group; ++g) s[g] = fma_rn(q0[g * a.head_dim + d], k, s[g]);
            }
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
          float wt[Group];
          bool seen = false;
          for (uint32_t g = 0; g < Group; ++g) {
            wt[g] = warp.at(weight[g], j);
            seen = seen || wt[g] != 0.0f;
          }
          const uint32_t at = warp.at(slot, j);
          if (!seen) continue;  // the same on every lane
          const bool here = staged_slot[j] == at;
          warp.each([&](uint32_t lane) {
            for (uint32_t k = 0; k < kDimsPerLane; ++k) {
              const uint32_t d = lane + k * kLanes;
              if (k >= dims || d >= a.head_dim) break;
              const float v = here ? staged(staged_values, j, d) : a.value(at, kv_off + d);
              for (uint32_t g = 0; g < Group; ++g)
                if (wt[g] != 0.0f) acc[g * kDimsPerLane + k][lane] = fma_rn(wt[g], v, acc[g * kDimsPerLane + k][lane]);
            }
          });
        }
      }
      if (!active) return;
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
    });
  }
};

// Merges AttentionBlockOp's parts of each (row, head): with M the largest max of the
// parts that saw a key, out[d] = sum_p acc_p[d] e_p / sum_p l_p e_p, e_p = exp(m_p - M),
// in part order; i over rows x n_head x head_dim, the rows from t0. A head's sink
// (AttentionOp::sinks) is one more logit: M is taken over it and exp(sink - M) starts
// the denominator.
struct AttentionCombineOp {
  const float* partials;  // AttentionBlockOp's, for the rows from t0
  float* out;
  uint32_t n_head, head_dim, n_parts, out_stride;
  uint32_t t0 = 0;
  const float* sinks = nullptr;  // [n_head], or null
  FAFO_HD void operator()(uint32_t i) const {
    const uint32_t d = i % head_dim, h = (i / head_dim) % n_head, r = i / (head_dim * n_head), t = t0 + r;
    const uint32_t stride = head_dim + 2;
    const float* p = partials + (static_cast<uint64_t>(r) * n_head + h) * n_parts * stride;
    float m = sinks ? sinks[h] : -INFINITY;
    for (uint32_t k = 0; k < n_parts; ++k)
      if (p[k * stride + 1] > 0.0f) m = max_f(m, p[k * stride]);
    float total = sinks ? exp_f(sub_rn(sinks[h], m)) : 0.0f, sum = 0.0f;
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
