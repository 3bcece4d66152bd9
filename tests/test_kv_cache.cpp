// The fixed compressed region: KvLayout keeps a permutation whose region holds
// exactly the chosen entries; after real FAFO generations under every policy, the
// cache still holds every entry exactly once with the right contents, the region
// holds the policy's choice, and the output equals plain decoding.
#include <algorithm>
#include <numeric>
#include <fstream>
#include <random>
#include <set>

#include "fafo/generator.h"
#include "fafo/kv_layout.h"
#include "model_fixtures.h"
#include "test_support.h"

using namespace fafo;

namespace {

void expect_consistent(const KvLayout& k) {
  std::set<int32_t> seen;
  for (int32_t l = 0; l < k.size(); ++l) {
    const int32_t p = k.physical_of(l);
    ASSERT_GE(p, 0);
    ASSERT_LT(p, k.size());
    ASSERT_EQ(k.logical_of(p), l);
    seen.insert(p);
  }
  ASSERT_EQ(static_cast<int32_t>(seen.size()), k.size());
}

}  // namespace

TEST(KvLayout, RegionHoldsExactlyTheChosenSetThroughRandomOperations) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int32_t region = std::uniform_int_distribution<int32_t>(0, 20)(rng);
    KvLayout k(region);
    for (int op = 0; op < 60; ++op) {
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      if (kind < 5) {
        k.append(std::uniform_int_distribution<int32_t>(1, 5)(rng));
      } else if (kind < 9 && k.size() > 0) {
        // A random choice of at most region_count() distinct entries.
        std::vector<int32_t> all(static_cast<size_t>(k.size()));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        all.resize(static_cast<size_t>(std::uniform_int_distribution<int32_t>(0, k.region_count())(rng)));
        k.select(all);
        expect_consistent(k);
        const auto in_region = k.region_entries();
        const std::set<int32_t> region_set(in_region.begin(), in_region.end());
        for (int32_t l : all) EXPECT_TRUE(region_set.count(l)) << "chosen entry " << l << " not in the region";
        EXPECT_EQ(static_cast<int32_t>(in_region.size()), k.region_count());
      } else {
        const int32_t n = std::uniform_int_distribution<int32_t>(0, k.size())(rng);
        std::set<int32_t> kept_in_region;
        for (int32_t l : k.region_entries())
          if (l < n) kept_in_region.insert(l);
        k.truncate(n);
        expect_consistent(k);
        for (int32_t l = 0; l < n; ++l) EXPECT_LT(k.physical_of(l), n);
        // What the region held of the first n entries, it still holds.
        const auto after = k.region_entries();
        for (int32_t l : kept_in_region) EXPECT_NE(std::find(after.begin(), after.end(), l), after.end()) << l;
      }
    }
  }
}

TEST(KvLayout, RestoreOrderIsTheIdentityAgain) {
  KvLayout k(3);
  k.append(10);
  k.select({7, 8, 9});
  EXPECT_FALSE(k.is_identity());
  k.truncate(9);  // entry 7 and 8 stay in the region
  EXPECT_FALSE(k.is_identity());
  EXPECT_LT(k.physical_of(7), 3);
  k.restore_order(6);
  EXPECT_TRUE(k.is_identity());
  for (int32_t l = 0; l < 6; ++l) EXPECT_EQ(k.physical_of(l), l);
}

TEST(KvLayout, RejectsBadChoices) {
  KvLayout k(2);
  k.append(5);
  EXPECT_THROW(k.select({0, 1, 2}), std::invalid_argument);
  EXPECT_THROW(k.select({1, 1}), std::invalid_argument);
  EXPECT_THROW(k.select({9}), std::out_of_range);
  const auto swaps = k.select({3, 4});
  EXPECT_EQ(swaps.size(), 2u);
  EXPECT_EQ(k.physical_of(3) < 2 && k.physical_of(4) < 2, true);
}

class PolicyGeneration : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(PolicyGeneration, CacheStaysCompleteAndOutputEqualsAr) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto [policy, budget] = GetParam();
  auto m = test::load_test_model(model_path.string());
  const auto prompt = m.tokenizer->encode("Lily and Tom went to the park. They saw a big dog. The dog was happy.", true);
  GenerationOptions o;
  o.n_predict = 120;
  o.sampling.temperature = 0;
  o.stop_at_end_of_generation = false;
  const auto ar = generate(*m.model, *m.tokenizer, prompt, o);
  // Reference keys: plain decoding keeps everything in logical order.
  const int32_t n = m.model->n_past();
  std::vector<std::vector<float>> reference;
  for (int32_t l = 0; l < m.model->config().n_layer; ++l) reference.push_back(m.model->committed_keys(l, 0, n));

  o.decoding.strategy = Strategy::Fafo;
  o.kv.name = policy;
  o.kv.budget = budget;
  o.kv.recent = std::min(8, budget);
  o.kv.update_interval = 3;
  const auto r = generate(*m.model, *m.tokenizer, prompt, o);
  EXPECT_EQ(r.ids, ar.ids) << policy << " budget " << budget;
  ASSERT_EQ(m.model->n_past(), n);

  const KvLayout& k = m.model->kv_layout();
  expect_consistent(k);
  EXPECT_EQ(k.region_count(), std::min(budget, n));
  if (std::string(policy) == "stream") {
    std::vector<int32_t> expected;
    if (n <= budget) {
      for (int32_t i = 0; i < n; ++i) expected.push_back(i);
    } else {
      for (int32_t i = 0; i < std::min(4, budget); ++i) expected.push_back(i);
      for (int32_t i = n - (budget - std::min(4, budget)); i < n; ++i) expected.push_back(i);
    }
    auto got = k.region_entries();
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, expected);
  }
  const bool region_moves = budget < n && !(std::string(policy) == "stream" && budget <= 4);
  if (region_moves) {
    EXPECT_GT(m.model->kv_swaps(), 0) << "the region never changed";
  } else {
    EXPECT_EQ(m.model->kv_swaps(), 0);
  }
  // Every entry's contents sit where the layout says: nothing lost or duplicated.
  for (int32_t l = 0; l < m.model->config().n_layer; ++l) {
    EXPECT_EQ(m.model->committed_keys(l, 0, n), reference[static_cast<size_t>(l)]) << "layer " << l;
    std::vector<int32_t> region_slots(static_cast<size_t>(k.region_count()));
    std::iota(region_slots.begin(), region_slots.end(), 0);
    const auto raw = m.model->kv_cache().read_keys(l, region_slots);
    const int32_t kv_dim = m.model->config().kv_dim();
    for (int32_t p = 0; p < k.region_count(); ++p) {
      const int32_t logical = k.logical_of(p);
      ASSERT_TRUE(std::equal(raw.begin() + p * kv_dim, raw.begin() + (p + 1) * kv_dim,
                             reference[static_cast<size_t>(l)].begin() + logical * kv_dim))
          << "region slot " << p << " layer " << l;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryPolicyAndBudget, PolicyGeneration,
                         ::testing::Combine(::testing::Values("stream", "quest", "snapkv", "chunks"),
                                            ::testing::Values(1, 17, 68, 1000)),
                         [](const ::testing::TestParamInfo<PolicyGeneration::ParamType>& p) {
                           return std::string(std::get<0>(p.param)) + "_budget_" + std::to_string(std::get<1>(p.param));
                         });
