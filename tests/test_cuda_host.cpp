// The CUDA backend's host-side code, on every machine (CI has no GPU): the block
// decoders and summation orders of cuda_backend/src/block_decode.h and dot_order.h,
// `__host__ __device__` functions compiled here as plain C++ (with -ffp-contract=off,
// as their header requires), checked against fafo's dequantize_row and, where a Vulkan
// device exists (lavapipe in CI), against the Vulkan kernels' bits: what the CUDA
// kernels compute with these functions is then what the Vulkan backend computes. The
// warp kernels (warp_ops.h), run by the host device lane by lane, give the plain
// kernels' bits.
// The CUDA backend through the emulated device, model by model: test_cuda_emulated.cpp;
// Vulkan's kernels against these bits: test_vulkan_cuda_order.cpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../cuda_backend/src/argmax_op.h"
#include "../cuda_backend/src/attention_ops.h"
#include "../cuda_backend/src/block_decode.h"
#include "../cuda_backend/src/dot_order.h"
#include "../cuda_backend/src/host_device.h"
#include "../cuda_backend/src/half_mma_ops.h"
#include "../cuda_backend/src/int_mma_block_op.h"
#include "../cuda_backend/src/int_ops.h"
#include "../cuda_backend/src/ops_backend.h"
#include "../cuda_backend/src/step_graphs.h"
#include "../cuda_backend/src/top_k_op.h"
#include "../cuda_backend/src/ops.h"
#include "../cuda_backend/src/warp_ops.h"
#include "fafo/cuda_backend.h"
#include "fafo/generator.h"
#include "fafo/tensor_type.h"
#include "fafo/top_k.h"
#include "random_weights.h"
#include "model_fixtures.h"
#include "joined_steps_check.h"
#include "test_support.h"
#include "cuda_test_rows.h"

namespace {

using fafo::TensorType;
using fafo::cuda::Format;
using namespace fafo::test::cuda_rows;  // NOLINT(google-build-using-namespace): the tests' rows

TEST(CudaBlockDecode, EveryFormatDecodesAsDequantizeRow) {
  for (const TensorType type : kFormats) {
    SCOPED_TRACE(name_of(type));
    const uint32_t cols = cols_for(type), rows = 16;
    const std::vector<uint8_t> bytes = test_rows(type, rows / 2, cols, 7);
    const size_t row_bytes = fafo::tensor_row_bytes(type, cols);
    std::vector<float> want(cols);
    for (uint32_t r = 0; r < rows; ++r) {
      const uint8_t* row = bytes.data() + r * row_bytes;
      fafo::dequantize_row(type, row, want.data(), cols);
      std::vector<float> got(cols);
      const bool known = fafo::cuda::with_format(static_cast<uint32_t>(type), [&]<Format F>() {
        for (uint32_t chunk = 0; chunk < cols / 16; ++chunk) fafo::cuda::decode_chunk<F>(row, chunk, &got[16 * chunk]);
        if constexpr (fafo::cuda::is_plain_float<F>)
          for (uint32_t c = cols / 16 * 16; c < cols; ++c) got[c] = fafo::cuda::decode_value<F>(row, c);
      });
      ASSERT_TRUE(known);
      for (uint32_t c = 0; c < cols; ++c)
        ASSERT_EQ(std::bit_cast<uint32_t>(got[c]), std::bit_cast<uint32_t>(want[c]))
            << "row " << r << " column " << c << ": " << got[c] << " vs " << want[c];
    }
  }
  EXPECT_FALSE(fafo::cuda::has_decoder(99));
}

TEST(CudaBlockDecode, EveryHalfAndBfloat16BitPattern) {
  std::vector<uint16_t> halves(65536);
  for (uint32_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(i);
  for (const TensorType type : {TensorType::F16, TensorType::BF16}) {
    std::vector<float> want(halves.size());
    fafo::dequantize_row(type, halves.data(), want.data(), static_cast<int64_t>(halves.size()));
    for (uint32_t i = 0; i < halves.size(); ++i) {
      const float got = type == TensorType::F16 ? fafo::cuda::half_bits_to_float(i) : fafo::cuda::bf16_bits_to_float(i);
      if (std::isnan(want[i])) {
        ASSERT_TRUE(std::isnan(got)) << name_of(type) << " bits " << i;
      } else {
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want[i])) << name_of(type) << " bits " << i;
      }
    }
  }
}

TEST(CudaBlockDecode, FloatToHalfRoundsAsTheCpuCache) {
  // The fp16 KV cache's rounding: every 4099th float bit pattern, and the edges
  // (halfway cases, the subnormal and overflow boundaries, infinities, NaN).
  std::vector<uint32_t> patterns = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x477fefffu, 0x477ff000u,
                                    0x477fe000u, 0x38800000u, 0x387fffffu, 0x33000000u, 0x33000001u, 0x32ffffffu,
                                    0x33800000u, 0x3f801000u, 0x3f803000u, 0x3f801001u};
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099) patterns.push_back(static_cast<uint32_t>(u));
  for (const uint32_t u : patterns) {
    const float f = std::bit_cast<float>(u);
    const uint16_t want = fafo::fp32_to_fp16(f), got = fafo::cuda::float_to_half_bits(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(fafo::cuda::half_bits_to_float(got))) << std::hex << u;
    } else {
      ASSERT_EQ(got, want) << "float bits 0x" << std::hex << u << " (" << f << ")";
    }
  }
}

TEST(CudaDotOrder, ProductsAreTheExactDotWithinTheOrdersRoundingBound) {
  // Independent of Vulkan: row_dot against a double-precision dot of the decoded row.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const TensorType type : kFormats) {
    SCOPED_TRACE(name_of(type));
    const uint32_t cols = cols_for(type);
    const std::vector<uint8_t> bytes = test_rows(type, 2, cols, 9);
    std::vector<float> x(cols), w(cols);
    for (float& v : x) v = value(rng);
    for (uint32_t r = 0; r < 2; ++r) {  // the quantized rows (random F32 bytes overflow a dot)
      const uint8_t* row = bytes.data() + r * fafo::tensor_row_bytes(type, cols);
      fafo::dequantize_row(type, row, w.data(), cols);
      double exact = 0, magnitude = 0;
      for (uint32_t c = 0; c < cols; ++c) {
        exact += double{w[c]} * x[c];
        magnitude += std::fabs(double{w[c]} * x[c]);
      }
      float got = 0;
      fafo::cuda::with_format(static_cast<uint32_t>(type),
                              [&]<Format F>() { got = fafo::cuda::row_dot<F>(row, x.data(), cols); });
      // A lane adds up to 16 * ceil(chunks / 32) + 15 products, then 5 tree levels.
      const double roundings = 16.0 * ((cols / 16 + 31) / 32) + 15 + 5 + 1;
      EXPECT_NEAR(got, exact, roundings * std::ldexp(1.0, -24) * magnitude) << "row " << r;
    }
  }
}

// The warp kernels' products (a warp per row, tiles of up to 8 tokens) equal the plain
// kernels' (a thread per output) bit for bit, for every format, step sizes around the
// tile (1, 3, 8, 9, 17), strided inputs and outputs, and accumulation; and so their
// RMSNorm.
TEST(CudaWarpOps, ProductsAndNormsGiveThePlainKernelsBits) {
  fafo::cuda::HostDevice device;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const TensorType type : kFormats) {
    SCOPED_TRACE(name_of(type));
    const uint32_t cols = cols_for(type), rows = 6;  // 3 quantized rows and 3 of random bytes
    const std::vector<uint8_t> bytes = test_rows(type, rows / 2, cols, 21);
    const uint64_t row_bytes = fafo::tensor_row_bytes(type, cols);
    for (const uint32_t T : {1u, 3u, 8u, 9u, 17u}) {
      SCOPED_TRACE("T = " + std::to_string(T));
      const uint32_t x_stride = cols + 5, out_stride = rows + 3, out_offset = 2;
      std::vector<float> x(size_t{T} * x_stride);
      for (float& v : x) v = value(rng);
      for (const bool accumulate : {false, true}) {
        std::vector<float> plain(size_t{T} * out_stride), warp;
        for (float& v : plain) v = value(rng);
        warp = plain;
        fafo::cuda::with_format(static_cast<uint32_t>(type), [&]<Format F>() {
          device.launch(fafo::cuda::MatmulOp<F>{bytes.data(), x.data(), plain.data(), rows, cols, x_stride, out_stride,
                                                out_offset, row_bytes, accumulate},
                        uint64_t{T} * rows, "matmul");
          using Op = fafo::cuda::MatmulWarpOp<F>;
          device.launch_warps(Op{bytes.data(), x.data(), warp.data(), rows, cols, T, x_stride, out_stride, out_offset,
                                 row_bytes, accumulate},
                              Op::warps(rows, T), "matmul");
        });
        ASSERT_EQ(std::memcmp(plain.data(), warp.data(), plain.size() * sizeof(float)), 0) << "accumulate " << accumulate;
      }
    }
  }
  // The norm with 1 to 9 warps a row (the last part short or empty where n is not a
  // multiple), and the parts the backend chooses.
  for (const uint32_t n : {1u, 15u, 288u, 1007u, 4096u}) {
    const uint32_t rows = 5;
    std::vector<float> x(size_t{rows} * n), gain(n), plain(x.size());
    for (float& v : x) v = value(rng);
    for (float& v : gain) v = value(rng);
    device.launch(fafo::cuda::RmsNormOp{x.data(), gain.data(), plain.data(), n, 1e-5f}, rows, "rms_norm");
    for (const uint32_t parts : {1u, 2u, 3u, 9u, fafo::cuda::RmsNormWarpOp::parts_for(n)}) {
      std::vector<float> warp(x.size(), -7.0f);
      device.launch_warps(fafo::cuda::RmsNormWarpOp{x.data(), gain.data(), warp.data(), n, 1e-5f, parts}, uint64_t{rows} * parts,
                          "rms_norm");
      EXPECT_EQ(std::memcmp(plain.data(), warp.data(), plain.size() * sizeof(float)), 0) << "n = " << n << ", parts " << parts;
    }
  }
}

// The integer products' rounding of the activations (QuantizeRowsOp, 4 blocks a warp:
// 10 blocks a row here, so a row has three warps, the last one partial):
// each block of 32 is d = max |x| RN(1 / 127) and q = the integer nearest to x / d
// (ties to even; decided exactly in double here), with d
// times the block's sum of q; a zero block is all 0 with d = 0, a block with a NaN or an infinity
// gets an infinite d and q = 0; the rounding of a normalized row (gain given) is the
// rounding of RmsNormWarpOp's values, bit for bit; each row alone.
TEST(CudaIntOps, RoundingGivesEachBlockOfThirtyTwoItsScaleQuantsAndSum) {
  fafo::cuda::HostDevice device;
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  const uint32_t T = 3, cols = 320, stride = 333, blocks = cols / 32;
  std::vector<float> x(size_t{T} * stride), gain(cols);
  for (float& v : x) v = value(rng);
  for (float& v : gain) v = value(rng);
  for (uint32_t c = 32; c < 64; ++c) x[c] = 0.0f;          // row 0, block 1: zeros
  x[stride + 70] = std::numeric_limits<float>::quiet_NaN();  // row 1, block 2
  x[2 * stride + 5] = 2.5f, x[2 * stride + 6] = -7.0f;       // row 2, block 0: max 7, 2.5 / (7 / 127) = 45.357...
  struct Rounded {
    std::vector<int8_t> q;
    std::vector<float> d;
    std::vector<float> s;
  };
  auto round_rows = [&](const float* rows, uint32_t row_stride, const float* g) {
    Rounded r{std::vector<int8_t>(size_t{T} * cols, 99), std::vector<float>(T * blocks, -1.0f),
              std::vector<float>(T * blocks, -1.0f)};
    device.launch_warp_fn(fafo::cuda::QuantizeRowsOp{rows, row_stride, g, 1e-5f, {r.q.data(), r.d.data(), r.s.data(), cols}},
                          fafo::cuda::QuantizeRowsOp::warps(T, cols), "quantize");
    return r;
  };
  const Rounded got = round_rows(x.data(), stride, nullptr);
  for (uint32_t t = 0; t < T; ++t)
    for (uint32_t b = 0; b < blocks; ++b) {
      SCOPED_TRACE("row " + std::to_string(t) + " block " + std::to_string(b));
      const float* v = x.data() + t * stride + 32 * b;
      float amax = 0;
      bool finite = true;
      for (uint32_t k = 0; k < 32; ++k) {
        finite = finite && std::isfinite(v[k]);
        amax = std::max(amax, std::fabs(v[k]));
      }
      const float d = finite ? amax * (1.0f / 127.0f) : std::numeric_limits<float>::infinity();
      EXPECT_EQ(got.d[t * blocks + b], d);
      int32_t sum = 0;
      for (uint32_t k = 0; k < 32; ++k) {
        const int32_t q = d > 0 && std::isfinite(d) ? static_cast<int32_t>(std::nearbyint(double{v[k]} / d)) : 0;
        EXPECT_EQ(got.q[t * cols + 32 * b + k], q) << k;
        EXPECT_LE(std::abs(q), 127);
        sum += q;
      }
      const float ds = d * static_cast<float>(sum);
      if (std::isnan(ds)) EXPECT_TRUE(std::isnan(got.s[t * blocks + b]));  // an infinite d times 0
      else EXPECT_EQ(got.s[t * blocks + b], ds);
    }
  EXPECT_EQ(got.q[2 * cols + 6], -127);
  EXPECT_EQ(got.q[2 * cols + 5], 45);
  EXPECT_EQ(got.d[1], 0.0f);

  // Normalized: the rounding of RmsNormWarpOp's output.
  std::vector<float> normed(size_t{T} * cols);
  x[stride + 70] = 1.0f;  // no NaN: a NaN makes the whole row's norm NaN
  for (uint32_t t = 0; t < T; ++t)
    device.launch_warps(fafo::cuda::RmsNormWarpOp{x.data() + t * stride, gain.data(), normed.data() + t * cols, cols, 1e-5f},
                        1, "rms_norm");
  const Rounded fused = round_rows(x.data(), stride, gain.data()), apart = round_rows(normed.data(), cols, nullptr);
  EXPECT_EQ(fused.q, apart.q);
  EXPECT_EQ(std::memcmp(fused.d.data(), apart.d.data(), fused.d.size() * sizeof(float)), 0);
  EXPECT_EQ(fused.s, apart.s);
}

// nearest_quotient (the rounding of the activations without a division) is the integer
// nearest to x / d, ties to even, decided exactly (double holds x / d to well within the
// distance of any float quotient from a half): exact halves (x = (n + 1/2) d, d with
// few significant bits), the floats on either side of them, and random quotients, over
// scales from 2^-100 to 2^100.
TEST(CudaIntOps, NearestQuotientIsTheNearestIntegerTiesToEven) {
  std::mt19937 rng(29);
  std::uniform_int_distribution<int32_t> n_of(-127, 126), exponent(-100, 100), small(1, 255);
  std::uniform_real_distribution<double> frac(-127.4, 127.4);
  uint32_t ties = 0;
  for (int i = 0; i < 200000; ++i) {
    const bool tie = i % 2 == 0;
    const float d = tie ? std::ldexp(static_cast<float>(small(rng)), exponent(rng))
                        : std::ldexp(1.0f + static_cast<float>(rng() % 8388608) / 8388608.0f, exponent(rng));
    float x = tie ? static_cast<float>((n_of(rng) + 0.5) * d) : static_cast<float>(frac(rng) * d);
    if (tie) {
      const int side = static_cast<int>(rng() % 3);  // the half itself, or a float beside it
      if (side == 1) x = std::nextafter(x, 0.0f);
      if (side == 2) x = std::nextafter(x, x < 0 ? -INFINITY : INFINITY);
      ties += side == 0;
    }
    const double q = std::nearbyint(static_cast<double>(x) / static_cast<double>(d));
    ASSERT_EQ(fafo::cuda::nearest_quotient(x, d), static_cast<int32_t>(q)) << x << " / " << d;
  }
  EXPECT_GT(ties, 30000u);
  EXPECT_EQ(fafo::cuda::nearest_quotient(2.5f, 1.0f), 2);
  EXPECT_EQ(fafo::cuda::nearest_quotient(-3.5f, 1.0f), -4);
  EXPECT_EQ(fafo::cuda::nearest_quotient(127.0f, 1.0f), 127);
}

// The integer products of Q4_K, Q5_K, Q6_K, Q8_0, Q3_K, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
// IQ4_XS and MXFP4 rows (fafo's quantizers on random floats, and random bytes): each unit's value (IntUnit:
// its integer sums, then its scales) is the exact dot product of the decoded weights with the rounded activations
// (q * d) within a few roundings; IntMatmulWarpOp's warps give int_row_dot's bits for
// every token whatever the step size (T-invariant), accumulate onto the output, and the
// gated form gives silu(gate) * up of the two rows' products; the tensor-core kernel of
// wide steps (IntMmaBlockOp, mma_s8 emulated) gives the same bits: rows in two blocks,
// one partial; steps of 9 to 130 tokens (partial warps, several token blocks); rows of
// fewer than 32 units (empty lane sums) and of more than 8 units a lane sum (stages).
TEST(CudaIntOps, IntegerProductsAreTheExactBlockSumsInAFixedOrder) {
  fafo::cuda::HostDevice device;
  std::mt19937 rng(19);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const TensorType type : {TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q3_K,
                                TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::IQ4_NL,
                                TensorType::IQ4_XS, TensorType::MXFP4})
    for (const bool long_rows : {false, true}) {
    // Long rows (the lane sums' stages) for a format of each kind of unit: a block of 32
    // (Q8_0; MXFP4's 17-byte blocks; Q4_1's minimum), pairs of sub-blocks (Q4_K, Q5_K),
    // sub-blocks of 16 (Q6_K).
    if (long_rows && (type == TensorType::Q3_K || type == TensorType::Q4_0 || type == TensorType::Q5_0 ||
                      type == TensorType::Q5_1 || type == TensorType::IQ4_NL || type == TensorType::IQ4_XS))
      continue;
    SCOPED_TRACE(std::string(name_of(type)) + (long_rows ? ", long rows" : ""));
    ASSERT_TRUE(fafo::cuda::has_int_product_for(static_cast<uint32_t>(type)));
    // 40 rows: the tensor-core kernel's blocks of 32 rows (gated: 16), one partial. Long
    // rows: 264 or 266 units, over 8 a lane sum.
    const uint32_t unit_values = type == TensorType::Q4_K || type == TensorType::Q5_K ? 64 : 32;
    const bool block32 = fafo::tensor_type_info(type).block_size == 32;
    const uint32_t cols = long_rows ? (block32 ? 266 * 32 : 264 * unit_values) : (block32 ? 24 * 32 : 3 * 256);
    const uint32_t rows = 40, T_max = long_rows ? 70 : 130;
    const std::vector<uint8_t> bytes = test_rows(type, rows / 2, cols, 23);
    const uint64_t row_bytes = fafo::tensor_row_bytes(type, cols);
    std::vector<float> x(size_t{T_max} * cols);
    for (float& v : x) v = value(rng);
    std::vector<int8_t> q(x.size());
    std::vector<float> d(x.size() / 32);
    std::vector<float> s(x.size() / 32);
    const fafo::cuda::Q8Rows x8{q.data(), d.data(), s.data(), cols};
    device.launch_warp_fn(fafo::cuda::QuantizeRowsOp{x.data(), cols, nullptr, 0.0f, x8},
                          fafo::cuda::QuantizeRowsOp::warps(T_max, cols), "quantize");
    fafo::cuda::with_format(static_cast<uint32_t>(type), [&]<Format F>() {
      if constexpr (fafo::cuda::has_int_product<F>) {
        using Unit = fafo::cuda::IntUnit<F>;
        std::vector<float> w(cols);
        double worst = 0;
        for (uint32_t r = 0; r < rows; r += long_rows ? 13 : 1) {
          const uint8_t* row = bytes.data() + r * row_bytes;
          fafo::dequantize_row(type, row, w.data(), cols);
          for (uint32_t t = 0; t < T_max; t += 11)
            for (uint32_t u = 0; u < cols / Unit::kValues; ++u) {
              double exact = 0, scale = 0;
              for (uint32_t k = 0; k < Unit::kValues; ++k) {
                const uint32_t c = Unit::kValues * u + k;
                const double term = double{w[c]} * q[t * cols + c] * d[(t * cols + c) / 32];
                exact += term;
                scale += std::fabs(term);
              }
              fafo::cuda::LoadedUnit<F> unit;
              unit.load(row, u);
              for (uint32_t k = 0; k < Unit::kValues / 4; ++k) ASSERT_EQ(unit.w[k], Unit::word(row, u, k));  // words(): word() each
              const double got = unit.add_to(0.0f, fafo::cuda::q8_run(x8, t, Unit::kValues * u));
              worst = std::max(worst, std::fabs(got - exact) / std::max(scale, 1e-30));
            }
        }
        EXPECT_LT(worst, 1e-5);  // a few float roundings of the scales; a wrong bit of a quant is far more

        // Every kind of step for the first four formats; for the others, whose units differ
        // only in how words and scales are read, a one-token step, a partial token block
        // and two token blocks.
        const bool first_four = type == TensorType::Q8_0 || type == TensorType::Q4_K || type == TensorType::Q5_K ||
                                type == TensorType::Q6_K;
        const std::vector<uint32_t> steps = long_rows    ? std::vector<uint32_t>{8, 9, 70}
                                            : first_four ? std::vector<uint32_t>{1, 3, 8, 9, 17, 64, 65, 130}
                                                         : std::vector<uint32_t>{1, 9, 65};
        for (const uint32_t T : steps) {
          SCOPED_TRACE("T = " + std::to_string(T));
          const uint32_t out_stride = rows + 3;
          std::vector<float> out(size_t{T} * out_stride, 0.5f), gated(size_t{T} * out_stride, 0.5f);
          using Op = fafo::cuda::IntMatmulWarpOp<F>;
          device.launch_warps(Op{bytes.data(), x8, out.data(), rows, T, out_stride, row_bytes, true}, Op::warps(rows, T),
                              "matmul");
          using Gated = fafo::cuda::IntMatmulWarpOp<F, true>;
          device.launch_warps(Gated{bytes.data(), x8, gated.data(), rows / 2, T, out_stride, row_bytes, false},
                              Gated::warps(rows / 2, T), "matmul_swiglu");
          // One-token tiles (the kernel of one-token steps): the same bits.
          std::vector<float> one(out.size(), 0.5f), one_gated(out.size(), 0.5f);
          using One = fafo::cuda::IntMatmulWarpOp<F, false, 1>;
          device.launch_warps(One{bytes.data(), x8, one.data(), rows, T, out_stride, row_bytes, true}, One::warps(rows, T),
                              "matmul");
          using OneGated = fafo::cuda::IntMatmulWarpOp<F, true, 1>;
          device.launch_warps(OneGated{bytes.data(), x8, one_gated.data(), rows / 2, T, out_stride, row_bytes, false},
                              OneGated::warps(rows / 2, T), "matmul_swiglu");
          EXPECT_EQ(std::memcmp(one.data(), out.data(), out.size() * sizeof(float)), 0);
          EXPECT_EQ(std::memcmp(one_gated.data(), gated.data(), out.size() * sizeof(float)), 0);
          // The tensor-core kernel: the same bits.
          // Blocks of 16, 32 and 64 tokens; the lane sums' tree in 1 to 32 parts.
          for (const uint32_t token_warps : {1u, 2u, 4u})
            for (const uint32_t parts : {1u, 2u, 8u, 32u}) {
            if (parts > 1 && token_warps != (parts == 8 ? 4u : 2u)) continue;
            SCOPED_TRACE("token warps " + std::to_string(token_warps) + ", parts " + std::to_string(parts));
            std::vector<float> mma(out.size(), 0.5f), mma_gated(out.size(), 0.5f);
            std::vector<float> partials(size_t{parts} * 2 * T * rows, 7.0f);
            using Mma = fafo::cuda::IntMmaBlockOp<F>;
            const Mma op{bytes.data(), x8, mma.data(), rows, T, out_stride, row_bytes, true, token_warps, parts, partials.data()};
            device.launch_block_fn(op, op.blocks(), op.warps(), Mma::kSharedBytes, "matmul");
            if (parts > 1)
              device.launch(fafo::cuda::IntPartsCombineOp{partials.data(), mma.data(), rows, T, parts, out_stride, false, true},
                            uint64_t{T} * rows, "matmul_combine");
            using MmaGated = fafo::cuda::IntMmaBlockOp<F, true>;
            const MmaGated gated_op{bytes.data(), x8, mma_gated.data(), rows / 2, T, out_stride, row_bytes, false, token_warps,
                                    parts, partials.data()};
            device.launch_block_fn(gated_op, gated_op.blocks(), gated_op.warps(), MmaGated::kSharedBytes, "matmul_swiglu");
            if (parts > 1)
              device.launch(fafo::cuda::IntPartsCombineOp{partials.data(), mma_gated.data(), rows / 2, T, parts, out_stride, true,
                                                          false},
                            uint64_t{T} * (rows / 2), "matmul_combine");
            EXPECT_EQ(std::memcmp(mma.data(), out.data(), out.size() * sizeof(float)), 0);
            EXPECT_EQ(std::memcmp(mma_gated.data(), gated.data(), out.size() * sizeof(float)), 0);
            if (token_warps == 4 && T > 8) {
              EXPECT_EQ(op.token_blocks(), (T + 63) / 64);  // each weight read once per 64 tokens
            }
          }
          for (uint32_t t = 0; t < T; t += long_rows ? 7 : 1)
            for (uint32_t r = 0; r < rows; ++r) {
              const float want = fafo::cuda::int_row_dot<F>(bytes.data() + r * row_bytes, x8, t);
              ASSERT_EQ(std::bit_cast<uint32_t>(out[t * out_stride + r]), std::bit_cast<uint32_t>(0.5f + want))
                  << "token " << t << " row " << r;
              if (r < rows / 2) {
                const float up = fafo::cuda::int_row_dot<F>(bytes.data() + (r + rows / 2) * row_bytes, x8, t);
                ASSERT_EQ(std::bit_cast<uint32_t>(gated[t * out_stride + r]),
                          std::bit_cast<uint32_t>(fafo::cuda::swiglu_value(want, up)));
              }
            }
          for (uint32_t t = 0; t < T; ++t)
            for (uint32_t r = rows; r < out_stride; ++r) ASSERT_EQ(out[t * out_stride + r], 0.5f);  // past the rows: untouched
        }
      }
    });
  }
  EXPECT_FALSE(fafo::cuda::has_int_product_for(static_cast<uint32_t>(TensorType::Q2_K)));
  EXPECT_FALSE(fafo::cuda::has_int_product_for(static_cast<uint32_t>(TensorType::IQ3_S)));
  EXPECT_FALSE(fafo::cuda::has_int_product_for(static_cast<uint32_t>(TensorType::F16)));
}

// A unit's value joins a lane's sum by IntUnit::add_to's fused multiply-adds, written
// out here from the block's bytes: Q8_0 (and Q4_0, Q5_0, IQ4_NL, IQ4_XS, MXFP4 with
// their d) fma(d * d_x, sum, acc); Q4_1/Q5_1 that, then fma(m, d_x * s_x, acc); Q6_K and
// Q3_K fma(d * d_x, sc_a * sum_a + sc_b * sum_b, acc); Q4_K/Q5_K per sub-block
// fma(d_x, (d * sc) * sum, acc) then fma(-(dmin * m), d_x * s_x, acc), where d * sc and
// dmin * m are exact; over
// random blocks (infinite and NaN scales among them) and sums up to their largest
// magnitudes, the same bits.
TEST(CudaIntOps, UnitsJoinALaneSumByTheirFusedExpression) {
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> scale(0.0f, 0.05f), partial(-3.0f, 3.0f);
  const auto same = [](float a, float b) { return std::isnan(a) ? std::isnan(b) : std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); };
  for (const TensorType type : {TensorType::Q8_0, TensorType::Q6_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q3_K,
                                TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::IQ4_NL,
                                TensorType::IQ4_XS, TensorType::MXFP4}) {
    SCOPED_TRACE(name_of(type));
    const uint32_t rows = 64, cols = 4 * 256;
    const std::vector<uint8_t> bytes = test_rows(type, rows / 2, cols, 43);
    const uint64_t row_bytes = fafo::tensor_row_bytes(type, cols);
    fafo::cuda::with_format(static_cast<uint32_t>(type), [&]<Format F>() {
      if constexpr (fafo::cuda::has_int_product<F>) {
        using Unit = fafo::cuda::IntUnit<F>;
        // Of a sum over 32 (Q6_K: 16) values; IQ4's table reaches 127.
        const bool table = F == Format::IQ4_NL || F == Format::IQ4_XS || F == Format::MXFP4;
        const int32_t largest = 32 * (F == Format::Q4_K ? 15 : table ? 127 : 31) * 127;
        std::uniform_int_distribution<int32_t> sum(-largest, largest);
        uint32_t checked = 0;
        for (uint32_t r = 0; r < rows; ++r)
          for (uint32_t u = 0; u < cols / Unit::kValues; ++u) {
            const uint8_t* row = bytes.data() + r * row_bytes;
            const typename Unit::Scales scales = Unit::scales(row, u);
            for (int rep = 0; rep < 4; ++rep) {
              int32_t sums[Unit::kSums];
              for (uint32_t k = 0; k < Unit::kSums; ++k) sums[k] = rep == 0 ? largest : rep == 1 ? -largest : sum(rng);
              fafo::cuda::Q8Scales<Unit::kValues / 32> x;
              for (uint32_t b = 0; b < Unit::kValues / 32; ++b) {
                x.d[b] = scale(rng);
                x.s[b] = x.d[b] * static_cast<float>(sum(rng) / 31);
              }
              const float acc = partial(rng);
              float want = acc;
              if constexpr (F == Format::Q8_0) {
                const float d = fafo::cuda::half_bits_to_float(fafo::cuda::read_u16(row + 34 * u));
                want = std::fma(d * x.d[0], static_cast<float>(sums[0]), acc);
              } else if constexpr (F == Format::Q6_K) {
                const uint8_t* b = row + 210 * (u / 8);
                const uint32_t h = (u % 8) / 4, k4 = u % 4;
                const float d = fafo::cuda::half_bits_to_float(fafo::cuda::read_u16(b + 208));
                const int32_t sc_a = static_cast<int8_t>(b[192 + 8 * h + 2 * k4]), sc_b = static_cast<int8_t>(b[192 + 8 * h + 2 * k4 + 1]);
                want = std::fma(d * x.d[0], static_cast<float>(sc_a * sums[0] + sc_b * sums[1]), acc);
              } else if constexpr (F == Format::Q3_K) {
                const uint8_t* b = row + 110 * (u / 8);
                const float d = fafo::cuda::half_bits_to_float(fafo::cuda::read_u16(b + 108));
                int32_t sc[2];
                for (uint32_t k = 0; k < 2; ++k) {  // sub-blocks 2 (u % 8) and 2 (u % 8) + 1 of 16
                  const uint32_t sub = 2 * (u % 8) + k;
                  const uint32_t low4 = sub < 8 ? b[96 + sub] & 15 : b[96 + sub - 8] >> 4;
                  sc[k] = static_cast<int32_t>(low4 | (((b[104 + sub % 4] >> (2 * (sub / 4))) & 3) << 4)) - 32;
                }
                want = std::fma(d * x.d[0], static_cast<float>(sc[0] * sums[0] + sc[1] * sums[1]), acc);
              } else if constexpr (F == Format::Q4_0 || F == Format::IQ4_NL || F == Format::Q5_0) {
                const float d = fafo::cuda::half_bits_to_float(fafo::cuda::read_u16(row + (F == Format::Q5_0 ? 22 : 18) * u));
                want = std::fma(d * x.d[0], static_cast<float>(sums[0]), acc);
              } else if constexpr (F == Format::Q4_1 || F == Format::Q5_1) {
                const uint8_t* b = row + (F == Format::Q4_1 ? 20 : 24) * u;
                const float d = fafo::cuda::half_bits_to_float(fafo::cuda::read_u16(b));
                const float m = fafo::cuda::half_bits_to_float(fafo::cuda::read_u16(b + 2));
                want = std::fma(m, x.s[0], std::fma(d * x.d[0], static_cast<float>(sums[0]), acc));
              } else if constexpr (F == Format::IQ4_XS) {
                const uint8_t* b = row + 136 * (u / 8);
                const uint32_t ib = u % 8;
                const int32_t ls = static_cast<int32_t>(((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((fafo::cuda::read_u16(b + 2) >> (2 * ib)) & 3) << 4));
                const float d = fafo::cuda::half_bits_to_float(fafo::cuda::read_u16(b)) * static_cast<float>(ls - 32);
                want = std::fma(d * x.d[0], static_cast<float>(sums[0]), acc);
              } else if constexpr (F == Format::MXFP4) {
                const float d = std::ldexp(1.0f, static_cast<int>(row[17 * u]) - 128);
                want = std::fma(d * x.d[0], static_cast<float>(sums[0]), acc);
              } else {
                const uint8_t* b = row + (F == Format::Q4_K ? 144 : 176) * (u / 4);
                const float d = fafo::cuda::half_bits_to_float(fafo::cuda::read_u16(b));
                const float dmin = fafo::cuda::half_bits_to_float(fafo::cuda::read_u16(b + 2));
                for (uint32_t j = 0; j < 2; ++j) {
                  int32_t sc, mn;
                  fafo::cuda::k_scale_min(b + 4, 2 * (u % 4) + j, sc, mn);
                  want = std::fma(x.d[j], (d * static_cast<float>(sc)) * static_cast<float>(sums[j]), want);
                  want = std::fma(-(dmin * static_cast<float>(mn)), x.s[j], want);
                }
              }
              ASSERT_TRUE(same(Unit::add_to(acc, scales, sums, x), want)) << "row " << r << " unit " << u;
              ++checked;
            }
          }
        EXPECT_EQ(checked, rows * (cols / Unit::kValues) * 4);
      }
    });
  }
}

// The attention blocks (attention_ops.h) give each (row, head) the same partials
// whatever the block's rows (1, 3 or 8 warps sharing the keys and values a block
// stages, or rows of another kind or window reading theirs from memory), the query
// heads a warp takes (groups of 4, 3, 2 against 1) and the launch's run of rows; merged,
// they are the plain kernel's attention within 1e-5. GQA 8/2 x 64, 12/3 x 100 and 6/3 x
// 33 (16-, 4- and 2-byte staging reads), f32 and f16 caches (and q8_0 and q4_0 ones where
// a head is whole blocks: 64, whose 68 and 36 bytes stage in 4-byte reads), FULL and COMPRESSED rows
// over a permuted order, random masks, with and without a 150-entry window (each FULL
// row's keys start elsewhere), parts of 96 and 32 keys over a 300-entry prefix.
TEST(CudaAttention, BlocksGiveEachRowAndHeadTheSameBitsWhateverTheirRowsAndGroup) {
  fafo::cuda::HostDevice device;
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  struct Shape {
    uint32_t n_head, n_head_kv, head_dim;
  };
  for (const Shape sh : {Shape{8, 2, 64}, Shape{12, 3, 100}, Shape{6, 3, 33}})
    for (const fafo::cuda::KvFormat format :
         {fafo::cuda::KvFormat::F32, fafo::cuda::KvFormat::F16, fafo::cuda::KvFormat::Q8_0, fafo::cuda::KvFormat::Q4_0})
      for (const int32_t window : {0, 150})
        for (const uint32_t part_keys : {96u, 32u}) {
          if (fafo::cuda::kv_blocks(format) && sh.head_dim % 32 != 0) continue;
          SCOPED_TRACE(std::to_string(sh.n_head) + "/" + std::to_string(sh.n_head_kv) + " x " + std::to_string(sh.head_dim) +
                       " format " + std::to_string(static_cast<int>(format)) + " window " + std::to_string(window) +
                       " part " + std::to_string(part_keys));
          const uint32_t T = 11, n_past = 300, region = 70, kv_dim = sh.n_head_kv * sh.head_dim, q_stride = sh.n_head * sh.head_dim;
          const uint32_t n_parts = (n_past + T + part_keys - 1) / part_keys;
          std::vector<float> q(size_t{T} * q_stride);
          for (float& v : q) v = value(rng);
          const size_t entries = size_t{n_past + T} * kv_dim;
          // The cache in its format (blocks quantized as the backend's store does).
          std::vector<float> kf(entries), vf(entries);
          for (size_t i = 0; i < entries; ++i) kf[i] = value(rng), vf[i] = value(rng);
          std::vector<uint8_t> kc(fafo::cuda::kv_bytes(format, entries)), vc(kc.size());
          for (size_t i = 0; i < entries; ++i)
            if (format == fafo::cuda::KvFormat::F32) {
              std::memcpy(&kc[4 * i], &kf[i], 4), std::memcpy(&vc[4 * i], &vf[i], 4);
            } else if (format == fafo::cuda::KvFormat::F16) {
              const uint16_t k = fafo::cuda::float_to_half_bits(kf[i]), v = fafo::cuda::float_to_half_bits(vf[i]);
              std::memcpy(&kc[2 * i], &k, 2), std::memcpy(&vc[2 * i], &v, 2);
            }
          if (fafo::cuda::kv_blocks(format))
            for (size_t b = 0; b < entries / 32; ++b) {
              fafo::cuda::quantize_kv_block(&kf[32 * b], &kc[b * fafo::cuda::kv_block_bytes(format)], format);
              fafo::cuda::quantize_kv_block(&vf[32 * b], &vc[b * fafo::cuda::kv_block_bytes(format)], format);
            }
          std::vector<uint64_t> mask(T, 0);
          std::vector<uint8_t> compressed(T, 0);
          std::vector<int32_t> positions(T), region_positions(region);
          for (uint32_t t = 0; t < T; ++t) {
            compressed[t] = t % 3 == 1;
            positions[t] = static_cast<int32_t>(n_past + t);
            for (uint32_t j = 0; j <= t; ++j)
              if (j == t || rng() % 2) mask[t] |= uint64_t{1} << j;
          }
          for (uint32_t k = 0; k < region; ++k) region_positions[k] = static_cast<int32_t>(k * 4);
          std::vector<int32_t> order(n_past);
          std::iota(order.begin(), order.end(), 0);
          std::shuffle(order.begin(), order.end(), rng);
          std::vector<float> out(size_t{T} * q_stride, 7.0f), scratch(size_t{T} * q_stride);
          const fafo::cuda::AttentionOp op{q.data(), out.data(), scratch.data(),
                                           kc.data(), vc.data(),
                                           mask.data(), compressed.data(), order.data(), T, n_past, sh.n_head, sh.n_head_kv,
                                           sh.head_dim, kv_dim, q_stride, q_stride, 1, region, 0.125f, false, format, 0.0f,
                                           window > 0 ? positions.data() : nullptr,
                                           window > 0 ? region_positions.data() : nullptr, window};
          const uint32_t group = fafo::cuda::attention_group_for(sh.n_head, sh.n_head_kv);
          EXPECT_EQ(group, sh.n_head / sh.n_head_kv);
          const size_t per_row = size_t{sh.n_head} * n_parts * (sh.head_dim + 2);
          const auto partials = [&](uint32_t g, uint32_t tile_rows, uint32_t t0, uint32_t rows) {
            std::vector<float> p(rows * per_row, 7.0f);
            const auto run = [&]<uint32_t Group>() {
              const fafo::cuda::AttentionBlockOp<Group> block{op, p.data(), part_keys, n_parts, t0, rows, tile_rows};
              device.launch_block_fn(block, block.blocks(), tile_rows,
                                     fafo::cuda::AttentionBlockOp<Group>::shared_bytes(sh.head_dim, format), "attention");
            };
            switch (g) {
              case 4: run.template operator()<4>(); break;
              case 3: run.template operator()<3>(); break;
              case 2: run.template operator()<2>(); break;
              default: run.template operator()<1>(); break;
            }
            return p;
          };
          const std::vector<float> one = partials(1, 1, 0, T);
          EXPECT_NE(one[2], 7.0f);  // written
          for (const uint32_t tile_rows : {1u, 3u, 8u})
            for (const uint32_t g : {1u, group}) {
              const std::vector<float> p = partials(g, tile_rows, 0, T);
              EXPECT_EQ(std::memcmp(p.data(), one.data(), p.size() * sizeof(float)), 0) << tile_rows << " rows, group " << g;
            }
          // The rows in runs of 4 (t0 = 0, 4, 8; the backend's runs when partials would
          // outgrow their budget): each run's partials are the same rows' of one launch.
          for (uint32_t t0 = 0; t0 < T; t0 += 4) {
            const uint32_t rows = std::min(4u, T - t0);
            const std::vector<float> p = partials(group, rows, t0, rows);
            EXPECT_EQ(std::memcmp(p.data(), one.data() + t0 * per_row, p.size() * sizeof(float)), 0) << "t0 " << t0;
          }
          std::vector<float> merged(out.size(), 7.0f);
          device.launch(fafo::cuda::AttentionCombineOp{one.data(), merged.data(), sh.n_head, sh.head_dim, n_parts, q_stride, 0},
                        uint64_t{T} * q_stride, "attention_combine");
          device.launch(op, uint64_t{T} * sh.n_head, "attention");
          float worst = 0.0f;
          for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(merged[i] - out[i]));
          EXPECT_LE(worst, 1e-5f);
          EXPECT_NE(out[0], 7.0f);
        }
}

// The KV cache's block formats (kv_blocks.h): the device's quantizer writes the bytes of
// fafo::quantize_row for Q8_0 and Q4_0, on random blocks of every magnitude and on
// blocks of zeros, ties, subnormals, infinities and NaNs; kv_value reads back
// dequantize_row's values.
TEST(CudaKvBlocks, TheDevicesBlocksAreTheHostQuantizersBytes) {
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::vector<std::vector<float>> blocks;
  for (int i = 0; i < 400; ++i) {
    std::vector<float> b(32);
    const float scale = std::ldexp(1.0f, static_cast<int>(rng() % 60) - 40);
    for (float& v : b) v = unit(rng) * scale;
    blocks.push_back(b);
  }
  blocks.push_back(std::vector<float>(32, 0.0f));
  // Codes on halves, rounded away from zero: a largest value of -8 (Q4_0's d = 1) or 127
  // (Q8_0's d = 1) makes x * inv = x.
  for (const float largest : {-8.0f, 127.0f}) {
    std::vector<float> ties(32);
    for (int j = 0; j < 32; ++j) ties[j] = static_cast<float>(j % 13 - 6) + 0.5f;
    ties[0] = largest;
    blocks.push_back(ties);
  }
  std::vector<float> special(32, 1.5f);
  special[3] = std::numeric_limits<float>::infinity(), special[7] = std::nanf(""), special[9] = -2.0f;
  blocks.push_back(special);
  std::vector<float> tiny(32);
  for (int j = 0; j < 32; ++j) tiny[j] = std::ldexp(static_cast<float>(j - 16), -140);
  blocks.push_back(tiny);
  for (const auto& [format, type] : {std::pair{fafo::cuda::KvFormat::Q8_0, TensorType::Q8_0},
                                     std::pair{fafo::cuda::KvFormat::Q4_0, TensorType::Q4_0}}) {
    const uint32_t bytes = fafo::cuda::kv_block_bytes(format);
    for (size_t i = 0; i < blocks.size(); ++i) {
      std::vector<uint8_t> got(bytes), want(bytes);
      fafo::cuda::quantize_kv_block(blocks[i].data(), got.data(), format);
      fafo::quantize_row(type, blocks[i].data(), want.data(), 32);
      ASSERT_EQ(got, want) << fafo::tensor_type_name(type) << " block " << i;
      std::vector<float> values(32);
      fafo::dequantize_row(type, want.data(), values.data(), 32);
      for (uint32_t j = 0; j < 32; ++j) {
        const float v = fafo::cuda::kv_value(got.data(), j, format);
        ASSERT_EQ(std::memcmp(&v, &values[j], sizeof v), 0) << fafo::tensor_type_name(type) << " block " << i << " value " << j;
      }
    }
  }
}

// F16 and BF16 products on the tensor cores (HalfMmaWarpOp's parts of 256 columns, then
// HalfCombineOp; mma_half emulated): each output is the dot product of the weights with
// the activations rounded to the weights' format within float roundings, the same bits
// for every step size (1 to 130) and from the wide steps' kernel (HalfMmaBlockOp: 9 to
// 130 tokens, partial warps and blocks), rows in a partial tile, row lengths that end
// inside a 16-column step and inside a part (45, 300, 600), accumulation and the gated
// form.
template <fafo::cuda::Format F>
void check_half_mma_products() {
  using Op = fafo::cuda::HalfMmaWarpOp<F>;
  const auto to_bits = [](float v) -> uint16_t {
    if constexpr (F == fafo::cuda::Format::F16) return fafo::cuda::float_to_half_bits(v);
    else return fafo::cuda::float_to_bf16_bits(v);
  };
  const auto to_float = [](uint32_t bits) {
    if constexpr (F == fafo::cuda::Format::F16) return fafo::cuda::half_bits_to_float(bits);
    else return fafo::cuda::bf16_bits_to_float(bits);
  };
  fafo::cuda::HostDevice device;
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const uint32_t cols : {45u, 300u, 600u}) {
    SCOPED_TRACE("cols = " + std::to_string(cols));
    const uint32_t rows = 20, T_max = 130;
    std::vector<uint16_t> w(size_t{2 * rows} * cols);  // the gated form's 2 x rows
    for (uint16_t& h : w) h = to_bits(value(rng));
    std::vector<float> x(size_t{T_max} * cols);
    for (float& v : x) v = value(rng);
    const uint64_t row_bytes = 2ull * cols;
    const auto* bytes = reinterpret_cast<const uint8_t*>(w.data());
    // wide: HalfMmaBlockOp, the weights staged once per block of 64 tokens.
    auto product = [&](uint32_t T, bool gated, bool accumulate, std::vector<float>& out, bool wide = false) {
      const uint32_t parts = Op::parts(cols), matrices = gated ? 2 : 1;
      std::vector<float> partials(size_t{matrices} * parts * T * rows);
      const Op op{bytes, x.data(), partials.data(), rows, cols, T, cols, matrices, row_bytes};
      if (wide) {
        const fafo::cuda::HalfMmaBlockOp<F> block{op};
        device.launch_block_fn(block, block.blocks(), block.warps(), block.kSharedBytes, "matmul");
      } else {
        device.launch_warp_fn(op, Op::warps(rows, cols, T), "matmul");
      }
      device.launch(fafo::cuda::HalfCombineOp{partials.data(), out.data(), rows, T, parts, rows + 1, gated, accumulate},
                    uint64_t{T} * rows, "matmul_combine");
    };
    std::vector<float> want(size_t{T_max} * (rows + 1), 0.25f), want_gated(want.size(), 0.25f);
    product(T_max, false, true, want);
    product(T_max, true, false, want_gated);
    double largest_rounding = 0;  // of an input, relative: shows the format's rounding is the one applied
    for (uint32_t t = 0; t < T_max; ++t)
      for (uint32_t r = 0; r < rows; ++r) {
        double exact = 0, scale = 0;
        for (uint32_t c = 0; c < cols; ++c) {
          const float xv = x[size_t{t} * cols + c], rounded = to_float(to_bits(xv));
          largest_rounding = std::max(largest_rounding, std::fabs(double{rounded} - xv) / std::fabs(xv));
          const double term = double{to_float(w[size_t{r} * cols + c])} * rounded;
          exact += term;
          scale += std::fabs(term);
        }
        EXPECT_NEAR(want[t * (rows + 1) + r], 0.25 + exact, 1e-6 * (scale + 1)) << "token " << t << " row " << r;
      }
    EXPECT_GT(largest_rounding, F == fafo::cuda::Format::F16 ? 1e-4 : 1e-3);
    EXPECT_EQ(want[rows], 0.25f);  // past the rows: untouched
    for (const uint32_t T : {1u, 3u, 8u, 9u, 17u, 64u, 65u, 130u})
      for (const bool wide : {false, true}) {
        if (wide && T <= 8) continue;
        std::vector<float> got(size_t{T} * (rows + 1), 0.25f), got_gated(got.size(), 0.25f);
        product(T, false, true, got, wide);
        product(T, true, false, got_gated, wide);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << "T = " << T << " wide " << wide;
        EXPECT_EQ(std::memcmp(got_gated.data(), want_gated.data(), got.size() * sizeof(float)), 0)
            << "T = " << T << " wide " << wide;
      }
  }
}

TEST(CudaHalfMma, ProductsAreTheHalfRoundedDotForEveryStepSize) {
  check_half_mma_products<fafo::cuda::Format::F16>();
}

TEST(CudaHalfMma, Bf16ProductsAreTheBf16RoundedDotForEveryStepSize) {
  check_half_mma_products<fafo::cuda::Format::BF16>();
}

// bfloat16 rounding on the device is fafo::fp32_to_bf16's: nearest even on the dropped
// 16 bits, ties, overflow to infinity, NaN kept a quiet NaN.
TEST(CudaHalfMma, Bf16RoundingIsTheRuntimes) {
  std::mt19937 rng(5);
  std::vector<uint32_t> bits = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u,
                                0x7fc00001u, 0x7f800001u, 0x80000000u, 0x00000001u, 0x00008000u, 0x00018000u};
  for (int i = 0; i < 100000; ++i) bits.push_back(static_cast<uint32_t>(rng()));
  for (const uint32_t b : bits) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    const uint16_t got = fafo::cuda::float_to_bf16_bits(f), want = fafo::fp32_to_bf16(f);
    if (std::isnan(f)) EXPECT_TRUE(std::isnan(fafo::bf16_to_fp32(got))) << std::hex << b;
    else EXPECT_EQ(got, want) << std::hex << b;
  }
}

// The warp kernels' argmax (argmax_op.h: warps over parts of 2,048 columns, then a warp
// per row) is the plain kernel's (ArgmaxOp, the first of equal largest values) on rows
// spanning 1 to 4 parts: the maximum in a later part than an equal earlier one, ties
// inside a part on lanes out of index order, -0.0 tying +0.0, +inf, rows of -inf only
// (-2), a NaN in the last part (-1), random rows with few distinct values.
TEST(CudaArgmax, PartsGiveTheFirstLargestValueAsThePlainKernel) {
  fafo::cuda::HostDevice device;
  std::mt19937 rng(23);
  for (const uint32_t cols : {1u, 31u, 2048u, 2049u, 7000u, 70000u}) {
    SCOPED_TRACE("cols " + std::to_string(cols));
    const uint32_t rows = 9;
    std::vector<float> x(size_t{rows} * cols);
    for (float& v : x) v = static_cast<float>(rng() % 5) - 4.0f;  // few distinct values: many ties at 0
    float* r = x.data();
    r[cols - 1] = 3.0f;  // row 0: the largest value last
    r = x.data() + cols;  // row 1: equal largest values, the later one on a lower lane
    if (cols > 64) r[33] = 9.0f, r[64] = 9.0f;  // lane 1 first, then lane 0
    if (cols > 65600) r[65600] = 9.0f;          // part 32: the combine's lane 0 again, after part 0
    r[cols - 1] = 9.0f;
    r = x.data() + 2 * cols;  // row 2: -0.0 and +0.0 as the largest
    for (uint32_t c = 0; c < cols; ++c) r[c] = c % 3 == 0 ? -0.0f : (c % 3 == 1 ? 0.0f : -1.0f);
    r = x.data() + 3 * cols;  // row 3: -inf only
    std::fill(r, r + cols, -std::numeric_limits<float>::infinity());
    r = x.data() + 4 * cols;  // row 4: a NaN in the last column
    r[cols - 1] = std::numeric_limits<float>::quiet_NaN();
    r = x.data() + 5 * cols;  // row 5: +inf twice
    r[cols / 2] = std::numeric_limits<float>::infinity(), r[cols - 1] = std::numeric_limits<float>::infinity();
    r = x.data() + 6 * cols;  // row 6: -inf but one finite value
    std::fill(r, r + cols, -std::numeric_limits<float>::infinity());
    r[cols - 1] = -1e30f;
    std::vector<int32_t> want(rows, 99), got(rows, 99);
    device.launch(fafo::cuda::ArgmaxOp{x.data(), want.data(), cols, cols}, rows, "argmax");
    const uint32_t parts = fafo::cuda::ArgmaxPartOp::parts(cols);
    std::vector<float> values(size_t{rows} * parts);
    std::vector<int32_t> index(size_t{rows} * parts);
    device.launch_warp_fn(fafo::cuda::ArgmaxPartOp{x.data(), cols, cols, parts, values.data(), index.data()},
                          uint64_t{rows} * parts, "argmax");
    device.launch_warp_fn(fafo::cuda::ArgmaxCombineOp{values.data(), index.data(), parts, got.data()}, rows, "argmax_combine");
    EXPECT_EQ(got, want);
    EXPECT_EQ(want[3], -2);
    EXPECT_EQ(want[4], -1);
    EXPECT_EQ(want[6], static_cast<int32_t>(cols - 1));
    if (cols > 64) {
      EXPECT_EQ(want[1], 33);
    }
  }
}

// Top-k on the device (TopKWarpOp, a warp per row) is fafo::top_k_row bit for bit:
// rows of few distinct values (ties broken by the lower index), -0.0 tying +0.0,
// infinities, k = 1, k = n and k past the 32 lanes, a row with a NaN marked, rows of
// odd lengths.
TEST(CudaTopK, EachRowsBestKAreTheHostsInItsOrder) {
  fafo::cuda::HostDevice device;
  std::mt19937 rng(29);
  for (const uint32_t n : {1u, 7u, 33u, 300u, 1000u}) {
    for (const uint32_t k : {1u, 5u, 40u, 1000u}) {
      if (k > n) continue;
      SCOPED_TRACE("n = " + std::to_string(n) + ", k = " + std::to_string(k));
      const uint32_t rows = 4, stride = n + 3;
      std::vector<float> x(size_t{rows} * stride, 9.0f);
      std::uniform_int_distribution<int> few(-3, 3);
      std::uniform_real_distribution<float> any(-5.0f, 5.0f);
      for (uint32_t r = 0; r < rows; ++r)
        for (uint32_t i = 0; i < n; ++i) {
          float v = r == 0 ? static_cast<float>(few(rng)) : any(rng);  // row 0: many ties
          if (r == 0 && v == 0.0f && i % 2) v = -0.0f;
          if (r == 1 && i % 17 == 3) v = (i % 2) ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
          x[size_t{r} * stride + i] = v;
        }
      x[size_t{3} * stride + n / 2] = std::numeric_limits<float>::quiet_NaN();
      std::vector<uint32_t> out(size_t{rows} * (4 * k + 1), 0xdeadbeefu);
      uint32_t* base = out.data();
      device.launch_warp_fn(fafo::cuda::TopKWarpOp{x.data(), n, stride, k, reinterpret_cast<int32_t*>(base),
                                                   reinterpret_cast<float*>(base + rows * k), base + rows * k * 2,
                                                   base + rows * (k * 2 + 1)},
                            rows, "top_k");
      for (uint32_t r = 0; r < rows; ++r) {
        std::vector<int32_t> ids(k);
        std::vector<float> values(k);
        const bool ok = fafo::top_k_row(x.data() + size_t{r} * stride, static_cast<int32_t>(n), static_cast<int32_t>(k),
                                        ids.data(), values.data());
        EXPECT_EQ(base[rows * k * 2 + r], ok ? 0u : 1u) << "row " << r;
        if (!ok) continue;
        for (uint32_t j = 0; j < k; ++j) {
          ASSERT_EQ(static_cast<int32_t>(base[r * k + j]), ids[j]) << "row " << r << " rank " << j;
          ASSERT_EQ(base[rows * k + r * k + j], std::bit_cast<uint32_t>(values[j])) << "row " << r << " rank " << j;
        }
      }
    }
  }
}

}  // namespace
