// The second-moment matrix of a layer's attention inputs, C = (1/N) sum x x^T over the N
// rows seen (thesis eq. 3.3), accumulated in double.
#pragma once

#include <cstdint>

#include <Eigen/Core>

namespace fafo::care {

class CovarianceAccumulator {
 public:
  // Rows of `dim` floats; throws std::invalid_argument when dim < 1.
  explicit CovarianceAccumulator(int64_t dim);

  // Adds n_rows rows (row-major, n_rows x dim floats). Throws std::invalid_argument
  // for a row width other than dim().
  void add(const float* rows, int64_t n_rows, int64_t row_width);

  int64_t dim() const { return sum_.rows(); }
  // Rows added so far.
  int64_t count() const { return count_; }
  // (1/N) sum x x^T (dim x dim, symmetric); throws std::logic_error before any row.
  Eigen::MatrixXd covariance() const;

 private:
  Eigen::MatrixXd sum_;  // sum x x^T, lower triangle only (rankUpdate)
  int64_t count_ = 0;
};

}  // namespace fafo::care
