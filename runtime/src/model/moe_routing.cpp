// Mixture-of-experts routing on the host (fafo/moe_routing.h).
#include "fafo/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>

namespace fafo {

namespace {
// An empty route of k experts per row for the rows of `logits`; throws
// std::invalid_argument (naming `fn`) unless 1 <= k <= n_expert and the logits are whole rows.
MoeRoute empty_route(const char* fn, std::span<const float> logits, int32_t n_expert, int32_t k) {
  if (n_expert < 1 || k < 1 || k > n_expert)
    throw std::invalid_argument(std::string(fn) + ": " + std::to_string(k) + " of " + std::to_string(n_expert) + " experts");
  if (logits.size() % static_cast<size_t>(n_expert) != 0)
    throw std::invalid_argument(std::string(fn) + ": the logits are not whole rows of " + std::to_string(n_expert));
  const size_t n_rows = logits.size() / static_cast<size_t>(n_expert);
  MoeRoute route;
  route.k = k;
  route.experts.reserve(n_rows * static_cast<size_t>(k));
  route.weights.reserve(n_rows * static_cast<size_t>(k));
  return route;
}
}  // namespace

MoeRoute route_top_k_softmax(std::span<const float> logits, int32_t n_expert, int32_t k, bool normalize) {
  MoeRoute route = empty_route("route_top_k_softmax", logits, n_expert, k);
  const size_t n_rows = logits.size() / static_cast<size_t>(n_expert);
  std::vector<float> probs(static_cast<size_t>(n_expert));
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  for (size_t r = 0; r < n_rows; ++r) {
    const float* row = logits.data() + r * static_cast<size_t>(n_expert);
    // Softmax: exp(x - max), summed in double, times 1 / sum (as ggml's CPU softmax).
    const float max = *std::max_element(row, row + n_expert);
    double sum = 0.0;
    for (int32_t e = 0; e < n_expert; ++e) {
      probs[static_cast<size_t>(e)] = std::exp(row[e] - max);
      sum += probs[static_cast<size_t>(e)];
    }
    const float scale = static_cast<float>(1.0 / sum);
    for (float& p : probs) p *= scale;
    std::iota(order.begin(), order.end(), 0);
    // (A NaN, from a NaN logit, ranks below every probability: the order stays strict.)
    const auto ranked = [&](int32_t e) {
      const float p = probs[static_cast<size_t>(e)];
      return std::isnan(p) ? -1.0f : p;
    };
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const float pa = ranked(a), pb = ranked(b);
      return pa > pb || (pa == pb && a < b);
    });
    float chosen = 0.0f;
    for (int32_t j = 0; j < k; ++j) chosen += probs[static_cast<size_t>(order[static_cast<size_t>(j)])];
    const float divisor = std::max(chosen, 6.103515625e-5f);
    for (int32_t j = 0; j < k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      route.experts.push_back(e);
      route.weights.push_back(normalize ? probs[static_cast<size_t>(e)] / divisor : probs[static_cast<size_t>(e)]);
    }
  }
  return route;
}

MoeRoute route_top_k_then_softmax(std::span<const float> logits, int32_t n_expert, int32_t k) {
  MoeRoute route = empty_route("route_top_k_then_softmax", logits, n_expert, k);
  const size_t n_rows = logits.size() / static_cast<size_t>(n_expert);
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  std::vector<float> chosen(static_cast<size_t>(k));
  for (size_t r = 0; r < n_rows; ++r) {
    const float* row = logits.data() + r * static_cast<size_t>(n_expert);
    // (A NaN logit ranks as -inf: the order stays strict.)
    const auto ranked = [&](int32_t e) { return std::isnan(row[e]) ? -INFINITY : row[e]; };
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const float la = ranked(a), lb = ranked(b);
      return la > lb || (la == lb && a < b);
    });
    // The softmax of the chosen logits, as ggml's CPU softmax: exp(x - max) summed in
    // double, times 1 / sum.
    const float max = row[order[0]];
    double sum = 0.0;
    for (int32_t j = 0; j < k; ++j) {
      chosen[static_cast<size_t>(j)] = std::exp(row[order[static_cast<size_t>(j)]] - max);
      sum += chosen[static_cast<size_t>(j)];
    }
    const float scale = static_cast<float>(1.0 / sum);
    for (int32_t j = 0; j < k; ++j) {
      route.experts.push_back(order[static_cast<size_t>(j)]);
      route.weights.push_back(chosen[static_cast<size_t>(j)] * scale);
    }
  }
  return route;
}

std::vector<ExpertRows> rows_by_expert(const MoeRoute& route) {
  std::map<int32_t, ExpertRows> by_expert;
  for (int32_t r = 0; r < route.rows(); ++r)
    for (int32_t j = 0; j < route.k; ++j) {
      const size_t at = static_cast<size_t>(r) * static_cast<size_t>(route.k) + static_cast<size_t>(j);
      ExpertRows& e = by_expert[route.experts[at]];
      e.expert = route.experts[at];
      e.rows.push_back(r);
      e.weights.push_back(route.weights[at]);
    }
  std::vector<ExpertRows> out;
  out.reserve(by_expert.size());
  for (auto& [expert, rows] : by_expert) out.push_back(std::move(rows));
  return out;
}

}  // namespace fafo
