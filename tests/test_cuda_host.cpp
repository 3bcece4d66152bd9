// The CUDA backend's host-side code, on every machine (CI has no GPU): the block
// decoders and summation orders of cuda_backend/src/block_decode.h and dot_order.h,
// `__host__ __device__` functions compiled here as plain C++ (with -ffp-contract=off,
// as their header requires), checked against fafo's dequantize_row and, where a Vulkan
// device exists (lavapipe in CI), against the Vulkan kernels' bits: what the CUDA
// kernels compute with these functions is then what the Vulkan backend computes. The
// warp kernels (warp_ops.h), run by the host device lane by lane, give the plain
// kernels' bits.
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

#if FAFO_HAVE_VULKAN
#include "backend/vulkan/buffer.h"
#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/kernels.h"
#include "backend/vulkan/weight_kernels.h"
#include "vulkan_test_support.h"
#endif

namespace {

using fafo::TensorType;
using fafo::cuda::Format;

constexpr TensorType kFormats[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q8_0,
                                   TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                   TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                                   TensorType::Q6_K};

std::string name_of(TensorType t) { return std::string(fafo::tensor_type_name(t)); }

// Rows quantized by fafo's quantizers from random floats, then rows of random bytes.
std::vector<uint8_t> test_rows(TensorType type, uint32_t rows, uint32_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  const size_t row_bytes = fafo::tensor_row_bytes(type, cols);
  std::vector<uint8_t> bytes(size_t{rows} * row_bytes);
  std::vector<float> row(cols);
  for (uint32_t r = 0; r < rows; ++r) {
    for (float& v : row) v = value(rng) * static_cast<float>(r + 1);
    fafo::quantize_row(type, row.data(), bytes.data() + r * row_bytes, cols);
  }
  const std::vector<uint8_t> random = fafo::test::random_block_bytes(type, rows, cols, seed + 1);
  bytes.insert(bytes.end(), random.begin(), random.end());
  return bytes;
}

uint32_t cols_for(TensorType type) {
  const uint32_t block = fafo::tensor_type_info(type).block_size;
  return block == 1 ? 1007 : block == 32 ? 24 * block : 3 * block;  // plain floats end in a partial chunk
}

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

// A small synthetic model (GQA 4/2, 256 wide) of `weight_type` (Q4_K_M: Q4_K and Q6_K
// weights), written into the temporary directory `name`.
std::shared_ptr<const fafo::GgufFile> small_test_model(const std::string& name,
                                                        const std::string& weight_type = "Q4_K_M") {
  fafo::synth::SyntheticConfig c;
  c.n_layer = 2, c.n_embd = 256, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 512, c.n_vocab = 300, c.n_ctx = 256;
  c.weight_type = weight_type;
  const std::string path = (fafo::test::temp_dir(name) / "m.gguf").string();
  fafo::synth::write_synthetic_model(c, path);
  return fafo::GgufFile::open(path);
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

// The integer products of Q4_K, Q5_K, Q6_K and Q8_0 rows (fafo's quantizers on random
// floats, and random bytes): each unit's value (IntUnit: its integer sums, then its
// scales) is the exact dot product of the decoded weights with the rounded activations
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
  for (const TensorType type : {TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K})
    for (const bool long_rows : {false, true}) {
    SCOPED_TRACE(std::string(name_of(type)) + (long_rows ? ", long rows" : ""));
    ASSERT_TRUE(fafo::cuda::has_int_product_for(static_cast<uint32_t>(type)));
    // 40 rows: the tensor-core kernel's blocks of 32 rows (gated: 16), one partial. Long
    // rows: 264 or 266 units, over 8 a lane sum.
    const uint32_t unit_values = type == TensorType::Q4_K || type == TensorType::Q5_K ? 64 : 32;
    const uint32_t cols = long_rows ? (type == TensorType::Q8_0 ? 266 * 32 : 264 * unit_values)
                                    : (type == TensorType::Q8_0 ? 24 * 32 : 3 * 256);
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

        const std::vector<uint32_t> steps = long_rows ? std::vector<uint32_t>{8, 9, 70} : std::vector<uint32_t>{1, 3, 8, 9, 17, 64, 65, 130};
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
  EXPECT_FALSE(fafo::cuda::has_int_product_for(static_cast<uint32_t>(TensorType::Q4_0)));
  EXPECT_FALSE(fafo::cuda::has_int_product_for(static_cast<uint32_t>(TensorType::F16)));
}

// A unit's value joins a lane's sum by IntUnit::add_to's fused multiply-adds, written
// out here from the block's bytes: Q8_0 fma(d * d_x, sum, acc); Q6_K fma(d * d_x,
// sc_a * sum_a + sc_b * sum_b, acc); Q4_K/Q5_K per sub-block fma(d_x, (d * sc) * sum,
// acc) then fma(-(dmin * m), d_x * s_x, acc), where d * sc and dmin * m are exact; over
// random blocks (infinite and NaN scales among them) and sums up to their largest
// magnitudes, the same bits.
TEST(CudaIntOps, UnitsJoinALaneSumByTheirFusedExpression) {
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> scale(0.0f, 0.05f), partial(-3.0f, 3.0f);
  const auto same = [](float a, float b) { return std::isnan(a) ? std::isnan(b) : std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); };
  for (const TensorType type : {TensorType::Q8_0, TensorType::Q6_K, TensorType::Q4_K, TensorType::Q5_K}) {
    SCOPED_TRACE(name_of(type));
    const uint32_t rows = 64, cols = 4 * 256;
    const std::vector<uint8_t> bytes = test_rows(type, rows / 2, cols, 43);
    const uint64_t row_bytes = fafo::tensor_row_bytes(type, cols);
    fafo::cuda::with_format(static_cast<uint32_t>(type), [&]<Format F>() {
      if constexpr (fafo::cuda::has_int_product<F>) {
        using Unit = fafo::cuda::IntUnit<F>;
        const int32_t largest = 32 * (F == Format::Q4_K ? 15 : 31) * 127;  // of a sum over 32 (Q6_K, Q8_0: 16 or 32) values
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
// 33 (16-, 4- and 2-byte staging reads), f32 and f16 caches, FULL and COMPRESSED rows
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
    for (const bool f16 : {false, true})
      for (const int32_t window : {0, 150})
        for (const uint32_t part_keys : {96u, 32u}) {
          SCOPED_TRACE(std::to_string(sh.n_head) + "/" + std::to_string(sh.n_head_kv) + " x " + std::to_string(sh.head_dim) +
                       (f16 ? " f16" : " f32") + " window " + std::to_string(window) + " part " + std::to_string(part_keys));
          const uint32_t T = 11, n_past = 300, region = 70, kv_dim = sh.n_head_kv * sh.head_dim, q_stride = sh.n_head * sh.head_dim;
          const uint32_t n_parts = (n_past + T + part_keys - 1) / part_keys;
          std::vector<float> q(size_t{T} * q_stride);
          for (float& v : q) v = value(rng);
          const size_t entries = size_t{n_past + T} * kv_dim;
          std::vector<float> kf(entries), vf(entries);
          std::vector<uint16_t> kh(entries), vh(entries);
          for (size_t i = 0; i < entries; ++i) {
            kf[i] = value(rng), vf[i] = value(rng);
            kh[i] = fafo::cuda::float_to_half_bits(kf[i]), vh[i] = fafo::cuda::float_to_half_bits(vf[i]);
            if (f16) kf[i] = fafo::cuda::half_bits_to_float(kh[i]), vf[i] = fafo::cuda::half_bits_to_float(vh[i]);
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
                                           f16 ? static_cast<const void*>(kh.data()) : kf.data(),
                                           f16 ? static_cast<const void*>(vh.data()) : vf.data(),
                                           mask.data(), compressed.data(), order.data(), T, n_past, sh.n_head, sh.n_head_kv,
                                           sh.head_dim, kv_dim, q_stride, q_stride, 1, region, 0.125f, false, f16, 0.0f,
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
                                     fafo::cuda::AttentionBlockOp<Group>::shared_bytes(sh.head_dim, f16), "attention");
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

// The backend with any kernel set (FAFO_CUDA_KERNELS) gives the same logits for a
// prefill step and a decode step at a context long enough for the warp kernels'
// attention to split the keys into parts: within the backend's tolerance (their
// attention sums the softmax in another order), the same greedy token; a bad value is
// a clear error.
TEST(CudaEmulated, BothKernelSetsGiveTheSameLogits) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(model_path.string());
  const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
  std::string text;
  for (int i = 0; i < 12; ++i) text += "Lily and Tom went to the park. They played with a ball and a kite. ";
  const std::vector<int32_t> prompt = tokenizer.encode(text, true);
  ASSERT_GT(prompt.size(), 200u);
  auto logits = [&](fafo::cuda::CudaKernels kernels) {
    fafo::ModelOptions mo;
    mo.n_ctx = 512;
    fafo::Model model(file, fafo::cuda::make_emulated_backend(kernels), mo);
    fafo::StepBatch prefill = fafo::StepBatch::causal(prompt, 0, true);
    std::vector<float> out = model.forward(prefill);
    model.commit(prefill.size());
    fafo::StepBatch next = fafo::StepBatch::causal({302}, model.n_past());
    const std::vector<float> last = model.forward(next);
    out.insert(out.end(), last.begin(), last.end());
    EXPECT_NE(model.backend().description().find(kernels != fafo::cuda::CudaKernels::Plain ? "warp kernels" : "plain kernels"),
              std::string::npos);
    return out;
  };
  const std::vector<float> fast = logits(fafo::cuda::CudaKernels::Fast), plain = logits(fafo::cuda::CudaKernels::Plain);
  ASSERT_EQ(fast.size(), plain.size());
  // F32 weights: no integer products, so the warp kernels' float products give the bits.
  const std::vector<float> warp = logits(fafo::cuda::CudaKernels::Warp);
  ASSERT_EQ(warp.size(), fast.size());
  EXPECT_EQ(std::memcmp(warp.data(), fast.data(), fast.size() * sizeof(float)), 0);
  const size_t n_vocab = 512;
  ASSERT_EQ(fast.size() % n_vocab, 0u);
  double worst = 0;
  for (size_t i = 0; i < fast.size(); ++i)
    worst = std::max(worst, std::fabs(double{fast[i]} - plain[i]) / std::max(1.0, std::fabs(double{plain[i]})));
  EXPECT_LE(worst, 1e-4);
  for (size_t row = 0; row < fast.size() / n_vocab; ++row) {
    const auto best = [&](const std::vector<float>& v) {
      return std::max_element(v.begin() + row * n_vocab, v.begin() + (row + 1) * n_vocab) - v.begin();
    };
    EXPECT_EQ(best(fast), best(plain)) << "row " << row;
  }
  ::setenv("FAFO_CUDA_KERNELS", "turbo", 1);
  EXPECT_THROW(fafo::cuda::make_emulated_backend(), std::invalid_argument);
  ::setenv("FAFO_CUDA_KERNELS", "plain", 1);
  EXPECT_NE(fafo::cuda::make_emulated_backend()->description().find("plain kernels"), std::string::npos);
  ::setenv("FAFO_CUDA_KERNELS", "warp", 1);
  EXPECT_NE(fafo::cuda::make_emulated_backend()->description().find("float products"), std::string::npos);
  ::setenv("FAFO_CUDA_KERNELS", "fast", 1);
  EXPECT_NE(fafo::cuda::make_emulated_backend()->description().find("integer products"), std::string::npos);
  ::unsetenv("FAFO_CUDA_KERNELS");
  // The wide steps' blocks: 16, 32 or 64 tokens (the default, not named).
  EXPECT_EQ(fafo::cuda::make_emulated_backend()->description().find("FAFO_CUDA_WIDE_TOKENS"), std::string::npos);
  ::setenv("FAFO_CUDA_WIDE_TOKENS", "32", 1);
  EXPECT_NE(fafo::cuda::make_emulated_backend()->description().find("blocks of 32 tokens"), std::string::npos);
  ::setenv("FAFO_CUDA_WIDE_TOKENS", "48", 1);
  EXPECT_THROW(fafo::cuda::make_emulated_backend(), std::invalid_argument);
  ::unsetenv("FAFO_CUDA_WIDE_TOKENS");
}

TEST(CudaEmulated, EveryStrategyAndCacheGivesTheCpuBackendsGreedyIds) {
  // The CUDA backend's whole step logic (StepBatch masks, FULL and COMPRESSED rows, the
  // logical order, KV swaps and moves, gathered rows, argmax), its kernels run on the
  // host: the greedy ids of plain decoding equal the cpu backend's, and every strategy's
  // equal plain decoding's, with fp32 and fp16 caches.
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(model_path.string());
  const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
  const std::vector<int32_t> prompt = tokenizer.encode("Once upon a time, there was a little girl named Lily.", true);
  auto run = [&](std::unique_ptr<fafo::Backend> be, fafo::KvCacheType kv, fafo::Strategy s, const std::string& policy) {
    fafo::ModelOptions mo;
    mo.n_ctx = 256;
    mo.kv_type = kv;
    fafo::Model model(file, std::move(be), mo);
    fafo::GenerationOptions o;
    o.n_predict = 40;
    o.sampling.temperature = 0;
    o.decoding.strategy = s;
    o.kv.name = policy;
    o.kv.budget = 24;
    return fafo::generate(model, tokenizer, prompt, o).ids;
  };
  for (const fafo::KvCacheType kv : {fafo::KvCacheType::F32, fafo::KvCacheType::F16}) {
    SCOPED_TRACE(fafo::kv_cache_type_name(kv));
    const auto ar = run(fafo::make_cpu_backend(2), kv, fafo::Strategy::Ar, "stream");
    ASSERT_EQ(ar.size(), 40u);
    EXPECT_EQ(run(fafo::cuda::make_emulated_backend(), kv, fafo::Strategy::Ar, "stream"), ar);
    EXPECT_EQ(run(fafo::cuda::make_emulated_backend(), kv, fafo::Strategy::Lookahead, "stream"), ar);
    for (const std::string policy : {"stream", "snapkv"})
      EXPECT_EQ(run(fafo::cuda::make_emulated_backend(), kv, fafo::Strategy::Fafo, policy), ar) << policy;
  }
}

// The model families beyond llama (qwen3: per-head Q and K norms before NEOX RoPE,
// heads wider than n_embd / n_head; phi3: one attn_qkv and one gate-and-up tensor,
// LongRoPE; phi4-mini: part of each head rotated, with the attention factor; gemma2:
// soft-capped scores and logits, GeGLU, post-norms, a window of 24 on layer 0; gemma3:
// Q/K norms, a window of 16 and its own RoPE on layer 0): the CUDA backend's logits are
// the cpu backend's within the tolerance at every position of a prompt, and every
// strategy's greedy ids equal plain decoding's over 40 positions (past both windows).
// (Both against llama.cpp: tests/test_model_families.cpp.)
TEST(CudaEmulated, ModelFamiliesGiveTheCpuBackendsLogitsAndEveryStrategyPlainDecodingsIds) {
  for (const std::string preset : {"qwen3-tiny", "phi3-tiny", "phi4-mini-tiny", "gemma2-tiny", "gemma3-tiny"}) {
    SCOPED_TRACE(preset);
    std::optional<fafo::synth::SyntheticConfig> c = fafo::synth::preset(preset);
    ASSERT_TRUE(c);
    c->weight_type = "F32";
    const std::string path = (fafo::test::temp_dir("cuda-" + preset) / "m.gguf").string();
    fafo::synth::write_synthetic_model(*c, path);
    const std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(path);
    const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
    const std::vector<int32_t> prompt = {1, 45, 99, 7, 250, 31, 8, 45, 99, 7, 250, 31, 8, 45, 300, 12};
    fafo::ModelOptions mo;
    mo.n_ctx = preset.rfind("phi", 0) == 0 ? 512 : 128;  // phi3, phi4-mini: LongRoPE's long factors
    fafo::Model cpu(file, fafo::make_cpu_backend(2), mo);
    fafo::Model cuda(file, fafo::cuda::make_emulated_backend(), mo);
    fafo::StepBatch batch = fafo::StepBatch::causal(prompt, 0, true);
    const std::vector<float> want = cpu.forward(batch);
    const std::vector<float> got = cuda.forward(batch);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4 * std::max(1.0f, std::fabs(want[i]))) << "logit " << i;
    auto run = [&](fafo::Strategy s, const std::string& policy) {
      cuda.truncate(0);
      fafo::GenerationOptions o;
      o.n_predict = 24;
      o.sampling.temperature = 0;
      o.decoding.strategy = s;
      o.kv.name = policy;
      o.kv.budget = 16;
      o.stop_at_end_of_generation = false;  // a random model may well pick the end first
      return fafo::generate(cuda, tokenizer, prompt, o).ids;
    };
    const auto ar = run(fafo::Strategy::Ar, "stream");
    ASSERT_EQ(ar.size(), 24u);
    EXPECT_EQ(run(fafo::Strategy::Lookahead, "stream"), ar);
    for (const std::string policy : {"stream", "snapkv"}) EXPECT_EQ(run(fafo::Strategy::Fafo, policy), ar) << policy;
  }
}

// The same with the integer and tensor-core products (a Q4_K_M model: Q4_K and Q6_K
// weights; a Q8_0, an F16 and a BF16 model): every strategy's greedy ids equal plain
// decoding's on the CUDA backend, and the products are the fast ones (the profile names
// the rounding launches, or the tensor-core products' combine). The 14-token prefill and
// the strategies' wider steps take the wide steps' block kernels.
TEST(CudaEmulated, EveryStrategyGivesPlainDecodingsIdsWithTheFastProducts) {
  for (const std::string type : {"Q4_K_M", "Q8_0", "F16", "BF16"}) {
    SCOPED_TRACE(type);
    const std::shared_ptr<const fafo::GgufFile> file = small_test_model("cuda-fast-" + type, type);
    const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
    const std::vector<int32_t> prompt = {1, 45, 99, 7, 250, 31, 8, 45, 99, 7, 250, 31, 8, 45};
    auto run = [&](fafo::Strategy s, const std::string& policy, fafo::KernelProfile* profile = nullptr) {
      fafo::ModelOptions mo;
      mo.n_ctx = 128;
      fafo::Model model(file, fafo::cuda::make_emulated_backend(fafo::cuda::CudaKernels::Fast), mo);
      if (profile) model.backend().profiler()->start_profile();
      fafo::GenerationOptions o;
      o.n_predict = 32;
      o.sampling.temperature = 0;
      o.decoding.strategy = s;
      o.kv.name = policy;
      o.kv.budget = 12;
      std::vector<int32_t> ids = fafo::generate(model, tokenizer, prompt, o).ids;
      if (profile) *profile = model.backend().profiler()->take_profile();
      return ids;
    };
    fafo::KernelProfile profile;
    const auto ar = run(fafo::Strategy::Ar, "stream", &profile);
    ASSERT_EQ(ar.size(), 32u);
    std::map<std::string, uint64_t> calls;
    for (const auto& k : profile.kernels) calls[k.name] = k.calls;
    if (type == "Q4_K_M" || type == "Q8_0") {
      EXPECT_GT(calls["quantize_norm"], 0u);  // the norm before qkv and gate-up, fused into the rounding
      EXPECT_GT(calls["quantize"], 0u);       // before the attention output and down projections
    } else {
      EXPECT_GT(calls["matmul_combine"], 0u);  // the tensor-core products' parts added
      EXPECT_EQ(calls["quantize"], 0u);
    }
    EXPECT_EQ(run(fafo::Strategy::Lookahead, "stream"), ar);
    EXPECT_EQ(run(fafo::Strategy::Fafo, "snapkv"), ar);
    if (type != "Q4_K_M") continue;  // the other strategies' steps are those shapes again
    EXPECT_EQ(run(fafo::Strategy::Jacobi, "stream"), ar);
    EXPECT_EQ(run(fafo::Strategy::Fafo, "stream"), ar);
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

// The step graphs' bookkeeping (step_graphs.h): a shape is captured from its second
// step on (the shapes seen are bounded); a kept graph is found by its topology and
// becomes the most recently used; beyond the capacity the least recently used is
// dropped; a graph whose update failed is replaced.
TEST(CudaGraphs, RepeatedShapesAreCapturedAndTheLeastRecentlyUsedGraphGoes) {
  fafo::cuda::StepGraphs<int> g(2, 3);
  EXPECT_FALSE(g.capture({1, 1}));
  EXPECT_TRUE(g.capture({1, 1}));
  EXPECT_FALSE(g.capture({8, 8}));
  EXPECT_FALSE(g.capture({8, 4, 4}));  // the same size, other parts: another shape
  EXPECT_TRUE(g.capture({1, 1}));
  EXPECT_FALSE(g.capture({2, 2}));     // 4 shapes seen, 3 kept: {8, 8} is forgotten
  EXPECT_FALSE(g.capture({8, 8}));
  EXPECT_EQ(g.stats().captured, 2u);
  EXPECT_EQ(g.stats().direct, 5u);

  EXPECT_EQ(g.find("matmul;rope;"), nullptr);
  g.keep("matmul;rope;", 1);
  g.keep("matmul;", 2);
  ASSERT_NE(g.find("matmul;rope;"), nullptr);  // now the most recently used
  EXPECT_EQ(*g.find("matmul;rope;"), 1);
  g.keep("rope;", 3);                          // drops "matmul;", the least recently used
  EXPECT_EQ(g.size(), 2u);
  EXPECT_EQ(g.find("matmul;"), nullptr);
  ASSERT_NE(g.find("rope;"), nullptr);
  const uint64_t updated = g.stats().updated;
  g.keep("rope;", 4, true);                    // its update failed: replaced
  EXPECT_EQ(*g.find("rope;"), 4);
  EXPECT_EQ(g.size(), 2u);
  EXPECT_EQ(g.stats().replaced, 1u);
  EXPECT_EQ(g.stats().updated, updated);  // the failed update is not counted, the last find is
  EXPECT_EQ(g.stats().instantiated, 4u);
  EXPECT_EQ(g.stats().evicted, 1u);
}

// With FAFO_CUDA_GRAPHS the backend captures each step whose shape ran before and runs
// it as a graph (the host device records the launches and in-step uploads and runs them
// at the step's end, as a GPU would): the logits and every strategy's ids are the bits
// of launching each kernel at once; decode steps reuse one graph, updated; after a step
// that throws inside, a download first runs what its capture recorded; a download
// inside a captured step is an error, not a stale read.
TEST(CudaEmulated, GraphsGiveTheBitsOfLaunchesOneByOne) {
  const std::shared_ptr<const fafo::GgufFile> file = small_test_model("cuda-graphs");
  const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
  using Backend = fafo::cuda::OpsBackend<fafo::cuda::HostDevice>;
  struct Run {
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<int32_t>> ids;
    fafo::cuda::GraphStats stats;
  };
  auto run = [&](bool graphs) {
    auto backend = std::make_unique<Backend>(std::make_unique<fafo::cuda::HostDevice>(), "cuda-emulated", "test",
                                             fafo::cuda::CudaKernels::Fast, true, graphs);
    const Backend* be = backend.get();
    EXPECT_EQ(be->description().find("CUDA graphs") != std::string::npos, graphs);
    fafo::ModelOptions mo;
    mo.n_ctx = 128;
    fafo::Model model(file, std::move(backend), mo);
    Run r;
    fafo::StepBatch prefill = fafo::StepBatch::causal({1, 45, 99, 7, 250, 31, 8}, 0);
    r.logits.push_back(model.forward(prefill));
    model.commit(prefill.size());
    for (int32_t t : {12, 200, 17, 9}) {
      fafo::StepBatch one = fafo::StepBatch::causal({t}, model.n_past());
      r.logits.push_back(model.forward(one));
      model.commit(1);
    }
    // A step that fails inside (a token outside the vocabulary: embed throws) while it
    // is captured: the calls after it are not captured into its graph.
    fafo::StepBatch bad = fafo::StepBatch::causal({100000}, model.n_past());
    EXPECT_ANY_THROW(model.forward(bad));
    fafo::Activation a = model.backend().alloc_activation(1, 4);
    EXPECT_NO_THROW(model.backend().read_rows(a, 1));  // runs the failed step's capture first
    fafo::StepBatch after = fafo::StepBatch::causal({5}, model.n_past());
    r.logits.push_back(model.forward(after));
    model.commit(1);
    const std::vector<int32_t> prompt = {1, 45, 99, 7, 250, 31, 8, 45, 99, 7, 250, 31};
    for (const fafo::Strategy s : {fafo::Strategy::Ar, fafo::Strategy::Lookahead, fafo::Strategy::Fafo}) {
      model.truncate(0);
      fafo::GenerationOptions o;
      o.n_predict = 20;
      o.sampling.temperature = 0;
      o.decoding.strategy = s;
      o.kv.name = s == fafo::Strategy::Fafo ? "snapkv" : "stream";
      o.kv.budget = 10;
      r.ids.push_back(fafo::generate(model, tokenizer, prompt, o).ids);
    }
    r.stats = be->graph_stats();
    return r;
  };
  const Run direct = run(false), graphs = run(true);
  ASSERT_EQ(direct.logits.size(), graphs.logits.size());
  for (size_t i = 0; i < direct.logits.size(); ++i) {
    ASSERT_EQ(direct.logits[i].size(), graphs.logits[i].size());
    EXPECT_EQ(std::memcmp(direct.logits[i].data(), graphs.logits[i].data(), direct.logits[i].size() * sizeof(float)), 0)
        << "step " << i;
  }
  EXPECT_EQ(direct.ids, graphs.ids);
  EXPECT_EQ(direct.stats.captured, 0u);
  EXPECT_GT(graphs.stats.captured, 20u);
  EXPECT_GT(graphs.stats.updated, 15u);  // decode steps replay one graph, updated
  EXPECT_LT(graphs.stats.instantiated, graphs.stats.captured / 2);

  fafo::cuda::HostDevice device;
  std::vector<float> a(4, 1.0f), b(4, 0.0f);
  device.begin_capture();
  EXPECT_THROW(device.download(b.data(), a.data(), sizeof(float) * 4), std::logic_error);
  EXPECT_THROW(device.sync(), std::logic_error);
  device.upload(b.data(), a.data(), sizeof(float) * 4);
  EXPECT_EQ(b[0], 0.0f);  // recorded, not run
  fafo::cuda::StepGraphs<fafo::cuda::HostDevice::Graph> kept;
  device.end_capture(kept);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(kept.size(), 1u);
}

// The warp kernels' fused products (the attention projections as one product with RoPE
// and the stores after it, the gate and up projections with the SwiGLU, each RMSNorm
// inside the product after it) give the logits of the ops apart, bit for bit: a
// prefill, single tokens and a multi-token step with a tree mask, fp32 and fp16 caches,
// GQA, and Qwen2's biases and NEOX rotation; and a policy's captured queries and FAFO's
// ids.
TEST(CudaEmulated, FusedProductsGiveTheBitsOfTheOpsApart) {
  for (const std::string arch : {"llama", "qwen2"}) {
    for (const fafo::KvCacheType kv : {fafo::KvCacheType::F32, fafo::KvCacheType::F16}) {
      SCOPED_TRACE(arch + (kv == fafo::KvCacheType::F16 ? " f16 cache" : " f32 cache"));
      fafo::synth::SyntheticConfig c;
      c.arch = arch;
      c.n_layer = 2, c.n_embd = 128, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 256, c.n_vocab = 300, c.n_ctx = 256;
      c.weight_type = arch == "llama" ? "Q8_0" : "F16";
      const std::string path = (fafo::test::temp_dir("cuda-fused-" + arch) / "m.gguf").string();
      fafo::synth::write_synthetic_model(c, path);
      const std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(path);
      const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
      auto open = [&](bool fuse) {
        fafo::ModelOptions o;
        o.n_ctx = 128;
        o.kv_type = kv;
        return std::make_unique<fafo::Model>(file, fafo::cuda::make_emulated_backend(fafo::cuda::CudaKernels::Fast, fuse), o);
      };
      auto steps = [&](fafo::Model& model) {
        EXPECT_EQ(fafo::fuses_qkv(model.backend(), fafo::TensorType::Q8_0, 128, 64, 128),
                  model.backend().description().find("fused") != std::string::npos);
        std::vector<std::vector<float>> logits;
        fafo::StepBatch prefill = fafo::StepBatch::causal({1, 45, 99, 7, 250, 31, 8}, 0);
        logits.push_back(model.forward(prefill));
        model.commit(prefill.size());
        for (int32_t t : {12, 200}) {
          fafo::StepBatch one = fafo::StepBatch::causal({t}, model.n_past());
          logits.push_back(model.forward(one));
          model.commit(1);
        }
        fafo::StepBatch tree;
        const int32_t n = model.n_past();
        tree.add(5, n, {}, true);
        tree.add(6, n + 1, {0}, true, fafo::PrefixView::Compressed);
        tree.add(7, n + 1, {0}, true);
        tree.add(8, n + 2, {0, 2}, true);
        tree.set_n_past(n);
        logits.push_back(model.forward(tree));
        return logits;
      };
      const auto fused = open(true), apart = open(false);
      const auto got = steps(*fused), want = steps(*apart);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].size(), want[i].size());
        EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0) << "step " << i;
      }
      const std::vector<int32_t> prompt = {1, 45, 99, 7, 250, 31, 8, 45, 99, 7, 250, 31};
      auto run = [&](fafo::Model& m) {
        m.truncate(0);
        fafo::GenerationOptions o;
        o.n_predict = 16;
        o.sampling.temperature = 0;
        o.decoding.strategy = fafo::Strategy::Fafo;
        o.kv.name = "snapkv";
        o.kv.budget = 8;
        std::vector<int32_t> ids = fafo::generate(m, tokenizer, prompt, o).ids;
        return std::make_pair(ids, m.kv_cache().captured_queries(1));
      };
      const auto [ids_fused, queries_fused] = run(*fused);
      const auto [ids_apart, queries_apart] = run(*apart);
      EXPECT_EQ(ids_fused, ids_apart);
      EXPECT_FALSE(queries_apart.empty());
      ASSERT_EQ(queries_fused.size(), queries_apart.size());
      EXPECT_EQ(std::memcmp(queries_fused.data(), queries_apart.data(), queries_fused.size() * sizeof(float)), 0);
    }
  }
}

// BackendProfiler::start_profile on the CUDA backend (here its host device, timing its loops; a
// GPU brackets each launch with events): per kernel the calls, seconds and the weight
// bytes of the products, over the steps run until take_profile.
TEST(CudaEmulated, AProfileCountsEachKernelsCallsTimeAndWeightBytes) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(model_path.string());
  fafo::ModelOptions mo;
  mo.n_ctx = 64;
  fafo::Model model(file, fafo::cuda::make_emulated_backend(fafo::cuda::CudaKernels::Fast), mo);
  fafo::StepBatch prefill = fafo::StepBatch::causal({1, 403, 261, 379}, 0);
  model.forward(prefill);  // not profiled
  model.commit(prefill.size());
  ASSERT_EQ(model.backend().profiler()->start_profile(), "");
  for (int32_t t : {285, 271}) {
    fafo::StepBatch one = fafo::StepBatch::causal({t}, model.n_past());
    model.forward(one);
    model.commit(1);
  }
  const fafo::KernelProfile p = model.backend().profiler()->take_profile();
  EXPECT_EQ(p.steps, 2u);
  uint64_t calls = 0;
  double bytes = 0;
  std::map<std::string, uint64_t> by_name;
  for (const fafo::KernelProfile::Kernel& k : p.kernels) {
    calls += k.calls;
    bytes += k.bytes;
    by_name[k.name] = k.calls;
    EXPECT_GE(k.seconds, 0.0) << k.name;
  }
  EXPECT_EQ(calls, p.dispatches);
  const int64_t layers = model.config().n_layer;
  EXPECT_EQ(by_name["attention"], static_cast<uint64_t>(2 * layers));
  EXPECT_EQ(by_name["matmul_swiglu"], static_cast<uint64_t>(2 * layers));  // gate and up fused, norm inside
  EXPECT_EQ(by_name.count("rms_norm"), 0u);
  // Every weight matrix is read once a step (the embedding's lookup is not counted; a
  // file without output.weight multiplies by the embedding table instead).
  double matrices = 0, table = 0;
  bool tied = true;
  for (const fafo::GgufTensor& t : file->tensors()) {
    if (t.shape.size() != 2) continue;
    if (t.name == "token_embd.weight") table = static_cast<double>(t.n_bytes);
    else matrices += static_cast<double>(t.n_bytes);
    if (t.name == "output.weight") tied = false;
  }
  if (tied) matrices += table;
  EXPECT_DOUBLE_EQ(bytes, 2 * matrices);
  EXPECT_GT(p.step_seconds, 0.0);
  EXPECT_TRUE(model.backend().profiler()->take_profile().kernels.empty());  // stopped
}

TEST(CudaEmulated, JoinedStepsGiveEachPartTheBitsOfItsStepAlone) {
  // Several sequences' steps as one step (one attention launch per part): each part's
  // results and stored keys and values equal its step alone (tests/joined_steps_check.h).
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(model_path.string());
  const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
  auto weights = std::make_shared<fafo::ModelWeights>(file, fafo::cuda::make_emulated_backend());
  fafo::test::check_joined_steps(weights, tokenizer);
}

#if FAFO_HAVE_VULKAN

using fafo::vulkan::Buffer;
using fafo::vulkan::CommandSequence;
using VulkanOrder = fafo::test::ValidatedVulkanSuite<fafo::vulkan::WeightKernels>;

Buffer upload(const fafo::vulkan::Context& ctx, const void* data, size_t bytes) {
  Buffer b(ctx, bytes);
  b.upload(data, bytes);
  return b;
}

TEST_F(VulkanOrder, RowDotGivesTheVulkanMatmulBitsForEveryFormat) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  for (const TensorType type : kFormats) {
    SCOPED_TRACE(name_of(type));
    const uint32_t cols = cols_for(type), rows = 6, T = 3;
    std::vector<uint8_t> bytes = test_rows(type, rows / 2, cols, 13);
    bytes.resize(fafo::vulkan::WeightKernels::weight_bytes(type, rows, cols), 0);
    std::vector<float> x(size_t{T} * cols);
    for (float& v : x) v = value(rng);
    const Buffer bw = upload(*context_, bytes.data(), bytes.size());
    const Buffer bx = upload(*context_, x.data(), x.size() * sizeof(float));
    const Buffer out(*context_, size_t{T} * rows * sizeof(float));
    CommandSequence seq(*context_);
    kernels_->matmul(seq, type, bw, bx, out, fafo::vulkan::MatmulShape{T, rows, cols, cols, rows, 0});
    seq.submit_and_wait();
    std::vector<float> device(size_t{T} * rows);
    out.download(device.data(), device.size() * sizeof(float));
    const size_t row_bytes = fafo::tensor_row_bytes(type, cols);
    // The device's multiply-add is fused or rounded (Vulkan allows both; lavapipe rounds):
    // every output must be the order's result in one of the two, the same one throughout.
    int fused = 0, rounded = 0;
    for (uint32_t t = 0; t < T; ++t)
      for (uint32_t r = 0; r < rows; ++r) {
        float with_fma = 0, without = 0;
        fafo::cuda::with_format(static_cast<uint32_t>(type), [&]<Format F>() {
          using fafo::cuda::MulAdd;
          with_fma = fafo::cuda::row_dot<F, MulAdd::Fused>(bytes.data() + r * row_bytes, &x[size_t{t} * cols], cols);
          without = fafo::cuda::row_dot<F, MulAdd::Rounded>(bytes.data() + r * row_bytes, &x[size_t{t} * cols], cols);
        });
        const uint32_t got = std::bit_cast<uint32_t>(device[size_t{t} * rows + r]);
        fused += got == std::bit_cast<uint32_t>(with_fma);
        rounded += got == std::bit_cast<uint32_t>(without);
        ASSERT_TRUE(got == std::bit_cast<uint32_t>(with_fma) || got == std::bit_cast<uint32_t>(without))
            << "token " << t << " row " << r << ": " << device[size_t{t} * rows + r] << " vs " << with_fma
            << " (fused) or " << without << " (rounded)";
      }
    EXPECT_TRUE(fused == static_cast<int>(T * rows) || rounded == static_cast<int>(T * rows))
        << fused << " outputs match the fused order, " << rounded << " the rounded one";
  }
}

// The Vulkan integer products (Kernels::quantize_rows, WeightKernels::matmul with
// MatmulVariant::int8) are the CUDA backend's: the rounded activations bit for bit
// (normalized first, those of rms_norm's rows: 2,560 columns, three workgroups a row)
// (exact halves x = (n + 1/2) d and their neighbours included: d = 1 for a block whose
// largest magnitude is 127; a zero block), and each product int_row_dot's order, with
// the device's multiply-add fused or rounded (the same one throughout), for every
// mapping (split rows portable and with subgroups where the device has them, whole
// rows; split rows also by the integer dot product instruction where the device has it:
// lavapipe does) and step sizes across tiles (1, 3, 9, 33); the gated form is the plain
// products' SwiGLU (Kernels::swiglu) and an accumulating one adds the product. Rows of
// 80 units (Q8_0, Q6_K) or 40 (Q4_K, Q5_K): lanes of one and of two units.
TEST_F(VulkanOrder, IntegerProductsGiveTheCudaBits) {
#if FAFO_SPIRV_DOT4
  EXPECT_EQ(kernels_->uses_dot(), context_->features().integer_dot_product);  // lavapipe has the feature
#else
  EXPECT_FALSE(kernels_->uses_dot());  // built without spirv-tools or python3: no such variants
#endif
  using fafo::vulkan::MatmulMapping;
  using fafo::vulkan::MatmulReduction;
  fafo::vulkan::Kernels kernels(*context_);
  fafo::cuda::HostDevice device;
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  const uint32_t cols = 2560, rows = 6, words = fafo::vulkan::Kernels::q8_row_words(cols), blocks = cols / 32;
  for (const TensorType type : {TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    SCOPED_TRACE(name_of(type));
    ASSERT_TRUE(fafo::vulkan::WeightKernels::has_int8(type));
    std::vector<uint8_t> bytes = test_rows(type, rows, cols, 21);  // 2 x rows: gate, then up
    const size_t row_bytes = fafo::tensor_row_bytes(type, cols);
    bytes.resize(fafo::vulkan::WeightKernels::weight_bytes(type, 2 * rows, cols), 0);  // gated: 2 x rows
    const Buffer bw = upload(*context_, bytes.data(), bytes.size());
    for (const uint32_t T : {1u, 3u, 9u, 33u}) {
      SCOPED_TRACE("T " + std::to_string(T));
      std::vector<float> x(size_t{T} * cols);
      for (float& v : x) v = value(rng);
      const float halves[] = {127.0f, 2.5f, -3.5f, 0.5f, -0.5f, 126.5f, 1.5f, -2.5f};
      for (uint32_t k = 0; k < 8; ++k) {
        x[k] = halves[k];
        x[8 + k] = k == 0 ? -127.0f : std::nextafter(halves[k], 0.0f);
        x[16 + k] = std::nextafter(halves[k], halves[k] < 0 ? -200.0f : 200.0f);
      }
      if (T > 1)
        for (uint32_t k = 0; k < 32; ++k) x[cols + 64 + k] = 0.0f;  // row 1, block 2
      // The rounding: the Vulkan kernel's words against QuantizeRowsOp's q, d and d sum.
      const Buffer bx = upload(*context_, x.data(), x.size() * sizeof(float));
      const Buffer bq(*context_, size_t{T} * words * 4);
      {
        CommandSequence seq(*context_);
        kernels.quantize_rows(seq, bx, bq, T, cols, cols);
        seq.submit_and_wait();
      }
      std::vector<uint32_t> q8(size_t{T} * words);
      bq.download(q8.data(), q8.size() * 4);
      std::vector<int8_t> cq(size_t{T} * cols);
      std::vector<float> cd(size_t{T} * blocks), cs(size_t{T} * blocks);
      const fafo::cuda::Q8Rows rounded{cq.data(), cd.data(), cs.data(), cols};
      device.launch_warp_fn(fafo::cuda::QuantizeRowsOp{x.data(), cols, nullptr, 0.0f, rounded},
                            fafo::cuda::QuantizeRowsOp::warps(T, cols), "quantize");
      for (uint32_t t = 0; t < T; ++t) {
        const uint32_t* row = q8.data() + size_t{t} * words;
        ASSERT_EQ(std::memcmp(row, cq.data() + size_t{t} * cols, cols), 0) << "q of row " << t;
        ASSERT_EQ(std::memcmp(row + cols / 4, cd.data() + size_t{t} * blocks, blocks * 4), 0) << "d of row " << t;
        ASSERT_EQ(std::memcmp(row + cols / 4 + blocks, cs.data() + size_t{t} * blocks, blocks * 4), 0) << "sums of row " << t;
      }
      // Normalized first (a gain): the bits of rms_norm's rows rounded (Vulkan's division
      // and square root may differ from CUDA's in the last bit, so the scale is compared
      // with Vulkan's own rms_norm: on lavapipe one row of the 46 here differs from the
      // host's by an ulp of its scale).
      {
        std::vector<float> gain(cols);
        for (float& g : gain) g = value(rng);
        const Buffer bg = upload(*context_, gain.data(), gain.size() * sizeof(float));
        const Buffer fused(*context_, size_t{T} * words * 4), apart(*context_, size_t{T} * words * 4),
            normed(*context_, x.size() * sizeof(float));
        CommandSequence seq(*context_);
        kernels.quantize_rows(seq, bx, fused, T, cols, cols, &bg, 1e-5f);
        kernels.rms_norm(seq, bx, bg, normed, T, cols, 1e-5f);
        kernels.quantize_rows(seq, normed, apart, T, cols, cols);
        seq.submit_and_wait();
        std::vector<uint32_t> f8(size_t{T} * words), a8(f8.size());
        fused.download(f8.data(), f8.size() * 4);
        apart.download(a8.data(), a8.size() * 4);
        ASSERT_EQ(f8, a8);
        EXPECT_NE(f8, q8);  // the norm did something
      }
      EXPECT_EQ(cd[0], 1.0f);
      EXPECT_EQ(cq[1], 2);  // 2.5: to even
      EXPECT_EQ(cq[2], -4);
      EXPECT_EQ(cq[9], 2);  // just below 2.5
      EXPECT_EQ(cq[17], 3);  // just above
      EXPECT_EQ(cq[10], -3);
      EXPECT_EQ(cq[18], -4);
      // The products, each mapping.
      std::vector<std::pair<MatmulMapping, MatmulReduction>> mappings = {{MatmulMapping::WholeRows, MatmulReduction::Auto},
                                                                        {MatmulMapping::SplitRows, MatmulReduction::Portable}};
      if (kernels_->has_subgroup_variant(1)) mappings.push_back({MatmulMapping::SplitRows, MatmulReduction::Subgroup});
      mappings.push_back({MatmulMapping::MatrixTiles, MatmulReduction::Auto});  // plain loops here
      std::vector<std::pair<MatmulMapping, MatmulReduction>> with_dot;  // split rows: also by the dot instruction
      if (kernels_->uses_dot())
        for (const auto& m : mappings)
          if (m.first == MatmulMapping::SplitRows) with_dot.push_back(m);
      const size_t plain = mappings.size();
      mappings.insert(mappings.end(), with_dot.begin(), with_dot.end());
      for (size_t k = 0; k < mappings.size(); ++k) {
        const auto [mapping, reduction] = mappings[k];
        const bool dot = k >= plain;
        if (dot && T > 16) continue;  // lavapipe takes ~40 s to compile the 32-token tile's (the GPU run has it)
        SCOPED_TRACE(std::string(mapping == MatmulMapping::WholeRows     ? "whole rows"
                                 : mapping == MatmulMapping::MatrixTiles ? "matrix tiles, plain loops"
                                 : reduction == MatmulReduction::Subgroup ? "subgroups"
                                                                          : "split rows") +
                     (dot ? ", dot instruction" : ""));
        fafo::vulkan::MatmulVariant variant;
        variant.mapping = mapping;
        variant.reduction = reduction;
        variant.int8 = true;
        if (mapping == MatmulMapping::SplitRows) variant.dot = dot;
        if (mapping == MatmulMapping::MatrixTiles) variant.matrix = false;
        const fafo::vulkan::MatmulShape shape{T, rows, cols, words, rows, 0};
        const Buffer out(*context_, size_t{T} * rows * 4), up(*context_, size_t{T} * rows * 4),
            gated(*context_, size_t{T} * rows * 4), silu(*context_, size_t{T} * rows * 4);
        std::vector<float> base(size_t{T} * rows);
        for (float& v : base) v = value(rng);
        const Buffer sum = upload(*context_, base.data(), base.size() * 4);
        {
          CommandSequence seq(*context_);
          kernels_->matmul(seq, type, bw, bq, out, shape, variant);
          fafo::vulkan::MatmulShape add = shape;
          add.accumulate = true;
          kernels_->matmul(seq, type, bw, bq, sum, add, variant);
          seq.submit_and_wait();
        }
        {
          // The up projection's rows (rows .. 2 rows - 1 of the weight) alone, then the gated product.
          const Buffer bu = upload(*context_, bytes.data() + rows * row_bytes, bytes.size() - rows * row_bytes);
          CommandSequence seq(*context_);
          kernels_->matmul(seq, type, bu, bq, up, shape, variant);
          kernels_->matmul_gated(seq, type, bw, bq, gated, shape, variant);
          kernels.swiglu(seq, out, up, silu, T * rows);
          seq.submit_and_wait();
        }
        std::vector<float> got(size_t{T} * rows), with_sum(got.size()), got_gated(got.size()), want_gated(got.size());
        out.download(got.data(), got.size() * 4);
        sum.download(with_sum.data(), with_sum.size() * 4);
        gated.download(got_gated.data(), got_gated.size() * 4);
        silu.download(want_gated.data(), want_gated.size() * 4);
        int fused = 0, twice = 0;
        for (uint32_t t = 0; t < T; ++t)
          for (uint32_t r = 0; r < rows; ++r) {
            float with_fma = 0, without = 0;
            fafo::cuda::with_format(static_cast<uint32_t>(type), [&]<Format F>() {
              if constexpr (fafo::cuda::has_int_product<F>) {
                using fafo::cuda::MulAdd;
                with_fma = fafo::cuda::int_row_dot<F, MulAdd::Fused>(bytes.data() + r * row_bytes, rounded, t);
                without = fafo::cuda::int_row_dot<F, MulAdd::Rounded>(bytes.data() + r * row_bytes, rounded, t);
              }
            });
            const size_t i = size_t{t} * rows + r;
            const uint32_t g = std::bit_cast<uint32_t>(got[i]);
            fused += g == std::bit_cast<uint32_t>(with_fma);
            twice += g == std::bit_cast<uint32_t>(without);
            ASSERT_TRUE(g == std::bit_cast<uint32_t>(with_fma) || g == std::bit_cast<uint32_t>(without))
                << "token " << t << " row " << r << ": " << got[i] << " vs " << with_fma << " (fused) or " << without;
            ASSERT_EQ(std::bit_cast<uint32_t>(with_sum[i]), std::bit_cast<uint32_t>(base[i] + got[i])) << i;
            ASSERT_EQ(std::bit_cast<uint32_t>(got_gated[i]), std::bit_cast<uint32_t>(want_gated[i])) << i;
          }
        EXPECT_TRUE(fused == static_cast<int>(T * rows) || twice == static_cast<int>(T * rows))
            << fused << " outputs match the fused order, " << twice << " the rounded one";
      }
    }
  }
}

// The matrix tiles (shaders/matmul_tiles.comp; here their plain-loop form, on a GPU with
// cooperative matrices also the instructions) give the whole-rows integer products' bits
// (IntegerProductsGiveTheCudaBits ties those to CUDA's) for every shape a tile meets:
// several row blocks and a last partial one, token tiles of 32 with a partial last one,
// a grid of one workgroup looping over all (max_groups_x/y = 1), rows with fewer units
// than lanes (Q4_K: 12 units) and with more (Q8_0, Q6_K: 40), gated products whose rows
// cross a block, and a product added to what out holds.
TEST_F(VulkanOrder, MatrixTilesGiveTheOtherMappingsBitsForEveryShape) {
  using fafo::vulkan::MatmulMapping;
  fafo::vulkan::Kernels kernels(*context_);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  std::vector<bool> forms = {false};  // plain loops
  if (context_->features().int8_matrix) forms.push_back(true);
  {
    // Misuse: a clear error naming what is missing.
    const Buffer b(*context_, 1 << 16);
    const fafo::vulkan::MatmulShape shape{9, 4, 256, fafo::vulkan::Kernels::q8_row_words(256), 4, 0};
    auto message = [&](fafo::vulkan::MatmulVariant v, TensorType type) {
      CommandSequence seq(*context_);
      try {
        kernels_->matmul(seq, type, b, b, b, shape, v);
      } catch (const std::invalid_argument& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    fafo::vulkan::MatmulVariant v;
    v.mapping = MatmulMapping::MatrixTiles;
    EXPECT_NE(message(v, TensorType::Q4_K).find("is for integer products"), std::string::npos);
    v.int8 = true;
    EXPECT_NE(message(v, TensorType::Q4_0).find("no integer products for Q4_0"), std::string::npos);
    v.tile = 16;
    EXPECT_NE(message(v, TensorType::Q4_K).find("tiles of 32 tokens, not 16"), std::string::npos);
    v.tile = 0;
    v.matrix = true;
    if (!context_->features().int8_matrix) {
      EXPECT_NE(message(v, TensorType::Q4_K).find("no 8-bit cooperative-matrix instructions"), std::string::npos);
    }
    v.mapping = MatmulMapping::SplitRows;
    EXPECT_NE(message(v, TensorType::Q4_K).find("MatmulVariant::matrix is for the MatrixTiles mapping"),
              std::string::npos);
  }
  for (const TensorType type : {TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    SCOPED_TRACE(name_of(type));
    const uint32_t cols = type == TensorType::Q8_0 || type == TensorType::Q6_K ? 1280 : 768;
    const uint32_t words = fafo::vulkan::Kernels::q8_row_words(cols), max_rows = 130, max_T = 70;
    std::vector<uint8_t> bytes = test_rows(type, max_rows / 2, cols, 31);
    bytes.resize(fafo::vulkan::WeightKernels::weight_bytes(type, max_rows, cols), 0);
    const Buffer bw = upload(*context_, bytes.data(), bytes.size());
    std::vector<float> x(size_t{max_T} * cols);
    for (float& v : x) v = value(rng);
    const Buffer bx = upload(*context_, x.data(), x.size() * sizeof(float));
    const Buffer bq(*context_, size_t{max_T} * words * 4);
    {
      CommandSequence seq(*context_);
      kernels.quantize_rows(seq, bx, bq, max_T, cols, cols);
      seq.submit_and_wait();
    }
    struct Case {
      uint32_t rows, T;
      bool gated, accumulate, one_group;
    };
    const Case cases[] = {{1, 9, false, false, false},   {65, 32, false, false, false}, {130, 70, false, false, false},
                          {130, 33, false, true, false}, {65, 70, false, false, true},  {33, 40, true, false, false},
                          {33, 70, true, false, true}};
    for (const Case& c : cases) {
      for (const bool matrix : forms) {
        SCOPED_TRACE("rows " + std::to_string(c.rows) + " T " + std::to_string(c.T) + (c.gated ? " gated" : "") +
                     (c.accumulate ? " accumulate" : "") + (c.one_group ? " one workgroup" : "") +
                     (matrix ? ", cooperative matrix" : ", plain loops"));
        const fafo::vulkan::MatmulShape shape{c.T, c.rows, cols, words, c.rows + 3, 1, c.accumulate};
        const size_t n = size_t{c.T} * (c.rows + 3) + 1;
        std::vector<float> base(n);
        for (float& v : base) v = value(rng);
        const Buffer want = upload(*context_, base.data(), n * 4), got = upload(*context_, base.data(), n * 4);
        fafo::vulkan::MatmulVariant whole;
        whole.mapping = MatmulMapping::WholeRows;
        whole.int8 = true;
        fafo::vulkan::MatmulVariant tiles;
        tiles.mapping = MatmulMapping::MatrixTiles;
        tiles.int8 = true;
        tiles.matrix = matrix;
        if (c.one_group) tiles.max_groups_x = tiles.max_groups_y = 1;
        CommandSequence seq(*context_);
        if (c.gated) {
          kernels_->matmul_gated(seq, type, bw, bq, want, shape, whole);
          kernels_->matmul_gated(seq, type, bw, bq, got, shape, tiles);
        } else {
          kernels_->matmul(seq, type, bw, bq, want, shape, whole);
          kernels_->matmul(seq, type, bw, bq, got, shape, tiles);
        }
        seq.submit_and_wait();
        std::vector<uint32_t> w(n), g(n);
        want.download(w.data(), n * 4);
        got.download(g.data(), n * 4);
        size_t written = 0;
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(g[i], w[i]) << "word " << i << ": " << std::bit_cast<float>(g[i]) << " vs "
                                << std::bit_cast<float>(w[i]);
          written += w[i] != std::bit_cast<uint32_t>(base[i]);
        }
        // Every output written (a product of a zero row may leave an accumulated one as it
        // was), and, above, nothing else.
        EXPECT_GE(written, size_t{c.T} * c.rows * 99 / 100);
      }
    }
  }
}

TEST_F(VulkanOrder, RmsNormGivesTheVulkanKernelsBits) {
  fafo::vulkan::Kernels kernels(*context_);
  std::mt19937 rng(6);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  for (const uint32_t n : {64u, 1007u, 2048u}) {
    const uint32_t rows = 3;
    std::vector<float> x(size_t{rows} * n), gain(n);
    for (float& v : x) v = value(rng);
    for (float& v : gain) v = value(rng);
    const Buffer bx = upload(*context_, x.data(), x.size() * sizeof(float));
    const Buffer bg = upload(*context_, gain.data(), gain.size() * sizeof(float));
    const Buffer out(*context_, x.size() * sizeof(float));
    CommandSequence seq(*context_);
    kernels.rms_norm(seq, bx, bg, out, rows, n, 1e-5f);
    seq.submit_and_wait();
    std::vector<float> device(x.size());
    out.download(device.data(), device.size() * sizeof(float));
    for (uint32_t r = 0; r < rows; ++r) {
      const float* row = &x[size_t{r} * n];
      float sums[fafo::cuda::kLanes];
      for (uint32_t l = 0; l < fafo::cuda::kLanes; ++l) sums[l] = fafo::cuda::lane_sum_squares(row, n, l);
      const float scale = fafo::cuda::rms_scale(fafo::cuda::tree32(sums), n, 1e-5f);
      for (uint32_t c = 0; c < n; ++c) {
        const float host = fafo::cuda::rms_apply(row[c], scale, gain[c]);
        ASSERT_EQ(std::bit_cast<uint32_t>(host), std::bit_cast<uint32_t>(device[size_t{r} * n + c]))
            << "n " << n << " row " << r << " column " << c;
      }
    }
  }
}

#endif  // FAFO_HAVE_VULKAN

}  // namespace
