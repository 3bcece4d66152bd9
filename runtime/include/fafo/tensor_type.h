// Weight formats as GGUF stores them (ggml type ids), their block layouts, and
// conversion to and from float32 on the CPU.
//
// Every format is a sequence of fixed-size blocks; a block encodes `block_size`
// consecutive values of a row in `block_bytes` bytes. Rows are always a whole
// number of blocks. The byte layouts are exactly those of GGUF files from the Hub
// (ggml's block structs, little endian; see runtime/src/quant/blocks.h).
//
// Dequantization is bit-exact with ggml's CPU reference (to_float), -0.0 included.
// Quantization produces valid blocks with llama.cpp-like error but not llama-quantize's
// exact bits (no importance matrix). Every type in the table below can be read and written,
// including Q8_1 and Q8_K (ggml's activation formats). Errors (unknown type, a value count
// that is not a whole number of blocks) throw std::invalid_argument.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fafo {

// Numeric values are the ggml type ids written in GGUF tensor infos.
enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ4_XS = 23,
  BF16 = 30,
  MXFP4 = 39,
};

struct TensorTypeInfo {
  TensorType type;
  std::string_view name;   // upper case, as ggml names it ("Q4_K")
  uint32_t block_size;     // values per block
  uint32_t block_bytes;    // bytes per block
  bool has_dequantize;     // fafo can read it
  bool has_quantize;       // fafo can write it
};

// Info for a ggml type id, or nullptr when the id is unknown to fafo.
const TensorTypeInfo* tensor_type_info(uint32_t ggml_type_id);
// Info for a type; throws std::invalid_argument for a value outside the table.
const TensorTypeInfo& tensor_type_info(TensorType type);
std::string_view tensor_type_name(TensorType type);
// ggml's name for a type id fafo does not read ("IQ3_S" for 21, "IQ2_XXS" for 16, ...),
// for error messages; empty for ids ggml does not define and for fafo's own types.
std::string_view unsupported_ggml_type_name(uint32_t ggml_type_id);
// The names of the weight formats fafo reads, space-separated ("F32 F16 ... MXFP4").
std::string weight_type_names();
// Case-insensitive lookup by name ("q4_k", "F16", "bf16").
std::optional<TensorType> tensor_type_from_name(std::string_view name);

// Bytes used by a row of n values; n must be a multiple of the block size
// (std::invalid_argument otherwise).
size_t tensor_row_bytes(TensorType type, int64_t n);

// Decodes n values (a multiple of the block size) from src into dst. src needs no
// particular alignment. Throws std::invalid_argument for an unsupported type or a bad n.
void dequantize_row(TensorType type, const void* src, float* dst, int64_t n);
// Encodes n values (a multiple of the block size) from src into dst
// (tensor_row_bytes(type, n) bytes, no alignment needed). Throws like dequantize_row.
// Single-threaded; rows are independent, so callers may quantize rows in parallel.
void quantize_row(TensorType type, const float* src, void* dst, int64_t n);

// Scalar half / bfloat16 conversions (round to nearest even; infinities kept, NaNs stay
// NaNs (quiet), fp16 subnormals produced and read exactly).
// fp16_to_fp32 is inline: the cpu backend's kernels call it once per weight block.
inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x03ffu;
  uint32_t bits;
  if (exponent == 0x1f) bits = 0x7f800000u | (mantissa << 13);           // infinity or NaN: same payload
  else if (exponent != 0) bits = ((exponent + 112u) << 23) | (mantissa << 13);  // normal: rebias 15 -> 127
  else bits = std::bit_cast<uint32_t>(static_cast<float>(mantissa) * 0x1p-24f);  // zero or subnormal, exact
  return std::bit_cast<float>(sign | bits);
}
uint16_t fp32_to_fp16(float f);
float bf16_to_fp32(uint16_t h);
uint16_t fp32_to_bf16(float f);

}  // namespace fafo
