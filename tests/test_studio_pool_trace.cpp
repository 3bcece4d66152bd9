// What fafo-studio's pool and KV views read from a StepTrace: the candidate pool's
// per-key hit counts and LRU ages, its bounded snapshot (the keys this step's lookup
// used first, then the most recently used), the model's layer counts, and their
// round trip through the --trace JSONL format; and the views built on them.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "fafo/candidate_pool.h"
#include "fafo/generator.h"
#include "fafo/step_trace_json.h"
#include "model_fixtures.h"
#include "test_support.h"
#include "view_models.h"

using namespace fafo;
using namespace fafo::studio;

TEST(StudioPoolTrace, KeysCountHitsAndAgeInLookups) {
  CandidatePool pool(2, 2);
  pool.add({1, 2}, {10, 11}, 0, 3);  // under [2] and [1, 2]
  EXPECT_EQ(pool.clock(), 0);
  pool.retrieve({5, 6}, 2);  // a miss: the clock still advances
  EXPECT_EQ(pool.clock(), 1);
  const auto got = pool.retrieve({9, 1, 2}, 2);  // takes {10, 11} from [1, 2]
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].key_length, 2);
  const PoolKey* longest = pool.find({1, 2});
  const PoolKey* shortest = pool.find({2});
  ASSERT_TRUE(longest && shortest);
  EXPECT_EQ(longest->hits, 1);
  EXPECT_EQ(shortest->hits, 0);  // the n-gram was taken under the longer key already
  EXPECT_EQ(longest->last_used, 2);
  EXPECT_EQ(shortest->last_used, 0);
  EXPECT_EQ(longest->entries.front().hits, 1);
  EXPECT_EQ(shortest->entries.front().hits, 0);
  EXPECT_EQ(pool.find({7}), nullptr);

  pool.retrieve({0}, 1);
  pool.retrieve({0}, 1);
  pool.add({4}, {40, 41}, 4, 0);
  const auto snap = pool.snapshot(10);
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_EQ(snap[0].key, (std::vector<int32_t>{4}));  // the most recently used first
  EXPECT_EQ(snap[0].age, 0);
  EXPECT_FALSE(snap[0].retrieved);                    // the latest lookup ({0}) used no key
  EXPECT_EQ(snap[1].key, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(snap[1].age, 2);                          // used at clock 2, now 4
  EXPECT_EQ(snap[1].hits, 1);
  ASSERT_EQ(snap[1].ngrams.size(), 1u);
  EXPECT_EQ(snap[1].ngrams[0].tokens, (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(snap[1].ngrams[0].hits, 1);
  EXPECT_EQ(snap[1].ngrams[0].age, 2);
  EXPECT_EQ(snap[1].ngrams[0].origin_column, 3);
  EXPECT_EQ(snap[2].key, (std::vector<int32_t>{2}));
  EXPECT_EQ(snap[2].age, 4);
  EXPECT_EQ(pool.snapshot(2).size(), 2u);
  EXPECT_TRUE(pool.snapshot(0).empty());
}

TEST(StudioPoolTrace, SnapshotPutsTheKeysOfTheLatestLookupFirst) {
  CandidatePool pool(3, 3);
  pool.add({1, 2, 3}, {100});  // under [3], [2, 3], [1, 2, 3]
  pool.add({7, 8, 9}, {200});  // more recent keys
  pool.add({3}, {300});        // [3] now holds 300, 100
  pool.retrieve({0, 2, 3}, 3);  // uses [2, 3] (100) then [3] (300)
  for (int i = 0; i < 5; ++i) pool.add({50 + i}, {1});  // newer keys than those retrieved
  const auto snap = pool.snapshot(3);
  ASSERT_EQ(snap.size(), 3u);
  EXPECT_EQ(snap[0].key, (std::vector<int32_t>{2, 3}));
  EXPECT_TRUE(snap[0].retrieved);
  EXPECT_EQ(snap[1].key, (std::vector<int32_t>{3}));
  EXPECT_TRUE(snap[1].retrieved);
  EXPECT_EQ(snap[1].ngrams[0].tokens, (std::vector<int32_t>{300}));  // most recently used first
  EXPECT_EQ(snap[2].key, (std::vector<int32_t>{54}));
  EXPECT_FALSE(snap[2].retrieved);
  // The LRU order inside a key is what eviction follows.
  pool.add({3}, {400});
  pool.add({3}, {500});  // evicts the least recently used of [3]
  const auto e = pool.entries({3});
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].ngram, (std::vector<int32_t>{500}));
  EXPECT_EQ(e[2].ngram, (std::vector<int32_t>{300}));
}

TEST(StudioPoolTrace, JsonRoundTripCarriesTheSnapshotAndLayers) {
  StepTrace t;
  t.step = 4;
  t.strategy = Strategy::Fafo;
  t.n_past = 8;
  t.batch_size = 1;
  t.kv_region = {0, 1, 7};
  t.kv_layers = 5;
  t.kv_dense_layers = 2;
  t.kv_type = "q4_0";
  t.kv_bytes_per_token = 1800;
  t.kv_windows = {512, 0, 512, 0, 0};
  PoolKeySnapshot k;
  k.key = {3, 4};
  k.hits = 6;
  k.age = 1;
  k.retrieved = true;
  k.ngrams = {{{5, 6, 7}, 2, 3, 4, 0}, {{8, 9, 10}, -1, -1, 0, 9}};
  t.pool_snapshot = {k};
  const StepTrace back = step_trace_from_json(nlohmann::json::parse(step_trace_to_json(t).dump()));
  ASSERT_EQ(back.pool_snapshot.size(), 1u);
  const PoolKeySnapshot& b = back.pool_snapshot[0];
  EXPECT_EQ(b.key, k.key);
  EXPECT_EQ(b.hits, 6);
  EXPECT_EQ(b.age, 1);
  EXPECT_TRUE(b.retrieved);
  ASSERT_EQ(b.ngrams.size(), 2u);
  EXPECT_EQ(b.ngrams[0].tokens, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(b.ngrams[0].origin_step, 2);
  EXPECT_EQ(b.ngrams[0].origin_column, 3);
  EXPECT_EQ(b.ngrams[0].hits, 4);
  EXPECT_EQ(b.ngrams[1].age, 9);
  EXPECT_EQ(back.kv_layers, 5);
  EXPECT_EQ(back.kv_dense_layers, 2);
  EXPECT_EQ(back.kv_type, "q4_0");
  EXPECT_EQ(back.kv_bytes_per_token, 1800);
  EXPECT_EQ(back.kv_windows, (std::vector<int32_t>{512, 0, 512, 0, 0}));
  nlohmann::json negative = step_trace_to_json(t);
  negative["kv"]["windows"][1] = -1;
  EXPECT_THROW(step_trace_from_json(negative), std::invalid_argument);
  // A trace written before these fields existed still loads.
  nlohmann::json old = step_trace_to_json(t);
  old["pool"].erase("snapshot");
  old["kv"].erase("layers");
  old["kv"].erase("dense_layers");
  for (const char* field : {"type", "bytes_per_token", "windows"}) old["kv"].erase(field);
  const StepTrace o = step_trace_from_json(old);
  EXPECT_TRUE(o.pool_snapshot.empty());
  EXPECT_EQ(o.kv_layers, 0);
  EXPECT_TRUE(o.kv_type.empty());
  EXPECT_TRUE(o.kv_windows.empty());
}

// Real FAFO runs: every step after the first carries a bounded snapshot whose
// retrieved keys hold the step's candidates, and the model's layer counts; turning
// the snapshot off leaves the output unchanged.
TEST(StudioPoolTrace, GeneratorFillsTheSnapshotAndLayers) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  auto m = test::load_test_model(model_path.string());
  const auto prompt = m.tokenizer->encode("Once upon a time there was a little girl", true);
  auto run = [&](int32_t snapshot_keys, const std::string& policy, std::vector<StepTrace>& traces) {
    GenerationOptions o;
    o.n_predict = 80;
    o.sampling.temperature = 0;
    o.stop_at_end_of_generation = false;
    o.decoding.strategy = Strategy::Fafo;
    o.decoding.trace_pool_keys = snapshot_keys;
    o.kv.name = policy;
    o.on_step = [&](const StepTrace& t) { traces.push_back(t); };
    return generate(*m.model, *m.tokenizer, prompt, o).ids;
  };
  std::vector<StepTrace> traces, plain;
  const auto ids = run(12, "quest", traces);
  EXPECT_EQ(run(0, "quest", plain), ids);
  for (const StepTrace& t : plain) EXPECT_TRUE(t.pool_snapshot.empty());

  int64_t found = 0, tried = 0;
  for (size_t i = 1; i < traces.size(); ++i) {
    const StepTrace& t = traces[i];
    EXPECT_EQ(t.kv_layers, 5);
    EXPECT_EQ(t.kv_dense_layers, 2);  // quest keeps its first 2 layers dense
    EXPECT_EQ(t.kv_type, "f32");
    EXPECT_EQ(t.kv_bytes_per_token, 5 * 2 * 32 * 4);  // 5 layers' keys and values, 32 floats each
    EXPECT_TRUE(t.kv_windows.empty());                 // no sliding window
    ASSERT_LE(t.pool_snapshot.size(), 12u);
    if (t.pool_keys >= 12) {
      EXPECT_EQ(t.pool_snapshot.size(), 12u);
    }
    bool seen_unretrieved = false;
    for (const PoolKeySnapshot& k : t.pool_snapshot) {
      EXPECT_FALSE(k.retrieved && seen_unretrieved) << "retrieved keys come first";
      seen_unretrieved |= !k.retrieved;
      EXPECT_GE(k.age, 0);
      EXPECT_LE(k.ngrams.size(), 8u);  // at most G per key
      EXPECT_LE(static_cast<int32_t>(k.key.size()), 4);
    }
    const PoolView v = pool_view(t);
    tried += v.tried;
    found += v.tried_in_snapshot;
    EXPECT_LE(v.tried_in_snapshot, v.tried);
    for (const PoolKeyRow& row : v.rows)
      for (const PoolNgramRow& n : row.ngrams)
        if (n.tried_match >= 0) {
          EXPECT_TRUE(row.retrieved);
        }
  }
  EXPECT_GT(tried, 0);
  EXPECT_GT(found, tried / 2) << "most tried candidates should be found under the retrieved keys";
}
