// A mixture-of-experts layer's routing (qwen3moe, gpt-oss): which experts each token's feed-forward
// block runs and with what weights, from the router's logits (ffn_gate_inp times the
// token's normalized hidden state). Computed on the host, one row at a time, so a
// token routes the same whatever else its step holds (T-invariance): the logits come
// from the backend's product, which is T-invariant, and nothing here looks past a row.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace fafo {

// The experts chosen for a step's rows: row r's k experts (best first) and weights at
// [r * k, r * k + k).
struct MoeRoute {
  int32_t k = 0;
  std::vector<int32_t> experts;
  std::vector<float> weights;
  int32_t rows() const { return k > 0 ? static_cast<int32_t>(experts.size()) / k : 0; }
};

// As llama.cpp's build_moe_ffn with softmax gating and normalized weights (qwen3moe):
// each row's probabilities are the softmax of its n_expert logits; the k most probable
// experts are chosen (equal probabilities: the lower index first); with `normalize`,
// their probabilities are divided by their sum (at least 2^-14). Throws
// std::invalid_argument unless 1 <= k <= n_expert and logits holds whole rows.
MoeRoute route_top_k_softmax(std::span<const float> logits, int32_t n_expert, int32_t k, bool normalize = true);

// As llama.cpp's build_moe_ffn with LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT (gpt-oss):
// the k largest logits choose the experts (equal logits: the lower index first; a NaN
// ranks as -inf), weighted by the softmax of those k logits. Throws as
// route_top_k_softmax.
MoeRoute route_top_k_then_softmax(std::span<const float> logits, int32_t n_expert, int32_t k);

// One expert's share of a step: the rows that chose it (ascending) and their weights.
struct ExpertRows {
  int32_t expert = 0;
  std::vector<int32_t> rows;
  std::vector<float> weights;
};
// The route by expert, in ascending expert order (experts no row chose left out). A
// layer adds each expert's outputs in this order, so each row's sum runs over its
// experts in ascending index, whatever the other rows chose.
std::vector<ExpertRows> rows_by_expert(const MoeRoute& route);

}  // namespace fafo
