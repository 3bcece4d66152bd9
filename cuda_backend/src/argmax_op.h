// The CUDA backend's argmax of the warp kernels (Backend::argmax_rows), in two launches
// so that a row of a 150k-token vocabulary is read by many warps at once:
//   1. ArgmaxPartOp: warp (row, part) finds the first largest value of the part's
//      kPartCols columns (lane l reads columns l, l + 32, ...: coalesced), or that the
//      part holds a NaN, or that it holds nothing larger than -inf;
//   2. ArgmaxCombineOp: a warp per row takes the parts in column order.
// The result is ArgmaxOp's (scalar::argmax_row's) exactly: the first index of the
// largest value (-0.0 == +0.0), -1 for a row holding a NaN, -2 for an empty row or one
// of -inf only. Nothing is approximate and each row is on its own (T-invariant).
#pragma once

#include <cmath>
#include <cstdint>

#include "warp.h"

namespace fafo::cuda {

// A part's (or a row's) result: `index` >= 0 with its value, kArgmaxNaN or kArgmaxNone.
constexpr int32_t kArgmaxNaN = -1, kArgmaxNone = -2;

// The warp's argmax: scan(lane, best, index, nan) gives each lane's first largest value
// (`best`, at `index`, or kArgmaxNone) and whether it saw a NaN; then a NaN anywhere
// wins, else the largest value and, among lanes holding it, the lowest index (lanes'
// indices interleave, so the lowest lane need not hold it); kArgmaxNone when no lane has
// one.
template <class W, class Scan>
FAFO_HD void argmax_warp(W& warp, const Scan& scan, float& value_out, int32_t& index_out) {
  typename W::template Vec<float> best;
  typename W::template Vec<int32_t> index;
  typename W::template Vec<bool> nan;
  warp.each([&](uint32_t lane) {
    float b = -INFINITY;
    int32_t i = kArgmaxNone;
    bool seen_nan = false;
    scan(lane, b, i, seen_nan);
    best[lane] = b, index[lane] = i, nan[lane] = seen_nan;
  });
  value_out = -INFINITY;
  index_out = kArgmaxNone;
  if (warp.ballot(nan) != 0u) {
    index_out = kArgmaxNaN;
    return;
  }
  const float m = warp.max(best);
  typename W::template Vec<bool> holds;
  warp.each([&](uint32_t lane) { holds[lane] = index[lane] >= 0 && best[lane] == m; });
  uint32_t lanes = warp.ballot(holds);
  while (lanes != 0u) {
    uint32_t lane = 0;
    while (((lanes >> lane) & 1u) == 0u) ++lane;
    lanes &= lanes - 1u;
    const int32_t i = warp.at(index, lane);
    if (index_out < 0 || i < index_out) index_out = i;
  }
  if (index_out >= 0) value_out = m;
}

struct ArgmaxPartOp {
  static constexpr uint32_t kPartCols = 2048;
  const float* x;
  uint32_t cols, stride, n_parts;  // n_parts = parts(cols)
  float* part_values;              // [rows][n_parts]
  int32_t* part_index;             // [rows][n_parts]

  static uint32_t parts(uint32_t cols) { return (cols + kPartCols - 1) / kPartCols; }

  template <class W>
  FAFO_HD void run(W& warp, uint32_t w) const {
    const uint32_t row = w / n_parts, part = w % n_parts;
    const uint32_t first = part * kPartCols, last = first + kPartCols < cols ? first + kPartCols : cols;
    const float* r = x + static_cast<uint64_t>(row) * stride;
    float value;
    int32_t at;
    argmax_warp(
        warp,
        [&](uint32_t lane, float& b, int32_t& i, bool& seen_nan) {
          for (uint32_t c = first + lane; c < last; c += kLanes) {
            const float v = r[c];
            seen_nan = seen_nan || v != v;
            if (v > b) b = v, i = static_cast<int32_t>(c);
          }
        },
        value, at);
    warp.each([&](uint32_t lane) {
      if (lane != 0) return;
      part_values[static_cast<uint64_t>(w)] = value;
      part_index[static_cast<uint64_t>(w)] = at;
    });
  }
};

struct ArgmaxCombineOp {
  const float* part_values;
  const int32_t* part_index;
  uint32_t n_parts;
  int32_t* out;

  template <class W>
  FAFO_HD void run(W& warp, uint32_t row) const {
    float value;
    int32_t at;
    argmax_warp(
        warp,
        [&](uint32_t lane, float& b, int32_t& i, bool& seen_nan) {
          for (uint32_t p = lane; p < n_parts; p += kLanes) {  // parts in column order: the first largest stays
            const uint64_t k = static_cast<uint64_t>(row) * n_parts + p;
            const int32_t pi = part_index[k];
            seen_nan = seen_nan || pi == kArgmaxNaN;
            if (pi >= 0 && (i < 0 || part_values[k] > b)) b = part_values[k], i = pi;
          }
        },
        value, at);
    warp.each([&](uint32_t lane) {
      if (lane == 0) out[row] = at;
    });
  }
};

}  // namespace fafo::cuda
