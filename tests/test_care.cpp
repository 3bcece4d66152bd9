// fafo-care (tools/care): the covariance accumulator, the covariance-weighted
// factorization (full rank reproduces W, the weighted factors minimize the activation
// error, Eckart-Young), water-filling and uniform rank allocation on spectra whose answer
// is known, and the converter on stories260K and synthetic files: the tensors and
// fafo.mla.* keys it writes, everything else copied, and the errors it refuses with.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <Eigen/SVD>

#include "calibration.h"
#include "conversion.h"
#include "covariance.h"
#include "factorize.h"
#include "fafo/gguf.h"
#include "fafo/sequence.h"
#include "fafo/tensor_type.h"
#include "rank_allocation.h"
#include "synthetic_model.h"
#include "test_support.h"

using namespace fafo;
using namespace fafo::care;

namespace {

// N x dim rows whose column j has scale exp(spread * j / dim): an anisotropic input.
Eigen::MatrixXd anisotropic_rows(int64_t n, int64_t dim, double spread, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd mix(dim, dim);  // a random rotation-ish mix, so the axes are not the basis
  for (int64_t i = 0; i < dim; ++i)
    for (int64_t j = 0; j < dim; ++j) mix(i, j) = normal(rng);
  Eigen::MatrixXd x(n, dim);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < dim; ++j) x(i, j) = normal(rng) * std::exp(spread * static_cast<double>(j) / dim);
  return x * mix / std::sqrt(static_cast<double>(dim));
}

Eigen::MatrixXd random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal;
  Eigen::MatrixXd m(rows, cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) m(i, j) = normal(rng);
  return m;
}

Eigen::MatrixXd second_moment(const Eigen::MatrixXd& x) { return x.transpose() * x / static_cast<double>(x.rows()); }

// ---- covariance ----

TEST(CareCovariance, EqualsTheSecondMomentOfEveryRowAdded) {
  const Eigen::MatrixXd x = anisotropic_rows(37, 6, 2.0, 1);
  const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> xf = x.cast<float>();
  CovarianceAccumulator acc(6);
  acc.add(xf.data(), 20, 6);                // two steps of rows, as two calibration steps give them
  acc.add(xf.data() + 20 * 6, 17, 6);
  EXPECT_EQ(acc.count(), 37);
  const Eigen::MatrixXd expected = second_moment(xf.cast<double>());
  EXPECT_LT((acc.covariance() - expected).cwiseAbs().maxCoeff(), 1e-12);
  EXPECT_LT((acc.covariance() - acc.covariance().transpose()).cwiseAbs().maxCoeff(), 1e-15);
}

TEST(CareCovariance, RefusesOtherWidthsAndAnEmptyCovariance) {
  CovarianceAccumulator acc(4);
  EXPECT_THROW(acc.covariance(), std::logic_error);
  const std::vector<float> rows(10, 1.0f);
  EXPECT_THROW(acc.add(rows.data(), 2, 5), std::invalid_argument);
  EXPECT_THROW(CovarianceAccumulator(0), std::invalid_argument);
}

// ---- factorization ----

TEST(CareFactorize, ShrunkRootIsTheRootAtZeroShrinkageAndInvertible) {
  const Eigen::MatrixXd c = second_moment(anisotropic_rows(400, 10, 3.0, 2));
  const Whitening exact = shrunk_sqrt(c, 0.0);
  EXPECT_LT((exact.sqrt_c * exact.sqrt_c - c).cwiseAbs().maxCoeff(), 1e-9 * c.cwiseAbs().maxCoeff());
  const Whitening shrunk = shrunk_sqrt(c, 0.01);
  const Eigen::MatrixXd identity = Eigen::MatrixXd::Identity(10, 10);
  EXPECT_LT((shrunk.sqrt_c * shrunk.inv_sqrt_c - identity).cwiseAbs().maxCoeff(), 1e-9);
  // alpha = 1: lambda I, lambda the largest root.
  const Whitening flat = shrunk_sqrt(c, 1.0);
  const double lambda = std::sqrt(Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd>(c).eigenvalues().maxCoeff());
  EXPECT_LT((flat.sqrt_c - lambda * identity).cwiseAbs().maxCoeff(), 1e-9 * lambda);
}

TEST(CareFactorize, ShrunkRootRefusesBadShrinkageAndSingularCovariances) {
  const Eigen::MatrixXd c = second_moment(anisotropic_rows(50, 5, 1.0, 3));
  EXPECT_THROW(shrunk_sqrt(c, -0.1), std::invalid_argument);
  EXPECT_THROW(shrunk_sqrt(c, 1.5), std::invalid_argument);
  EXPECT_THROW(shrunk_sqrt(Eigen::MatrixXd(3, 4), 0.1), std::invalid_argument);
  EXPECT_THROW(shrunk_sqrt(Eigen::MatrixXd::Zero(5, 5), 0.1), std::runtime_error);
  // Rank 2 (two rows): singular without shrinkage, invertible with it.
  const Eigen::MatrixXd low = second_moment(anisotropic_rows(2, 5, 1.0, 4));
  EXPECT_THROW(shrunk_sqrt(low, 0.0), std::runtime_error);
  EXPECT_NO_THROW(shrunk_sqrt(low, 0.01));
}

TEST(CareFactorize, FullRankReproducesTheWeight) {
  const int64_t n_embd = 24, kv_dim = 8;
  const Eigen::MatrixXd w = random_matrix(n_embd, kv_dim, 5);
  const Eigen::MatrixXd c = second_moment(anisotropic_rows(300, n_embd, 4.0, 6));
  for (const Whitening& whitening : {shrunk_sqrt(c, 0.01), shrunk_sqrt(c, 0.0), identity_whitening(n_embd)}) {
    const Factorization f = factorize(whitening, w);
    ASSERT_EQ(f.max_rank(), kv_dim);
    const LowRank full = truncate(f, kv_dim);
    EXPECT_EQ(full.a.rows(), n_embd);
    EXPECT_EQ(full.a.cols(), kv_dim);
    EXPECT_EQ(full.b.rows(), kv_dim);
    EXPECT_EQ(full.b.cols(), kv_dim);
    EXPECT_LT((full.product() - w).cwiseAbs().maxCoeff(), 1e-9);
    EXPECT_LT(relative_activation_error(c, w, full.product()), 1e-10);
  }
  // Wide weights (kv_dim > n_embd) cap the rank at n_embd.
  const Eigen::MatrixXd wide = random_matrix(4, 9, 7);
  const Factorization f = factorize(identity_whitening(4), wide);
  EXPECT_EQ(f.max_rank(), 4);
  EXPECT_LT((truncate(f, 4).product() - wide).cwiseAbs().maxCoeff(), 1e-9);
  EXPECT_THROW(truncate(f, 0), std::invalid_argument);
  EXPECT_THROW(truncate(f, 5), std::invalid_argument);
  EXPECT_THROW(factorize(identity_whitening(5), wide), std::invalid_argument);
}

TEST(CareFactorize, WeightedFactorsHaveTheSmallerActivationErrorPlainSvdTheSmallerWeightError) {
  const int64_t n_embd = 32, kv_dim = 16, n = 500;
  const Eigen::MatrixXd x = anisotropic_rows(n, n_embd, 5.0, 8);
  const Eigen::MatrixXd c = second_moment(x);
  const Eigen::MatrixXd w = random_matrix(n_embd, kv_dim, 9);
  const Factorization plain = factorize(identity_whitening(n_embd), w);
  for (double alpha : {0.0, 0.01}) {
    const Factorization weighted = factorize(shrunk_sqrt(c, alpha), w);
    for (int64_t r : {1, 4, 8, 15}) {
      SCOPED_TRACE("alpha " + std::to_string(alpha) + ", rank " + std::to_string(r));
      const Eigen::MatrixXd w_care = truncate(weighted, r).product(), w_svd = truncate(plain, r).product();
      const double act_care = (x * (w - w_care)).norm(), act_svd = (x * (w - w_svd)).norm();
      EXPECT_LE(act_care, act_svd * (1.0 + 1e-12));
      // By a clear margin on an input this anisotropic (least at rank 1: both keep the top direction).
      EXPECT_LT(act_care, (r == 1 ? 0.99 : 0.9) * act_svd);
      EXPECT_LE((w - w_svd).norm(), (w - w_care).norm() * (1.0 + 1e-12));
      // The relative error the summary prints is the same activation error.
      EXPECT_NEAR(relative_activation_error(c, w, w_care), act_care / (x * w).norm(), 1e-9);
      EXPECT_NEAR(relative_weight_error(w, w_svd), (w - w_svd).norm() / w.norm(), 1e-12);
    }
  }
}

TEST(CareFactorize, ActivationErrorIsTheDroppedSingularValuesWithoutShrinkage) {
  const int64_t n_embd = 20, kv_dim = 12, n = 300;
  const Eigen::MatrixXd x = anisotropic_rows(n, n_embd, 3.0, 10);
  const Eigen::MatrixXd c = second_moment(x);
  const Eigen::MatrixXd w = random_matrix(n_embd, kv_dim, 11);
  const Factorization f = factorize(shrunk_sqrt(c, 0.0), w);
  for (int64_t r = 1; r <= kv_dim; ++r) {
    const double dropped = std::sqrt(f.sigma.tail(kv_dim - r).squaredNorm());
    // ||X (W - W^)||_F / sqrt(N) = ||sqrt(C) (W - W^)||_F
    const double error = (x * (w - truncate(f, r).product())).norm() / std::sqrt(static_cast<double>(n));
    EXPECT_NEAR(error, dropped, 1e-9 * f.sigma(0)) << "rank " << r;
  }
  // The singular values are those of sqrt(C) W, descending.
  const Eigen::JacobiSVD<Eigen::MatrixXd> reference(shrunk_sqrt(c, 0.0).sqrt_c * w);
  EXPECT_LT((f.sigma - reference.singularValues()).cwiseAbs().maxCoeff(), 1e-9 * f.sigma(0));
}

// ---- rank allocation ----

TEST(CareRankAllocation, WaterFillingGivesEveryExtraRankToTheLargestSpectrum) {
  const std::vector<std::vector<double>> spectra = {
      {10, 9, 8, 7}, {1, 0.5, 0.4, 0.3}, {1, 0.6, 0.1, 0.05}, {1, 0.2, 0.1, 0.01}};
  EXPECT_EQ(allocate_water_filling(spectra, 4), (std::vector<int32_t>{1, 1, 1, 1}));
  EXPECT_EQ(allocate_water_filling(spectra, 7), (std::vector<int32_t>{4, 1, 1, 1}));  // all three extra to layer 0's K
  EXPECT_EQ(allocate_water_filling(spectra, 8), (std::vector<int32_t>{4, 1, 2, 1}));  // then 0.6
  EXPECT_EQ(allocate_water_filling(spectra, 9), (std::vector<int32_t>{4, 2, 2, 1}));  // then 0.5
  EXPECT_EQ(allocate_water_filling(spectra, 10), (std::vector<int32_t>{4, 3, 2, 1}));  // then 0.4
  EXPECT_EQ(allocate_water_filling(spectra, 11), (std::vector<int32_t>{4, 4, 2, 1}));  // 0.3 before 0.2 and 0.1
  EXPECT_EQ(allocate_water_filling(spectra, 12), (std::vector<int32_t>{4, 4, 2, 2}));
}

// Energy shares: the same spectra, but each matrix competes with the share of its own
// energy the next rank keeps (layer 0's K: 81/294 for its second value; matrix 2: 0.36/1.3725).
TEST(CareRankAllocation, EnergyShareWaterFillingComparesSharesNotSizes) {
  const std::vector<std::vector<double>> spectra = {
      {10, 9, 8, 7}, {1, 0.5, 0.4, 0.3}, {1, 0.6, 0.1, 0.05}, {1, 0.2, 0.1, 0.01}};
  EXPECT_EQ(allocate_energy_share(spectra, 5), (std::vector<int32_t>{2, 1, 1, 1}));  // 0.276
  EXPECT_EQ(allocate_energy_share(spectra, 6), (std::vector<int32_t>{2, 1, 2, 1}));  // 0.262 before 0.218
  EXPECT_EQ(allocate_energy_share(spectra, 7), (std::vector<int32_t>{3, 1, 2, 1}));  // absolute sizes: {4, 1, 1, 1}
  EXPECT_THROW(allocate_energy_share({{1, 0.5}, {0, 0}}, 3), std::invalid_argument);  // no energy to share
}

TEST(CareRankAllocation, WaterFillingStopsAtTheCapsAndSpendsTheBudgetExactly) {
  // Caps are the spectra's lengths: 2, 5, 3.
  const std::vector<std::vector<double>> spectra = {{100, 90}, {5, 4, 3, 2, 1}, {50, 40, 30}};
  EXPECT_EQ(allocate_water_filling(spectra, 6), (std::vector<int32_t>{2, 1, 3}));
  EXPECT_EQ(allocate_water_filling(spectra, 8), (std::vector<int32_t>{2, 3, 3}));
  EXPECT_EQ(allocate_water_filling(spectra, 10), (std::vector<int32_t>{2, 5, 3}));
  EXPECT_EQ(allocate_water_filling(spectra, 1000), (std::vector<int32_t>{2, 5, 3}));  // everything full
  // Random spectra: the budget is spent exactly, and every singular value kept (past the
  // first of each) is at least every one dropped.
  std::mt19937 rng(12);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::vector<double>> random(10);
  for (auto& s : random) {
    s.resize(16);
    for (double& v : s) v = u(rng);
    std::sort(s.begin(), s.end(), std::greater<>());
  }
  for (int64_t budget : {10, 11, 37, 80, 159, 160}) {
    const std::vector<int32_t> ranks = allocate_water_filling(random, budget);
    EXPECT_EQ(std::accumulate(ranks.begin(), ranks.end(), int64_t{0}), budget);
    double min_kept = INFINITY, max_dropped = 0.0;
    for (size_t m = 0; m < random.size(); ++m) {
      for (int32_t i = 1; i < ranks[m]; ++i) min_kept = std::min(min_kept, random[m][static_cast<size_t>(i)]);
      for (size_t i = static_cast<size_t>(ranks[m]); i < random[m].size(); ++i) max_dropped = std::max(max_dropped, random[m][i]);
    }
    EXPECT_GE(min_kept, max_dropped) << "budget " << budget;
  }
}

TEST(CareRankAllocation, WaterFillingTiesGoToTheLowestIndex) {
  const std::vector<std::vector<double>> equal(3, std::vector<double>{1, 1, 1, 1});
  EXPECT_EQ(allocate_water_filling(equal, 5), (std::vector<int32_t>{3, 1, 1}));
  EXPECT_EQ(allocate_water_filling(equal, 8), (std::vector<int32_t>{4, 3, 1}));
  const std::vector<std::vector<double>> tie = {{9, 2, 1}, {9, 2, 2}};
  EXPECT_EQ(allocate_water_filling(tie, 3), (std::vector<int32_t>{2, 1}));
  EXPECT_EQ(allocate_water_filling(tie, 4), (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(allocate_water_filling(tie, 5), (std::vector<int32_t>{2, 3}));
}

TEST(CareRankAllocation, UniformSharesTheRemainderToTheFirstMatrices) {
  EXPECT_EQ(allocate_uniform(std::vector<int32_t>(4, 32), 8), (std::vector<int32_t>{2, 2, 2, 2}));
  EXPECT_EQ(allocate_uniform(std::vector<int32_t>(10, 32), 25), (std::vector<int32_t>{3, 3, 3, 3, 3, 2, 2, 2, 2, 2}));
  EXPECT_EQ(allocate_uniform(std::vector<int32_t>(2, 32), 7), (std::vector<int32_t>{4, 3}));
  // A cap's surplus goes to the matrices with room; beyond every cap, all are full.
  EXPECT_EQ(allocate_uniform({1, 10, 10}, 9), (std::vector<int32_t>{1, 4, 4}));
  EXPECT_EQ(allocate_uniform({2, 3}, 100), (std::vector<int32_t>{2, 3}));
}

TEST(CareRankAllocation, ABudgetBelowOneRankPerMatrixIsAnError) {
  const std::vector<std::vector<double>> spectra(4, std::vector<double>{3, 2, 1});
  try {
    allocate_water_filling(spectra, 3);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("below one rank per matrix"), std::string::npos) << e.what();
  }
  EXPECT_THROW(allocate_uniform(std::vector<int32_t>(4, 3), 3), std::invalid_argument);
  EXPECT_THROW(allocate_water_filling({}, 3), std::invalid_argument);
  EXPECT_THROW(allocate_water_filling({{}}, 3), std::invalid_argument);
  EXPECT_THROW(allocate_uniform({0, 3}, 3), std::invalid_argument);
}

// ---- the converter ----

// A calibration text: enough plain English for a few chunks of stories260K's tokenizer.
std::filesystem::path write_calibration_text(const std::filesystem::path& dir, int repeats) {
  const std::filesystem::path path = dir / "calib.txt";
  std::ofstream out(path);
  for (int i = 0; i < repeats; ++i)
    out << "Once upon a time, there was a little girl named Lily. She liked to play outside in the park with her "
           "dog. One day, she saw a big red ball under a tree and ran to get it. \"Mom, look!\" she said. "
        << i << "\n";
  return path;
}

// The dequantized weight of `t` (rows x cols, as the file stores it).
Eigen::MatrixXd file_matrix(const GgufTensor& t) {
  const int64_t cols = t.shape[0], rows = t.n_rows();
  const size_t row_bytes = tensor_row_bytes(t.type, cols);
  std::vector<float> row(static_cast<size_t>(cols));
  Eigen::MatrixXd m(rows, cols);
  for (int64_t i = 0; i < rows; ++i) {
    dequantize_row(t.type, t.data + static_cast<size_t>(i) * row_bytes, row.data(), cols);
    for (int64_t j = 0; j < cols; ++j) m(i, j) = row[static_cast<size_t>(j)];
  }
  return m;
}

std::vector<int32_t> int_array(const GgufFile& f, const std::string& key) {
  std::vector<int32_t> v;
  const GgufValue* value = f.find(key);
  if (!value) return v;
  EXPECT_EQ(value->as_array().elem_type, GgufType::INT32) << key;
  for (const GgufValue& item : value->as_array().items) v.push_back(static_cast<int32_t>(item.as_int()));
  return v;
}

// Checks `out` against `in`: the same metadata (plus fafo.mla.*), the same tensors but
// for K and V, F32 factors of the stated ranks in their place; returns the ranks' sum.
int64_t check_mla_file(const GgufFile& in, const GgufFile& out, const std::string& method, const std::string& allocation) {
  const ModelConfig c = ModelConfig::from_gguf(in);
  for (const auto& [key, value] : in.metadata()) {
    const GgufValue* copy = out.find(key);
    EXPECT_TRUE(copy != nullptr) << key;
    if (copy) {
      EXPECT_EQ(copy->summary(1 << 20), value.summary(1 << 20)) << key;
    }
  }
  EXPECT_EQ(out.require_string("fafo.mla.method"), method);
  EXPECT_EQ(out.require_string("fafo.mla.allocation"), allocation);
  EXPECT_EQ(out.find("fafo.mla.kv_ratio")->type, GgufType::FLOAT32);
  EXPECT_EQ(out.find("fafo.mla.calibration_tokens")->type, GgufType::UINT32);
  EXPECT_EQ(out.find("fafo.mla.shrinkage")->type, GgufType::FLOAT32);
  const std::vector<int32_t> rank_k = int_array(out, "fafo.mla.rank_k"), rank_v = int_array(out, "fafo.mla.rank_v");
  EXPECT_EQ(rank_k.size(), static_cast<size_t>(c.n_layer));
  EXPECT_EQ(rank_v.size(), static_cast<size_t>(c.n_layer));
  int64_t sum = 0;
  for (int32_t l = 0; l < c.n_layer && static_cast<size_t>(l) < rank_k.size() && static_cast<size_t>(l) < rank_v.size(); ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(out.find_tensor(p + "attn_k.weight"), nullptr);
    EXPECT_EQ(out.find_tensor(p + "attn_v.weight"), nullptr);
    for (const auto& [name, rank] : {std::pair<std::string, int32_t>{"k", rank_k[static_cast<size_t>(l)]},
                                     std::pair<std::string, int32_t>{"v", rank_v[static_cast<size_t>(l)]}}) {
      EXPECT_GE(rank, 1);
      EXPECT_LE(rank, std::min(c.n_embd, c.kv_dim()));
      const GgufTensor* a = out.find_tensor(p + "attn_" + name + "_a.weight");
      const GgufTensor* b = out.find_tensor(p + "attn_" + name + "_b.weight");
      EXPECT_TRUE(a && b) << p << name;
      if (!a || !b) continue;
      EXPECT_EQ(a->type, TensorType::F32);
      EXPECT_EQ(b->type, TensorType::F32);
      EXPECT_EQ(a->shape, (std::vector<int64_t>{c.n_embd, rank}));
      EXPECT_EQ(b->shape, (std::vector<int64_t>{rank, c.kv_dim()}));
      sum += rank;
    }
  }
  EXPECT_NEAR(out.find("fafo.mla.kv_ratio")->as_float(),
              static_cast<double>(sum) / (2.0 * c.kv_dim() * c.n_layer), 1e-6);
  // Every other tensor byte for byte, in the same type and shape.
  size_t others = 0;
  for (const GgufTensor& t : in.tensors()) {
    if (t.name.ends_with("attn_k.weight") || t.name.ends_with("attn_v.weight")) continue;
    ++others;
    const GgufTensor* copy = out.find_tensor(t.name);
    EXPECT_TRUE(copy != nullptr) << t.name;
    if (!copy) continue;
    EXPECT_EQ(copy->type, t.type) << t.name;
    EXPECT_EQ(copy->shape, t.shape) << t.name;
    EXPECT_TRUE(copy->n_bytes == t.n_bytes && std::memcmp(copy->data, t.data, t.n_bytes) == 0) << t.name;
  }
  EXPECT_EQ(out.tensors().size(), others + 4 * static_cast<size_t>(c.n_layer));
  return sum;
}

// B A (kv_dim x n_embd) against the input's K and V weights.
double max_reconstruction_error(const GgufFile& in, const GgufFile& out) {
  const ModelConfig c = ModelConfig::from_gguf(in);
  double worst = 0.0;
  for (int32_t l = 0; l < c.n_layer; ++l)
    for (const std::string kv : {"k", "v"}) {
      const std::string p = "blk." + std::to_string(l) + ".attn_" + kv;
      const Eigen::MatrixXd w = file_matrix(in.require_tensor(p + ".weight"));
      const Eigen::MatrixXd ba = file_matrix(out.require_tensor(p + "_b.weight")) * file_matrix(out.require_tensor(p + "_a.weight"));
      worst = std::max(worst, (ba - w).cwiseAbs().maxCoeff() / std::max(1e-30, w.cwiseAbs().maxCoeff()));
    }
  return worst;
}

TEST(CareConvert, SvdWritesTheMlaTensorsAndKeysWithUniformRanks) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("care-svd");
  ConversionOptions o;
  o.input = model.string();
  o.output = (dir / "svd.gguf").string();
  o.method = "svd";
  o.kv_ratio = 0.5;
  const ConversionReport r = convert_to_mla(o);
  const auto in = GgufFile::open(o.input), out = GgufFile::open(o.output);
  // stories260K: 5 layers, kv_dim 32: R_total = 0.5 * 2 * 32 * 5 = 160, 16 each.
  EXPECT_EQ(check_mla_file(*in, *out, "svd", "uniform"), 160);
  EXPECT_EQ(int_array(*out, "fafo.mla.rank_k"), std::vector<int32_t>(5, 16));
  EXPECT_EQ(int_array(*out, "fafo.mla.rank_v"), std::vector<int32_t>(5, 16));
  EXPECT_EQ(out->require_int("fafo.mla.calibration_tokens"), 0);
  EXPECT_EQ(out->require_float("fafo.mla.shrinkage"), 0.0);
  EXPECT_FLOAT_EQ(static_cast<float>(out->require_float("fafo.mla.kv_ratio")), 0.5f);
  EXPECT_EQ(r.budget, 160);
  EXPECT_EQ(r.kv_floats_before, 320);
  EXPECT_EQ(r.kv_floats_after, 160);
  EXPECT_FALSE(r.activation_errors);
  ASSERT_EQ(r.layers.size(), 5u);
  for (const LayerResult& l : r.layers) {
    EXPECT_GT(l.error_k, 0.0);
    EXPECT_LT(l.error_k, 1.0);
    EXPECT_GT(l.error_v, 0.0);
    EXPECT_LT(l.error_v, 1.0);
  }
  EXPECT_FALSE(std::filesystem::exists(o.output + ".tmp"));
  // The output is what the runtime's configuration reads as MLA.
  const ModelConfig mla = ModelConfig::from_gguf(*out);
  EXPECT_TRUE(mla.mla());
  EXPECT_EQ(mla.kv_floats_per_token(), 160);
  std::filesystem::remove_all(dir);
}

TEST(CareConvert, CareCalibratesAndWaterFillsTheBudget) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("care-care");
  ConversionOptions o;
  o.input = model.string();
  o.output = (dir / "care.gguf").string();
  o.calibration.text_path = write_calibration_text(dir, 40).string();
  o.calibration.chunk_len = 32;
  o.calibration.max_chunks = 4;
  o.allocation = "water-filling";
  o.rank = 12;  // R_total = 2 * 12 * 5 = 120
  int32_t chunks_seen = 0, layers_seen = 0;
  const ConversionReport r = convert_to_mla(o, [&](const ConversionProgress& p) {
    if (p.stage == ConversionProgress::Stage::Calibration) {
      chunks_seen = p.done;
      EXPECT_EQ(p.total, 4);
    }
    if (p.stage == ConversionProgress::Stage::Factorization) {
      layers_seen = p.done;
      EXPECT_EQ(p.total, 5);
    }
  });
  EXPECT_EQ(chunks_seen, 4);
  EXPECT_EQ(layers_seen, 5);
  const auto in = GgufFile::open(o.input), out = GgufFile::open(o.output);
  EXPECT_EQ(check_mla_file(*in, *out, "care", "water-filling"), 120);
  EXPECT_EQ(out->require_int("fafo.mla.calibration_tokens"), 4 * 32);
  EXPECT_FLOAT_EQ(static_cast<float>(out->require_float("fafo.mla.shrinkage")), 0.01f);
  EXPECT_EQ(r.calibration_tokens, 128);
  EXPECT_EQ(r.calibration_chunks, 4);
  EXPECT_TRUE(r.activation_errors);
  EXPECT_EQ(r.kv_floats_after, 120);
  std::filesystem::remove_all(dir);
}

TEST(CareConvert, CareBeatsSvdInActivationErrorAtTheSameUniformRanks) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("care-vs-svd");
  ConversionOptions o;
  o.input = model.string();
  o.calibration.text_path = write_calibration_text(dir, 60).string();
  o.calibration.chunk_len = 64;
  o.calibration.max_chunks = 6;
  o.allocation = "uniform";
  o.rank = 8;
  o.shrinkage = 0.0;  // the exact activation objective: CARE's errors can only be smaller
  o.output = (dir / "care.gguf").string();
  const ConversionReport care = convert_to_mla(o);
  o.method = "svd";  // the same calibration only measures plain SVD's errors
  o.output = (dir / "svd.gguf").string();
  const ConversionReport svd = convert_to_mla(o);
  ASSERT_TRUE(care.activation_errors && svd.activation_errors);
  for (size_t l = 0; l < care.layers.size(); ++l) {
    EXPECT_EQ(care.layers[l].rank_k, 8);
    EXPECT_EQ(svd.layers[l].rank_k, 8);
    EXPECT_LE(care.layers[l].error_k, svd.layers[l].error_k * (1 + 1e-9)) << "layer " << l;
    EXPECT_LE(care.layers[l].error_v, svd.layers[l].error_v * (1 + 1e-9)) << "layer " << l;
  }
  EXPECT_EQ(GgufFile::open(dir / "svd.gguf")->require_int("fafo.mla.calibration_tokens"), 0);
  std::filesystem::remove_all(dir);
}

TEST(CareConvert, FullRankReproducesTheKeyAndValueWeights) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("care-full");
  ConversionOptions o;
  o.input = model.string();
  o.output = (dir / "full.gguf").string();
  o.calibration.text_path = write_calibration_text(dir, 40).string();
  o.calibration.chunk_len = 48;
  o.calibration.max_chunks = 3;
  o.kv_ratio = 1.0;  // every matrix at rank kv_dim = 32
  const ConversionReport r = convert_to_mla(o);
  for (const LayerResult& l : r.layers) {
    EXPECT_EQ(l.rank_k, 32);
    EXPECT_EQ(l.rank_v, 32);
    EXPECT_LT(l.error_k, 1e-5);
    EXPECT_LT(l.error_v, 1e-5);
  }
  const auto in = GgufFile::open(o.input), out = GgufFile::open(o.output);
  EXPECT_EQ(check_mla_file(*in, *out, "care", "uniform"), 320);
  EXPECT_LT(max_reconstruction_error(*in, *out), 1e-4);  // float32 factors of the exact product
  std::filesystem::remove_all(dir);
}

// The converted model at full rank is the original model: its logits (MLA attention on
// the reference backend, keys recovered from the latents) match within 1e-3 relative,
// and greedy decoding gives the same tokens; at half the cache it is a different model.
TEST(CareConvert, FullRankMlaModelGivesTheOriginalLogits) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("care-logits");
  ConversionOptions o;
  o.input = model.string();
  o.calibration.text_path = write_calibration_text(dir, 40).string();
  o.calibration.chunk_len = 48;
  o.calibration.max_chunks = 3;
  o.threads = 2;
  auto open = [](const std::string& path) {
    return std::make_unique<Sequence>(std::shared_ptr<const GgufFile>(GgufFile::open(path)), make_reference_backend(2),
                                   SequenceOptions{256});
  };
  const std::vector<int32_t> tokens = {1, 403, 261, 379, 285, 271, 266, 297, 263, 295, 260, 302, 414, 317, 270, 260};
  auto logits = [&](Sequence& m) {
    StepBatch b = StepBatch::causal(tokens, 0, true);
    return m.forward(b);
  };
  auto original = open(model.string());
  const std::vector<float> want = logits(*original);
  for (const double ratio : {1.0, 0.5}) {
    o.kv_ratio = ratio;
    o.output = (dir / ("care" + std::to_string(ratio) + ".gguf")).string();
    convert_to_mla(o);
    auto mla = open(o.output);
    ASSERT_TRUE(mla->config().mla());
    const std::vector<float> got = logits(*mla);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i)
      worst = std::max(worst, std::fabs(got[i] - want[i]) / std::max(1.0, std::fabs(static_cast<double>(want[i]))));
    if (ratio == 1.0) {
      EXPECT_LT(worst, 1e-3) << "full rank";
    } else {
      EXPECT_GT(worst, 1e-2) << "half the cache should change the logits";
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(CareConvert, QuantizedWeightsAreDequantized) {
  const auto dir = fafo::test::temp_dir("care-q8");
  synth::SyntheticConfig cfg;
  cfg.n_layer = 2;
  cfg.n_embd = 64;
  cfg.n_head = 4;
  cfg.n_head_kv = 2;  // kv_dim 32
  cfg.weight_type = "Q8_0";
  const std::string model = (dir / "q8.gguf").string();
  synth::write_synthetic_model(cfg, model);
  ConversionOptions o;
  o.input = model;
  o.output = (dir / "mla.gguf").string();
  o.method = "svd";
  o.rank = 32;
  convert_to_mla(o);
  const auto in = GgufFile::open(o.input), out = GgufFile::open(o.output);
  EXPECT_EQ(in->require_tensor("blk.0.attn_k.weight").type, TensorType::Q8_0);
  EXPECT_EQ(check_mla_file(*in, *out, "svd", "uniform"), 128);
  EXPECT_LT(max_reconstruction_error(*in, *out), 1e-4);
  std::filesystem::remove_all(dir);
}

// Runs the conversion, expecting `what` (a part of its message) and no output file.
template <class E>
void expect_refused(const ConversionOptions& o, const std::string& what) {
  try {
    convert_to_mla(o);
    ADD_FAILURE() << "no error; expected: " << what;
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "another error: " << e.what() << "; expected: " << what;
  }
  EXPECT_FALSE(std::filesystem::exists(o.output)) << what;
  EXPECT_FALSE(std::filesystem::exists(o.output + ".tmp")) << what;
}

TEST(CareConvert, BadInputsAndOptionsAreClearErrorsWithoutOutput) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("care-errors");
  ConversionOptions base;
  base.input = model.string();
  base.output = (dir / "out.gguf").string();
  base.calibration.text_path = write_calibration_text(dir, 40).string();
  base.calibration.chunk_len = 32;
  base.calibration.max_chunks = 2;
  auto with = [&](auto change) {
    ConversionOptions o = base;
    change(o);
    return o;
  };
  expect_refused<std::runtime_error>(with([&](auto& o) { o.input = (dir / "absent.gguf").string(); }), "absent.gguf: no such file");
  expect_refused<std::runtime_error>(with([&](auto& o) { o.calibration.text_path = (dir / "absent.txt").string(); }),
                                     "absent.txt: no such file");
  expect_refused<std::invalid_argument>(with([](auto& o) { o.calibration.text_path.clear(); }),
                                        "--method care needs a calibration text");
  expect_refused<std::invalid_argument>(with([](auto& o) { o.kv_ratio = 0.0; }), "--kv-ratio must be in (0, 1]");
  expect_refused<std::invalid_argument>(with([](auto& o) { o.kv_ratio = 1.5; }), "--kv-ratio must be in (0, 1]");
  expect_refused<std::invalid_argument>(with([](auto& o) { o.kv_ratio = 0.5, o.rank = 4; }), "not both");
  expect_refused<std::invalid_argument>(with([](auto& o) { o.rank = 0; }), "--rank must be at least 1");
  expect_refused<std::invalid_argument>(with([](auto& o) { o.rank = 33; }), "exceeds the largest rank");
  // 0.01 * 2 * 32 * 5 = 3 ranks for 10 matrices.
  expect_refused<std::invalid_argument>(with([](auto& o) { o.kv_ratio = 0.01; }), "below 2 * n_layer = 10");
  expect_refused<std::invalid_argument>(with([](auto& o) { o.method = "pca"; }), "--method must be care or svd");
  expect_refused<std::invalid_argument>(with([](auto& o) { o.allocation = "greedy"; }), "--allocation must be");
  expect_refused<std::invalid_argument>(with([](auto& o) { o.shrinkage = 2.0; }), "--shrinkage must be in [0, 1]");
  expect_refused<std::invalid_argument>(with([](auto& o) { o.calibration.chunk_len = 1; }), "--calib-len must be at least 2");
  try {
    convert_to_mla(with([](auto& o) { o.output = o.input; }));
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("would overwrite the input"), std::string::npos) << e.what();
  }
  {
    const std::filesystem::path tiny = dir / "tiny.txt";
    std::ofstream(tiny) << "Once upon a time.";
    expect_refused<std::runtime_error>(with([&](auto& o) { o.calibration.text_path = tiny.string(); }),
                                       "fewer than one chunk");
  }
  // A qwen2 file (QKV biases) and a llama file with an attention bias.
  synth::SyntheticConfig qwen;
  qwen.arch = "qwen2";
  const std::string qwen_path = (dir / "qwen2.gguf").string();
  synth::write_synthetic_model(qwen, qwen_path);
  expect_refused<std::runtime_error>(with([&](auto& o) { o.input = qwen_path; }), "architecture 'qwen2' is not supported");
  {
    const auto q = GgufFile::open(qwen_path);
    GgufWriter w;
    for (const auto& [key, value] : q->metadata()) w.set(key, value);
    w.set_string("general.architecture", "llama");
    for (const auto& [key, value] : q->metadata())
      if (key.starts_with("qwen2.")) w.set("llama." + key.substr(6), value);
    for (const GgufTensor& t : q->tensors()) w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    const std::string biased = (dir / "biased.gguf").string();
    w.write(biased);
    expect_refused<std::runtime_error>(with([&](auto& o) { o.input = biased; }), "have biases (blk.0.attn_q.bias)");
  }
  // An MLA file cannot be converted again.
  ConversionOptions first = with([](auto& o) { o.method = "svd"; });
  first.output = (dir / "mla.gguf").string();
  convert_to_mla(first);
  expect_refused<std::runtime_error>(with([&](auto& o) { o.input = first.output; }), "is already an MLA model");
  // A directory that does not exist: refused before the calibration.
  expect_refused<std::runtime_error>(with([&](auto& o) { o.output = (dir / "no" / "out.gguf").string(); }),
                                     "cannot open for writing");
  std::filesystem::remove_all(dir);
}

TEST(CareCli, ConvertsAndSummarizesOrFailsWithAMessage) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::filesystem::path tool = fafo::test::binary_path("tools/care/fafo-care");
  if (!std::filesystem::exists(tool)) GTEST_SKIP() << "fafo-care not built: " << tool;
  const auto dir = fafo::test::temp_dir("care-cli");
  const std::string calib = write_calibration_text(dir, 40).string();
  const std::string out = (dir / "out.gguf").string();
  using fafo::test::shell_quote;
  const std::string head = shell_quote(tool) + " -m " + shell_quote(model) + " -o " + shell_quote(out) + " -t 2 ";
  const auto ok = fafo::test::run_command(head + "--calib " + shell_quote(calib) + " --calib-len 32 --calib-chunks 3 --kv-ratio 0.5");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("method:       care"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("allocation:   uniform, budget 160 ranks"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("KV per token: 320 floats -> 160 floats"), std::string::npos) << ok.out;
  EXPECT_NE(ok.err.find("calibration chunk 3/3"), std::string::npos) << ok.err;
  EXPECT_NE(ok.err.find("factorized layer 5/5"), std::string::npos) << ok.err;
  EXPECT_TRUE(std::filesystem::exists(out));
  std::filesystem::remove(out);
  const auto both = fafo::test::run_command(head + "--method svd --rank 4 --kv-ratio 0.5");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("excludes"), std::string::npos) << both.err;
  const auto bad = fafo::test::run_command(head + "--method svd --kv-ratio 2");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("fafo-care: error: --kv-ratio must be in (0, 1]"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(out));
  std::filesystem::remove_all(dir);
}

}  // namespace
