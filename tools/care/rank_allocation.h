// How a total budget of latent dimensions is split among the projections (thesis section
// 3.2.4 and Algorithm 2). Matrices are indexed 2l (layer l's K) and 2l + 1 (its V).
#pragma once

#include <cstdint>
#include <vector>

namespace fafo::care {

// Water-filling: every matrix starts at rank 1; each further rank goes to the matrix
// whose next singular value (spectra[m][rank_m]) is largest, the lowest index on a tie,
// until `budget` ranks are given or every matrix holds its whole spectrum (its cap:
// spectra[m].size()). Spectra must be non-increasing. Throws std::invalid_argument when
// the budget is below the number of matrices, or a spectrum is empty.
std::vector<int32_t> allocate_water_filling(const std::vector<std::vector<double>>& spectra, int64_t budget);

// Water-filling over shares: each spectrum replaced by σ_i² / Σ σ² (the share of the
// matrix's own energy each rank keeps), then allocate_water_filling. Matrices whose
// singular values differ in scale (K against V) then compete on the fraction of their
// activation they keep rather than on absolute size. Throws like allocate_water_filling,
// and for a spectrum of only zeros.
std::vector<int32_t> allocate_energy_share(const std::vector<std::vector<double>>& spectra, int64_t budget);

// Uniform: budget / n ranks each, the remainder one each to the first matrices; a matrix
// is never given more than its cap, whose surplus goes to the next matrices with room
// (in index order). Throws like allocate_water_filling.
std::vector<int32_t> allocate_uniform(const std::vector<int32_t>& caps, int64_t budget);

}  // namespace fafo::care
