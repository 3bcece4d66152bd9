// The cpu backend's own layout of Q4_0, IQ4_NL, MXFP4, Q8_0, Q5_0, Q4_K, Q5_K and Q6_K matrices,
// made when a weight is loaded (as llama.cpp repacks its Q4_0 and Q4_K rows): rows in groups
// of 8, so one vector instruction multiplies 4 activation bytes with 4 codes of each of 8
// rows, each 32-bit lane summing one row's products.
//
// Layout: group g holds rows 8g .. 8g + 7 (rows past the matrix's end: scale 0, codes
// 0), its 32-value blocks in order, group_block_bytes each: the 8 rows' scales (fp16 d,
// 16 bytes; MXFP4: the exponent bytes e, 8 bytes), Q5_0's 32-bit words of fifth bits
// (row r's at 4r, 32 bytes), then the rows' code bytes in chunks
// of 32, chunk k holding row r's code bytes 4k .. 4k + 3 at 4r: 4 chunks of nibbles
// (values 4k .. 4k + 3 in the low nibbles, 16 + 4k .. 16 + 4k + 3 in the high ones) or,
// for Q8_0, 8 chunks of bytes (values 4k .. 4k + 3).
//
// Q4_K's 256-value super-blocks (kK4GroupBlockBytes each): the 8 rows' fp16 d (16
// bytes), their fp16 dmin (16 bytes), the scales of the 8 sub-blocks of 32 values
// unpacked to bytes (sub-block j's of row r at 8j + r), the mins by pairs of sub-blocks
// (sub-blocks 2i and 2i + 1 of row r at 16i + 2r and 16i + 2r + 1), then per pair of
// sub-blocks 8 chunks of 32 bytes, chunk k holding row r's code bytes 32i + 4k .. + 3 at
// 4r (low nibbles: sub-block 2i's values 4k .. 4k + 3; high nibbles: sub-block 2i + 1's).
// Q5_K's (kK5GroupBlockBytes each): Q4_K's with the fifth bits' 32 bytes a row before the
// codes, in chunks of 32, chunk k holding row r's bytes 4k .. 4k + 3 of qh at 4r (bit j of
// qh[l]: value 32j + l's fifth bit).
// Q6_K's (kK6GroupBlockBytes each, the file's 210 bytes a row): the 8 rows' fp16 d, the
// 16 signed scales by pairs of sub-blocks of 16 values (sub-blocks 2m and 2m + 1 of row r
// at 16m + 2r and 16m + 2r + 1), then the codes in chunks of 32 (chunk c of ql or qh
// holding row r's bytes 4c .. 4c + 3 at 4r), by halves of the super-block, each half h
// the 16 chunks of ql's bytes 64h .. 64h + 63 then the 8 of qh's 32h .. 32h + 31 (a half's
// low and high codes one after the other: kept apart, a one-token step ran slower).
//
// Numerics (q8_matmul.h's contract, another float expression): each output is one
// lane; per block the exact integer sum of its 32 products, converted to float, times
// (d * dx) added in one multiply-add, blocks in order (Q4_K: per super-block the exact
// sum over its sub-blocks of scale times products, times d * dx, then the one of min
// times the activations' sums, times dmin * dx, subtracted; Q5_K the same with its codes
// of 5 bits; Q6_K: per super-block the
// exact sum of scale times (code - 32) times activation, times d * dx). The same for every step
// size, token tile, panel and thread count: T-invariant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cpu/q8_matmul.h"
#include "backend/host/host_backend.h"
#include "fafo/tensor_type.h"

namespace fafo::cpu {

constexpr int64_t kGroupRows = 8;
// A group's block: the rows' scales of `scale_bytes` each, then their `code_bytes` each
// (Q5_0: its fifth bits and nibbles).
constexpr int64_t group_block_bytes(int64_t scale_bytes, int64_t code_bytes) {
  return (scale_bytes + code_bytes) * kGroupRows;
}

// Where Q4_K's, Q5_K's and Q6_K's super-blocks in a group keep their parts (the layout above).
constexpr int64_t kK4GroupDmin = 2 * kGroupRows, kK4GroupScales = 4 * kGroupRows, kK4GroupMins = 12 * kGroupRows,
                  kK4GroupCodes = 20 * kGroupRows, kK4GroupBlockBytes = kK4GroupCodes + 128 * kGroupRows;
constexpr int64_t kK5GroupHigh = kK4GroupCodes, kK5GroupCodes = kK5GroupHigh + 32 * kGroupRows,
                  kK5GroupBlockBytes = kK5GroupCodes + 128 * kGroupRows;
constexpr int64_t kK6GroupScales = 2 * kGroupRows, kK6GroupCodes = 18 * kGroupRows,
                  kK6GroupHalfBytes = 96 * kGroupRows, kK6GroupBlockBytes = kK6GroupCodes + 2 * kK6GroupHalfBytes;
// Where Q6_K's chunk c of ql (0 .. 31) and of qh (0 .. 15) are in a group's super-block.
constexpr int64_t k6_group_low(int64_t c) { return kK6GroupCodes + (c / 16) * kK6GroupHalfBytes + 32 * (c % 16); }
constexpr int64_t k6_group_high(int64_t c) {
  return kK6GroupCodes + (c / 8) * kK6GroupHalfBytes + 64 * kGroupRows + 32 * (c % 8);
}

// Whether matrices of `type` are multiplied in groups of rows (Q4_0, IQ4_NL, MXFP4, Q8_0,
// Q5_0, Q4_K, Q5_K, Q6_K).
bool multiplies_in_groups(TensorType type);

// The bytes of w's rows in groups; 0 where the format has none.
size_t grouped_bytes(const host::HostWeight& w);
// Writes groups [g0, g1) of w's rows (the layout above) into `out` (grouped_bytes(w) long).
void group_rows(const host::HostWeight& w, int64_t g0, int64_t g1, uint8_t* out);
// w's rows in groups; empty where the format has none.
std::vector<uint8_t> group_rows(const host::HostWeight& w);

// q8_matmul_rows' product over w.groups (x already checked): out[t * out_stride + r] for
// r in [r0, r1); groups whose rows lie partly outside are computed whole, written in part.
void q8_matmul_groups(const host::HostWeight& w, int64_t r0, int64_t r1, const QuantizedActivations& x, float* out,
                      int64_t out_stride, int64_t panel_rows);

}  // namespace fafo::cpu
