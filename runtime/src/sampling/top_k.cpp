#include "fafo/top_k.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace fafo {

bool top_k_row(const float* x, int32_t n, int32_t k, int32_t* ids, float* values) {
  if (k < 0 || k > n) throw std::invalid_argument("top_k_row: k must be in [0, n]");
  for (int32_t i = 0; i < n; ++i)
    if (std::isnan(x[i])) return false;
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  // A strict weak order without NaN; ties (including -0.0 == +0.0) by the lower id.
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  for (int32_t j = 0; j < k; ++j) {
    ids[j] = order[static_cast<size_t>(j)];
    values[j] = x[ids[j]];
  }
  return true;
}

}  // namespace fafo
