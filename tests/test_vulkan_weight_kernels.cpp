// The Vulkan weight kernels (backend/vulkan/weight_kernels.h: matmul and embedding
// lookup over every GGUF weight format) against fafo's CPU dequantize_row, on whatever
// Vulkan device the machine has (lavapipe in CI), with the Khronos validation layer on
// when installed: every test also asserts that the layer reported no error. Skipped,
// with the reason, when fafo was built without Vulkan or no Vulkan device is found.
//
//   embed   bit-exact with dequantize_row, for weights made by fafo's quantizers and for
//           random block bytes (every bit pattern of the codes and scales, fp16 scales
//           finite but including subnormals), and for every fp16 / bf16 bit pattern.
//   matmul  against a double-precision dot of the dequantized rows, within the
//           rounding-error bound of the kernel's fp32 summation order; positions of
//           out outside the written rows stay untouched; and every token's result is
//           bit for bit the same whatever T and token tile computed it.
#include <gtest/gtest.h>

#if FAFO_HAVE_VULKAN

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/vulkan/buffer.h"
#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/kernels.h"
#include "backend/vulkan/vulkan_error.h"
#include "backend/vulkan/weight_kernels.h"
#include "fafo/tensor_type.h"
#include "random_weights.h"
#include "vulkan_test_support.h"

namespace {

using fafo::TensorType;
using fafo::vulkan::Buffer;
using fafo::vulkan::CommandSequence;
using fafo::vulkan::Context;
using fafo::vulkan::ContextOptions;
using fafo::vulkan::InputNorm;
using fafo::vulkan::Kernels;
using fafo::vulkan::MatmulMapping;
using fafo::vulkan::MatmulShape;
using fafo::vulkan::MatmulVariant;
using fafo::vulkan::ValidationLog;
using fafo::vulkan::VulkanError;
using fafo::vulkan::WeightKernels;
using fafo::test::make_buffer;
using fafo::test::random_values;

constexpr auto& kFormats = fafo::test::kAllWeightFormats;
// Token counts around every tile boundary, up to a full lookahead/FAFO step.
constexpr uint32_t kTokenCounts[] = {1, 2, 3, 5, 8, 9, 16, 17, 33, 64, 100, 256};
constexpr uint32_t kMaxT = 256;
// Written into out before a kernel runs, to see what it did not write (a NaN no kernel makes).
constexpr uint32_t kSentinel = 0xffc0dead;

std::string type_name(TensorType type) { return std::string(fafo::tensor_type_name(type)); }
uint32_t block_size(TensorType type) { return fafo::tensor_type_info(type).block_size; }

// Column counts for a format: one block, and several (for the plain float formats, whose
// block is one value: lengths that end in a partial 16-value chunk).
std::vector<uint32_t> test_cols(TensorType type) {
  const uint32_t block = block_size(type);
  if (block == 1) return {1, 37, 300};
  return {block, 3 * block};
}

// rows x cols weights in `type`, as the kernels read them, and the CPU's reading of them.
struct Weights {
  TensorType type;
  uint32_t rows = 0, cols = 0;
  std::vector<uint8_t> bytes;  // packed rows, padded to WeightKernels::weight_bytes
  std::vector<float> values;   // dequantize_row of every row: the oracle
};

void dequantize_all(Weights& w) {
  const size_t row_bytes = fafo::tensor_row_bytes(w.type, w.cols);
  w.values.resize(size_t{w.rows} * w.cols);
  for (uint32_t r = 0; r < w.rows; ++r)
    fafo::dequantize_row(w.type, w.bytes.data() + r * row_bytes, w.values.data() + size_t{r} * w.cols, w.cols);
}

// Weights quantized by fafo's quantizers from random floats (rows of different scales).
Weights quantized_weights(TensorType type, uint32_t rows, uint32_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::uniform_real_distribution<float> scale(0.05f, 3.0f);
  Weights w{type, rows, cols, {}, {}};
  const size_t row_bytes = fafo::tensor_row_bytes(type, cols);
  w.bytes.assign(WeightKernels::weight_bytes(type, rows, cols), 0);
  std::vector<float> row(cols);
  for (uint32_t r = 0; r < rows; ++r) {
    const float s = scale(rng);
    for (float& v : row) v = value(rng) * s;
    fafo::test::quantize_for_test(type, row.data(), w.bytes.data() + r * row_bytes, cols);
  }
  dequantize_all(w);
  return w;
}

// Weights of random bytes: every bit pattern of the codes and packed scales
// (test::random_block_bytes: fp16 fields finite, subnormal and zero scales included).
Weights random_block_weights(TensorType type, uint32_t rows, uint32_t cols, uint32_t seed) {
  Weights w{type, rows, cols, fafo::test::random_block_bytes(type, rows, cols, seed), {}};
  w.bytes.resize(WeightKernels::weight_bytes(type, rows, cols), 0);
  dequantize_all(w);
  return w;
}

Buffer sentinel_buffer(const Context& ctx, size_t words) {
  const std::vector<uint32_t> fill(words, kSentinel);
  return make_buffer(ctx, fill.data(), words * sizeof(uint32_t));
}

std::vector<uint32_t> read_bits(const Buffer& b, size_t words) {
  std::vector<uint32_t> bits(words);
  b.download(bits.data(), words * sizeof(uint32_t));
  return bits;
}

// One validated context and one WeightKernels for the whole program (creating the
// pipelines per test would make the suite slow under the validation layer).
using VulkanWeightKernels = fafo::test::ValidatedVulkanSuite<WeightKernels>;

// ---- embed ----

// Looks up `tokens` in a table holding rows [first_row, first_row + w.rows) and checks
// every output row: the table row's exact bits, or the sentinel for tokens outside it.
void check_embed(const Context& ctx, const WeightKernels& kernels, const Weights& w, uint32_t first_row,
                 const std::vector<uint32_t>& tokens) {
  const auto T = static_cast<uint32_t>(tokens.size());
  const Buffer table = make_buffer(ctx, w.bytes.data(), w.bytes.size());
  const Buffer token_buffer = make_buffer(ctx, tokens.data(), tokens.size() * sizeof(uint32_t));
  const Buffer out = sentinel_buffer(ctx, size_t{T} * w.cols);
  CommandSequence seq(ctx);
  kernels.embed(seq, w.type, table, token_buffer, out, T, w.cols, first_row, w.rows);
  seq.submit_and_wait();
  const std::vector<uint32_t> got = read_bits(out, size_t{T} * w.cols);
  for (uint32_t t = 0; t < T; ++t) {
    const bool inside = tokens[t] >= first_row && tokens[t] - first_row < w.rows;
    for (uint32_t c = 0; c < w.cols; ++c) {
      const uint32_t want =
          inside ? std::bit_cast<uint32_t>(w.values[size_t{tokens[t] - first_row} * w.cols + c]) : kSentinel;
      ASSERT_EQ(got[size_t{t} * w.cols + c], want)
          << "token " << t << " (id " << tokens[t] << ") column " << c << ": got "
          << std::bit_cast<float>(got[size_t{t} * w.cols + c]) << ", want " << std::bit_cast<float>(want);
    }
  }
}

TEST_F(VulkanWeightKernels, EmbedIsBitExactForEveryFormat) {
  // Tokens inside the table part [5, 16), below it, above it, and -1 as an int.
  const std::vector<uint32_t> tokens = {5, 15, 7, 0, 16, 6, 4, 40, 10, 0xffffffffu, 11, 5, 12, 13, 14, 8, 9, 3, 15};
  const uint32_t first_row = 5, n_rows = 11;
  for (const TensorType type : kFormats) {
    for (const uint32_t cols : test_cols(type)) {
      SCOPED_TRACE(type_name(type) + " cols " + std::to_string(cols));
      {
        SCOPED_TRACE("quantized from random floats");
        check_embed(*context_, *kernels_, quantized_weights(type, n_rows, cols, 100 + cols), first_row, tokens);
      }
      {
        SCOPED_TRACE("random block bytes");
        check_embed(*context_, *kernels_, random_block_weights(type, n_rows, cols, 200 + cols), first_row, tokens);
      }
    }
  }
}

TEST_F(VulkanWeightKernels, EmbedReadsEveryHalfAndBfloat16BitPattern) {
  // 256 rows of 256 values: every 16-bit pattern once (zeros, subnormals, infinities,
  // NaNs). The fp16 decoder is integer code, so even NaN payloads come through.
  const uint32_t side = 256;
  std::vector<uint32_t> tokens(side);
  for (uint32_t t = 0; t < side; ++t) tokens[t] = (t * 37) % side;  // every row, shuffled
  for (const TensorType type : {TensorType::F16, TensorType::BF16}) {
    SCOPED_TRACE(type_name(type));
    Weights w{type, side, side, {}, {}};
    w.bytes.resize(WeightKernels::weight_bytes(type, side, side));
    for (uint32_t i = 0; i < side * side; ++i) {
      const auto h = static_cast<uint16_t>(i);
      std::memcpy(&w.bytes[2 * i], &h, 2);
    }
    dequantize_all(w);
    check_embed(*context_, *kernels_, w, 0, tokens);
  }
}

TEST_F(VulkanWeightKernels, EmbedOfATableSplitInPartsWritesEveryToken) {
  // A table cut into two buffers at row 10 (as the backend splits tables larger than
  // maxStorageBufferRange): one dispatch per part, each writes only its own tokens.
  const uint32_t rows = 23, split = 10;
  for (const TensorType type : {TensorType::Q4_0, TensorType::Q6_K, TensorType::F16}) {
    SCOPED_TRACE(type_name(type));
    const uint32_t cols = block_size(type) == 1 ? 20 : 2 * block_size(type);
    const Weights whole = quantized_weights(type, rows, cols, 7);
    const size_t row_bytes = fafo::tensor_row_bytes(type, cols);
    std::vector<uint32_t> tokens(40);
    std::mt19937 rng(3);
    for (uint32_t& t : tokens) t = rng() % rows;
    const auto T = static_cast<uint32_t>(tokens.size());
    std::vector<uint8_t> part0(whole.bytes.begin(), whole.bytes.begin() + static_cast<long>(split * row_bytes));
    std::vector<uint8_t> part1(whole.bytes.begin() + static_cast<long>(split * row_bytes),
                               whole.bytes.begin() + static_cast<long>(rows * row_bytes));
    part0.resize(WeightKernels::weight_bytes(type, split, cols));
    part1.resize(WeightKernels::weight_bytes(type, rows - split, cols));
    const Buffer b0 = make_buffer(*context_, part0.data(), part0.size());
    const Buffer b1 = make_buffer(*context_, part1.data(), part1.size());
    const Buffer token_buffer = make_buffer(*context_, tokens.data(), tokens.size() * sizeof(uint32_t));
    const Buffer out = sentinel_buffer(*context_, size_t{T} * cols);
    CommandSequence seq(*context_);
    kernels_->embed(seq, type, b0, token_buffer, out, T, cols, 0, split);
    kernels_->embed(seq, type, b1, token_buffer, out, T, cols, split, rows - split);
    seq.submit_and_wait();
    const std::vector<uint32_t> got = read_bits(out, size_t{T} * cols);
    for (uint32_t t = 0; t < T; ++t)
      for (uint32_t c = 0; c < cols; ++c)
        ASSERT_EQ(got[size_t{t} * cols + c], std::bit_cast<uint32_t>(whole.values[size_t{tokens[t]} * cols + c]))
            << "token " << t << " column " << c;
  }
}

// ---- matmul ----

// Tokens x in [kMaxT x x_stride] (the padding between tokens is garbage the kernel must
// not read into the result).
struct Activations {
  uint32_t cols = 0, x_stride = 0;
  std::vector<float> values;
};

Activations random_activations(uint32_t cols, uint32_t T, uint32_t seed) {
  Activations a{cols, cols + 3, {}};
  a.values = random_values(size_t{T} * a.x_stride, seed);
  return a;
}

// The bound on |kernel - exact| for one output, from the kernel's summation order
// (shaders/matmul.comp): a lane adds at most 16 * ceil(chunks / 32) (+ 15 for a partial
// last chunk) products with one rounding each, then 5 tree levels add one rounding each,
// every rounding at most 2^-24 of the sum of |w * x|.
double error_bound(uint32_t cols, double magnitude) {
  const uint32_t chunks = cols / 16;
  const double roundings = 16.0 * ((chunks + 31) / 32) + (cols % 16 != 0 ? 15 : 0) + 5 + 1;
  return roundings * std::ldexp(1.0, -24) * magnitude;
}

struct Reference {
  std::vector<double> value;      // [t][row], exact up to double rounding
  std::vector<double> magnitude;  // sum of |w * x|
};

Reference reference(const Weights& w, const Activations& a, uint32_t T) {
  Reference ref;
  ref.value.resize(size_t{T} * w.rows);
  ref.magnitude.resize(size_t{T} * w.rows);
  for (uint32_t t = 0; t < T; ++t) {
    const float* x = &a.values[size_t{t} * a.x_stride];
    for (uint32_t r = 0; r < w.rows; ++r) {
      const float* wr = &w.values[size_t{r} * w.cols];
      double sum = 0.0, magnitude = 0.0;
      for (uint32_t c = 0; c < w.cols; ++c) {
        const double p = static_cast<double>(wr[c]) * x[c];
        sum += p;
        magnitude += std::fabs(p);
      }
      ref.value[size_t{t} * w.rows + r] = sum;
      ref.magnitude[size_t{t} * w.rows + r] = magnitude;
    }
  }
  return ref;
}

// Out layout of the tests: token t's outputs at t * out_stride + out_offset, with
// sentinel-filled gaps before, between and after them.
struct OutLayout {
  uint32_t out_stride, out_offset;
  size_t words(uint32_t T, uint32_t rows) const { return size_t{T - 1} * out_stride + out_offset + rows + 3; }
};
OutLayout out_layout(uint32_t rows) { return {rows + 5, 2}; }

// Checks out against the reference, and that nothing outside the outputs was written.
void check_matmul(const std::vector<uint32_t>& got, const Reference& ref, uint32_t T, uint32_t rows, uint32_t cols,
                  const OutLayout& layout) {
  std::vector<bool> is_output(got.size(), false);
  for (uint32_t t = 0; t < T; ++t) {
    for (uint32_t r = 0; r < rows; ++r) {
      const size_t at = size_t{t} * layout.out_stride + layout.out_offset + r;
      is_output[at] = true;
      const double want = ref.value[size_t{t} * rows + r];
      const float value = std::bit_cast<float>(got[at]);
      ASSERT_NEAR(value, want, error_bound(cols, ref.magnitude[size_t{t} * rows + r]))
          << "token " << t << " row " << r << " (sum of |w*x| " << ref.magnitude[size_t{t} * rows + r] << ")";
    }
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!is_output[i]) {
      ASSERT_EQ(got[i], kSentinel) << "out[" << i << "] is not an output but was written";
    }
  }
}

std::string mapping_name(MatmulMapping mapping) {
  switch (mapping) {
    case MatmulMapping::Auto:
      return "automatic";
    case MatmulMapping::SplitRows:
      return "SplitRows";
    case MatmulMapping::WholeRows:
      return "WholeRows";
    case MatmulMapping::MatrixTiles:
      return "MatrixTiles";
  }
  return "?";
}

// The automatic choice for every shape; both mappings explicitly for the shapes up to 33
// rows (the mapping the device does not prefer is slow there: SplitRows on lavapipe).
// Each case below takes five of the formats: a format's pipelines are its own, and all 20
// in one case compiled about 200 of them, 8 to 10 minutes on a cold lavapipe shader cache
// on 2 cores, at the edge of ctest's 10-minute limit.
class VulkanMatmulShapes : public VulkanWeightKernels {
 protected:
  void matmul_matches_the_cpu(size_t first_format);
};

TEST_F(VulkanMatmulShapes, MatmulMatchesTheCpuForEveryShapeAndTokenCountInFormats1To5) { matmul_matches_the_cpu(0); }
TEST_F(VulkanMatmulShapes, MatmulMatchesTheCpuForEveryShapeAndTokenCountInFormats6To10) { matmul_matches_the_cpu(5); }
TEST_F(VulkanMatmulShapes, MatmulMatchesTheCpuForEveryShapeAndTokenCountInFormats11To15) { matmul_matches_the_cpu(10); }
TEST_F(VulkanMatmulShapes, MatmulMatchesTheCpuForEveryShapeAndTokenCountInFormats16To20) { matmul_matches_the_cpu(15); }
static_assert(std::size(kFormats) == 20, "the VulkanMatmulShapes and VulkanEveryVariant cases take five formats each");

void VulkanMatmulShapes::matmul_matches_the_cpu(size_t first_format) {
  for (const TensorType type : std::span(kFormats).subspan(first_format, 5)) {
    for (const uint32_t rows : {1u, 7u, 33u, 257u}) {
      for (const uint32_t cols : test_cols(type)) {
        SCOPED_TRACE(type_name(type) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols));
        const Weights w = quantized_weights(type, rows, cols, rows * 31 + cols);
        const Activations a = random_activations(cols, kMaxT, rows + cols);
        const Reference ref = reference(w, a, kMaxT);
        const Buffer bw = make_buffer(*context_, w.bytes.data(), w.bytes.size());
        const Buffer bx = make_buffer(*context_, a.values.data(), a.values.size() * sizeof(float));
        const OutLayout layout = out_layout(rows);
        std::vector<MatmulMapping> mappings = {MatmulMapping::Auto};
        if (rows <= 33) mappings = {MatmulMapping::SplitRows, MatmulMapping::WholeRows};
        struct Run {
          MatmulMapping mapping;
          uint32_t T;
          Buffer out;
        };
        std::vector<Run> runs;
        CommandSequence seq(*context_);
        for (const uint32_t T : kTokenCounts) {
          for (const MatmulMapping mapping : mappings) {
            runs.push_back({mapping, T, sentinel_buffer(*context_, layout.words(T, rows))});
            kernels_->matmul(seq, type, bw, bx, runs.back().out,
                             MatmulShape{T, rows, cols, a.x_stride, layout.out_stride, layout.out_offset},
                             MatmulVariant{0, mapping});
          }
        }
        seq.submit_and_wait();
        for (const Run& run : runs) {
          SCOPED_TRACE(mapping_name(run.mapping) + ", T " + std::to_string(run.T));
          check_matmul(read_bits(run.out, layout.words(run.T, rows)), ref, run.T, rows, cols, layout);
        }
      }
    }
  }
}

// Every variant the tests run: each SplitRows tile (with the automatic reduction, which
// is the subgroup one where the device has it, and the portable one), WholeRows, and the
// automatic choice.
struct NamedVariant {
  std::string name;
  MatmulVariant variant;
};
std::vector<NamedVariant> all_variants() {
  std::vector<NamedVariant> variants;
  for (const uint32_t tile : WeightKernels::kTokenTiles) {
    variants.push_back({"SplitRows tile " + std::to_string(tile), MatmulVariant{tile, MatmulMapping::SplitRows}});
    MatmulVariant portable{tile, MatmulMapping::SplitRows};
    portable.reduction = fafo::vulkan::MatmulReduction::Portable;
    variants.push_back({"SplitRows tile " + std::to_string(tile) + " portable", portable});
  }
  variants.push_back({"WholeRows", MatmulVariant{0, MatmulMapping::WholeRows}});
  variants.push_back({"automatic", MatmulVariant{}});
  return variants;
}

// all_variants() with the SplitRows tiles cut to `tiles` (a lavapipe pipeline costs about
// a second to compile on a cold cache, and only the decoders differ between tiles).
std::vector<NamedVariant> variants_with_tiles(std::initializer_list<uint32_t> tiles) {
  std::vector<NamedVariant> variants;
  for (const NamedVariant& v : all_variants())
    if (v.variant.tile == 0 || std::ranges::find(tiles, v.variant.tile) != tiles.end()) variants.push_back(v);
  return variants;
}

// Lossless multi-token decoding needs a token's logits not to depend on how many tokens
// share the step. The reference is the mat-vec (SplitRows tile 1) run token by token;
// every variant with all 256 tokens, and the automatic choice for every T, must reproduce
// it bit for bit. The table and codebook formats (IQ4_NL onwards) differ from the others
// only in their decoder, which every tile shares: they take the SplitRows tiles 1 and 8
// (the other tiles are each a lavapipe pipeline per format to compile). The portable
// reduction runs at tile 1 only, but for kEveryTilePortableFormats. Each case takes
// five of the formats: all 20 in one compiled about 260 pipelines, 331 s on a cold
// lavapipe shader cache on 2 cores, and past ctest's 600 s on the same machine on a slower
// day (ten in one: 415 s there).
class VulkanEveryVariant : public VulkanWeightKernels {
 protected:
  void gives_each_token_the_mat_vec_bits(size_t first_format);
};

TEST_F(VulkanEveryVariant, EveryVariantAndTokenCountGivesEachTokenTheMatVecBitsInFormats1To5) {
  gives_each_token_the_mat_vec_bits(0);
}
TEST_F(VulkanEveryVariant, EveryVariantAndTokenCountGivesEachTokenTheMatVecBitsInFormats6To10) {
  gives_each_token_the_mat_vec_bits(5);
}
TEST_F(VulkanEveryVariant, EveryVariantAndTokenCountGivesEachTokenTheMatVecBitsInFormats11To15) {
  gives_each_token_the_mat_vec_bits(10);
}
TEST_F(VulkanEveryVariant, EveryVariantAndTokenCountGivesEachTokenTheMatVecBitsInFormats16To20) {
  gives_each_token_the_mat_vec_bits(15);
}

void VulkanEveryVariant::gives_each_token_the_mat_vec_bits(size_t first_format) {
  const uint32_t rows = 33;
  for (const TensorType type : std::span(kFormats).subspan(first_format, 5)) {
    const bool decoder_only = type == TensorType::IQ4_NL || type == TensorType::IQ4_XS || type == TensorType::MXFP4 ||
                              type == TensorType::IQ2_XXS || type == TensorType::IQ2_XS || type == TensorType::IQ3_XXS ||
                              type == TensorType::IQ3_S;
    const uint32_t block = block_size(type);
    const uint32_t cols = block == 1 ? 1007 : block == 32 ? 24 * block : 3 * block;
    SCOPED_TRACE(type_name(type) + " cols " + std::to_string(cols));
    const Weights w = quantized_weights(type, rows, cols, 11);
    const Activations a = random_activations(cols, kMaxT, 12);
    const Buffer bw = make_buffer(*context_, w.bytes.data(), w.bytes.size());
    const Buffer bx = make_buffer(*context_, a.values.data(), a.values.size() * sizeof(float));
    const OutLayout layout = out_layout(rows);
    auto shape = [&](uint32_t T) {
      return MatmulShape{T, rows, cols, a.x_stride, layout.out_stride, layout.out_offset};
    };

    struct Run {
      std::string name;
      uint32_t T;
      Buffer out;
    };
    std::vector<Run> runs;
    CommandSequence seq(*context_);
    for (const NamedVariant& v : decoder_only ? variants_with_tiles({1, 8}) : all_variants()) {
      // The portable reduction at tile 1 only, but for kEveryTilePortableFormats.
      if (v.variant.reduction == fafo::vulkan::MatmulReduction::Portable && v.variant.tile != 1 &&
          !fafo::test::every_tile_portable(type))
        continue;
      runs.push_back({v.name + ", T 256", kMaxT, sentinel_buffer(*context_, layout.words(kMaxT, rows))});
      kernels_->matmul(seq, type, bw, bx, runs.back().out, shape(kMaxT), v.variant);
    }
    for (const uint32_t T : kTokenCounts) {
      for (const MatmulMapping mapping : {MatmulMapping::SplitRows, MatmulMapping::WholeRows}) {
        const bool split = mapping == MatmulMapping::SplitRows;
        runs.push_back({std::string(split ? "SplitRows" : "WholeRows") + ", T " + std::to_string(T), T,
                        sentinel_buffer(*context_, layout.words(T, rows))});
        kernels_->matmul(seq, type, bw, bx, runs.back().out, shape(T), MatmulVariant{0, mapping});
      }
    }
    seq.submit_and_wait();
    const std::vector<uint32_t> mat_vec = read_bits(runs[0].out, layout.words(kMaxT, rows));
    for (size_t i = 1; i < runs.size(); ++i) {
      SCOPED_TRACE(runs[i].name);
      const std::vector<uint32_t> got = read_bits(runs[i].out, layout.words(runs[i].T, rows));
      for (uint32_t t = 0; t < runs[i].T; ++t)
        for (uint32_t r = 0; r < rows; ++r) {
          const size_t at = size_t{t} * layout.out_stride + layout.out_offset + r;
          ASSERT_EQ(got[at], mat_vec[at]) << "token " << t << " row " << r << ": " << std::bit_cast<float>(got[at])
                                          << " vs " << std::bit_cast<float>(mat_vec[at]);
        }
    }
    // And the mat-vec itself is right.
    check_matmul(mat_vec, reference(w, a, kMaxT), kMaxT, rows, cols, layout);
  }
}

TEST_F(VulkanWeightKernels, FusedGateAndNormGiveTheBitsOfTheSeparateKernels) {
  // matmul_gated is matmul of the gate rows, matmul of the up rows, then Kernels::swiglu;
  // a fused RMSNorm is Kernels::rms_norm, then the product: bit for bit, with every
  // mapping, tile and reduction, for token counts around the tiles (x rows with padding
  // between them, which the norm must not read). The variants differ from one format to
  // the next only in the decoder, so two formats: a plain float one with a partial last
  // chunk, and a K-quant.
  Kernels kernels(*context_);
  const uint32_t rows = 33;
  const float eps = 1e-5f;
  for (const TensorType type : {TensorType::F32, TensorType::Q4_K}) {
    const uint32_t block = block_size(type);
    const uint32_t cols = block == 1 ? 1007 : block == 32 ? 24 * block : 3 * block;
    SCOPED_TRACE(type_name(type) + " cols " + std::to_string(cols));
    const Weights gate = quantized_weights(type, rows, cols, 21), up = quantized_weights(type, rows, cols, 22);
    std::vector<uint8_t> both = gate.bytes;
    both.resize(size_t{rows} * fafo::tensor_row_bytes(type, cols));
    const std::vector<uint8_t> up_rows(up.bytes.begin(), up.bytes.begin() + static_cast<std::ptrdiff_t>(both.size()));
    both.insert(both.end(), up_rows.begin(), up_rows.end());
    both.resize(WeightKernels::weight_bytes(type, 2 * rows, cols), 0);
    const uint32_t max_t = 40;
    Activations a = random_activations(cols, max_t, 23);
    for (float& v : a.values) v *= 4.0f;  // rows far from unit scale, so the norm matters
    std::vector<float> packed(size_t{max_t} * cols);  // the same rows without the padding
    for (uint32_t t = 0; t < max_t; ++t)
      std::copy_n(&a.values[size_t{t} * a.x_stride], cols, &packed[size_t{t} * cols]);
    const std::vector<float> gains = random_values(cols, 24);
    const Buffer b_gate = make_buffer(*context_, gate.bytes.data(), gate.bytes.size());
    const Buffer b_up = make_buffer(*context_, up.bytes.data(), up.bytes.size());
    const Buffer b_both = make_buffer(*context_, both.data(), both.size());
    const Buffer bx = make_buffer(*context_, a.values.data(), a.values.size() * sizeof(float));
    const Buffer b_packed = make_buffer(*context_, packed.data(), packed.size() * sizeof(float));
    const Buffer b_gain = make_buffer(*context_, gains.data(), gains.size() * sizeof(float));
    const Buffer normed(*context_, packed.size() * sizeof(float));
    const InputNorm norm{&b_gain, eps};

    // The separate kernels, per input (raw or normalized): the gate's product, the up
    // projection's and their SwiGLU, every token at once (the products are T-invariant).
    const size_t words = size_t{max_t} * rows;
    struct Separate {
      Buffer g, u, swiglu;
    };
    auto separate = [&](const Buffer& x, uint32_t x_stride) {
      Separate r{Buffer(*context_, words * 4), Buffer(*context_, words * 4), Buffer(*context_, words * 4)};
      CommandSequence seq(*context_);
      const MatmulShape shape{max_t, rows, cols, x_stride, rows, 0};
      kernels_->matmul(seq, type, b_gate, x, r.g, shape);
      kernels_->matmul(seq, type, b_up, x, r.u, shape);
      kernels.swiglu(seq, r.g, r.u, r.swiglu, static_cast<uint32_t>(words));
      seq.submit_and_wait();
      return r;
    };
    {
      CommandSequence seq(*context_);
      kernels.rms_norm(seq, b_packed, b_gain, normed, max_t, cols, eps);
      seq.submit_and_wait();
    }
    const Separate raw = separate(bx, a.x_stride), normalized = separate(normed, cols);
    const std::vector<uint32_t> want_product = read_bits(normalized.g, words);
    const std::vector<uint32_t> want_gated = read_bits(raw.swiglu, words);
    const std::vector<uint32_t> want_gated_norm = read_bits(normalized.swiglu, words);

    struct Run {
      std::string name;
      uint32_t T;
      const std::vector<uint32_t>* want;
      Buffer out;
    };
    std::vector<Run> runs;
    CommandSequence seq(*context_);
    const OutLayout layout = out_layout(rows);
    for (const uint32_t T : {1u, 2u, 3u, 5u, 8u, 9u, 17u, 33u, 40u}) {
      const MatmulShape shape{T, rows, cols, a.x_stride, layout.out_stride, layout.out_offset};
      for (const NamedVariant& v : variants_with_tiles({1, 4, 32})) {
        runs.push_back({"gated, " + v.name + ", T " + std::to_string(T), T, &want_gated,
                        sentinel_buffer(*context_, layout.words(T, rows))});
        kernels_->matmul_gated(seq, type, b_both, bx, runs.back().out, shape, v.variant);
      }
      if (T > WeightKernels::kMaxNormTokens) continue;
      for (const NamedVariant& v : variants_with_tiles({1, 8})) {
        runs.push_back({"norm, " + v.name + ", T " + std::to_string(T), T, &want_product,
                        sentinel_buffer(*context_, layout.words(T, rows))});
        kernels_->matmul(seq, type, b_gate, bx, runs.back().out, shape, v.variant, norm);
        runs.push_back({"gated norm, " + v.name + ", T " + std::to_string(T), T, &want_gated_norm,
                        sentinel_buffer(*context_, layout.words(T, rows))});
        kernels_->matmul_gated(seq, type, b_both, bx, runs.back().out, shape, v.variant, norm);
      }
    }
    seq.submit_and_wait();
    for (const Run& run : runs) {
      SCOPED_TRACE(run.name);
      const std::vector<uint32_t> got = read_bits(run.out, layout.words(run.T, rows));
      std::vector<bool> is_output(got.size(), false);
      for (uint32_t t = 0; t < run.T; ++t)
        for (uint32_t r = 0; r < rows; ++r) {
          const size_t at = size_t{t} * layout.out_stride + layout.out_offset + r;
          is_output[at] = true;
          const uint32_t want = (*run.want)[size_t{t} * rows + r];
          ASSERT_EQ(got[at], want) << "token " << t << " row " << r << ": " << std::bit_cast<float>(got[at]) << " vs "
                                   << std::bit_cast<float>(want);
        }
      for (size_t i = 0; i < got.size(); ++i) {
        if (!is_output[i]) {
          ASSERT_EQ(got[i], kSentinel) << "out[" << i << "] is not an output but was written";
        }
      }
    }

    // The norm is right: rms_norm's rows against a double-precision norm.
    const std::vector<uint32_t> norm_bits = read_bits(normed, packed.size());
    for (uint32_t t = 0; t < max_t; ++t) {
      double sum_sq = 0;
      for (uint32_t c = 0; c < cols; ++c) sum_sq += double{packed[size_t{t} * cols + c]} * packed[size_t{t} * cols + c];
      const double scale = 1.0 / std::sqrt(sum_sq / cols + eps);
      for (uint32_t c = 0; c < cols; ++c) {
        const double want = packed[size_t{t} * cols + c] * scale * gains[c];
        ASSERT_NEAR(std::bit_cast<float>(norm_bits[size_t{t} * cols + c]), want, 1e-5 * (1.0 + std::fabs(want)))
            << "token " << t << " column " << c;
      }
    }
  }
  // More tokens than a fused norm takes: a clear error.
  const Weights w = quantized_weights(TensorType::Q8_0, 4, 32, 5);
  const Buffer bw = make_buffer(*context_, w.bytes.data(), w.bytes.size());
  const Buffer bx(*context_, 9 * 32 * sizeof(float)), out(*context_, 9 * 4 * sizeof(float)), gain(*context_, 32 * 4);
  CommandSequence seq(*context_);
  EXPECT_THROW(kernels_->matmul(seq, TensorType::Q8_0, bw, bx, out, MatmulShape{9, 4, 32, 32, 4, 0}, {},
                                InputNorm{&gain, 1e-5f}),
               std::invalid_argument);
  EXPECT_THROW(kernels_->matmul(seq, TensorType::Q8_0, bw, bx, out, MatmulShape{4, 4, 32, 32, 4, 0},
                                MatmulVariant{16, MatmulMapping::SplitRows}, InputNorm{&gain, 1e-5f}),
               std::invalid_argument);
}

TEST_F(VulkanWeightKernels, MatmulOfMoreThan65535Rows) {
  // More rows than the smallest maxComputeWorkGroupCount a device may have (Q4_0, one
  // block per row: cheap).
  const uint32_t rows = 65535 + 37, cols = 32, max_T = 3;
  const TensorType type = TensorType::Q4_0;
  const Weights w = quantized_weights(type, rows, cols, 5);
  const Activations a = random_activations(cols, max_T, 6);
  const Reference ref = reference(w, a, max_T);
  const Buffer bw = make_buffer(*context_, w.bytes.data(), w.bytes.size());
  const Buffer bx = make_buffer(*context_, a.values.data(), a.values.size() * sizeof(float));
  const OutLayout layout = out_layout(rows);
  for (const MatmulMapping mapping : {MatmulMapping::SplitRows, MatmulMapping::WholeRows}) {
    for (const uint32_t T : {1u, max_T}) {
      SCOPED_TRACE(mapping_name(mapping) + " T " + std::to_string(T));
      const Buffer out = sentinel_buffer(*context_, layout.words(T, rows));
      CommandSequence seq(*context_);
      kernels_->matmul(seq, type, bw, bx, out,
                       MatmulShape{T, rows, cols, a.x_stride, layout.out_stride, layout.out_offset},
                       MatmulVariant{0, mapping});
      seq.submit_and_wait();
      check_matmul(read_bits(out, layout.words(T, rows)), ref, T, rows, cols, layout);
    }
  }
}

TEST_F(VulkanWeightKernels, WorkgroupsLoopOverWhatTheGridDoesNotCover) {
  // Capped workgroup counts stand in for a device limit: each workgroup then handles
  // several row blocks and token tiles, as with rows beyond limit x rows per workgroup.
  const TensorType type = TensorType::Q6_K;
  const uint32_t rows = 77, cols = 512, T = 100;
  const Weights w = quantized_weights(type, rows, cols, 8);
  const Activations a = random_activations(cols, T, 9);
  const Reference ref = reference(w, a, T);
  const Buffer bw = make_buffer(*context_, w.bytes.data(), w.bytes.size());
  const Buffer bx = make_buffer(*context_, a.values.data(), a.values.size() * sizeof(float));
  const OutLayout layout = out_layout(rows);
  struct Run {
    std::string name;
    Buffer out;
  };
  std::vector<Run> runs;
  CommandSequence seq(*context_);
  for (const NamedVariant& v : all_variants()) {
    for (const auto& [gx, gy] : {std::pair{1u, 1u}, std::pair{3u, 2u}}) {
      MatmulVariant capped = v.variant;
      capped.max_groups_x = gx;
      capped.max_groups_y = gy;
      runs.push_back({v.name + ", " + std::to_string(gx) + "x" + std::to_string(gy) + " workgroups",
                      sentinel_buffer(*context_, layout.words(T, rows))});
      kernels_->matmul(seq, type, bw, bx, runs.back().out,
                       MatmulShape{T, rows, cols, a.x_stride, layout.out_stride, layout.out_offset}, capped);
    }
  }
  seq.submit_and_wait();
  for (const Run& run : runs) {
    SCOPED_TRACE(run.name);
    check_matmul(read_bits(run.out, layout.words(T, rows)), ref, T, rows, cols, layout);
  }
}

TEST_F(VulkanWeightKernels, MatmulAndEmbedChainInOneSubmission) {
  // embed -> matmul reading the embeddings, in one command buffer.
  const TensorType type = TensorType::Q4_K;
  const uint32_t vocab = 50, cols = 256, rows = 19, T = 6;
  const Weights table = quantized_weights(type, vocab, cols, 21);
  const Weights w = quantized_weights(TensorType::Q8_0, rows, cols, 22);
  const std::vector<uint32_t> tokens = {3, 49, 0, 17, 17, 8};
  const Buffer btable = make_buffer(*context_, table.bytes.data(), table.bytes.size());
  const Buffer btokens = make_buffer(*context_, tokens.data(), tokens.size() * sizeof(uint32_t));
  const Buffer bw = make_buffer(*context_, w.bytes.data(), w.bytes.size());
  const Buffer embeddings(*context_, size_t{T} * cols * sizeof(float));
  const Buffer out = sentinel_buffer(*context_, size_t{T} * rows);
  CommandSequence seq(*context_);
  kernels_->embed(seq, type, btable, btokens, embeddings, T, cols, 0, vocab);
  kernels_->matmul(seq, TensorType::Q8_0, bw, embeddings, out, MatmulShape{T, rows, cols, cols, rows, 0});
  seq.submit_and_wait();
  Activations a{cols, cols, {}};
  for (const uint32_t token : tokens)
    a.values.insert(a.values.end(), table.values.begin() + size_t{token} * cols,
                    table.values.begin() + size_t{token + 1} * cols);
  check_matmul(read_bits(out, size_t{T} * rows), reference(w, a, T), T, rows, cols, OutLayout{rows, 0});
}

TEST_F(VulkanWeightKernels, MisuseIsAClearErrorNotACrash) {
  Buffer small(*context_, 64);
  Buffer big(*context_, 1 << 16);
  CommandSequence seq(*context_);
  const MatmulShape ok{2, 4, 32, 32, 4, 0};
  auto expect_message = [&](auto&& call, const std::string& part) {
    try {
      call();
      ADD_FAILURE() << "no exception; expected one mentioning \"" << part << "\"";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  EXPECT_NO_THROW(kernels_->matmul(seq, TensorType::Q4_0, big, big, big, ok));
  expect_message([&] { kernels_->matmul(seq, TensorType::Q8_K, big, big, big, ok); }, "not supported");
  expect_message([&] { kernels_->matmul(seq, TensorType::Q8_1, big, big, big, ok); }, "not supported");
  expect_message([&] { kernels_->matmul(seq, TensorType::Q4_K, big, big, big, ok); }, "block size 256");
  expect_message(
      [&] {
        kernels_->matmul(seq, TensorType::Q4_0, big, big, big, MatmulShape{2, 4, 0, 32, 4, 0});
      },
      "cols = 0");
  expect_message([&] { kernels_->matmul(seq, TensorType::Q4_0, small, big, big, ok); }, "buffer w");
  expect_message(
      [&] {
        kernels_->matmul(seq, TensorType::Q4_0, big, small, big, MatmulShape{2, 4, 32, 48, 4, 0});
      },
      "buffer x");
  expect_message(
      [&] {
        kernels_->matmul(seq, TensorType::F32, big, big, small, MatmulShape{2, 15, 32, 32, 15, 0});
      },
      "buffer out");
  expect_message(
      [&] {
        kernels_->matmul(seq, TensorType::Q4_0, big, big, big, MatmulShape{2, 4, 32, 16, 4, 0});
      },
      "x_stride");
  expect_message(
      [&] {
        kernels_->matmul(seq, TensorType::Q4_0, big, big, big, MatmulShape{2, 4, 32, 32, 5, 2});
      },
      "out_stride");
  expect_message([&] { kernels_->matmul(seq, TensorType::Q4_0, big, big, big, ok, MatmulVariant{3}); }, "tile 3");
  expect_message(
      [&] {
        kernels_->matmul(seq, TensorType::Q4_0, big, big, big, ok, MatmulVariant{4, MatmulMapping::WholeRows});
      },
      "no tiles");
  // A Q4_0 row is 18 bytes: 3 rows need 54 bytes, padded to 56.
  Buffer exact(*context_, 54);
  expect_message(
      [&] {
        kernels_->matmul(seq, TensorType::Q4_0, exact, big, big, MatmulShape{1, 3, 32, 32, 3, 0});
      },
      "rounded up to 4 bytes");
  EXPECT_EQ(WeightKernels::weight_bytes(TensorType::Q4_0, 3, 32), 56u);
  expect_message([&] { kernels_->embed(seq, TensorType::Q2_K, big, big, big, 4, 100, 0, 4); }, "block size 256");
  expect_message([&] { kernels_->embed(seq, TensorType::F16, big, small, big, 17, 8, 0, 4); }, "buffer tokens");
  expect_message([&] { kernels_->embed(seq, TensorType::F16, big, big, small, 2, 16, 0, 4); }, "buffer out");
  expect_message([&] { kernels_->embed(seq, TensorType::F16, small, big, big, 2, 16, 0, 4); }, "buffer table");
  // Nothing to do is not an error, and records nothing.
  const uint32_t before = seq.dispatch_count();
  kernels_->matmul(seq, TensorType::Q4_0, big, big, big, MatmulShape{0, 4, 32, 32, 4, 0});
  kernels_->embed(seq, TensorType::Q4_0, big, big, big, 0, 32, 0, 4);
  EXPECT_EQ(seq.dispatch_count(), before);
  seq.submit_and_wait();
  for (const TensorType type : kFormats) EXPECT_TRUE(WeightKernels::supports(type)) << type_name(type);
  EXPECT_FALSE(WeightKernels::supports(TensorType::Q8_K));
}

// The step-cost curve t(T) of one weight matrix, for a look at how the cost grows with T
// (not a test: run with --gtest_also_run_disabled_tests). FAFO_BENCH_ROWS and
// FAFO_BENCH_COLS set the shape (default 1024 x 1024), FAFO_BENCH_MAPPING=split|whole
// the mapping (default: automatic).
TEST_F(VulkanWeightKernels, DISABLED_StepCostCurve) {
  const auto env = [](const char* name, uint32_t fallback) {
    const char* v = std::getenv(name);
    return v ? static_cast<uint32_t>(std::stoul(v)) : fallback;
  };
  const uint32_t rows = env("FAFO_BENCH_ROWS", 1024), cols = env("FAFO_BENCH_COLS", 1024);
  const char* mapping_env = std::getenv("FAFO_BENCH_MAPPING");
  const std::string asked = mapping_env ? mapping_env : "";
  const MatmulMapping mapping = asked == "split"   ? MatmulMapping::SplitRows
                                : asked == "whole" ? MatmulMapping::WholeRows
                                                   : MatmulMapping::Auto;
  for (const TensorType type : {TensorType::Q4_K, TensorType::Q8_0, TensorType::F16}) {
    const Weights w = quantized_weights(type, rows, cols, 1);
    const Activations a = random_activations(cols, kMaxT, 2);
    const Buffer bw = make_buffer(*context_, w.bytes.data(), w.bytes.size());
    const Buffer bx = make_buffer(*context_, a.values.data(), a.values.size() * sizeof(float));
    const Buffer out(*context_, size_t{kMaxT} * rows * sizeof(float));
    std::printf("%s %ux%u, %s:", type_name(type).c_str(), rows, cols, mapping_name(mapping).c_str());
    double t1 = 0;
    for (const uint32_t T : {1u, 2u, 3u, 4u, 5u, 8u, 9u, 12u, 16u, 17u, 24u, 32u, 33u, 48u, 64u, 65u, 128u, 256u}) {
      double best = 1e30;
      for (int rep = 0; rep < 3; ++rep) {
        CommandSequence seq(*context_);
        kernels_->matmul(seq, type, bw, bx, out, MatmulShape{T, rows, cols, a.x_stride, rows, 0},
                         MatmulVariant{0, mapping});
        const auto start = std::chrono::steady_clock::now();
        seq.submit_and_wait();
        best =
            std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      }
      if (T == 1) t1 = best;
      std::printf(" T%u %.2fms (%.2fx)", T, best, best / t1);
    }
    std::printf("\n");
  }
}

}  // namespace

#else  // !FAFO_HAVE_VULKAN

TEST(VulkanWeightKernels, Skipped) { GTEST_SKIP() << "fafo was built without Vulkan (FAFO_VULKAN=OFF or not found)"; }

#endif
