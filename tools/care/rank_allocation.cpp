#include "rank_allocation.h"

#include <algorithm>
#include <queue>
#include <stdexcept>
#include <string>
#include <utility>

namespace fafo::care {

namespace {

void check_budget(size_t n_matrices, int64_t budget) {
  if (n_matrices == 0) throw std::invalid_argument("rank allocation: no matrices");
  if (budget < static_cast<int64_t>(n_matrices))
    throw std::invalid_argument("the rank budget " + std::to_string(budget) + " is below one rank per matrix (" +
                                std::to_string(n_matrices) + ": K and V of every layer)");
}

}  // namespace

std::vector<int32_t> allocate_water_filling(const std::vector<std::vector<double>>& spectra, int64_t budget) {
  check_budget(spectra.size(), budget);
  for (size_t m = 0; m < spectra.size(); ++m)
    if (spectra[m].empty()) throw std::invalid_argument("rank allocation: matrix " + std::to_string(m) + " has no singular values");
  std::vector<int32_t> ranks(spectra.size(), 1);
  // (next singular value, -index): the largest value first, then the lowest index.
  std::priority_queue<std::pair<double, int64_t>> next;
  for (size_t m = 0; m < spectra.size(); ++m)
    if (spectra[m].size() > 1) next.emplace(spectra[m][1], -static_cast<int64_t>(m));
  for (int64_t left = budget - static_cast<int64_t>(spectra.size()); left > 0 && !next.empty(); --left) {
    const size_t m = static_cast<size_t>(-next.top().second);
    next.pop();
    const size_t r = static_cast<size_t>(++ranks[m]);
    if (r < spectra[m].size()) next.emplace(spectra[m][r], -static_cast<int64_t>(m));
  }
  return ranks;
}

std::vector<int32_t> allocate_energy_share(const std::vector<std::vector<double>>& spectra, int64_t budget) {
  std::vector<std::vector<double>> shares;
  for (const std::vector<double>& spectrum : spectra) {
    double total = 0.0;
    for (double s : spectrum) total += s * s;
    if (!(total > 0.0) && !spectrum.empty())
      throw std::invalid_argument("rank allocation: matrix " + std::to_string(shares.size()) + " has no energy (all singular values 0)");
    std::vector<double> share;
    for (double s : spectrum) share.push_back(s * s / total);
    shares.push_back(std::move(share));
  }
  return allocate_water_filling(shares, budget);
}

std::vector<int32_t> allocate_uniform(const std::vector<int32_t>& caps, int64_t budget) {
  check_budget(caps.size(), budget);
  for (size_t m = 0; m < caps.size(); ++m)
    if (caps[m] < 1) throw std::invalid_argument("rank allocation: matrix " + std::to_string(m) + " has no rank to give");
  std::vector<int32_t> ranks(caps.size(), 0);
  int64_t left = budget;
  // Rounds of an equal share to every matrix with room; what a cap refuses is shared in
  // the next round, and the last, partial round goes to the first matrices.
  for (bool room = true; left > 0 && room;) {
    int64_t open = 0;
    for (size_t m = 0; m < caps.size(); ++m) open += ranks[m] < caps[m];
    room = open > 0;
    const int64_t share = std::max<int64_t>(1, left / std::max<int64_t>(open, 1));
    for (size_t m = 0; m < caps.size() && left > 0; ++m) {
      const int64_t give = std::min<int64_t>({share, caps[m] - ranks[m], left});
      if (give <= 0) continue;
      ranks[m] += static_cast<int32_t>(give);
      left -= give;
    }
  }
  return ranks;
}

}  // namespace fafo::care
