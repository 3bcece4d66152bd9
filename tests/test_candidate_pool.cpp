// The candidate pool: LRU per key, caching under every suffix up to the lookback,
// retrieval by the longest matching suffix with back-off to shorter ones.
#include "fafo/candidate_pool.h"
#include "test_support.h"

using namespace fafo;

TEST(CandidatePool, KeepsAtMostGPerKeyEvictingLeastRecentlyUsed) {
  CandidatePool pool(2, 1);
  pool.add({7}, {1, 1});
  pool.add({7}, {2, 2});
  pool.add({7}, {3, 3});  // evicts {1,1}
  auto e = pool.entries({7});
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].ngram, (std::vector<int32_t>{3, 3}));
  EXPECT_EQ(e[1].ngram, (std::vector<int32_t>{2, 2}));
  EXPECT_EQ(pool.ngram_count(), 2);
  // Using {2,2} makes it most recent, so the next insertion evicts {3,3}.
  auto got = pool.retrieve({5, 7}, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].ngram, (std::vector<int32_t>{3, 3}));
  pool.retrieve({7}, 2);  // touches 3,3 then 2,2: order stays 3,3 first
  pool.add({7}, {2, 2});  // refresh, no duplicate
  EXPECT_EQ(pool.entries({7}).front().ngram, (std::vector<int32_t>{2, 2}));
  pool.add({7}, {4, 4});
  e = pool.entries({7});
  EXPECT_EQ(e[0].ngram, (std::vector<int32_t>{4, 4}));
  EXPECT_EQ(e[1].ngram, (std::vector<int32_t>{2, 2}));
}

TEST(CandidatePool, CachesUnderEverySuffixUpToTheLookback) {
  CandidatePool pool(4, 3);
  pool.add({10, 11, 12, 13}, {20, 21}, 5, 2);
  EXPECT_EQ(pool.entries({13}).size(), 1u);
  EXPECT_EQ(pool.entries({12, 13}).size(), 1u);
  EXPECT_EQ(pool.entries({11, 12, 13}).size(), 1u);
  EXPECT_EQ(pool.entries({10, 11, 12, 13}).size(), 0u);  // longer than the lookback
  EXPECT_EQ(pool.key_count(), 3);
  EXPECT_EQ(pool.entries({13})[0].origin_step, 5);
  EXPECT_EQ(pool.entries({13})[0].origin_column, 2);
}

TEST(CandidatePool, RetrievesLongestSuffixFirstThenBacksOff) {
  CandidatePool pool(4, 3);
  pool.add({1, 2, 3}, {100});  // under [3], [2,3], [1,2,3]
  pool.add({9, 2, 3}, {200});  // under [3], [2,3], [9,2,3]
  pool.add({3}, {300});        // under [3] only
  auto got = pool.retrieve({0, 1, 2, 3}, 3);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].ngram, (std::vector<int32_t>{100}));  // the 3-token key matched
  EXPECT_EQ(got[0].key_length, 3);
  EXPECT_EQ(got[1].ngram, (std::vector<int32_t>{200}));  // then [2,3]
  EXPECT_EQ(got[1].key_length, 2);
  EXPECT_EQ(got[2].ngram, (std::vector<int32_t>{300}));  // then [3]
  EXPECT_EQ(got[2].key_length, 1);
  // Distinct n-grams only, capped at the count.
  EXPECT_EQ(pool.retrieve({1, 2, 3}, 2).size(), 2u);
  EXPECT_TRUE(pool.retrieve({4}, 5).empty());
  EXPECT_EQ(pool.lookups(), 3);
  EXPECT_EQ(pool.hits(), 2);
}

TEST(CandidatePool, LookaheadIsLookbackOne) {
  CandidatePool pool(3, 1);
  pool.add({1, 2, 3}, {4, 5});
  EXPECT_EQ(pool.key_count(), 1);
  EXPECT_EQ(pool.retrieve({8, 3}, 3).at(0).ngram, (std::vector<int32_t>{4, 5}));
}

TEST(CandidatePool, RejectsBadSizes) {
  EXPECT_THROW(CandidatePool(0, 1), std::invalid_argument);
  EXPECT_THROW(CandidatePool(1, 0), std::invalid_argument);
}
