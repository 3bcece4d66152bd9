// The oracle checked against the StepBatch's definition itself, not against another
// backend: with every query 0, every key scores 0 and attention returns the mean of the
// values a row sees; with entry c's value the one-hot vector e_c, output column c is
// 1/n exactly when the row sees entry c (n: the entries it sees), else 0. So each case
// below states which entries a row must see (FULL and COMPRESSED rows, a chosen region,
// dense layers, in-step masks, f16 caches, MLA) and reads it back from the output.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fafo/backend.h"
#include "fafo/kv_cache.h"
#include "fafo/step_batch.h"

namespace fafo {
namespace {

constexpr int32_t kWidth = 16;      // head_dim = kv_dim: room for 10 committed + 3 step one-hots
constexpr int32_t kCommitted = 10;  // entries before the step; entry l's value is e_l
constexpr int32_t kLayers = 2;

std::vector<float> one_hots(int32_t first, int32_t count) {
  std::vector<float> v(static_cast<size_t>(count) * kWidth, 0.0f);
  for (int32_t i = 0; i < count; ++i) v[static_cast<size_t>(i) * kWidth + static_cast<size_t>(first + i)] = 1.0f;
  return v;
}

struct Row {
  std::vector<int32_t> sees_in_step;  // batch tokens j < i it sees (itself always)
  PrefixView prefix = PrefixView::Full;
};

struct Case {
  std::string name;
  KvCacheType type = KvCacheType::F32;
  bool latent = false;
  int32_t region = 0, dense_layers = 0;
  std::vector<int32_t> region_entries;  // logical entries selected into the region
  std::vector<Row> rows;
};

// Which committed entries row `r` sees in `layer`, by the definition (not by any code
// under test): everything for a FULL row or a dense layer, else the selected region.
std::set<int32_t> expected_entries(const Case& c, int32_t layer, int32_t r) {
  std::set<int32_t> seen;
  const Row& row = c.rows[static_cast<size_t>(r)];
  if (row.prefix == PrefixView::Full || layer < c.dense_layers) {
    for (int32_t l = 0; l < kCommitted; ++l) seen.insert(l);
  } else {
    seen.insert(c.region_entries.begin(), c.region_entries.end());
  }
  seen.insert(kCommitted + r);
  for (int32_t j : row.sees_in_step) seen.insert(kCommitted + j);
  return seen;
}

void check(const Case& c, const std::function<std::unique_ptr<Backend>()>& make) {
  SCOPED_TRACE(c.name);
  std::unique_ptr<Backend> be = make();
  KvCacheShape shape(kLayers, 64, kWidth, c.type);
  if (c.latent) shape.key_dims = shape.value_dims = std::vector<int32_t>(kLayers, kWidth);
  const std::unique_ptr<KvCache> kv_owned = be->create_kv_cache(shape);
  KvCache& kv = *kv_owned;
  std::vector<float> keys(static_cast<size_t>(kCommitted) * kWidth);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = static_cast<float>((i * 37) % 11) - 5.0f;  // any keys: q = 0
  const std::vector<float> values = one_hots(0, kCommitted);
  for (int32_t l = 0; l < kLayers; ++l) kv.write(l, 0, kCommitted, keys.data(), values.data());
  kv.reset_layout(c.region, c.dense_layers, kCommitted);
  if (!c.region_entries.empty()) kv.select(c.region_entries);

  StepBatch batch;
  const int32_t T = static_cast<int32_t>(c.rows.size());
  for (int32_t i = 0; i < T; ++i)
    batch.add(i, kCommitted + i, c.rows[static_cast<size_t>(i)].sees_in_step, true, c.rows[static_cast<size_t>(i)].prefix);
  batch.set_n_past(kCommitted);
  const std::vector<float> step_values = one_hots(kCommitted, T);  // token i's value: e_(10 + i)
  const Weight table = be->upload_weight(TensorType::F32, T, kWidth, step_values.data());
  std::vector<float> identity(static_cast<size_t>(kWidth) * kWidth, 0.0f);
  for (int32_t i = 0; i < kWidth; ++i) identity[static_cast<size_t>(i) * kWidth + static_cast<size_t>(i)] = 1.0f;
  const Weight up = be->upload_weight(TensorType::F32, kWidth, kWidth, identity.data());
  Activation v = be->alloc_activation(T, kWidth), q = be->alloc_activation(T, kWidth);  // q stays 0
  const AttentionShape heads{1, 1, kWidth, 1.0f};
  RopeParams no_rope;
  no_rope.n_dims = 0;
  for (int32_t layer = 0; layer < kLayers; ++layer) {
    Activation out = be->alloc_activation(T, kWidth);
    be->begin_step(batch, kv);
    be->embed(table, v);
    kv.store(layer, v, v);
    if (c.latent)
      be->latent_attention(layer, q, heads, up, up, no_rope, out);
    else
      be->attention(layer, q, heads, out);
    be->finish_step();
    const std::vector<float> got = be->read_rows(out, T);
    for (int32_t r = 0; r < T; ++r) {
      const std::set<int32_t> seen = expected_entries(c, layer, r);
      const float share = static_cast<float>(1.0 / static_cast<double>(seen.size()));
      for (int32_t col = 0; col < kWidth; ++col)
        EXPECT_EQ(got[static_cast<size_t>(r) * kWidth + static_cast<size_t>(col)], seen.count(col) ? share : 0.0f)
            << "layer " << layer << ", row " << r << ", entry " << col << (seen.count(col) ? " must" : " must not")
            << " be seen";
    }
  }
}

std::vector<Case> all_cases() {
  const std::vector<Row> causal = {{{}}, {{0}}, {{0, 1}}};
  const std::vector<Row> masked = {{{}, PrefixView::Compressed}, {{}, PrefixView::Full}, {{0}, PrefixView::Compressed}};
  std::vector<Case> cases = {
      {"FULL rows, causal", KvCacheType::F32, false, 0, 0, {}, causal},
      {"COMPRESSED and FULL rows, a chosen region, a mask", KvCacheType::F32, false, 4, 0, {2, 5, 7, 9}, masked},
      {"the same with a dense first layer", KvCacheType::F32, false, 4, 1, {2, 5, 7, 9}, masked},
      {"a region of the first entries, f16 cache", KvCacheType::F16, false, 3, 0, {0, 1, 2}, masked},
      {"MLA, identity up-projections", KvCacheType::F32, true, 4, 1, {1, 3, 6, 8}, masked},
      {"MLA, f16 cache", KvCacheType::F16, true, 4, 0, {9, 0, 4, 5}, masked},
  };
  return cases;
}

TEST(ReferenceBackend, AttentionSeesExactlyWhatTheStepBatchDefines) {
  for (const Case& c : all_cases()) check(c, [] { return make_reference_backend(); });
}

// The same definition checked on the cpu backend, whose slot selection, parts and
// combine are its own: exact too (q = 0: every weight is 1, every sum an integer).
TEST(ReferenceBackend, TheCpuBackendSeesTheSameEntries) {
  for (const Case& c : all_cases()) check(c, [] { return make_cpu_backend(2); });
}

}  // namespace
}  // namespace fafo
