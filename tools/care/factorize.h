// Covariance-weighted low-rank factorization of one projection (thesis sections 3.2.3
// and 3.3.2-3.3.5), in the thesis's orientation: W is n_embd x kv_dim and a row x of
// attention input projects to x W.
//
//   sqrt(C)_a = Q diag(s) Q^T,  s_i = (1 - a) sqrt(max(d_i, 0)) + a * lambda,
//                               lambda = max_i sqrt(d_i),  C = Q diag(d) Q^T
//   sqrt(C)_a W = U S V^T,      W_a = sqrt(C)_a^-1 U_r S_r  (n_embd x r),  W_b = V_r^T  (r x kv_dim)
//
// W_a W_b is the rank-r matrix closest to W in ||sqrt(C)_a (W - W^)||_F (Eckart-Young);
// with C = I it is plain weight-space SVD.
#pragma once

#include <cstdint>

#include <Eigen/Core>

namespace fafo::care {

// sqrt(C)_a and its inverse.
struct Whitening {
  Eigen::MatrixXd sqrt_c;
  Eigen::MatrixXd inv_sqrt_c;
};

// The shrunk square root of a symmetric positive semi-definite C (eq. 3.8 applied to the
// root, as eq. 3.5 states it) with shrinkage `alpha` in [0, 1]. Throws
// std::invalid_argument for a non-square C or alpha outside [0, 1], std::runtime_error
// when the root is singular (C is zero, or alpha is 0 and C is singular).
Whitening shrunk_sqrt(const Eigen::MatrixXd& c, double alpha);
// sqrt(C) = I: plain SVD.
Whitening identity_whitening(int64_t dim);

// sqrt(C)_a W = U S V^T, kept at full rank k = min(n_embd, kv_dim); rank r takes the
// first r columns of `a` and of `v`.
struct Factorization {
  Eigen::VectorXd sigma;  // the k covariance-weighted singular values, descending
  Eigen::MatrixXd a;      // sqrt(C)_a^-1 U S (n_embd x k)
  Eigen::MatrixXd v;      // V (kv_dim x k)
  int64_t max_rank() const { return sigma.size(); }
};

// Factors `w` (n_embd x kv_dim) under `whitening` (n_embd x n_embd). Throws
// std::invalid_argument when the sizes disagree.
Factorization factorize(const Whitening& whitening, const Eigen::MatrixXd& w);

// The rank-r factors: W_a (n_embd x r) and W_b (r x kv_dim).
struct LowRank {
  Eigen::MatrixXd a;
  Eigen::MatrixXd b;
  Eigen::MatrixXd product() const { return a * b; }
};
// Throws std::invalid_argument for a rank outside [1, f.max_rank()].
LowRank truncate(const Factorization& f, int64_t rank);

// ||sqrt(C)(W - W^)||_F / ||sqrt(C) W||_F, computed as sqrt(tr(E^T C E) / tr(W^T C W)):
// the relative error of the projected activations x W over the rows whose second
// moment is C. 0 when W is zero.
double relative_activation_error(const Eigen::MatrixXd& c, const Eigen::MatrixXd& w, const Eigen::MatrixXd& approx);
// ||W - W^||_F / ||W||_F (C = I). 0 when W is zero.
double relative_weight_error(const Eigen::MatrixXd& w, const Eigen::MatrixXd& approx);

}  // namespace fafo::care
