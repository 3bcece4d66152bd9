// Sampling: greedy is pure argmax; top-k / top-p / min-p cut the distribution as
// documented; temperature sharpens it; draws follow the distribution and are
// reproducible from the seed.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <limits>
#include <stdexcept>
#include <string>

#include "fafo/sampler.h"
#include "fafo/top_k.h"
#include "fafo/utf8_stream.h"
#include "test_support.h"

using namespace fafo;

namespace {
const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};

SamplerOptions opts(float temp, int32_t top_k, float top_p, float min_p) { return SamplerOptions{temp, top_k, top_p, min_p, 42}; }

int support(const std::vector<float>& p) {
  int n = 0;
  for (float x : p) n += x > 0.0f;
  return n;
}
}  // namespace

TEST(Sampler, GreedyIsArgmaxWithLowestIndexOnTies) {
  EXPECT_EQ(argmax(kLogits.data(), 6), 1);
  Sampler s(opts(0.0f, 40, 0.95f, 0.05f));
  EXPECT_EQ(s.sample(kLogits.data(), 6), 1);
  const auto p = s.distribution(kLogits.data(), 6);
  EXPECT_EQ(p[1], 1.0f);
  EXPECT_EQ(support(p), 1);
}

TEST(Sampler, PlainSoftmaxWhenFiltersAreOff) {
  Sampler s(opts(1.0f, 0, 1.0f, 0.0f));
  const auto p = s.distribution(kLogits.data(), 6);
  double z = 0;
  for (float l : kLogits) z += std::exp(l);
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(p[i], std::exp(kLogits[i]) / z, 1e-6);
}

TEST(Sampler, TopKKeepsTheKBest) {
  Sampler s(opts(1.0f, 2, 1.0f, 0.0f));
  const auto p = s.distribution(kLogits.data(), 6);
  EXPECT_EQ(support(p), 2);
  EXPECT_NEAR(p[1], 0.5, 1e-6);
  EXPECT_NEAR(p[3], 0.5, 1e-6);
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  // Softmax of kLogits: p(1) = p(3) ~ 0.384, p(2) ~ 0.141: 0.8 needs three tokens,
  // 0.6 two and 0.3 one.
  Sampler s(opts(1.0f, 0, 0.8f, 0.0f));
  EXPECT_EQ(support(s.distribution(kLogits.data(), 6)), 3);
  Sampler t(opts(1.0f, 0, 0.6f, 0.0f));
  EXPECT_EQ(support(t.distribution(kLogits.data(), 6)), 2);
  Sampler u(opts(1.0f, 0, 0.3f, 0.0f));
  EXPECT_EQ(support(u.distribution(kLogits.data(), 6)), 1);
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheBest) {
  // p(2)/p(1) = e^-1 ~ 0.37; p(0)/p(1) = e^-2 ~ 0.135.
  Sampler s(opts(1.0f, 0, 1.0f, 0.3f));
  EXPECT_EQ(support(s.distribution(kLogits.data(), 6)), 3);
  Sampler t(opts(1.0f, 0, 1.0f, 0.1f));
  EXPECT_EQ(support(t.distribution(kLogits.data(), 6)), 4);
}

TEST(Sampler, LowTemperatureSharpens) {
  Sampler hot(opts(2.0f, 0, 1.0f, 0.0f)), cold(opts(0.25f, 0, 1.0f, 0.0f));
  EXPECT_LT(hot.distribution(kLogits.data(), 6)[1], cold.distribution(kLogits.data(), 6)[1]);
}

TEST(Sampler, DrawsFollowTheDistributionAndTheSeed) {
  Sampler s(opts(1.0f, 0, 1.0f, 0.0f));
  const auto p = s.distribution(kLogits.data(), 6);
  std::vector<int> counts(6, 0);
  const int n = 60000;
  for (int i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.sample(kLogits.data(), 6))];
  double chi2 = 0;
  for (size_t i = 0; i < 6; ++i) {
    const double e = p[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  EXPECT_LT(chi2, 20.5);  // 5 degrees of freedom, p ~ 0.001
  Sampler a(opts(1.0f, 0, 1.0f, 0.0f)), b(opts(1.0f, 0, 1.0f, 0.0f));
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.sample(kLogits.data(), 6), b.sample(kLogits.data(), 6));
}

// The generation's draws: position_uniform is uniform over [0, 1) across positions and
// seeds, and draw_token with it follows the distribution.
TEST(Sampler, PositionDrawsFollowTheDistribution) {
  Sampler s(opts(1.0f, 0, 1.0f, 0.0f));
  const auto p = s.distribution(kLogits.data(), 6);
  std::vector<int> counts(6, 0);
  const int n = 60000;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const double u = position_uniform(static_cast<uint64_t>(i / 100), i % 100);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    ++counts[static_cast<size_t>(draw_token(p, u))];
  }
  EXPECT_NEAR(sum / n, 0.5, 0.01);
  double chi2 = 0;
  for (size_t i = 0; i < 6; ++i) {
    const double e = p[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
  }
  EXPECT_LT(chi2, 20.5);  // 5 degrees of freedom, p ~ 0.001
  // The same seed and position give the same number; another seed or position another.
  EXPECT_EQ(position_uniform(7, 3), position_uniform(7, 3));
  EXPECT_NE(position_uniform(7, 3), position_uniform(8, 3));
  EXPECT_NE(position_uniform(7, 3), position_uniform(7, 4));
}

TEST(Sampler, DrawTokenSkipsEmptyTokensAndNeedsMass) {
  const std::vector<float> p = {0.0f, 0.25f, 0.0f, 0.75f, 0.0f};
  EXPECT_EQ(draw_token(p, 0.0), 1);
  EXPECT_EQ(draw_token(p, 0.2499), 1);
  EXPECT_EQ(draw_token(p, 0.25), 3);
  EXPECT_EQ(draw_token(p, 0.9999999999), 3);  // never the trailing token without mass
  // Unnormalised: relative to the total.
  EXPECT_EQ(draw_token({0.0f, 2.0f, 2.0f}, 0.49), 1);
  EXPECT_EQ(draw_token({0.0f, 2.0f, 2.0f}, 0.51), 2);
  try {
    draw_token({0.0f, 0.0f}, 0.5);
    ADD_FAILURE() << "a distribution without mass was drawn from";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no mass"), std::string::npos) << e.what();
  }
}

TEST(Sampler, InvalidOptionsAreRejected) {
  EXPECT_THROW(Sampler(opts(-1.0f, 0, 1.0f, 0.0f)), std::invalid_argument);
  EXPECT_THROW(Sampler(opts(1.0f, -3, 1.0f, 0.0f)), std::invalid_argument);
  EXPECT_THROW(Sampler(opts(1.0f, 0, 0.0f, 0.0f)), std::invalid_argument);
  EXPECT_THROW(Sampler(opts(1.0f, 0, 1.0f, 1.0f)), std::invalid_argument);
}

namespace {
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Expects std::runtime_error whose message contains `part`.
template <typename F>
void expect_runtime_error(F&& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning " << part;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "message: " << e.what();
  }
}
}  // namespace

TEST(Sampler, NaNLogitsAreAnError) {
  for (const size_t at : {size_t{0}, size_t{2}, size_t{5}}) {
    std::vector<float> logits = kLogits;
    logits[at] = kNaN;
    const float* l = logits.data();
    expect_runtime_error([&] { argmax(l, 6); }, "non-finite logits (NaN");
    for (const SamplerOptions& o : {opts(0.0f, 40, 0.95f, 0.05f), opts(1.0f, 0, 1.0f, 0.0f), opts(0.8f, 40, 0.95f, 0.05f),
                                    opts(1.0f, 2, 1.0f, 0.0f)}) {
      Sampler s(o);
      expect_runtime_error([&] { s.sample(l, 6); }, "non-finite logits (NaN");
      expect_runtime_error([&] { s.distribution(l, 6); }, "non-finite logits (NaN");
    }
  }
  // Every logit NaN, too.
  const std::vector<float> all(6, kNaN);
  Sampler s(opts(1.0f, 0, 1.0f, 0.0f));
  expect_runtime_error([&] { s.sample(all.data(), 6); }, "NaN");
}

TEST(Sampler, AllNegativeInfinityIsAnError) {
  const std::vector<float> all(6, -kInf);
  expect_runtime_error([&] { argmax(all.data(), 6); }, "-inf");
  for (const SamplerOptions& o : {opts(0.0f, 40, 0.95f, 0.05f), opts(1.0f, 0, 1.0f, 0.0f), opts(0.8f, 40, 0.95f, 0.05f)}) {
    Sampler s(o);
    expect_runtime_error([&] { s.sample(all.data(), 6); }, "-inf");
    expect_runtime_error([&] { s.distribution(all.data(), 6); }, "-inf");
  }
}

TEST(Sampler, NegativeInfinityLogitsGetNoProbability) {
  // Masked tokens (-inf) next to finite ones: the finite ones keep a proper softmax.
  const std::vector<float> logits = {-kInf, 1.0f, -kInf, 2.0f, -kInf, -kInf};
  EXPECT_EQ(argmax(logits.data(), 6), 3);
  for (const SamplerOptions& o : {opts(1.0f, 0, 1.0f, 0.0f), opts(1.0f, 5, 0.999f, 0.0f), opts(0.5f, 0, 1.0f, 0.01f)}) {
    Sampler s(o);
    const auto p = s.distribution(logits.data(), 6);
    const double ratio = std::exp(-1.0 / o.temperature);
    EXPECT_NEAR(p[3], 1.0 / (1.0 + ratio), 1e-6);
    EXPECT_NEAR(p[1], ratio / (1.0 + ratio), 1e-6);
    EXPECT_EQ(support(p), 2);
    for (int i = 0; i < 200; ++i) {
      const int32_t t = s.sample(logits.data(), 6);
      EXPECT_TRUE(t == 1 || t == 3) << t;
    }
  }
}

TEST(Sampler, PositiveInfinityLogitIsChosen) {
  const std::vector<float> logits = {1.0f, 3.0f, kInf, 3.0f, -kInf, 0.5f};
  EXPECT_EQ(argmax(logits.data(), 6), 2);
  for (const SamplerOptions& o : {opts(0.0f, 40, 0.95f, 0.05f), opts(1.0f, 0, 1.0f, 0.0f), opts(0.8f, 40, 0.95f, 0.05f),
                                  opts(2.0f, 3, 0.5f, 0.0f)}) {
    Sampler s(o);
    const auto p = s.distribution(logits.data(), 6);
    EXPECT_EQ(p[2], 1.0f);
    EXPECT_EQ(support(p), 1);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(logits.data(), 6), 2);
  }
  // Several +inf logits: greedy takes the first; sampling splits the mass between them.
  const std::vector<float> two = {kInf, 0.0f, kInf, 5.0f};
  EXPECT_EQ(argmax(two.data(), 4), 0);
  Sampler s(opts(1.0f, 0, 1.0f, 0.0f));
  const auto p = s.distribution(two.data(), 4);
  EXPECT_FLOAT_EQ(p[0], 0.5f);
  EXPECT_FLOAT_EQ(p[2], 0.5f);
  EXPECT_EQ(support(p), 2);
}

// Logit rows with the cases the candidate order must get right: heavy ties (with -0.0
// and +0.0), -inf, +inf.
std::vector<std::vector<float>> candidate_test_rows() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int r = 0; r < 12; ++r) {
    std::vector<float> row(r < 6 ? 50 : 517);
    for (float& v : row) v = normal(rng);
    if (r % 3 == 1) {  // few distinct values; the best tie at -0.0 / +0.0 in row 7
      for (float& v : row) v = std::min(0.0f, std::round(v / 2.0f));
      row[3] = -0.0f;
      row[4] = 0.0f;
    }
    if (r % 4 == 2)
      for (size_t i = 0; i < row.size(); i += 2) row[i] = -inf;
    if (r == 11) row[9] = inf, row[20] = inf;
    rows.push_back(row);
  }
  return rows;
}

TEST(TopK, OrdersByValueThenLowerIdLikeTheSampler) {
  for (const auto& row : candidate_test_rows()) {
    const int32_t n = static_cast<int32_t>(row.size());
    std::vector<int32_t> order(row.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    for (int32_t k : {1, 7, n}) {
      std::vector<int32_t> ids(static_cast<size_t>(k));
      std::vector<float> values(static_cast<size_t>(k));
      ASSERT_TRUE(top_k_row(row.data(), n, k, ids.data(), values.data()));
      for (int32_t j = 0; j < k; ++j) {
        ASSERT_EQ(ids[j], order[j]) << "k " << k << " place " << j;
        ASSERT_EQ(std::memcmp(&values[j], &row[ids[j]], sizeof(float)), 0);  // -0.0 stays -0.0
      }
    }
  }
  std::vector<float> nan_row = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f};
  int32_t id;
  float value;
  EXPECT_FALSE(top_k_row(nan_row.data(), 3, 1, &id, &value));
  EXPECT_THROW(top_k_row(nan_row.data(), 3, 4, &id, &value), std::invalid_argument);
}

TEST(Sampler, DistributionFromTheTopCandidatesEqualsTheWholeRow) {
  // What a sampling step computes from the backend's top k must be, bit for bit, what
  // it would compute from the whole row, for every filter combination.
  const SamplerOptions cases[] = {opts(0.8f, 40, 0.95f, 0.05f), opts(1.0f, 5, 1.0f, 0.0f), opts(1.5f, 1, 0.9f, 0.0f),
                                  opts(0.3f, 40, 1.0f, 0.2f), opts(0.0f, 40, 0.95f, 0.05f), opts(1.0f, 0, 0.5f, 0.0f)};
  for (const SamplerOptions& o : cases) {
    Sampler s(o);
    for (const auto& row : candidate_test_rows()) {
      const int32_t n = static_cast<int32_t>(row.size());
      const int32_t k = o.top_k > 0 ? std::min(o.top_k, n) : n;  // top-k off: the whole row
      ASSERT_TRUE(s.top_candidates_suffice(k, n));
      std::vector<int32_t> ids(static_cast<size_t>(k));
      std::vector<float> values(static_cast<size_t>(k));
      ASSERT_TRUE(top_k_row(row.data(), n, k, ids.data(), values.data()));
      const std::vector<float> whole = s.distribution(row.data(), n);
      const std::vector<float> top = s.distribution_top(ids.data(), values.data(), k, n);
      ASSERT_EQ(whole.size(), top.size());
      for (size_t i = 0; i < whole.size(); ++i)
        ASSERT_EQ(std::memcmp(&whole[i], &top[i], sizeof(float)), 0)
            << "temperature " << o.temperature << " top_k " << o.top_k << " token " << i;
    }
  }
}

TEST(Sampler, TooFewOrBrokenCandidatesAreAnError) {
  Sampler s(opts(1.0f, 40, 0.95f, 0.05f));
  const int32_t ids[3] = {2, 0, 1};
  const float good[3] = {3.0f, 2.0f, 1.0f};
  EXPECT_FALSE(s.top_candidates_suffice(3, 100));
  EXPECT_TRUE(s.top_candidates_suffice(3, 3));
  EXPECT_THROW(s.distribution_top(ids, good, 3, 100), std::invalid_argument);
  EXPECT_NO_THROW(s.distribution_top(ids, good, 3, 3));
  const float nan[3] = {3.0f, std::numeric_limits<float>::quiet_NaN(), 1.0f};
  EXPECT_THROW(s.distribution_top(ids, nan, 3, 3), std::runtime_error);
  const float none[3] = {-INFINITY, -INFINITY, -INFINITY};
  EXPECT_THROW(s.distribution_top(ids, none, 3, 3), std::runtime_error);
  const int32_t outside[3] = {2, 0, 7};
  EXPECT_THROW(s.distribution_top(outside, good, 3, 3), std::out_of_range);
  Sampler off(opts(1.0f, 0, 0.95f, 0.05f));  // top-k off: only the whole row suffices
  EXPECT_FALSE(off.top_candidates_suffice(1024, 2000));
}

TEST(Utf8Stream, HoldsBackSplitCharacters) {
  Utf8Stream s;
  EXPECT_EQ(s.push("a\xE2"), "a");
  EXPECT_EQ(s.push("\x80"), "");
  EXPECT_EQ(s.push("\x99 b"), "\xE2\x80\x99 b");
  EXPECT_EQ(s.push("\xF0\x9F"), "");
  EXPECT_EQ(s.flush(), "\xF0\x9F");
  EXPECT_EQ(s.push("\x80"), "\x80");  // a stray continuation byte is not held forever
}
