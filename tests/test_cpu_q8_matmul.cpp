// The cpu backend's integer matrix product (backend/cpu/q8_matmul.h): activations are
// rounded to 8 bits per block as documented, and the product of a weight row with the
// rounded activations is exact up to float rounding (checked against a float64 sum over
// the reference's dequantized weights), on every instruction set, and the same bits for
// every step size.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/q8_groups.h"
#include "backend/cpu/q8_matmul.h"
#include "backend/cpu/simd_matmul.h"
#include "fafo/backend.h"
#include "fafo/tensor_type.h"
#include "quant/blocks.h"
#include "random_weights.h"
#include "test_support.h"

using namespace fafo;

namespace {

struct Matrix {
  TensorType type;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> dequantized;  // the reference's floats, row by row
  std::vector<uint8_t> groups;     // the rows in groups of 8 (q8_groups.h), for the formats that have them
  // The file's rows, or (grouped) the groups the cpu backend makes at load.
  host::HostWeight weight(bool grouped = false) const {
    return host::HostWeight{type, rows, cols, bytes.data(), tensor_row_bytes(type, cols), grouped ? groups.data() : nullptr};
  }
  // Both ways of reading the matrix where it has groups, else the file's rows.
  std::vector<bool> layouts() const { return groups.empty() ? std::vector<bool>{false} : std::vector<bool>{false, true}; }
};

Matrix random_matrix(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  Matrix m{type, rows, cols, {}, {}, {}};
  const size_t row_bytes = tensor_row_bytes(type, cols);
  m.bytes.resize(row_bytes * static_cast<size_t>(rows));
  m.dequantized.resize(static_cast<size_t>(rows * cols));
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = 0.1f + static_cast<float>(r % 7);  // rows of different magnitudes
    for (auto& v : row) v = normal(rng) * scale;
    test::quantize_for_test(type, row.data(), m.bytes.data() + static_cast<size_t>(r) * row_bytes, cols);
    dequantize_row(type, m.bytes.data() + static_cast<size_t>(r) * row_bytes, m.dequantized.data() + r * cols, cols);
  }
  m.groups = cpu::group_rows(m.weight());
  return m;
}

// T activation rows: Gaussian, one all zeros, one with a single large value per block.
std::vector<float> activations(int64_t T, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T * cols));
  for (auto& v : x) v = normal(rng);
  if (T > 2) {
    for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(cols + c)] = 0.0f;
    for (int64_t c = 0; c < cols; c += 32) x[static_cast<size_t>(2 * cols + c)] = 1000.0f;
  }
  return x;
}

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

const TensorType kTypes[] = {TensorType::Q4_K,    TensorType::Q5_K,   TensorType::Q6_K,    TensorType::Q8_0,
                             TensorType::Q4_0,    TensorType::Q4_1,   TensorType::Q5_0,    TensorType::Q5_1,
                             TensorType::IQ4_NL,  TensorType::IQ4_XS, TensorType::MXFP4,   TensorType::IQ2_XXS,
                             TensorType::IQ2_XS,  TensorType::IQ3_XXS, TensorType::IQ3_S};

// Formats of 32-value blocks: activation blocks of 32 where the row is not a multiple of 256.
bool legacy(TensorType type) { return tensor_type_info(type).block_size == 32; }

// T rows of x (w.cols floats each) rounded to 8 bits for w, and w's product over them on
// the current instruction set (out[t * w.rows + r]).
struct RoundedProduct {
  cpu::QuantizedActivations q;
  std::vector<float> out;
};
RoundedProduct rounded_product(const host::HostWeight& w, const std::vector<float>& x, int64_t T) {
  RoundedProduct p;
  p.q.resize(T, w.cols, cpu::q8_activation_block(w.type, w.cols));
  cpu::quantize_activations(x.data(), w.cols, 0, T, p.q);
  p.out.resize(static_cast<size_t>(T * w.rows));
  cpu::q8_matmul_rows(w, 0, w.rows, p.q, p.out.data(), w.rows);
  return p;
}

}  // namespace

TEST(CpuQ8Matmul, ActivationsRoundToEightBitsPerBlock) {
  const int64_t T = 4, cols = 512;
  const std::vector<float> x = activations(T, cols, 1);
  for (const int64_t block : {int64_t{32}, int64_t{256}}) {
    cpu::QuantizedActivations q;
    q.resize(T, cols, block);
    cpu::quantize_activations(x.data(), cols, 0, T, q);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t b = 0; b < cols / block; ++b) {
        float amax = 0.0f;
        for (int64_t i = 0; i < block; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(t * cols + b * block + i)]));
        const float d = q.d[static_cast<size_t>(t * (cols / block) + b)];
        EXPECT_FLOAT_EQ(d, amax / 127.0f) << "row " << t << " block " << b;
        for (int64_t i = 0; i < block; ++i) {
          const int64_t c = b * block + i;
          const int v = q.q[static_cast<size_t>(t * cols + c)];
          EXPECT_LE(std::abs(v), 127);
          EXPECT_LE(std::fabs(x[static_cast<size_t>(t * cols + c)] - v * d), 0.5f * d * 1.0001f + 1e-30f) << c;
        }
      }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < cols / 16; ++i) {
        int32_t s = 0;
        for (int64_t j = 0; j < 16; ++j) s += q.q[static_cast<size_t>(t * cols + 16 * i + j)];
        EXPECT_EQ(q.sums16[static_cast<size_t>(t * (cols / 16) + i)], s);
      }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < cols / 32; ++i) {
        int32_t s = 0;
        for (int64_t j = 0; j < 32; ++j) s += q.q[static_cast<size_t>(t * cols + 32 * i + j)];
        EXPECT_EQ(q.sums32[static_cast<size_t>(t * (cols / 32) + i)],
                  static_cast<float>(s) * q.d[static_cast<size_t>(t * (cols / block) + 32 * i / block)]);
      }
  }
}

TEST(CpuQ8Matmul, ProductsAreExactOverTheRoundedActivationsOnEveryInstructionSet) {
  const int64_t rows = 37, T = 9;
  cpu::use_simd_target("");
  for (const std::string& target : cpu::simd_targets()) {
    cpu::use_simd_target(target);
    for (const TensorType type : kTypes)
    for (const int64_t cols : {int64_t{96}, int64_t{512}}) {  // 32-value formats: activation blocks of 32, then 256
      if (!legacy(type) && cols == 96) continue;
      const Matrix m = random_matrix(type, rows, cols, 7);
      const std::vector<float> x = activations(T, cols, 3);
      cpu::QuantizedActivations q;
      q.resize(T, cols, cpu::q8_activation_block(type, cols));
      cpu::quantize_activations(x.data(), cols, 0, T, q);
      for (const bool grouped : m.layouts()) {
      SCOPED_TRACE(grouped ? "rows in groups" : "the file's rows");
      std::vector<float> out(static_cast<size_t>(T * rows));
      cpu::q8_matmul_rows(m.weight(grouped), 0, rows, q, out.data(), rows);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          double want = 0.0, magnitude = 0.0;
          for (int64_t c = 0; c < cols; ++c) {
            const double xv = static_cast<double>(q.q[static_cast<size_t>(t * cols + c)]) *
                              q.d[static_cast<size_t>(t * (cols / q.block) + c / q.block)];
            want += m.dequantized[static_cast<size_t>(r * cols + c)] * xv;
            magnitude += std::fabs(m.dequantized[static_cast<size_t>(r * cols + c)] * xv);
          }
          const float got = out[static_cast<size_t>(t * rows + r)];
          EXPECT_NEAR(got, want, 2e-6 * magnitude + 1e-30)
              << target << " " << tensor_type_name(type) << " row " << r << " token " << t;
        }
      // Against the float activations the error is the rounding's: small next to the sum.
      for (int64_t r = 0; r < rows; ++r) {
        double want = 0.0, magnitude = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
          want += static_cast<double>(m.dequantized[static_cast<size_t>(r * cols + c)]) * x[static_cast<size_t>(c)];
          magnitude += std::fabs(static_cast<double>(m.dequantized[static_cast<size_t>(r * cols + c)]) * x[static_cast<size_t>(c)]);
        }
        EXPECT_NEAR(out[static_cast<size_t>(r)], want, 0.02 * magnitude) << tensor_type_name(type) << " row " << r;
      }
      }
    }
  }
  cpu::use_simd_target("");
}

TEST(CpuQ8Matmul, EveryStepSizeGivesTheSameBitsOnEveryInstructionSet) {
  // Small steps (up to 4 or 8 tokens, by instruction set) read the weights from the file
  // row by row against all their tokens, larger ones by panels and token tiles with a
  // smaller last tile: a row's result must not depend on which, nor on the other rows.
  const int64_t rows = 70, T = 19;
  for (const std::string& target : cpu::simd_targets()) {
    cpu::use_simd_target(target);
    for (const TensorType type : kTypes)
    for (const int64_t cols : {int64_t{512}, int64_t{96}}) {  // 32-value formats at 96: activation blocks of 32
      if (!legacy(type) && cols == 96) continue;
      const Matrix m = random_matrix(type, rows, cols, 11);
      const std::vector<float> x = activations(T, cols, 5);
      cpu::QuantizedActivations q;
      q.resize(T, cols, cpu::q8_activation_block(type, cols));
      cpu::quantize_activations(x.data(), cols, 0, T, q);
      for (const bool grouped : m.layouts()) {
        SCOPED_TRACE(grouped ? "rows in groups" : "the file's rows");
        const host::HostWeight w = m.weight(grouped);
        std::vector<float> all(static_cast<size_t>(T * rows));
        cpu::q8_matmul_rows(w, 0, rows, q, all.data(), rows);
        for (int64_t n = 1; n < T; ++n) {
          cpu::QuantizedActivations part;
          part.resize(n, cols, cpu::q8_activation_block(type, cols));
          cpu::quantize_activations(x.data(), cols, 0, n, part);
          std::vector<float> out(static_cast<size_t>(n * rows));
          // In two ranges of rows, split inside a group of 8.
          cpu::q8_matmul_rows(w, 0, 13, part, out.data(), rows);
          cpu::q8_matmul_rows(w, 13, rows, part, out.data(), rows);
          for (int64_t i = 0; i < n * rows; ++i)
            ASSERT_EQ(float_bits(out[static_cast<size_t>(i)]), float_bits(all[static_cast<size_t>(i)]))
                << target << " " << tensor_type_name(type) << " T=" << n << " token " << i / rows << " row " << i % rows;
        }
      }
    }
  }
  cpu::use_simd_target("");
}

TEST(CpuQ8Matmul, NonFiniteActivationsGiveNaNInTheirRowOnly) {
  const int64_t rows = 5, T = 3, cols = 256;
  for (const TensorType type : {TensorType::Q4_K, TensorType::Q5_1, TensorType::Q4_0})  // Q5_1: through its mins too
  for (const bool grouped : {false, true}) {  // Q4_0: its rows in groups too
    if (grouped && type != TensorType::Q4_0) continue;
    SCOPED_TRACE(std::string(tensor_type_name(type)) + (grouped ? " in groups" : ""));
    const Matrix m = random_matrix(type, rows, cols, 2);
    std::vector<float> x = activations(T, cols, 9);
    x[static_cast<size_t>(cols + 17)] = std::numeric_limits<float>::infinity();
    x[static_cast<size_t>(2 * cols + 200)] = std::numeric_limits<float>::quiet_NaN();
    cpu::QuantizedActivations q;
    q.resize(T, cols, 256);
    cpu::quantize_activations(x.data(), cols, 0, T, q);
    std::vector<float> out(static_cast<size_t>(T * rows));
    cpu::q8_matmul_rows(m.weight(grouped), 0, rows, q, out.data(), rows);
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_TRUE(std::isfinite(out[static_cast<size_t>(r)]));
      EXPECT_TRUE(std::isnan(out[static_cast<size_t>(rows + r)]));
      EXPECT_TRUE(std::isnan(out[static_cast<size_t>(2 * rows + r)]));
    }
  }
}

TEST(CpuQ8Matmul, ActivationsRoundedForAnotherFormatAreRefused) {
  const Matrix m = random_matrix(TensorType::Q8_0, 3, 256, 1);
  cpu::QuantizedActivations q;
  q.resize(1, 256, 32);  // Q8_0 rows of 256 values take one activation block of 256
  std::vector<float> out(3);
  EXPECT_THROW(cpu::q8_matmul_rows(m.weight(), 0, 3, q, out.data(), 3), std::logic_error);
  EXPECT_EQ(cpu::q8_activation_block(TensorType::F16, 256), 0);
  EXPECT_EQ(cpu::q8_activation_block(TensorType::Q4_K, 256), 256);
  EXPECT_EQ(cpu::q8_activation_block(TensorType::Q8_0, 512), 256);
  EXPECT_EQ(cpu::q8_activation_block(TensorType::Q8_0, 96), 32);
  EXPECT_EQ(cpu::q8_activation_block(TensorType::Q5_0, 1152), 32);  // Gemma 3 1B's rows
  EXPECT_EQ(cpu::q8_activation_block(TensorType::Q5_0, 512), 256);
  EXPECT_EQ(cpu::q8_activation_block(TensorType::Q5_1, 1152), 32);  // Gemma 3 1B's Q5_K_M rows
  EXPECT_EQ(cpu::q8_activation_block(TensorType::Q4_0, 4096), 256);
  EXPECT_EQ(cpu::q8_activation_block(TensorType::Q4_1, 96), 32);
}

TEST(CpuQ8Matmul, VnnisQuadProductsGiveTheBitsOfThePairProducts) {
  // With VNNI (AVX3_DL) the 32-value formats of signed values sum four products into a
  // 32-bit lane in one instruction (vpdpbusd); AVX3 sums the same four in pairs of 16
  // bits, then the pairs. Each lane holds the same integer either way, so the results
  // must be the same bits.
  const std::vector<std::string> targets = cpu::simd_targets();
  if (std::find(targets.begin(), targets.end(), "AVX3_DL") == targets.end() ||
      std::find(targets.begin(), targets.end(), "AVX3") == targets.end())
    GTEST_SKIP() << "this CPU has no AVX-512 with VNNI";
  const int64_t rows = 19, T = 11;
  for (const TensorType type : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q5_0, TensorType::IQ4_NL, TensorType::MXFP4})
    for (const int64_t cols : {int64_t{96}, int64_t{512}}) {
      SCOPED_TRACE(std::string(tensor_type_name(type)) + " cols " + std::to_string(cols));
      const Matrix m = random_matrix(type, rows, cols, 13);
      std::vector<float> x = activations(T, cols, 17);
      x[5] = 1000.0f;  // a block whose largest value rounds to 127
      x[static_cast<size_t>(cols + 7)] = -1000.0f;  // ... and to -127
      cpu::QuantizedActivations q;
      q.resize(T, cols, cpu::q8_activation_block(type, cols));
      cpu::quantize_activations(x.data(), cols, 0, T, q);
      for (const bool grouped : m.layouts()) {
        SCOPED_TRACE(grouped ? "rows in groups" : "the file's rows");
        std::vector<float> pairs(static_cast<size_t>(T * rows)), vnni(pairs.size());
        cpu::use_simd_target("AVX3");
        cpu::q8_matmul_rows(m.weight(grouped), 0, rows, q, pairs.data(), rows);
        cpu::use_simd_target("AVX3_DL");
        cpu::q8_matmul_rows(m.weight(grouped), 0, rows, q, vnni.data(), rows);
        cpu::use_simd_target("");
        for (size_t i = 0; i < pairs.size(); ++i)
          ASSERT_EQ(float_bits(vnni[i]), float_bits(pairs[i])) << "token " << i / rows << " row " << i % rows;
      }
    }
}

TEST(CpuQ8Matmul, GroupsReadEveryMxfp4Exponent) {
  // MXFP4's scale 2^(e - 129) is made from the exponent byte in vector lanes where the
  // rows are in groups (e = 0 and 1 give subnormal floats, 254 overflows the product).
  // One block per row, so each output is the block's integer sum times (d * dx): the same
  // bits as those three numbers multiplied here.
  const int64_t rows = 8, cols = 32;
  const uint8_t exponents[rows] = {0, 1, 2, 3, 100, 127, 128, 254};
  const size_t row_bytes = tensor_row_bytes(TensorType::MXFP4, cols);
  std::vector<uint8_t> bytes(row_bytes * rows);
  std::mt19937 rng(4);
  for (int64_t r = 0; r < rows; ++r) {
    bytes[static_cast<size_t>(r) * row_bytes] = exponents[r];
    for (size_t i = 1; i < row_bytes; ++i) bytes[static_cast<size_t>(r) * row_bytes + i] = static_cast<uint8_t>(rng());
  }
  host::HostWeight w{TensorType::MXFP4, rows, cols, bytes.data(), row_bytes, nullptr};
  const std::vector<uint8_t> groups = cpu::group_rows(w);
  ASSERT_EQ(groups.size(), static_cast<size_t>(cpu::group_block_bytes(1, 16)));
  w.groups = groups.data();
  const std::vector<float> x = activations(1, cols, 8);
  for (const std::string& target : cpu::simd_targets()) {
    cpu::use_simd_target(target);
    cpu::QuantizedActivations q;
    q.resize(1, cols, cpu::q8_activation_block(TensorType::MXFP4, cols));
    cpu::quantize_activations(x.data(), cols, 0, 1, q);
    std::vector<float> out(rows);
    cpu::q8_matmul_rows(w, 0, rows, q, out.data(), rows);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* qs = bytes.data() + static_cast<size_t>(r) * row_bytes + 1;
      int32_t sum = 0;
      for (int64_t j = 0; j < 16; ++j)
        sum += quant::kMxfp4Values[qs[j] & 0x0f] * q.q[static_cast<size_t>(j)] +
               quant::kMxfp4Values[qs[j] >> 4] * q.q[static_cast<size_t>(j + 16)];
      const float want = static_cast<float>(sum) * (quant::e8m0_half_to_fp32(exponents[r]) * q.d[0]);
      EXPECT_EQ(float_bits(out[static_cast<size_t>(r)]), float_bits(want))
          << target << " e " << int{exponents[r]} << ": " << out[static_cast<size_t>(r)] << " against " << want;
    }
  }
  cpu::use_simd_target("");
}

// Q4_K's or Q5_K's rows in groups keep each sub-block's 6-bit scale and min unpacked and
// its codes (Q5_K: and their fifth bits) in chunks. Random bytes everywhere (every scale,
// min, code and fifth bit), two super-blocks per row of which one has d = dmin = 0, and in
// the other either dmin = 0 (the output is the exact integer sum of scale x products
// times d * dx) or d = 0 (minus the exact sum of min x activation sums times dmin * dx):
// the same bits as computed here, on every instruction set. 13 rows: the second group is
// partly past the matrix's end.
namespace {
template <class Block>
void groups_read_every_k4_scale_and_min(TensorType type, int64_t group_block_bytes) {
  constexpr bool kFifthBits = std::is_same_v<Block, quant::BlockQ5_K>;
  const int64_t rows = 13, cols = 512;
  const size_t row_bytes = tensor_row_bytes(type, cols);
  ASSERT_EQ(row_bytes, 2 * sizeof(Block));
  const std::vector<float> x = activations(3, cols, 21);
  for (const bool mins : {false, true})
  for (const int64_t used : {0, 1}) {  // the super-block that holds the values; the other's d and dmin are 0
    SCOPED_TRACE((mins ? "d = 0: the mins" : "dmin = 0: the scales and codes") + std::string(", super-block ") +
                 std::to_string(used));
    std::vector<uint8_t> bytes(row_bytes * rows);
    std::mt19937 rng(mins ? 5 : 6);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < 2; ++b) {
        auto* block = reinterpret_cast<Block*>(bytes.data() + static_cast<size_t>(r) * row_bytes) + b;
        const uint16_t half = static_cast<uint16_t>(0x2000 + (rng() & 0x0fff));  // finite, 2^-7 .. 2^-5
        block->d = mins || b != used ? 0 : half;
        block->dmin = mins && b == used ? half : 0;
      }
    host::HostWeight w{type, rows, cols, bytes.data(), row_bytes, nullptr};
    const std::vector<uint8_t> groups = cpu::group_rows(w);
    ASSERT_EQ(groups.size(), static_cast<size_t>(2 * 2 * group_block_bytes));
    w.groups = groups.data();
    for (const std::string& target : cpu::simd_targets()) {
      cpu::use_simd_target(target);
      const int64_t T = 3;
      const auto [q, out] = rounded_product(w, x, T);
      for (int64_t r = 0; r < rows; ++r) {
        const auto* block = reinterpret_cast<const Block*>(bytes.data() + static_cast<size_t>(r) * row_bytes) + used;
        uint8_t scale[8], min[8];
        quant::unpack_scales_mins_k4(block->scales, scale, min);
        for (int64_t t = 0; t < T; ++t) {
          const int8_t* xq = q.q.data() + t * cols + used * 256;
          int32_t sum = 0;
          for (int64_t j = 0; j < 8; ++j) {
            int32_t sub = 0, xsum = 0;
            for (int64_t l = 0; l < 32; ++l) {
              const uint8_t byte = block->qs[32 * (j / 2) + l];
              int32_t code = (j & 1) ? byte >> 4 : byte & 0x0f;
              if constexpr (kFifthBits) code += ((block->qh[l] >> j) & 1) * 16;
              sub += code * xq[32 * j + l];
              xsum += xq[32 * j + l];
            }
            sum += mins ? min[j] * xsum : scale[j] * sub;
          }
          const float dx = q.d[static_cast<size_t>(t * 2 + used)];
          // (From +0, as the kernel's sums start and the other super-block leaves them: a
          // zero product gives +0.)
          const float want = mins ? 0.0f - static_cast<float>(sum) * (fp16_to_fp32(block->dmin) * dx)
                                  : 0.0f + static_cast<float>(sum) * (fp16_to_fp32(block->d) * dx);
          EXPECT_EQ(float_bits(out[static_cast<size_t>(t * rows + r)]), float_bits(want))
              << target << " row " << r << " token " << t << ": " << out[static_cast<size_t>(t * rows + r)] << " against "
              << want;
        }
      }
    }
    cpu::use_simd_target("");
  }
}
}  // namespace

TEST(CpuQ8Matmul, GroupsReadEveryQ4KScaleAndMin) {
  groups_read_every_k4_scale_and_min<quant::BlockQ4_K>(TensorType::Q4_K, cpu::kK4GroupBlockBytes);
}

TEST(CpuQ8Matmul, GroupsReadEveryQ5KScaleMinAndFifthBit) {
  groups_read_every_k4_scale_and_min<quant::BlockQ5_K>(TensorType::Q5_K, cpu::kK5GroupBlockBytes);
}

TEST(CpuQ8Matmul, GroupsSumTheLargestCodesWithoutOverflow) {
  // Every code at its largest (Q4_K 15, Q5_K 31), every scale 63, against activations all
  // at +127 or all at -127: the 16-bit sums inside each sub-block are at their bounds
  // (30,480 and 31,496; Q5_K's chunks summed 8 at a time would wrap), and the output is the
  // exact integer sum times d * dx, on every instruction set.
  const int64_t rows = 8, cols = 256, T = 2;
  std::vector<float> x(static_cast<size_t>(T * cols), 1.0f);
  std::fill(x.begin() + cols, x.end(), -1.0f);
  for (const TensorType type : {TensorType::Q4_K, TensorType::Q5_K}) {
    SCOPED_TRACE(tensor_type_name(type));
    const size_t row_bytes = tensor_row_bytes(type, cols);
    std::vector<uint8_t> bytes(row_bytes * rows, 0xff);
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t d = 0x2c00, dmin = 0;  // d = 1/16
      std::memcpy(bytes.data() + static_cast<size_t>(r) * row_bytes, &d, 2);
      std::memcpy(bytes.data() + static_cast<size_t>(r) * row_bytes + 2, &dmin, 2);
    }
    host::HostWeight w{type, rows, cols, bytes.data(), row_bytes, nullptr};
    const std::vector<uint8_t> groups = cpu::group_rows(w);
    ASSERT_FALSE(groups.empty());
    w.groups = groups.data();
    const int32_t code = type == TensorType::Q5_K ? 31 : 15;
    for (const std::string& target : cpu::simd_targets()) {
      cpu::use_simd_target(target);
      const auto [q, out] = rounded_product(w, x, T);
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(q.q[static_cast<size_t>(t * cols)], t == 0 ? 127 : -127);
        const int32_t sum = 8 * 63 * 32 * code * q.q[static_cast<size_t>(t * cols)];
        const float want = 0.0f + static_cast<float>(sum) * (fp16_to_fp32(0x2c00) * q.d[static_cast<size_t>(t)]);
        for (int64_t r = 0; r < rows; ++r)
          EXPECT_EQ(float_bits(out[static_cast<size_t>(t * rows + r)]), float_bits(want))
              << target << " row " << r << " token " << t << ": " << out[static_cast<size_t>(t * rows + r)] << " against "
              << want;
      }
    }
    cpu::use_simd_target("");
  }
}

TEST(CpuQ8Matmul, CodebookProductsReadEveryIndexBitAndSign) {
  // Blocks of random bytes (d = 1 kept finite): every codebook index, IQ3_S's 9th index
  // bits, every sign bit and scale, on every instruction set. Each output against the
  // reference's values times the rounded activations, summed exactly.
  const int64_t rows = 16, cols = 512;
  for (const int64_t T : {int64_t{1}, int64_t{3}})  // a one-token step, and a token tile
  for (const TensorType type : {TensorType::IQ2_XXS, TensorType::IQ2_XS, TensorType::IQ3_XXS, TensorType::IQ3_S}) {
    SCOPED_TRACE(tensor_type_name(type));
    const std::vector<float> x = activations(T, cols, 21);
    const size_t row_bytes = tensor_row_bytes(type, cols), block_bytes = row_bytes / (cols / 256);
    std::vector<uint8_t> bytes(row_bytes * rows);
    std::mt19937 rng(17);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    for (size_t at = 0; at < bytes.size(); at += block_bytes) {
      const uint16_t one = 0x3c00;
      std::memcpy(bytes.data() + at, &one, 2);
    }
    std::vector<float> values(static_cast<size_t>(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
      dequantize_row(type, bytes.data() + static_cast<size_t>(r) * row_bytes, values.data() + r * cols, cols);
    const host::HostWeight w{type, rows, cols, bytes.data(), row_bytes, nullptr};
    for (const std::string& target : cpu::simd_targets()) {
      cpu::use_simd_target(target);
      const auto [q, out] = rounded_product(w, x, T);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          double want = 0.0, magnitude = 0.0;
          for (int64_t c = 0; c < cols; ++c) {
            const double p = static_cast<double>(values[static_cast<size_t>(r * cols + c)]) * q.q[static_cast<size_t>(t * cols + c)] *
                             q.d[static_cast<size_t>(t * (cols / q.block) + c / q.block)];
            want += p;
            magnitude += std::fabs(p);
          }
          EXPECT_NEAR(out[static_cast<size_t>(t * rows + r)], want, 1e-6 * magnitude + 1e-30)
              << target << " row " << r << " token " << t << " of " << T;
        }
    }
    cpu::use_simd_target("");
  }
}

TEST(CpuQ8Matmul, TheBackendArrangesTheMatricesItMultipliesNotTheTablesItOnlyGathers) {
  // A matrix uploaded for products keeps a copy of its rows in groups, counted as memory
  // of its own; an embedding table that is not also the output head (upload_table) does
  // not; a format without groups counts the same either way.
  std::vector<Matrix> matrices;  // (the backend keeps pointers to their bytes: they outlive it)
  for (const TensorType type : {TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q4_0, TensorType::F16})
    matrices.push_back(random_matrix(type, 16, 256, 3));
  const std::unique_ptr<Backend> be = make_cpu_backend(1);
  ASSERT_NE(be->memory(), nullptr);
  for (const Matrix& m : matrices) {
    const TensorType type = m.type;
    SCOPED_TRACE(tensor_type_name(type));
    const uint64_t file_bytes = m.bytes.size();
    ASSERT_EQ(m.groups.size(), cpu::multiplies_in_groups(type) ? cpu::grouped_bytes(m.weight()) : 0u);
    uint64_t before = be->memory()->memory_in_use();
    be->upload_weight(type, m.rows, m.cols, m.bytes.data());
    EXPECT_EQ(be->memory()->memory_in_use() - before, file_bytes + m.groups.size());
    before = be->memory()->memory_in_use();
    be->upload_table(type, m.rows, m.cols, m.bytes.data());
    EXPECT_EQ(be->memory()->memory_in_use() - before, file_bytes);
  }
  // --no-repack (BackendSpec::repack false): the file's rows alone, no copy.
  BackendSpec spec;
  spec.name = "cpu";
  spec.threads = 1;
  spec.repack = false;
  const std::unique_ptr<Backend> plain = make_backend(spec);
  for (const Matrix& m : matrices) {
    SCOPED_TRACE(tensor_type_name(m.type));
    const uint64_t before = plain->memory()->memory_in_use();
    plain->upload_weight(m.type, m.rows, m.cols, m.bytes.data());
    EXPECT_EQ(plain->memory()->memory_in_use() - before, m.bytes.size());
  }
}

TEST(CpuQ8Matmul, GroupsReadEveryQ6KCodeAndScale) {
  // Q6_K's rows in groups keep its 16 signed scales by pairs and its low and high code
  // bytes in chunks. Random bytes everywhere (every scale from -128 to 127, every code),
  // two super-blocks per row of which one has d = 0: the output is the exact integer sum
  // of scale x (code - 32) x activation times d * dx, the same bits as computed here, on
  // every instruction set. 13 rows: the second group is partly past the matrix's end.
  const int64_t rows = 13, cols = 512, T = 3;
  const size_t row_bytes = tensor_row_bytes(TensorType::Q6_K, cols);
  ASSERT_EQ(row_bytes, 2 * sizeof(quant::BlockQ6_K));
  const std::vector<float> x = activations(T, cols, 23);
  for (const int64_t used : {0, 1}) {
    SCOPED_TRACE("super-block " + std::to_string(used));
    std::vector<uint8_t> bytes(row_bytes * rows);
    std::mt19937 rng(7);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < 2; ++b) {
        auto* block = reinterpret_cast<quant::BlockQ6_K*>(bytes.data() + static_cast<size_t>(r) * row_bytes) + b;
        block->d = b == used ? static_cast<uint16_t>(0x1800 + (rng() & 0x0fff)) : 0;  // finite, 2^-9 .. 2^-7
      }
    host::HostWeight w{TensorType::Q6_K, rows, cols, bytes.data(), row_bytes, nullptr};
    const std::vector<uint8_t> groups = cpu::group_rows(w);
    ASSERT_EQ(groups.size(), static_cast<size_t>(2 * 2 * cpu::kK6GroupBlockBytes));
    w.groups = groups.data();
    for (const std::string& target : cpu::simd_targets()) {
      cpu::use_simd_target(target);
      cpu::QuantizedActivations q;
      q.resize(T, cols, cpu::q8_activation_block(TensorType::Q6_K, cols));
      cpu::quantize_activations(x.data(), cols, 0, T, q);
      std::vector<float> out(static_cast<size_t>(T * rows));
      cpu::q8_matmul_rows(w, 0, rows, q, out.data(), rows);
      for (int64_t r = 0; r < rows; ++r) {
        const auto* block = reinterpret_cast<const quant::BlockQ6_K*>(bytes.data() + static_cast<size_t>(r) * row_bytes) + used;
        for (int64_t t = 0; t < T; ++t) {
          const int8_t* xq = q.q.data() + t * cols + used * 256;
          int32_t sum = 0;
          for (int64_t v = 0; v < 256; ++v) {  // v = 128h + 32k + l
            const int64_t h = v / 128, k = (v % 128) / 32, l = v % 32;
            const uint8_t low = block->ql[64 * h + 32 * (k % 2) + l];
            const int32_t code = (k < 2 ? low & 0x0f : low >> 4) | (((block->qh[32 * h + l] >> (2 * k)) & 3) << 4);
            sum += block->scales[v / 16] * (code - 32) * xq[v];
          }
          const float want = 0.0f + static_cast<float>(sum) * (fp16_to_fp32(block->d) * q.d[static_cast<size_t>(t * 2 + used)]);
          EXPECT_EQ(float_bits(out[static_cast<size_t>(t * rows + r)]), float_bits(want))
              << target << " row " << r << " token " << t << ": " << out[static_cast<size_t>(t * rows + r)] << " against "
              << want;
        }
      }
    }
    cpu::use_simd_target("");
  }
}
