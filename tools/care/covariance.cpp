#include "covariance.h"

#include <stdexcept>
#include <string>

namespace fafo::care {

CovarianceAccumulator::CovarianceAccumulator(int64_t dim) {
  if (dim < 1) throw std::invalid_argument("covariance: the row width must be positive, not " + std::to_string(dim));
  sum_ = Eigen::MatrixXd::Zero(dim, dim);
}

void CovarianceAccumulator::add(const float* rows, int64_t n_rows, int64_t row_width) {
  if (row_width != dim())
    throw std::invalid_argument("covariance: rows of " + std::to_string(row_width) + " values, expected " +
                                std::to_string(dim()));
  if (n_rows <= 0) return;
  using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMajor> x(rows, n_rows, row_width);
  // sum += X^T X, in double from the start (the sum of many float products loses digits).
  const Eigen::MatrixXd xd = x.cast<double>();
  sum_.selfadjointView<Eigen::Lower>().rankUpdate(xd.transpose());
  count_ += n_rows;
}

Eigen::MatrixXd CovarianceAccumulator::covariance() const {
  if (count_ == 0) throw std::logic_error("covariance: no rows were added");
  Eigen::MatrixXd c = sum_.selfadjointView<Eigen::Lower>();
  c /= static_cast<double>(count_);
  return c;
}

}  // namespace fafo::care
