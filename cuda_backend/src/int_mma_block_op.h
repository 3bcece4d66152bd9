// The integer products of wide steps (more than 8 tokens: FAFO, Lookahead, prefill
// chunks) on the tensor cores, a block of warps per tile of weight rows reading each
// weight once per 64 tokens (IntMatmulWarpOp, int_ops.h, reads it once per 8 tokens):
//
//   - a block owns kRows output rows (32; gated: 16, whose gate and up rows make the 32
//     rows it stages) and up to 16 * token_warps tokens (64 by default); its warps are a
//     grid of kRowWarps (2) by up to token_warps token warps, each warp computing 16
//     tokens by 16 staged rows;
//   - the block walks the row's units in the warp-per-row kernel's lane order: the 32
//     lane sums in reverse5 order (so a stack of partial sums adds them by tree32's
//     tree), each lane sum's units l, l + 32, ... in order, and stages them kStageUnits
//     (8) at a time along that walk, so a stage spans lane sums where they are short;
//   - each stage copies the units' words (four signed bytes) and scales of the block's
//     rows into shared memory once, decoded (IntUnit::words, IntUnit::scales), then every
//     warp multiplies them with its tokens' rounded activations by mma_s8 (A: 16 tokens by
//     16 values of the activations, B: 16 values by 8 weight rows): each unit's integer
//     sums for the warp's 256 (token, row) pairs, exact;
//   - each thread then adds each of its 8 pairs' values (tokens g and g + 8, rows 2i and
//     2i + 1 of two 8-row tiles) to the pair's lane sum by IntUnit::add_to, in unit order.
// Those are the float operations of IntMatmulWarpOp in the same order, so the result has
// its bits for every row and token whatever T (T-invariant across the threshold).
// Rows past `rows` and tokens past T repeat the last one and are not written.
#pragma once

#include <cstddef>
#include <cstdint>

#include "block.h"
#include "int_ops.h"

namespace fafo::cuda {

// The 5-bit reversal of n: the order in which the tensor-core kernel takes the 32 lane
// sums, so that a stack adds them by tree32's tree (lane l + 16 first, then + 8, ...).
FAFO_HD uint32_t reverse5(uint32_t n) {
  return ((n & 1u) << 4) | ((n & 2u) << 2) | (n & 4u) | ((n & 8u) >> 2) | ((n & 16u) >> 4);
}

template <Format F, bool Gated = false>
struct IntMmaBlockOp {
  using Unit = IntUnit<F>;
  using Scales = typename Unit::Scales;
  static constexpr uint32_t kRowWarps = 2, kMaxTokenWarps = 4, kWarpTokens = 16;
  static constexpr uint32_t kStagedRows = 32;
  static constexpr uint32_t kRows = Gated ? 16 : 32;
  static constexpr uint32_t kStageUnits = 8;
  static constexpr uint32_t kWords = Unit::kValues / 4;
  static constexpr uint32_t kRowWords = kWords + 4;  // a staged row's stride: the B reads hit 32 banks
  static constexpr uint32_t kSlices = Unit::kValues / 16;
  static constexpr uint32_t kXBlocks = Unit::kValues / kQ8Block;
  static constexpr uint32_t kOutputs = 8;  // a thread's (token, row) pairs: 2 tiles of 8 rows x 4
  static constexpr uint32_t kNoUnit = 0xffffffffu;
  static constexpr size_t kWordBytes = size_t{kStageUnits} * kStagedRows * kRowWords * 4;
  static constexpr size_t kScaleBytes = size_t{kStageUnits} * kStagedRows * sizeof(Scales);
  // The staged words, their scales, and two tables of the units a stage holds.
  static constexpr size_t kSharedBytes = kWordBytes + kScaleBytes + 2 * kStageUnits * sizeof(uint32_t);
  static_assert(kRowWarps * kMaxTokenWarps <= kMaxBlockWarps);

  const uint8_t* w;
  Q8Rows x;
  float* out;
  uint32_t rows, T, out_stride;
  uint64_t row_bytes;
  bool accumulate;
  uint32_t token_warps = kMaxTokenWarps;  // a block's token warps at most (1 to 4): 16 tokens each
  // The lane sums' tree split over `parts` blocks (1, 2, 4, 8, 16 or 32): part p sums the
  // subtree of lane sums n = p * 32 / parts ... and writes it to partials
  // [part][matrix][token][row]; IntPartsCombineOp adds the parts by the tree's top levels.
  uint32_t parts = 1;
  float* partials = nullptr;

  static uint32_t row_tiles(uint32_t rows) { return (rows + kRows - 1) / kRows; }
  // The tokens a block takes, and how many times the kernel reads each weight for T.
  FAFO_HD uint32_t block_tokens() const { return kWarpTokens * token_warps; }
  FAFO_HD uint32_t token_blocks() const { return (T + block_tokens() - 1) / block_tokens(); }
  FAFO_HD uint32_t warps() const {
    const uint32_t needed = (T + kWarpTokens - 1) / kWarpTokens;
    return kRowWarps * (needed < token_warps ? needed : token_warps);
  }
  uint64_t blocks() const { return uint64_t{row_tiles(rows)} * token_blocks() * parts; }

  // The staged row of row c of a warp's tile `tile` (0, 1) for row warp rw.
  static FAFO_HD uint32_t staged_row(uint32_t rw, uint32_t tile, uint32_t c) {
    return Gated ? 16 * tile + 8 * rw + c : 16 * rw + 8 * tile + c;
  }
  // Lane sum reverse5(n)'s number of units.
  static FAFO_HD uint32_t lane_units(uint32_t n, uint32_t units) {
    const uint32_t l = reverse5(n);
    return l < units ? (units - 1 - l) / kLanes + 1 : 0;
  }
  // The walk's unit at or after unit j of lane sum reverse5(n) (n = end past the last),
  // and the one after it.
  static FAFO_HD void settle(uint32_t& n, uint32_t& j, uint32_t units, uint32_t end) {
    while (n < end && j >= lane_units(n, units)) {
      ++n;
      j = 0;
    }
  }
  static FAFO_HD void advance(uint32_t& n, uint32_t& j, uint32_t units, uint32_t end) {
    ++j;
    settle(n, j, units, end);
  }

  template <class B>
  FAFO_HD void run(B& block, uint32_t index) const {
    const uint32_t n_token_blocks = token_blocks();
    const uint32_t part = index % parts, block_tile = index / parts;
    const uint32_t r0 = (block_tile / n_token_blocks) * kRows, tb0 = (block_tile % n_token_blocks) * block_tokens();
    const uint32_t threads = block.threads();
    const uint32_t units = x.cols / Unit::kValues;
    const uint32_t width = kLanes / parts, n0 = part * width, n1 = n0 + width;  // this block's lane sums
    uint32_t walk_units = 0;  // the units of its walk
    for (uint32_t n = n0; n < n1; ++n) walk_units += lane_units(n, units);
    uint32_t* staged_words = reinterpret_cast<uint32_t*>(block.shared());
    Scales* staged_scales = reinterpret_cast<Scales*>(block.shared() + kWordBytes);
    uint32_t* tables = reinterpret_cast<uint32_t*>(block.shared() + kWordBytes + kScaleBytes);
    const auto row_of = [&](uint32_t sr) {  // staged row sr's weights (clamped to the last row)
      const uint32_t m = Gated ? sr / 16 : 0, local = Gated ? sr % 16 : sr;
      const uint32_t r = r0 + local < rows ? r0 + local : rows - 1;
      return w + static_cast<uint64_t>(r + m * rows) * row_bytes;
    };
    const auto token_of = [&](uint32_t thread, uint32_t h) {  // token g + 8h of the thread's warp (clamped)
      const uint32_t t = tb0 + kWarpTokens * (thread / kLanes / kRowWarps) + (thread % kLanes) / 4 + 8 * h;
      return t < T ? t : T - 1;
    };
    // pending[o][k]: output o's partial sum of level k of the tree, waiting for its sibling.
    typename B::template Vec<float> acc[kOutputs], pending[kOutputs][6];
    // Lane sum reverse5(n0 + n)'s sum (`zero`: 0) into this part's subtree: carry while
    // n's low bits are 1.
    const auto push = [&](uint32_t n, bool zero) {
      block.each([&](uint32_t t) {
        FAFO_UNROLL
        for (uint32_t o = 0; o < kOutputs; ++o) {
          float v = zero ? 0.0f : acc[o][t];
          bool carrying = true;
          FAFO_UNROLL
          for (uint32_t level = 0; level < 6; ++level) {
            if (!carrying) continue;
            if ((n >> level) & 1u) {
              v = add_rn(pending[o][level][t], v);
            } else {
              pending[o][level][t] = v;
              carrying = false;
            }
          }
          acc[o][t] = 0.0f;
        }
      });
    };
    // Stages take the walk's units kStageUnits at a time: stage k's units are in table k % 2,
    // each written by thread s < kStageUnits, which keeps the walk's position of its slot.
    typename B::template Vec<uint32_t> slot_n, slot_j;
    block.each([&](uint32_t t) {
      FAFO_UNROLL
      for (uint32_t o = 0; o < kOutputs; ++o) acc[o][t] = 0.0f;
      if (t >= kStageUnits) return;
      uint32_t n = n0, j = 0;
      settle(n, j, units, n1);
      for (uint32_t s = 0; s < t; ++s) advance(n, j, units, n1);
      slot_n[t] = n;
      slot_j[t] = j;
      tables[t] = n < n1 ? reverse5(n) + kLanes * j : kNoUnit;
    });
    block.sync();
    uint32_t n = n0, j = 0, summing = n0;  // the walk's next unit to multiply; the lane sum acc holds
    settle(n, j, units, n1);
    for (uint32_t q0 = 0, stage = 0; q0 < walk_units; q0 += kStageUnits, ++stage) {
      const uint32_t* table = tables + (stage % 2) * kStageUnits;
      block.each([&](uint32_t t) {  // the words and scales of the stage's units
        for (uint32_t i = t; i < kStageUnits * kStagedRows; i += threads) {  // a (unit, row) a thread
          const uint32_t u = table[i / kStagedRows];
          if (u == kNoUnit) continue;
          uint32_t words[kWords];
          Unit::words(row_of(i % kStagedRows), u, words);
          store_words<kWords>(staged_words + i * kRowWords, words);
          staged_scales[i] = Unit::scales(row_of(i % kStagedRows), u);
        }
      });
      block.sync();
      block.each([&](uint32_t t) {  // the next stage's table
        if (t >= kStageUnits) return;
        uint32_t sn = slot_n[t], sj = slot_j[t];
        for (uint32_t s = 0; s < kStageUnits; ++s) advance(sn, sj, units, n1);
        slot_n[t] = sn;
        slot_j[t] = sj;
        tables[((stage + 1) % 2) * kStageUnits + t] = sn < n1 ? reverse5(sn) + kLanes * sj : kNoUnit;
      });
      for (uint32_t s = 0; s < kStageUnits && n < n1; ++s, advance(n, j, units, n1)) {
        if (n != summing) {  // a lane sum is complete (and any without units after it)
          push(summing - n0, false);
          while (++summing < n) push(summing - n0, true);
        }
        const uint32_t u = reverse5(n) + kLanes * j;
        typename B::template Vec<int32_t> sums[2][Unit::kSums][4];
        block.each([&](uint32_t t) {
          FAFO_UNROLL
          for (uint32_t tile = 0; tile < 2; ++tile)
            FAFO_UNROLL
            for (uint32_t k = 0; k < Unit::kSums; ++k)
              FAFO_UNROLL
              for (uint32_t e = 0; e < 4; ++e) sums[tile][k][e][t] = 0;
        });
        FAFO_UNROLL
        for (uint32_t slice = 0; slice < kSlices; ++slice) {
          typename B::template Vec<uint32_t> a0, a1, b[2];
          block.each([&](uint32_t t) {
            const uint32_t lane = t % kLanes, g = lane / 4, k = 4 * slice + lane % 4, rw = (t / kLanes) % kRowWarps;
            a0[t] = load_word4(q8_run(x, token_of(t, 0), Unit::kValues * u).q + 4 * k);
            a1[t] = load_word4(q8_run(x, token_of(t, 1), Unit::kValues * u).q + 4 * k);
            FAFO_UNROLL
            for (uint32_t tile = 0; tile < 2; ++tile)
              b[tile][t] = staged_words[(s * kStagedRows + staged_row(rw, tile, g)) * kRowWords + k];
          });
          FAFO_UNROLL
          for (uint32_t tile = 0; tile < 2; ++tile) block.mma_s8(a0, a1, b[tile], sums[tile][4 * slice / Unit::kWordsPerSum]);
        }
        block.each([&](uint32_t t) {  // the values of the thread's pairs: tokens g + 8h, rows 2i + j of each tile
          const uint32_t lane = t % kLanes, i = lane % 4, rw = (t / kLanes) % kRowWarps;
          Q8Scales<kXBlocks> xs[2];
          FAFO_UNROLL
          for (uint32_t h = 0; h < 2; ++h) xs[h].load(q8_run(x, token_of(t, h), Unit::kValues * u));
          FAFO_UNROLL
          for (uint32_t tile = 0; tile < 2; ++tile)
            FAFO_UNROLL
            for (uint32_t c = 0; c < 2; ++c) {
              const Scales sc = staged_scales[s * kStagedRows + staged_row(rw, tile, 2 * i + c)];
              FAFO_UNROLL
              for (uint32_t h = 0; h < 2; ++h) {
                const uint32_t e = 2 * h + c;
                int32_t unit_sums[Unit::kSums];
                FAFO_UNROLL
                for (uint32_t k = 0; k < Unit::kSums; ++k) unit_sums[k] = sums[tile][k][e][t];
                acc[4 * tile + e][t] = Unit::add_to(acc[4 * tile + e][t], sc, unit_sums, xs[h]);
              }
            }
        });
      }
      block.sync();  // every warp is done with the stage before the next one overwrites it
    }
    push(summing - n0, false);
    while (++summing < n1) push(summing - n0, true);
    uint32_t top = 0;  // the subtree's level: log2(width)
    while ((2u << top) <= width) ++top;
    block.each([&](uint32_t t) {
      const uint32_t lane = t % kLanes, i = lane % 4, rw = (t / kLanes) % kRowWarps;
      const uint32_t first_token = tb0 + kWarpTokens * (t / kLanes / kRowWarps) + lane / 4;
      FAFO_UNROLL
      for (uint32_t tile = 0; tile < (Gated ? 1u : 2u); ++tile)
        FAFO_UNROLL
        for (uint32_t e = 0; e < 4; ++e) {
          const uint32_t token = first_token + 8 * (e / 2), c = 2 * i + e % 2;
          const uint32_t r = r0 + (Gated ? 8 * rw + c : staged_row(rw, tile, c));
          if (r >= rows || token >= T) continue;
          float sum = 0.0f, up = 0.0f;  // by selects: a level indexed at run time would live in memory
          FAFO_UNROLL
          for (uint32_t level = 0; level < 6; ++level)
            if (level == top) {
              sum = pending[4 * tile + e][level][t];
              if constexpr (Gated) up = pending[4 + e][level][t];
            }
          if (parts > 1) {
            const uint64_t matrices = Gated ? 2 : 1, at = (uint64_t{part} * matrices * T + token) * rows + r;
            partials[at] = sum;
            if constexpr (Gated) partials[at + uint64_t{T} * rows] = up;
            continue;
          }
          float* o = out + static_cast<uint64_t>(token) * out_stride + r;
          if constexpr (Gated) *o = swiglu_value(sum, up);
          else *o = accumulate ? add_rn(*o, sum) : sum;
        }
    });
  }
};

// out[t * out_stride + r] (+)= IntMmaBlockOp's parts of (t, r) added by the lane sums'
// tree (parts 2: p0 + p1; 4: (p0 + p1) + (p2 + p3); ...; gated: silu(the gate's sum)
// times the up projection's), one thread per output: the bits of one block's sum.
struct IntPartsCombineOp {
  const float* partials;  // [part][matrix][token][row]
  float* out;
  uint32_t rows, T, parts, out_stride;
  bool gated, accumulate;
  FAFO_HD void operator()(uint32_t i) const {
    const uint32_t t = i / rows, r = i % rows, matrices = gated ? 2 : 1;
    const auto sum = [&](uint32_t m) {
      float s[kLanes] = {};
      for (uint32_t p = 0; p < parts; ++p) s[p] = partials[((uint64_t{p} * matrices + m) * T + t) * rows + r];
      for (uint32_t width = parts; width > 1; width /= 2)
        for (uint32_t k = 0; k < width / 2; ++k) s[k] = add_rn(s[2 * k], s[2 * k + 1]);
      return s[0];
    };
    float* o = out + static_cast<uint64_t>(t) * out_stride + r;
    if (gated) *o = swiglu_value(sum(0), sum(1));
    else *o = accumulate ? add_rn(*o, sum(0)) : sum(0);
  }
};

}  // namespace fafo::cuda
