#include "factorize.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include <Eigen/Eigenvalues>
#include <Eigen/SVD>

namespace fafo::care {

namespace {

std::string size_text(const Eigen::MatrixXd& m) {
  return std::to_string(m.rows()) + " x " + std::to_string(m.cols());
}

}  // namespace

Whitening shrunk_sqrt(const Eigen::MatrixXd& c, double alpha) {
  if (c.rows() != c.cols() || c.rows() == 0)
    throw std::invalid_argument("shrunk_sqrt: the covariance must be square and non-empty, not " + size_text(c));
  if (!(alpha >= 0.0 && alpha <= 1.0))
    throw std::invalid_argument("the shrinkage must be in [0, 1], not " + std::to_string(alpha));
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eigen(c);
  if (eigen.info() != Eigen::Success) throw std::runtime_error("the eigen-decomposition of the covariance failed");
  const Eigen::VectorXd roots = eigen.eigenvalues().cwiseMax(0.0).cwiseSqrt();
  const double lambda = roots.maxCoeff();
  if (!(lambda > 0.0) || !std::isfinite(lambda))
    throw std::runtime_error("the covariance is zero or not finite (were the calibration inputs all zero?)");
  const Eigen::VectorXd s = ((1.0 - alpha) * roots).array() + alpha * lambda;
  // A root below 1e-8 of the largest makes C's condition number exceed double precision.
  if (s.minCoeff() <= 1e-8 * lambda)
    throw std::runtime_error("the covariance is singular; a shrinkage above 0 makes its root invertible");
  const Eigen::MatrixXd& q = eigen.eigenvectors();
  Whitening w;
  w.sqrt_c = q * s.asDiagonal() * q.transpose();
  w.inv_sqrt_c = q * s.cwiseInverse().asDiagonal() * q.transpose();
  return w;
}

Whitening identity_whitening(int64_t dim) {
  return {Eigen::MatrixXd::Identity(dim, dim), Eigen::MatrixXd::Identity(dim, dim)};
}

Factorization factorize(const Whitening& whitening, const Eigen::MatrixXd& w) {
  if (whitening.sqrt_c.rows() != w.rows() || whitening.sqrt_c.cols() != w.rows() ||
      whitening.inv_sqrt_c.rows() != w.rows() || whitening.inv_sqrt_c.cols() != w.rows())
    throw std::invalid_argument("factorize: a " + size_text(w) + " weight with a " + size_text(whitening.sqrt_c) +
                                " covariance root");
  const Eigen::MatrixXd m = whitening.sqrt_c * w;
  const Eigen::BDCSVD<Eigen::MatrixXd> svd(m, Eigen::ComputeThinU | Eigen::ComputeThinV);
  if (svd.info() != Eigen::Success) throw std::runtime_error("the SVD of the covariance-weighted weight failed");
  Factorization f;
  f.sigma = svd.singularValues();
  f.a = whitening.inv_sqrt_c * svd.matrixU() * f.sigma.asDiagonal();
  f.v = svd.matrixV();
  return f;
}

LowRank truncate(const Factorization& f, int64_t rank) {
  if (rank < 1 || rank > f.max_rank())
    throw std::invalid_argument("rank " + std::to_string(rank) + " is outside [1, " + std::to_string(f.max_rank()) + "]");
  return {f.a.leftCols(rank), f.v.leftCols(rank).transpose()};
}

double relative_activation_error(const Eigen::MatrixXd& c, const Eigen::MatrixXd& w, const Eigen::MatrixXd& approx) {
  if (c.rows() != w.rows() || c.cols() != w.rows() || approx.rows() != w.rows() || approx.cols() != w.cols())
    throw std::invalid_argument("relative_activation_error: sizes " + size_text(c) + ", " + size_text(w) + ", " +
                                size_text(approx));
  const Eigen::MatrixXd e = w - approx;
  const double reference = (c * w).cwiseProduct(w).sum();
  if (!(reference > 0.0)) return 0.0;
  return std::sqrt(std::max(0.0, (c * e).cwiseProduct(e).sum()) / reference);
}

double relative_weight_error(const Eigen::MatrixXd& w, const Eigen::MatrixXd& approx) {
  if (approx.rows() != w.rows() || approx.cols() != w.cols())
    throw std::invalid_argument("relative_weight_error: sizes " + size_text(w) + " and " + size_text(approx));
  const double reference = w.norm();
  return reference > 0.0 ? (w - approx).norm() / reference : 0.0;
}

}  // namespace fafo::care
