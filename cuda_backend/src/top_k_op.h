// The CUDA backend's top-k on the device (Backend::top_k_rows): a warp per row finds
// the row's k best values in fafo/top_k.h's order (larger first, equal values, -0.0 ==
// +0.0, by lower index first), so that a sampling step reads back k ids and values per
// row instead of the whole row. Exact selection on a key that orders floats as
// unsigned integers, as the Vulkan kernel (shaders/top_k.comp) does it:
//   1. NaN: a row holding one is marked (its ids and values are then unspecified);
//   2. the key of the k-th largest value, bit by bit from the top: a bit is kept when at
//      least k keys are at or above the key with it set (each lane counts its values,
//      the warp adds the counts);
//   3. the values above it, and the lowest-indexed ones equal to it up to k, are
//      collected in index order (32 at a time, places by the warp's ballot) into
//      `scratch`;
//   4. each collected value's rank (how many collected ones come before it in the
//      order) places it in the output.
// Nothing is compared approximately and nothing depends on timing: the result equals
// fafo::top_k_row bit for bit. Each row on its own (T-invariant).
#pragma once

#include <cstdint>

#include "block_decode.h"
#include "warp.h"

namespace fafo::cuda {

// Larger float <=> larger key; -0.0 gets +0.0's key so that the two tie.
FAFO_HD uint32_t top_k_key(float v) {
  uint32_t b = float_bits(v);
  if (b == 0x80000000u) b = 0u;
  return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

struct TopKWarpOp {
  const float* x;
  uint32_t n, x_stride, k;
  int32_t* ids;        // rows x k
  float* values;       // rows x k
  uint32_t* has_nan;   // per row
  uint32_t* scratch;   // rows x 2k: the collected keys, then their indices

  template <class W>
  FAFO_HD void run(W& warp, uint32_t row) const {
    const float* xr = x + static_cast<uint64_t>(row) * x_stride;
    uint32_t* keys = scratch + static_cast<uint64_t>(row) * 2 * k;
    uint32_t* index = keys + k;
    typename W::template Vec<int32_t> count;
    warp.each([&](uint32_t lane) {
      int32_t nan = 0;
      for (uint32_t i = lane; i < n; i += kLanes) nan += xr[i] != xr[i];
      count[lane] = nan;
    });
    const bool any_nan = warp.sum_int(count) != 0;
    warp.each([&](uint32_t lane) {
      if (lane == 0) has_nan[row] = any_nan ? 1u : 0u;
    });
    if (any_nan) return;

    uint32_t threshold = 0;
    for (uint32_t bit = 32; bit-- > 0;) {
      const uint32_t candidate = threshold | (1u << bit);
      warp.each([&](uint32_t lane) {
        int32_t c = 0;
        for (uint32_t i = lane; i < n; i += kLanes) c += top_k_key(xr[i]) >= candidate;
        count[lane] = c;
      });
      if (static_cast<uint32_t>(warp.sum_int(count)) >= k) threshold = candidate;
    }
    warp.each([&](uint32_t lane) {
      int32_t c = 0;
      for (uint32_t i = lane; i < n; i += kLanes) c += top_k_key(xr[i]) > threshold;
      count[lane] = c;
    });
    const uint32_t remaining = k - static_cast<uint32_t>(warp.sum_int(count));  // equal ones to take: >= 1

    uint32_t written = 0, equal_seen = 0;
    for (uint32_t base = 0; base < n && written < k; base += kLanes) {
      typename W::template Vec<bool> equal, take;
      typename W::template Vec<uint32_t> key;
      warp.each([&](uint32_t lane) {
        const uint32_t i = base + lane;
        key[lane] = i < n ? top_k_key(xr[i]) : 0u;
        equal[lane] = i < n && key[lane] == threshold;
      });
      const uint32_t equal_mask = warp.ballot(equal);
      warp.each([&](uint32_t lane) {
        const uint32_t below = (1u << lane) - 1u;  // lanes before this one
        const bool above = base + lane < n && key[lane] > threshold;
        take[lane] = above || (equal[lane] && equal_seen + popcount32(equal_mask & below) < remaining);
      });
      const uint32_t take_mask = warp.ballot(take);
      warp.each([&](uint32_t lane) {
        if (!take[lane]) return;
        const uint32_t at = written + popcount32(take_mask & ((1u << lane) - 1u));
        keys[at] = key[lane];
        index[at] = base + lane;
      });
      written += popcount32(take_mask);
      equal_seen += popcount32(equal_mask);
    }
    warp.sync();

    warp.each([&](uint32_t lane) {
      for (uint32_t j = lane; j < k; j += kLanes) {
        const uint32_t kj = keys[j], ij = index[j];
        uint32_t rank = 0;
        for (uint32_t m = 0; m < k; ++m) rank += keys[m] > kj || (keys[m] == kj && index[m] < ij);
        ids[static_cast<uint64_t>(row) * k + rank] = static_cast<int32_t>(ij);
        values[static_cast<uint64_t>(row) * k + rank] = xr[ij];
      }
    });
  }
};

}  // namespace fafo::cuda
