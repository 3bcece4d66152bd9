// StepBatch semantics in the forward pass: the in-step mask and the FULL /
// COMPRESSED prefix views, checked through logits on a small random model.
#include <algorithm>
#include <cmath>

#include "model_fixtures.h"
#include "test_support.h"

using namespace fafo;

namespace {

test::TestModel small_model(int32_t n_ctx = 64, int32_t n_layer = 2) {
  synth::SyntheticConfig c;
  c.n_layer = n_layer, c.n_embd = 48, c.n_head = 6, c.n_head_kv = 3, c.n_ff = 80, c.n_vocab = 270, c.seed = 3;
  const auto path = (test::temp_dir("stepbatch" + std::to_string(n_layer)) / "m.gguf").string();
  synth::write_synthetic_model(c, path);
  return test::load_test_model(path, n_ctx);
}

std::vector<float> row(const std::vector<float>& logits, size_t r, size_t n_vocab) {
  return std::vector<float>(logits.begin() + static_cast<std::ptrdiff_t>(r * n_vocab),
                            logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * n_vocab));
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
  return d;
}

}  // namespace

TEST(StepBatch, CausalMaskAndValidation) {
  StepBatch b = StepBatch::causal({5, 6, 7}, 10);
  EXPECT_EQ(b.positions(), (std::vector<int32_t>{10, 11, 12}));
  EXPECT_TRUE(b.sees(2, 0));
  EXPECT_TRUE(b.sees(2, 2));
  EXPECT_FALSE(b.sees(0, 1));
  EXPECT_EQ(b.logit_rows(), (std::vector<int32_t>{2}));
  StepBatch c;
  c.add(1, 0, {}, false);
  EXPECT_THROW(c.add(2, 1, {1}, false), std::out_of_range);  // cannot see itself-or-later by index
  EXPECT_THROW(c.add(2, 1, {-1}, false), std::out_of_range);
}

TEST(StepBatch, InStepMaskHidesTokens) {
  // A tree batch [A, B, C] where C sees A but not B must give C the logits of the
  // plain sequence [A, C] with C at the same position.
  auto m = small_model();
  const size_t V = 270;
  m.model->truncate(0);
  StepBatch prefix = StepBatch::causal({1, 40}, 0);
  m.model->forward(prefix);
  m.model->commit(2);
  StepBatch tree;
  tree.add(100, 2, {}, true);
  tree.add(101, 3, {0}, true);
  tree.add(102, 3, {0}, true);  // a sibling of B: same position, sees A only
  const auto tree_logits = m.model->forward(tree);

  m.model->truncate(2);
  StepBatch plain = StepBatch::causal({100, 102}, 2, true);
  const auto plain_logits = m.model->forward(plain);
  EXPECT_LT(max_diff(row(tree_logits, 2, V), row(plain_logits, 1, V)), 1e-5);
  EXPECT_LT(max_diff(row(tree_logits, 0, V), row(plain_logits, 0, V)), 1e-5);
  // And B (which also sees only A) differs from C: the mask did not merge them.
  EXPECT_GT(max_diff(row(tree_logits, 1, V), row(tree_logits, 2, V)), 1e-3);
}

// A stream policy whose region covers the whole context: COMPRESSED == FULL.
TEST(StepBatch, CompressedViewOfTheWholeContextEqualsFull) {
  auto m = small_model();
  const size_t V = 270;
  KvPolicyOptions kv;
  kv.budget = 16;
  m.model->set_kv_policy(make_kv_policy(kv));
  StepBatch prefix = StepBatch::causal({1, 7, 8, 9, 10, 11}, 0);
  m.model->forward(prefix);
  m.model->commit(6);
  EXPECT_EQ(m.model->kv_layout().region_count(), 6);
  StepBatch b;
  b.add(50, 6, {}, true, PrefixView::Full);
  b.add(50, 6, {}, true, PrefixView::Compressed);
  const auto l = m.model->forward(b);
  EXPECT_LT(max_diff(row(l, 0, V), row(l, 1, V)), 1e-6);
}

TEST(StepBatch, CompressedViewAttendsOnlyTheRegion) {
  // One layer: an entry's key and value depend only on its token and position, so a
  // FULL row over a context made of just the region's tokens is the exact reference.
  auto m = small_model(64, 1);
  const size_t V = 270;
  KvPolicyOptions kv;
  kv.budget = 4;
  kv.sinks = 2;  // region = sinks {0, 1} + the 2 most recent {6, 7}
  m.model->set_kv_policy(make_kv_policy(kv));
  StepBatch prefix = StepBatch::causal({1, 7, 8, 9, 10, 11, 12, 13}, 0);
  m.model->forward(prefix);
  m.model->commit(8);
  auto region = m.model->kv_layout().region_entries();
  std::sort(region.begin(), region.end());
  EXPECT_EQ(region, (std::vector<int32_t>{0, 1, 6, 7}));
  StepBatch b;
  b.add(60, 8, {}, true, PrefixView::Compressed);
  b.add(60, 8, {}, true, PrefixView::Full);
  const auto l = m.model->forward(b);

  m.model->set_kv_policy(nullptr);
  m.model->truncate(0);
  StepBatch ref;
  ref.add(1, 0, {}, false);
  ref.add(7, 1, {0}, false);
  ref.add(12, 6, {0, 1}, false);
  ref.add(13, 7, {0, 1, 2}, false);
  ref.add(60, 8, {0, 1, 2, 3}, true);
  const auto expected = m.model->forward(ref);
  EXPECT_LT(max_diff(row(l, 0, V), expected), 1e-5);
  EXPECT_GT(max_diff(row(l, 1, V), expected), 1e-4);  // the FULL row saw entries 2..5 too
}

TEST(StepBatch, EmptyRegionSeesOnlyTheStep) {
  // With no policy the region is empty: a COMPRESSED token sees only itself, which
  // (RoPE keeps q.k at equal positions) equals the token alone at position 0.
  auto m = small_model();
  const size_t V = 270;
  StepBatch prefix = StepBatch::causal({1, 7, 8, 9, 10, 11}, 0);
  m.model->forward(prefix);
  m.model->commit(6);
  StepBatch lonely;
  lonely.add(60, 6, {}, true, PrefixView::Compressed);
  lonely.add(60, 6, {}, true, PrefixView::Full);
  const auto l = m.model->forward(lonely);
  m.model->truncate(0);
  StepBatch alone = StepBatch::causal({60}, 0);
  const auto ref = m.model->forward(alone);
  EXPECT_LT(max_diff(row(l, 0, V), ref), 1e-4);
  EXPECT_GT(max_diff(row(l, 1, V), ref), 1e-3);  // the FULL row did see the prefix
}
