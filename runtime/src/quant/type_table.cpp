// The table of weight formats fafo knows, lookups by id and name, row sizes, and the
// dispatch of dequantize_row / quantize_row to the per-format kernels.
#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <stdexcept>
#include <string>

#include "fafo/tensor_type.h"
#include "quant/blocks.h"
#include "quant/formats.h"

namespace fafo {

namespace {

constexpr std::array kTypes = {
    TensorTypeInfo{TensorType::F32, "F32", 1, 4, true, true},
    TensorTypeInfo{TensorType::F16, "F16", 1, 2, true, true},
    TensorTypeInfo{TensorType::Q4_0, "Q4_0", quant::kLegacyBlock, sizeof(quant::BlockQ4_0), true, true},
    TensorTypeInfo{TensorType::Q4_1, "Q4_1", quant::kLegacyBlock, sizeof(quant::BlockQ4_1), true, true},
    TensorTypeInfo{TensorType::Q5_0, "Q5_0", quant::kLegacyBlock, sizeof(quant::BlockQ5_0), true, true},
    TensorTypeInfo{TensorType::Q5_1, "Q5_1", quant::kLegacyBlock, sizeof(quant::BlockQ5_1), true, true},
    TensorTypeInfo{TensorType::Q8_0, "Q8_0", quant::kLegacyBlock, sizeof(quant::BlockQ8_0), true, true},
    TensorTypeInfo{TensorType::Q8_1, "Q8_1", quant::kLegacyBlock, sizeof(quant::BlockQ8_1), true, true},
    TensorTypeInfo{TensorType::Q2_K, "Q2_K", quant::kSuperBlock, sizeof(quant::BlockQ2_K), true, true},
    TensorTypeInfo{TensorType::Q3_K, "Q3_K", quant::kSuperBlock, sizeof(quant::BlockQ3_K), true, true},
    TensorTypeInfo{TensorType::Q4_K, "Q4_K", quant::kSuperBlock, sizeof(quant::BlockQ4_K), true, true},
    TensorTypeInfo{TensorType::Q5_K, "Q5_K", quant::kSuperBlock, sizeof(quant::BlockQ5_K), true, true},
    TensorTypeInfo{TensorType::Q6_K, "Q6_K", quant::kSuperBlock, sizeof(quant::BlockQ6_K), true, true},
    TensorTypeInfo{TensorType::Q8_K, "Q8_K", quant::kSuperBlock, sizeof(quant::BlockQ8_K), true, true},
    TensorTypeInfo{TensorType::IQ2_XXS, "IQ2_XXS", quant::kSuperBlock, sizeof(quant::BlockIq2Xxs), true, false},
    TensorTypeInfo{TensorType::IQ2_XS, "IQ2_XS", quant::kSuperBlock, sizeof(quant::BlockIq2Xs), true, false},
    TensorTypeInfo{TensorType::IQ3_XXS, "IQ3_XXS", quant::kSuperBlock, sizeof(quant::BlockIq3Xxs), true, true},
    TensorTypeInfo{TensorType::IQ3_S, "IQ3_S", quant::kSuperBlock, sizeof(quant::BlockIq3S), true, true},
    TensorTypeInfo{TensorType::IQ4_NL, "IQ4_NL", quant::kLegacyBlock, sizeof(quant::BlockIq4Nl), true, true},
    TensorTypeInfo{TensorType::IQ4_XS, "IQ4_XS", quant::kSuperBlock, sizeof(quant::BlockIq4Xs), true, true},
    TensorTypeInfo{TensorType::BF16, "BF16", 1, 2, true, true},
    TensorTypeInfo{TensorType::MXFP4, "MXFP4", quant::kLegacyBlock, sizeof(quant::BlockMxfp4), true, true},
};

const TensorTypeInfo* find_info(uint32_t id) {
  const auto* it = std::find_if(kTypes.begin(), kTypes.end(),
                                [id](const TensorTypeInfo& info) { return static_cast<uint32_t>(info.type) == id; });
  return it == kTypes.end() ? nullptr : &*it;
}

std::string describe(TensorType type) {
  const TensorTypeInfo* info = find_info(static_cast<uint32_t>(type));
  const std::string id = "ggml type id " + std::to_string(static_cast<uint32_t>(type));
  return info ? std::string(info->name) + " (" + id + ")" : id;
}

// Checks n against the block size and returns the number of blocks.
int64_t block_count(const TensorTypeInfo& info, int64_t n, const char* what) {
  if (n < 0 || n % info.block_size != 0) {
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(n) + " values is not a whole number of " +
                                std::string(info.name) + " blocks of " + std::to_string(info.block_size));
  }
  return n / info.block_size;
}

}  // namespace

const TensorTypeInfo* tensor_type_info(uint32_t ggml_type_id) { return find_info(ggml_type_id); }

const TensorTypeInfo& tensor_type_info(TensorType type) {
  const TensorTypeInfo* info = find_info(static_cast<uint32_t>(type));
  if (!info) throw std::invalid_argument("unknown tensor type: " + describe(type));
  return *info;
}

std::string_view tensor_type_name(TensorType type) { return tensor_type_info(type).name; }

std::string_view unsupported_ggml_type_name(uint32_t id) {
  if (find_info(id)) return {};
  // ggml's type ids (ggml.h) that GGUF files may hold and fafo does not read.
  static constexpr std::array<std::pair<uint32_t, std::string_view>, 12> kOthers = {{{19, "IQ1_S"},
                                                                                   {22, "IQ2_S"},
                                                                                   {24, "I8"},
                                                                                   {25, "I16"},
                                                                                   {26, "I32"},
                                                                                   {27, "I64"},
                                                                                   {28, "F64"},
                                                                                   {29, "IQ1_M"},
                                                                                   {34, "TQ1_0"},
                                                                                   {35, "TQ2_0"},
                                                                                   {40, "NVFP4"},
                                                                                   {41, "Q1_0"}}};
  for (const auto& [other, name] : kOthers)
    if (other == id) return name;
  return {};
}

std::string weight_type_names() {
  std::string names;
  for (const TensorTypeInfo& info : kTypes) {
    if (info.type == TensorType::Q8_1 || info.type == TensorType::Q8_K) continue;  // activation formats
    if (!names.empty()) names += ' ';
    names += info.name;
  }
  return names;
}

std::optional<TensorType> tensor_type_from_name(std::string_view name) {
  for (const TensorTypeInfo& info : kTypes) {
    const bool same = std::equal(name.begin(), name.end(), info.name.begin(), info.name.end(), [](char a, char b) {
      return std::toupper(static_cast<unsigned char>(a)) == std::toupper(static_cast<unsigned char>(b));
    });
    if (same) return info.type;
  }
  return std::nullopt;
}

size_t tensor_row_bytes(TensorType type, int64_t n) {
  const TensorTypeInfo& info = tensor_type_info(type);
  return static_cast<size_t>(block_count(info, n, "tensor_row_bytes")) * info.block_bytes;
}

void dequantize_row(TensorType type, const void* src, float* dst, int64_t n) {
  const TensorTypeInfo& info = tensor_type_info(type);
  if (!info.has_dequantize) throw std::invalid_argument("dequantize_row: unsupported type " + describe(type));
  const int64_t blocks = block_count(info, n, "dequantize_row");
  const auto* bytes = static_cast<const uint8_t*>(src);
  switch (type) {
    case TensorType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case TensorType::F16: quant::dequantize_f16(bytes, dst, n); return;
    case TensorType::BF16: quant::dequantize_bf16(bytes, dst, n); return;
    case TensorType::Q4_0: quant::dequantize_q4_0(bytes, dst, blocks); return;
    case TensorType::Q4_1: quant::dequantize_q4_1(bytes, dst, blocks); return;
    case TensorType::Q5_0: quant::dequantize_q5_0(bytes, dst, blocks); return;
    case TensorType::Q5_1: quant::dequantize_q5_1(bytes, dst, blocks); return;
    case TensorType::Q8_0: quant::dequantize_q8_0(bytes, dst, blocks); return;
    case TensorType::Q8_1: quant::dequantize_q8_1(bytes, dst, blocks); return;
    case TensorType::Q2_K: quant::dequantize_q2_k(bytes, dst, blocks); return;
    case TensorType::Q3_K: quant::dequantize_q3_k(bytes, dst, blocks); return;
    case TensorType::Q4_K: quant::dequantize_q4_k(bytes, dst, blocks); return;
    case TensorType::Q5_K: quant::dequantize_q5_k(bytes, dst, blocks); return;
    case TensorType::Q6_K: quant::dequantize_q6_k(bytes, dst, blocks); return;
    case TensorType::Q8_K: quant::dequantize_q8_k(bytes, dst, blocks); return;
    case TensorType::IQ2_XXS: quant::dequantize_iq2_xxs(bytes, dst, blocks); return;
    case TensorType::IQ2_XS: quant::dequantize_iq2_xs(bytes, dst, blocks); return;
    case TensorType::IQ3_XXS: quant::dequantize_iq3_xxs(bytes, dst, blocks); return;
    case TensorType::IQ3_S: quant::dequantize_iq3_s(bytes, dst, blocks); return;
    case TensorType::IQ4_NL: quant::dequantize_iq4_nl(bytes, dst, blocks); return;
    case TensorType::IQ4_XS: quant::dequantize_iq4_xs(bytes, dst, blocks); return;
    case TensorType::MXFP4: quant::dequantize_mxfp4(bytes, dst, blocks); return;
  }
  throw std::invalid_argument("dequantize_row: unsupported type " + describe(type));
}

void quantize_row(TensorType type, const float* src, void* dst, int64_t n) {
  const TensorTypeInfo& info = tensor_type_info(type);
  if (!info.has_quantize) throw std::invalid_argument("quantize_row: unsupported type " + describe(type));
  const int64_t blocks = block_count(info, n, "quantize_row");
  auto* bytes = static_cast<uint8_t*>(dst);
  switch (type) {
    case TensorType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case TensorType::F16: quant::quantize_f16(src, bytes, n); return;
    case TensorType::BF16: quant::quantize_bf16(src, bytes, n); return;
    case TensorType::Q4_0: quant::quantize_q4_0(src, bytes, blocks); return;
    case TensorType::Q4_1: quant::quantize_q4_1(src, bytes, blocks); return;
    case TensorType::Q5_0: quant::quantize_q5_0(src, bytes, blocks); return;
    case TensorType::Q5_1: quant::quantize_q5_1(src, bytes, blocks); return;
    case TensorType::Q8_0: quant::quantize_q8_0(src, bytes, blocks); return;
    case TensorType::Q8_1: quant::quantize_q8_1(src, bytes, blocks); return;
    case TensorType::Q2_K: quant::quantize_q2_k(src, bytes, blocks); return;
    case TensorType::Q3_K: quant::quantize_q3_k(src, bytes, blocks); return;
    case TensorType::Q4_K: quant::quantize_q4_k(src, bytes, blocks); return;
    case TensorType::Q5_K: quant::quantize_q5_k(src, bytes, blocks); return;
    case TensorType::Q6_K: quant::quantize_q6_k(src, bytes, blocks); return;
    case TensorType::Q8_K: quant::quantize_q8_k(src, bytes, blocks); return;
    case TensorType::IQ2_XXS:
    case TensorType::IQ2_XS: break;  // read only (has_quantize is false)
    case TensorType::IQ3_XXS: quant::quantize_iq3_xxs(src, bytes, blocks); return;
    case TensorType::IQ3_S: quant::quantize_iq3_s(src, bytes, blocks); return;
    case TensorType::IQ4_NL: quant::quantize_iq4_nl(src, bytes, blocks); return;
    case TensorType::IQ4_XS: quant::quantize_iq4_xs(src, bytes, blocks); return;
    case TensorType::MXFP4: quant::quantize_mxfp4(src, bytes, blocks); return;
  }
  throw std::invalid_argument("quantize_row: unsupported type " + describe(type));
}

}  // namespace fafo
