// Quantizing to the codebook formats IQ3_XXS and IQ3_S (layouts: blocks.h): llama.cpp's
// search without an importance matrix (ggml's quantize_iq3_xxs / quantize_iq3_s with no
// quant_weights), the same float operations in the same order, so fafo writes llama.cpp's
// bits (tests/test_grid_formats.cpp compares them). Per group of 32 values, each weighted
// by its square:
//   - the signs come out (IQ3_XXS: in a vector of 8 with an odd count of minus signs,
//     since its 8th sign bit is implied by parity, the least weighted value's sign bit
//     is flipped and its fit target negated);
//   - 31 (IQ3_XXS) or 19 (IQ3_S) trial scales around max / 15: each value's level l
//     (0..7, value 2l + 1 times the scale) rounded, each 4 levels looked up in the
//     codebook or, off it, replaced by the nearest entry by weighted error among those
//     at the 2 (IQ3_XXS) or 3 (IQ3_S) smallest distances; the trial with the best
//     weighted fit wins, and its off-codebook quadruples are fitted again at its scale;
//   - the group scales are stored as 4-bit odd multiples of d = the largest / 31,
//     written as d * 1.0125 (IQ3_XXS) or d * 1.033 (IQ3_S), llama.cpp's correction.
// The IQ2 formats are not written: llama.cpp requires an importance matrix for them.
//
// Where llama.cpp d32676d7 differs, fafo writes what the layout says: an IQ3_S group of 32
// zeros leaves llama.cpp's pointers to the next groups' indices and signs where they were
// (those groups' codes land one group early); fafo leaves the zero group's fields zero and
// writes every other group in its place. A quadruple with no finite distance to any
// neighbour (infinite or NaN input) takes the first neighbour where llama.cpp aborts.
//
// Built with -ffp-contract=off (runtime/CMakeLists.txt): llama.cpp's quantizer has no
// fused multiply-adds either.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "fafo/tensor_type.h"
#include "quant/blocks.h"
#include "quant/formats.h"
#include "quant/iq_grids.h"

namespace fafo::quant {

namespace {

constexpr int kMaxLevel = 7;                  // a value's level l is 0..7: 2l + 1 times the scale
constexpr int kGroup = 32;                    // values per group scale
constexpr int kQuads = kGroup / 4;            // codebook entries per group
constexpr int kIq3Groups = kSuperBlock / kGroup;
constexpr int kCodes = 1 << 12;               // 4 levels of 3 bits

int level(uint32_t code, int i) { return static_cast<int>((code >> (3 * i)) & 7u); }

// A codebook (entries as 4 levels of 3 bits, level i at bits 3i) with, for every other
// quadruple of levels, the entries nearest to it: those at the `rings` smallest squared
// distances, by distance then index.
class CodebookSearch {
 public:
  CodebookSearch(const uint16_t* packed, int size, int rings) : packed_(packed), entry_(kCodes, -1), near_(kCodes) {
    for (int e = 0; e < size; ++e) entry_[packed[e]] = e;
    std::vector<std::pair<int, int>> by_distance(static_cast<size_t>(size));
    for (int code = 0; code < kCodes; ++code) {
      if (entry_[code] >= 0) continue;
      for (int e = 0; e < size; ++e) {
        int d2 = 0;
        for (int i = 0; i < 4; ++i) {
          const int diff = 2 * (level(packed[e], i) - level(static_cast<uint32_t>(code), i));
          d2 += diff * diff;
        }
        by_distance[static_cast<size_t>(e)] = {d2, e};
      }
      std::sort(by_distance.begin(), by_distance.end());
      int seen = 1, distance = by_distance[0].first;
      for (const auto& [d2, e] : by_distance) {
        if (d2 > distance) {
          if (seen == rings) break;
          distance = d2;
          ++seen;
        }
        near_[static_cast<size_t>(code)].push_back(static_cast<uint16_t>(e));
      }
    }
  }

  // The entry of these 4 levels, or -1 where the codebook has none.
  int entry(uint32_t code) const { return entry_[code]; }

  // The entry among the neighbours of `code` whose values (2l + 1) * scale are nearest
  // to x[0..3], by squared error weighted by w; its levels into L.
  int nearest(uint32_t code, const float* x, const float* w, float scale, int8_t* L) const {
    const std::vector<uint16_t>& near = near_[code];
    float best = FLT_MAX;
    int pick = near.front();
    for (const uint16_t e : near) {
      float d2 = 0;
      for (int i = 0; i < 4; ++i) {
        const auto q = static_cast<float>(2 * level(packed_[e], i) + 1);
        const float diff = scale * q - x[i];
        d2 += w[i] * diff * diff;
      }
      if (d2 < best) {
        best = d2;
        pick = e;
      }
    }
    for (int i = 0; i < 4; ++i) L[i] = static_cast<int8_t>(level(packed_[pick], i));
    return pick;
  }

  uint32_t code_of(int e) const { return packed_[e]; }

 private:
  const uint16_t* packed_;
  std::vector<int> entry_;
  std::vector<std::vector<uint16_t>> near_;
};

const CodebookSearch& iq3_xxs_search() {
  static const CodebookSearch search(grid_detail::kIq3xxsPacked, FAFO_IQ3XXS_SIZE, 2);
  return search;
}
const CodebookSearch& iq3_s_search() {
  static const CodebookSearch search(grid_detail::kIq3sPacked, FAFO_IQ3S_SIZE, 3);
  return search;
}

float larger(float a, float b) { return a > b ? a : b; }  // ggml's MAX, NaN and all

uint32_t code_of_levels(const int8_t* L) {
  uint32_t u = 0;
  for (int i = 0; i < 4; ++i) u |= static_cast<uint32_t>(L[i]) << (3 * i);
  return u;
}

// The weighted fit of levels L to x: sum w x q and sum w q^2, q = 2l + 1.
void fit_sums(const float* weight, const float* x, const int8_t* L, float& sumqx, float& sumq2) {
  sumqx = 0;
  sumq2 = 0;
  for (int i = 0; i < kGroup; ++i) {
    const float w = weight[i];
    const auto q = static_cast<float>(2 * L[i] + 1);
    sumqx += w * x[i] * q;
    sumq2 += w * q * q;
  }
}

struct GroupFit {
  float scale = 0;
  int8_t L[kGroup] = {};
  int entries[kQuads] = {};
};

// One group's levels and scale for |x| values `xval` (IQ3_XXS: possibly one negative per
// vector), as the header says. `xxs` selects IQ3_XXS's variant of the search.
GroupFit fit_group(const CodebookSearch& search, const float* xval, const float* weight, float max, bool xxs) {
  constexpr float kTopLevel = 2 * (kMaxLevel + 1) - 1;  // 15
  float waux[kGroup];
  for (int i = 0; i < kGroup; ++i) waux[i] = std::sqrt(weight[i]);
  GroupFit fit;
  float best = 0;
  fit.scale = max / kTopLevel;
  bool on_grid[kQuads], on_grid_trial[kQuads];
  std::fill(on_grid, on_grid + kQuads, xxs);
  const int trials = xxs ? 15 : 9;
  int8_t trial[kGroup];
  for (int is = -trials; is <= trials; ++is) {
    const float id = (kTopLevel + static_cast<float>(is) * 0.2f) / max;
    const float this_scale = 1 / id;
    for (int k = 0; k < kQuads; ++k) {
      for (int i = 0; i < 4; ++i) {
        const int l = nearest_int_even(0.5f * (id * xval[4 * k + i] - 1));
        trial[4 * k + i] = static_cast<int8_t>(std::max(0, std::min(kMaxLevel, l)));
      }
      const uint32_t u = code_of_levels(trial + 4 * k);
      on_grid_trial[k] = search.entry(u) >= 0;
      if (!on_grid_trial[k]) search.nearest(u, xval + 4 * k, waux + 4 * k, this_scale, trial + 4 * k);
    }
    float sumqx, sumq2;
    fit_sums(weight, xval, trial, sumqx, sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      fit.scale = sumqx / sumq2;
      best = fit.scale * sumqx;
      std::copy(trial, trial + kGroup, fit.L);
      std::copy(on_grid_trial, on_grid_trial + kQuads, on_grid);
    }
  }
  if (std::count(on_grid, on_grid + kQuads, false) > 0 && fit.scale > 0) {
    const float id = 1 / fit.scale;
    for (int k = 0; k < kQuads; ++k) {
      if (xxs && on_grid[k]) continue;  // IQ3_S fits every quadruple again
      int8_t levels[4];
      for (int i = 0; i < 4; ++i) {
        const int l = nearest_int_even(0.5f * (id * xval[4 * k + i] - 1));
        levels[i] = static_cast<int8_t>(std::max(0, std::min(kMaxLevel, l)));
      }
      const uint32_t u = code_of_levels(levels);
      int e = search.entry(u);
      if (e < 0) e = search.nearest(u, xval + 4 * k, waux + 4 * k, fit.scale, fit.L + 4 * k);
      for (int i = 0; i < 4; ++i) fit.L[4 * k + i] = static_cast<int8_t>(level(search.code_of(e), i));
    }
    float sumqx, sumq2;
    fit_sums(weight, xval, fit.L, sumqx, sumq2);
    if (sumq2 > 0) fit.scale = sumqx / sumq2;
  }
  for (int k = 0; k < kQuads; ++k) fit.entries[k] = std::max(0, search.entry(code_of_levels(fit.L + 4 * k)));
  return fit;
}

// A 4-bit odd multiple of d: (2l + 1) * d nearest to scale.
int group_scale(float scale, float id) {
  return std::max(0, std::min(15, nearest_int_even(0.5f * (id * scale - 1))));
}

}  // namespace

void quantize_iq3_xxs(const float* src, uint8_t* dst, int64_t n_blocks) {
  const CodebookSearch& search = iq3_xxs_search();
  for (int64_t ibl = 0; ibl < n_blocks; ++ibl, src += kSuperBlock, dst += sizeof(BlockIq3Xxs)) {
    BlockIq3Xxs block{};
    uint32_t scales_and_signs[kIq3Groups] = {};
    float scales[kIq3Groups] = {};
    float max_scale = 0;
    for (int ib = 0; ib < kIq3Groups; ++ib) {
      const float* xb = src + kGroup * ib;
      float weight[kGroup], xval[kGroup];
      for (int i = 0; i < kGroup; ++i) weight[i] = xb[i] * xb[i];
      uint32_t signs[4];
      for (int k = 0; k < 4; ++k) {
        int flips = 0;
        uint32_t s = 0;
        for (int i = 0; i < 8; ++i) {
          const float v = xb[8 * k + i];
          xval[8 * k + i] = v >= 0 ? v : -v;
          if (!(v >= 0)) {
            ++flips;
            s |= 1u << i;
          }
        }
        if (flips % 2) {  // the least weighted value is stored with the other sign: its fit target negated
          int imin = 0;
          float least = weight[8 * k] * xb[8 * k] * xb[8 * k];
          for (int i = 1; i < 8; ++i) {
            const float a = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
            if (a < least) {
              least = a;
              imin = i;
            }
          }
          xval[8 * k + imin] = -xval[8 * k + imin];
          s ^= 1u << imin;
        }
        signs[k] = s & 127u;
      }
      float max = xval[0];
      for (int i = 1; i < kGroup; ++i) max = larger(max, xval[i]);
      if (max < 1e-8f) continue;  // scale 0, indices and signs 0
      GroupFit fit = fit_group(search, xval, weight, max, true);
      if (fit.scale < 0) {
        fit.scale = -fit.scale;
        for (uint32_t& s : signs) s = ~s & 127u;
      }
      for (int k = 0; k < kQuads; ++k) block.qs[8 * ib + k] = static_cast<uint8_t>(fit.entries[k]);
      scales_and_signs[ib] = signs[0] | (signs[1] << 7) | (signs[2] << 14) | (signs[3] << 21);
      scales[ib] = fit.scale;
      max_scale = larger(max_scale, fit.scale);
    }
    if (max_scale != 0) {
      const float d = max_scale / 31;
      block.d = fp32_to_fp16(d * 1.0125f);
      const float id = 1 / d;
      for (int ib = 0; ib < kIq3Groups; ++ib) scales_and_signs[ib] |= static_cast<uint32_t>(group_scale(scales[ib], id)) << 28;
      std::memcpy(block.qs + kSuperBlock / 4, scales_and_signs, sizeof scales_and_signs);
    } else {
      std::memset(block.qs, 0, sizeof block.qs);
    }
    std::memcpy(dst, &block, sizeof block);
  }
}

void quantize_iq3_s(const float* src, uint8_t* dst, int64_t n_blocks) {
  const CodebookSearch& search = iq3_s_search();
  for (int64_t ibl = 0; ibl < n_blocks; ++ibl, src += kSuperBlock, dst += sizeof(BlockIq3S)) {
    BlockIq3S block{};
    float scales[kIq3Groups] = {};
    float max_scale = 0;
    for (int ib = 0; ib < kIq3Groups; ++ib) {
      const float* xb = src + kGroup * ib;
      float weight[kGroup], xval[kGroup];
      for (int i = 0; i < kGroup; ++i) weight[i] = xb[i] * xb[i];
      uint8_t signs[4];
      for (int k = 0; k < 4; ++k) {
        uint32_t s = 0;
        for (int i = 0; i < 8; ++i) {
          const float v = xb[8 * k + i];
          xval[8 * k + i] = v >= 0 ? v : -v;
          if (!(v >= 0)) s |= 1u << i;
        }
        signs[k] = static_cast<uint8_t>(s);
      }
      float max = xval[0];
      for (int i = 1; i < kGroup; ++i) max = larger(max, xval[i]);
      if (max == 0) continue;
      GroupFit fit = fit_group(search, xval, weight, max, false);
      if (fit.scale < 0) {
        fit.scale = -fit.scale;
        for (uint8_t& s : signs) s = static_cast<uint8_t>(~s);
      }
      for (int k = 0; k < kQuads; ++k) {
        block.qs[kQuads * ib + k] = static_cast<uint8_t>(fit.entries[k] & 255);
        block.qh[ib] = static_cast<uint8_t>(block.qh[ib] | ((fit.entries[k] >> 8) << k));
      }
      std::memcpy(block.signs + 4 * ib, signs, 4);
      scales[ib] = fit.scale;
      max_scale = larger(max_scale, fit.scale);
    }
    if (max_scale != 0) {
      const float d = max_scale / 31;
      block.d = fp32_to_fp16(d * 1.033f);
      const float id = 1 / d;
      for (int ib = 0; ib < kIq3Groups; ib += 2)
        block.scales[ib / 2] = static_cast<uint8_t>(group_scale(scales[ib], id) | (group_scale(scales[ib + 1], id) << 4));
    }
    std::memcpy(dst, &block, sizeof block);
  }
}

}  // namespace fafo::quant
