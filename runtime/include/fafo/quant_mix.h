// Which weight type each tensor of a model gets when it is quantized to a named type or
// to one of llama.cpp's mixes (used by `fafo quantize` and fafo-synth).
#pragma once

#include <cstdint>
#include <string>

#include "fafo/tensor_type.h"

namespace fafo {

// The names quant_type_for accepts: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K
// Q4_K Q5_K Q6_K IQ4_NL IQ4_XS MXFP4, and the mixes Q4_K_M, Q5_K_M and MXFP4_MOE.
const char* quant_mix_names();

// The type of tensor `name` (rows of `row_length` values) of a model of `n_layer` layers
// quantized to `mix`. Norms, biases and rope_freqs stay F32. In the mixes, as llama.cpp:
// output.weight (and a tied token_embd) is Q6_K, attn_v and ffn_down are Q6_K in the
// first and last eighth of the layers and every third layer between, the rest is Q4_K
// (Q4_K_M) or Q5_K (Q5_K_M); a mixture of experts' ffn_down_exps as ffn_down, its
// router (ffn_gate_inp) F32, and with exactly 8 experts (`n_expert`) attn_k and attn_v
// Q8_0. MXFP4_MOE: the experts (*_exps) MXFP4, every other matrix Q8_0. A row that is
// not a whole number of the type's blocks gets the type llama.cpp falls back to (Q4_0 /
// Q5_0 / Q5_1 / Q8_0 for the K types, IQ4_NL for IQ4_XS, else F16). Throws
// std::invalid_argument naming an unknown `mix` and the names above.
TensorType quant_type_for(const std::string& mix, const std::string& name, int64_t row_length, int32_t n_layer,
                          bool tied_embeddings, int32_t n_expert = 0);

// llama.cpp's general.file_type for `mix` (its llama_ftype; the single K types are
// labelled with their _S variants). Throws std::invalid_argument for an unknown mix.
uint32_t quant_file_type(const std::string& mix);

}  // namespace fafo
