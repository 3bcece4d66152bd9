#include "fafo/quant_mix.h"

#include <cctype>
#include <map>
#include <stdexcept>

namespace fafo {
namespace {

bool use_more_bits(int32_t layer, int32_t n_layer) {
  return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

int32_t layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  try {
    return std::stoi(name.substr(4));
  } catch (const std::exception&) {
    return -1;
  }
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string upper(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

// When a row does not fit a format's blocks, the format llama.cpp falls back to.
TensorType fit_row(TensorType t, int64_t row_length) {
  if (row_length % tensor_type_info(t).block_size == 0) return t;
  switch (t) {
    case TensorType::Q2_K:
    case TensorType::Q3_K: t = TensorType::Q4_0; break;
    case TensorType::Q4_K: t = TensorType::Q5_0; break;
    case TensorType::Q5_K: t = TensorType::Q5_1; break;
    case TensorType::Q6_K: t = TensorType::Q8_0; break;
    case TensorType::IQ4_XS:
    case TensorType::IQ2_XXS:
    case TensorType::IQ2_XS:
    case TensorType::IQ3_XXS:
    case TensorType::IQ3_S: t = TensorType::IQ4_NL; break;
    default: break;
  }
  return row_length % tensor_type_info(t).block_size == 0 ? t : TensorType::F16;
}

}  // namespace

const char* quant_mix_names() {
  return "F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K Q6_K IQ3_XXS IQ3_S IQ4_NL IQ4_XS MXFP4 Q4_K_M Q5_K_M "
         "MXFP4_MOE";
}

TensorType quant_type_for(const std::string& mix_name, const std::string& name, int64_t row_length, int32_t n_layer,
                          bool tied_embeddings, int32_t n_expert) {
  static const std::map<std::string, TensorType> mixes = {{"Q4_K_M", TensorType::Q4_K}, {"Q5_K_M", TensorType::Q5_K}};
  const std::string mix = upper(mix_name);
  TensorType t;
  if (auto m = mixes.find(mix); m != mixes.end()) {
    t = m->second;
    if (name == "output.weight" || (tied_embeddings && name == "token_embd.weight"))
      t = row_length % tensor_type_info(TensorType::Q6_K).block_size == 0 ? TensorType::Q6_K : TensorType::Q8_0;
    if ((ends_with(name, "attn_v.weight") || ends_with(name, "ffn_down.weight") ||
         ends_with(name, "ffn_down_exps.weight")) &&
        use_more_bits(layer_of(name), n_layer))
      t = TensorType::Q6_K;
    // An 8-expert model's keys and values: Q8_0, as llama.cpp ("trades just ~128MB").
    if (n_expert == 8 && (ends_with(name, "attn_v.weight") || ends_with(name, "attn_k.weight"))) t = TensorType::Q8_0;
    // A fused query-key-value projection (Phi-3) gets one step more, as in llama.cpp.
    if (ends_with(name, "attn_qkv.weight")) t = mix == "Q4_K_M" ? TensorType::Q5_K : TensorType::Q6_K;
  } else if (mix == "MXFP4_MOE") {
    // As llama.cpp's MXFP4_MOE (gpt-oss's published layout): the experts MXFP4, every
    // other matrix, the output included, Q8_0.
    t = ends_with(name, "_exps.weight") ? TensorType::MXFP4 : TensorType::Q8_0;
  } else {
    const auto parsed = tensor_type_from_name(mix);
    if (parsed && tensor_type_info(*parsed).has_dequantize && !tensor_type_info(*parsed).has_quantize)
      throw std::invalid_argument("fafo reads " + mix + " files but does not write " + mix +
                                  ": llama.cpp's quantizer for it searches its codebook with an importance matrix "
                                  "(llama-quantize --imatrix); fafo writes " + quant_mix_names());
    if (!parsed || !tensor_type_info(*parsed).has_quantize || *parsed == TensorType::Q8_1 || *parsed == TensorType::Q8_K)
      throw std::invalid_argument("unknown or unsupported weight type '" + mix_name + "' (" + quant_mix_names() + ")");
    t = *parsed;
  }
  // (A mixture of experts' router stays F32, as llama.cpp's quantize leaves it.)
  if (ends_with(name, "_norm.weight") || ends_with(name, ".bias") || name == "rope_freqs.weight" ||
      ends_with(name, "ffn_gate_inp.weight"))
    return TensorType::F32;
  return fit_row(t, row_length);
}

uint32_t quant_file_type(const std::string& mix) {
  static const std::map<std::string, uint32_t> file_types = {
      {"F32", 0},   {"F16", 1},   {"Q4_0", 2},  {"Q4_1", 3},  {"Q8_0", 7},    {"Q5_0", 8},    {"Q5_1", 9},
      {"Q2_K", 10}, {"Q3_K", 11}, {"Q4_K", 14}, {"Q5_K", 16}, {"Q6_K", 18}, {"Q4_K_M", 15}, {"Q5_K_M", 17}, {"BF16", 32},
      {"IQ4_NL", 25}, {"IQ4_XS", 30}, {"MXFP4", 38}, {"MXFP4_MOE", 38}, {"IQ3_XXS", 23}, {"IQ3_S", 26},
      // formats fafo reads only (fafo-synth writes random codes in them)
      {"IQ2_XXS", 19}, {"IQ2_XS", 20}};
  const auto it = file_types.find(upper(mix));
  if (it == file_types.end()) throw std::invalid_argument("no GGUF file type for '" + mix + "' (" + quant_mix_names() + ")");
  return it->second;
}

}  // namespace fafo
