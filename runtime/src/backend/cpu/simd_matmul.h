// The `cpu` backend's float matrix product, for the formats without an integer one
// (q8_matmul.h): F32, F16, BF16, Q2_K, Q3_K. Weight rows dequantized in panels by SIMD decoders
// (Google Highway, the best instruction set of the running CPU chosen at run time), then
// multiplied with tiles of tokens, so each weight block is read and decoded once per
// step for all of the step's tokens.
//
// Numerics: every result is one dot product of a dequantized weight row (the very floats
// the reference's dequantizer gives) with an activation row, summed in vector lanes with
// fused multiply-adds over the row in order, then across lanes. Neither the panel, the
// token tile, the step's size nor the thread count changes that arithmetic, so the
// results are T-invariant; they differ from the reference's dot (eight partial sums) only in summation
// order (and by instruction set: AVX-512, AVX2, SSE4, NEON, scalar). For F16 weights
// the caller rounds the activations to fp16 first (round_to_half, as llama.cpp does):
// one-token steps then read half the activation bytes, and every step multiplies by the
// same rounded values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/host/host_backend.h"

namespace fafo::cpu {

// Floats of scratch one thread needs for a product over `cols` columns.
size_t matmul_scratch_floats(int64_t cols);
// Weight rows dequantized per panel for a product over `cols` columns; a thread's share
// of rows should be a multiple of it.
int64_t matmul_panel_rows(int64_t cols);

// out[t * out_stride + r] = dot(row r of w, x + t * x_stride) for r in [r0, r1), t < T.
// x_half: nullptr, or x as fp16 (same stride; x then holds exactly those values), which
// small steps with F16 weights read instead of x.
void matmul_rows(const host::HostWeight& w, int64_t r0, int64_t r1, const float* x, const uint16_t* x_half,
                 int64_t x_stride, int64_t T, float* out, int64_t out_stride, float* scratch);

// Whether products with `type` weights take activations rounded to fp16 (F16).
bool rounds_activations_to_half(TensorType type);
// Steps of at most this many tokens may read x_half (up to 8 tokens on AVX-512 and NEON,
// 4 elsewhere); larger ones only x.
constexpr int64_t kHalfActivationsMaxT = 8;
// n activations to fp16 in `half` (unless nullptr), and the same values as floats in
// `rounded`: fp32_to_fp16's bits (nearest even; infinity past 65504) on every
// instruction set.
void round_to_half(const float* x, int64_t n, uint16_t* half, float* rounded);

// Dequantizes `n` values (whole blocks) of one weight row into dst, as
// fafo::dequantize_row does, with SIMD decoders where the format has one.
void dequantize_row_simd(TensorType type, const uint8_t* src, float* dst, int64_t n);
// Whether `type` has a SIMD decoder (the rest use the scalar one of src/quant).
bool has_simd_decoder(TensorType type);
// The instruction set chosen at run time: "AVX-512", "AVX2", "SSE4.2", "NEON", "scalar".
const char* simd_target_name();

// For tests: the instruction sets this build compiled that this CPU runs, best first
// (Highway's names: "AVX3", "AVX2", "SSE4", "EMU128", ...), and a switch that makes
// every kernel use one of them ("" = the best again). Throws std::invalid_argument for
// a name not in the list. Not thread-safe: call it while no product runs.
std::vector<std::string> simd_targets();
void use_simd_target(const std::string& name);

}  // namespace fafo::cpu
