// quant-reference: what ggml's own code does with a weight format, for checking fafo's
// quantizer and dequantizer bit for bit (tests/data/quant/<FORMAT>.json). Built outside
// this repository against a llama.cpp checkout (not part of fafo's build):
//   c++ -O2 -std=c++20 tools/peer/quant_reference.cpp -I$LLAMA/ggml/include \
//       -L$LLAMA/build/bin -lggml-base -Wl,-rpath,$LLAMA/build/bin -o quant-reference
//   quant-reference FORMAT LLAMA_COMMIT > FORMAT.json
// It writes, as hex strings of little-endian bytes:
//   input: 8 rows of 256 float32 values (its own generator: Gaussian rows of several
//     scales, a row with outliers, a row of tiny values, a row of zeros and exact ties);
//   blocks: those rows quantized by ggml_quantize_chunk (no importance matrix), as
//     llama-quantize does; dequantized: the blocks through the type's to_float;
//   random_blocks: 4,096 values' worth of blocks of random bytes (every code, scale and exponent byte,
//     fp16 infinities and NaNs included); random_dequantized: their to_float values;
//   many_random: the SHA-256 of the to_float values (float32 bits, little endian) of
//     1,048,576 values' worth of random bytes, splitmix64 from the seed given (each
//     output's top byte), so a test can make the same bytes: enough to reach every entry
//     of the codebook formats' tables.
// The formats whose quantizer requires an importance matrix (IQ2_XXS, IQ2_XS) are
// quantized with one of all ones ("imatrix": "ones" in the output).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ggml.h"
#include "../../tests/sha256.h"

namespace {

uint64_t g_state = 0x9e3779b97f4a7c15ull;
uint64_t next_u64() {  // splitmix64
  uint64_t z = (g_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1p-53; }
float gaussian(double sigma) {
  const double u = uniform() + 0x1p-60, v = uniform();
  return static_cast<float>(sigma * std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v));
}

std::string hex(const void* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) {
    s += digits[b[i] >> 4];
    s += digits[b[i] & 15];
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: quant-reference FORMAT LLAMA_COMMIT\n");
    return 2;
  }
  const std::string name = argv[1];
  ggml_type type = GGML_TYPE_COUNT;
  for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
    const char* n = ggml_type_name(static_cast<ggml_type>(t));
    if (n && name == n) type = static_cast<ggml_type>(t);
  }
  if (type == GGML_TYPE_COUNT) {
    std::fprintf(stderr, "quant-reference: unknown type %s\n", name.c_str());
    return 2;
  }
  const int64_t rows = 8, cols = 256;
  std::vector<float> input(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    float* x = input.data() + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      switch (r) {
        case 0: x[c] = gaussian(0.05); break;
        case 1: x[c] = gaussian(1.0); break;
        case 2: x[c] = gaussian(0.02) + (c % 37 == 0 ? gaussian(2.0) : 0.0f); break;  // outliers
        case 3: x[c] = gaussian(1e-3); break;
        case 4: x[c] = gaussian(3e-9); break;  // tiny
        case 5: x[c] = c < 64 ? 0.0f : gaussian(0.1); break;  // zero blocks
        case 6: x[c] = static_cast<float>(static_cast<int>(c % 9) - 4) * 0.25f; break;  // exact ties
        default: x[c] = gaussian(100.0); break;
      }
    }
  }
  ggml_quantize_init(type);
  const size_t row_bytes = ggml_row_size(type, cols);
  std::vector<uint8_t> blocks(row_bytes * rows);
  const bool needs_imatrix = ggml_quantize_requires_imatrix(type);
  const std::vector<float> ones(static_cast<size_t>(cols), 1.0f);
  ggml_quantize_chunk(type, input.data(), blocks.data(), 0, rows, cols, needs_imatrix ? ones.data() : nullptr);
  const auto* traits = ggml_get_type_traits(type);
  std::vector<float> dequantized(input.size());
  traits->to_float(blocks.data(), dequantized.data(), rows * cols);

  const int64_t n_random = 4096 / traits->blck_size;  // 4,096 values
  std::vector<uint8_t> random_blocks(traits->type_size * n_random);
  for (auto& b : random_blocks) b = static_cast<uint8_t>(next_u64() >> 56);
  std::vector<float> random_dequantized(static_cast<size_t>(n_random * traits->blck_size));
  traits->to_float(random_blocks.data(), random_dequantized.data(), static_cast<int64_t>(random_dequantized.size()));

  const uint64_t many_seed = 0x243f6a8885a308d3ull;
  g_state = many_seed;
  const int64_t many_values = 1 << 20;
  std::vector<uint8_t> many_blocks(traits->type_size * (many_values / traits->blck_size));
  for (auto& b : many_blocks) b = static_cast<uint8_t>(next_u64() >> 56);
  std::vector<float> many(static_cast<size_t>(many_values));
  traits->to_float(many_blocks.data(), many.data(), many_values);

  std::printf("{\n  \"format\": \"%s\",\n  \"llama_cpp_commit\": \"%s\",\n  \"rows\": %lld,\n  \"cols\": %lld,\n",
              name.c_str(), argv[2], static_cast<long long>(rows), static_cast<long long>(cols));
  if (needs_imatrix) std::printf("  \"imatrix\": \"ones\",\n");
  std::printf("  \"many_random\": {\"seed\": %llu, \"values\": %lld, \"sha256\": \"%s\"},\n",
              static_cast<unsigned long long>(many_seed), static_cast<long long>(many_values),
              fafo::test::sha256_hex(many.data(), many.size() * 4).c_str());
  std::printf("  \"input\": \"%s\",\n", hex(input.data(), input.size() * 4).c_str());
  std::printf("  \"blocks\": \"%s\",\n", hex(blocks.data(), blocks.size()).c_str());
  std::printf("  \"dequantized\": \"%s\",\n", hex(dequantized.data(), dequantized.size() * 4).c_str());
  std::printf("  \"random_blocks\": \"%s\",\n", hex(random_blocks.data(), random_blocks.size()).c_str());
  std::printf("  \"random_dequantized\": \"%s\"\n}\n",
              hex(random_dequantized.data(), random_dequantized.size() * 4).c_str());
  return 0;
}
