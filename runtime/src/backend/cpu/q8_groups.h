// The cpu backend's own layout of Q4_0, IQ4_NL, MXFP4, Q8_0 and Q5_0 matrices, made when a
// weight is loaded (as llama.cpp repacks its Q4_0 rows): rows in groups of 8, so one
// vector instruction multiplies 4 activation bytes with 4 codes of each of 8 rows, each
// 32-bit lane summing one row's products.
//
// Layout: group g holds rows 8g .. 8g + 7 (rows past the matrix's end: scale 0, codes
// 0), its 32-value blocks in order, group_block_bytes each: the 8 rows' scales (fp16 d,
// 16 bytes; MXFP4: the exponent bytes e, 8 bytes), Q5_0's 32-bit words of fifth bits
// (row r's at 4r, 32 bytes), then the rows' code bytes in chunks
// of 32, chunk k holding row r's code bytes 4k .. 4k + 3 at 4r: 4 chunks of nibbles
// (values 4k .. 4k + 3 in the low nibbles, 16 + 4k .. 16 + 4k + 3 in the high ones) or,
// for Q8_0, 8 chunks of bytes (values 4k .. 4k + 3).
//
// Numerics (q8_matmul.h's contract, another float expression): each output is one
// lane; per block the exact integer sum of its 32 products, converted to float, times
// (d * dx) added in one multiply-add, blocks in order. The same for every step size,
// token tile, panel and thread count: T-invariant.
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

// Whether matrices of `type` are multiplied in groups of rows (Q4_0, IQ4_NL, MXFP4, Q8_0,
// Q5_0).
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
