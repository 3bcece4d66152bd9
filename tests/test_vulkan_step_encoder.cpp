// The Vulkan backend's StepEncoder on whatever Vulkan device the machine has (lavapipe
// in CI), with the Khronos validation layer enabled when it is installed: the step
// inputs begin() writes (tokens, prefix flags, in-step masks, positions, the region's
// entries, the cache's logical order), the RoPE tables, the one recording per step and its submission, the row counts
// of gathered activations, and clear errors for misuse. Skipped, with the reason, when
// there is no Vulkan device or fafo was built without Vulkan.
#include <gtest/gtest.h>

#if FAFO_HAVE_VULKAN

#include <cmath>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/vulkan/buffer.h"
#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/descriptor_cache.h"
#include "backend/vulkan/replay_cache.h"
#include "backend/vulkan/step_encoder.h"
#include "fafo/backend.h"
#include "fafo/step_batch.h"
#include "vulkan_test_support.h"

namespace {

using fafo::Activation;
using fafo::KvLayout;
using fafo::PrefixView;
using fafo::RopeParams;
using fafo::StepBatch;
using fafo::vulkan::Buffer;
using fafo::vulkan::Context;
using fafo::vulkan::DescriptorCache;
using fafo::vulkan::CommandSequence;
using fafo::vulkan::ReplayCache;
using fafo::vulkan::StepEncoder;
using fafo::vulkan::ValidationLog;

template <class T>
std::vector<T> read(const Buffer& b, size_t n, size_t offset = 0) {
  std::vector<T> out(n);
  b.download(out.data(), n * sizeof(T), offset * sizeof(T));
  return out;
}

class VulkanStepEncoder : public fafo::test::ValidatedVulkanSuite<fafo::test::NoKernels> {
 protected:
  void SetUp() override {
    ValidatedVulkanSuite::SetUp();
    if (IsSkipped()) return;
    descriptors_ = std::make_unique<DescriptorCache>(*context_);
    encoder_ = std::make_unique<StepEncoder>(*context_, *descriptors_);
    encoder_->reserve(64);
  }
  void TearDown() override {
    encoder_.reset();
    descriptors_.reset();
    ValidatedVulkanSuite::TearDown();
  }

  std::unique_ptr<DescriptorCache> descriptors_;
  std::unique_ptr<StepEncoder> encoder_;
};

TEST_F(VulkanStepEncoder, MisuseIsAClearError) {
  EXPECT_THROW(encoder_->finish(), std::logic_error);
  EXPECT_THROW(encoder_->commands(), std::logic_error);
  EXPECT_THROW(encoder_->batch(), std::logic_error);
  StepBatch batch = StepBatch::causal({1, 2, 3}, 4);
  KvLayout short_layout(1);  // a logical order of 2 entries for a step after 4
  short_layout.append(2);
  short_layout.select({1});
  ASSERT_FALSE(short_layout.is_identity());
  EXPECT_THROW(encoder_->begin(batch, &short_layout), std::invalid_argument);
}

// The layout's order and region entries as the step_info holds them.
std::vector<uint32_t> words_of(const std::vector<int32_t>& v, size_t n) {
  return std::vector<uint32_t>(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
}

TEST_F(VulkanStepEncoder, BeginWritesTheStepsInputs) {
  // 40 tokens: two mask words per row. Token 1 sees only itself, token 2 sees 0 and
  // itself and views the compressed prefix; the rest are causal.
  StepBatch batch;
  batch.add(10, 7, {}, true);
  batch.add(11, 8, {}, true);
  batch.add(12, 8, {0}, true, PrefixView::Compressed);
  for (int32_t i = 3; i < 40; ++i) {
    std::vector<int32_t> sees;
    for (int32_t j = 0; j < i; ++j) sees.push_back(j);
    batch.add(10 + i, 6 + i, sees, false);
  }
  batch.set_n_past(5);
  KvLayout layout(2);  // a region of 2 holding entries 4 and 3: a permuted order
  layout.append(6);
  layout.select({4, 3});
  ASSERT_FALSE(layout.is_identity());
  encoder_->begin(batch, &layout);
  EXPECT_EQ(&encoder_->batch(), &batch);
  EXPECT_TRUE(encoder_->use_order());
  const uint32_t T = 40, words = 2, region = 2;
  EXPECT_EQ(encoder_->mask_words(), words);
  const uint32_t H = StepEncoder::kHeaderWords;
  EXPECT_EQ(encoder_->flags_offset(), H);
  EXPECT_EQ(encoder_->mask_offset(), H + T);
  EXPECT_EQ(encoder_->positions_offset(), H + T + T * words);
  EXPECT_EQ(encoder_->region_offset(), H + T + T * words + T);
  EXPECT_EQ(encoder_->order_offset(), H + T + T * words + T + region);
  encoder_->set_split(0, 128, 2);
  encoder_->set_split(0, 128, 2);  // the same again is fine; another split is not
  EXPECT_THROW(encoder_->set_split(0, 256, 1), std::logic_error);
  EXPECT_THROW(encoder_->set_split(1, 128, 2), std::out_of_range);  // a step of one part
  const std::vector<uint32_t> info = read<uint32_t>(encoder_->step_info(), H + T + T * words + T + region + 5);
  EXPECT_EQ(info[0], 5u);    // n_past
  EXPECT_EQ(info[1], 128u);  // keys per part
  EXPECT_EQ(info[2], 2u);    // parts in use
  EXPECT_EQ(info[3], 0u);    // the first row
  for (uint32_t i = 0; i < T; ++i) EXPECT_EQ(info[H + i], i == 2 ? 1u : 0u) << "prefix flag of " << i;
  for (uint32_t i = 0; i < T; ++i)
    for (uint32_t j = 0; j < T; ++j) {
      const bool bit = (info[H + T + i * words + j / 32] >> (j % 32)) & 1u;
      EXPECT_EQ(bit, j <= i && batch.sees(static_cast<int32_t>(i), static_cast<int32_t>(j))) << i << " sees " << j;
    }
  for (uint32_t i = 0; i < T; ++i)
    EXPECT_EQ(info[H + T + T * words + i], static_cast<uint32_t>(batch.positions()[i])) << "position of " << i;
  EXPECT_EQ(std::vector<uint32_t>(info.end() - 5 - region, info.end() - 5), words_of(layout.region_entries(), region));
  EXPECT_EQ(std::vector<uint32_t>(info.end() - 5, info.end()), words_of(layout.full_order(), 5));
  EXPECT_EQ(read<int32_t>(encoder_->tokens(), T), batch.tokens());
  encoder_->finish();

  // No order, or nothing committed: the order is not used.
  StepBatch first = StepBatch::causal({1, 2}, 0);
  encoder_->begin(first, &layout);
  EXPECT_FALSE(encoder_->use_order());
  encoder_->finish();
  batch.set_n_past(5);
  encoder_->begin(batch, nullptr);
  EXPECT_FALSE(encoder_->use_order());
  encoder_->finish();
}

TEST_F(VulkanStepEncoder, AJoinedStepGivesEachPartItsOwnStepInputs) {
  // Three sequences in one step: a 3-token causal step at n_past 4 (an order), one
  // decode row at n_past 0, and a FAFO-like part at n_past 6 whose row 1 views the
  // compressed prefix and sees only itself.
  StepBatch a = StepBatch::causal({1, 2, 3}, 4);
  StepBatch b = StepBatch::causal({7}, 0);
  StepBatch c;
  c.add(20, 6, {}, true);
  c.add(21, 7, {}, true, PrefixView::Compressed);
  c.set_n_past(6);
  const StepBatch joined = StepBatch::join({&a, &b, &c});
  KvLayout layout_a(2), layout_c(1);  // permuted orders, regions of 2 and 1
  layout_a.append(4);
  layout_a.select({3, 2});
  layout_c.append(6);
  layout_c.select({5});
  const KvLayout* layouts[3] = {&layout_a, nullptr, &layout_c};
  EXPECT_THROW(encoder_->begin(joined, std::span<const KvLayout* const>(layouts, 2)), std::invalid_argument);
  encoder_->begin(joined, layouts);
  ASSERT_EQ(encoder_->parts(), 3);
  const uint32_t H = StepEncoder::kHeaderWords;
  EXPECT_TRUE(encoder_->use_order(0));
  EXPECT_FALSE(encoder_->use_order(1));  // nothing committed
  EXPECT_TRUE(encoder_->use_order(2));
  EXPECT_EQ(encoder_->mask_offset(0), H + 3);
  EXPECT_EQ(encoder_->order_offset(2), H + 2 + 2 + 2 + 1);
  encoder_->set_split(2, 128, 1);
  EXPECT_THROW(encoder_->set_split(3, 128, 1), std::out_of_range);
  const std::vector<uint32_t> info_a = read<uint32_t>(encoder_->step_info(0), H + 3 + 3 + 3 + 2 + 4);
  const std::vector<uint32_t> info_b = read<uint32_t>(encoder_->step_info(1), H + 1 + 1 + 1);
  const std::vector<uint32_t> info_c = read<uint32_t>(encoder_->step_info(2), H + 2 + 2 + 2 + 1 + 6);
  // Header: n_past, split (only part 2's set), first row.
  EXPECT_EQ(std::vector<uint32_t>(info_a.begin(), info_a.begin() + H), (std::vector<uint32_t>{4, 0, 0, 0}));
  EXPECT_EQ(std::vector<uint32_t>(info_b.begin(), info_b.begin() + H), (std::vector<uint32_t>{0, 0, 0, 3}));
  EXPECT_EQ(std::vector<uint32_t>(info_c.begin(), info_c.begin() + H), (std::vector<uint32_t>{6, 128, 1, 4}));
  // Flags and masks of each part's own rows, counted from its first row.
  EXPECT_EQ(std::vector<uint32_t>(info_a.begin() + H, info_a.begin() + H + 6), (std::vector<uint32_t>{0, 0, 0, 1, 3, 7}));
  EXPECT_EQ(std::vector<uint32_t>(info_b.begin() + H, info_b.end()), (std::vector<uint32_t>{0, 1, 0}));
  EXPECT_EQ(std::vector<uint32_t>(info_c.begin() + H, info_c.begin() + H + 4), (std::vector<uint32_t>{0, 1, 1, 2}));
  // Positions, region entries and order.
  EXPECT_EQ(std::vector<uint32_t>(info_a.begin() + H + 6, info_a.begin() + H + 9), (std::vector<uint32_t>{4, 5, 6}));
  EXPECT_EQ(std::vector<uint32_t>(info_c.begin() + H + 4, info_c.begin() + H + 6), (std::vector<uint32_t>{6, 7}));
  EXPECT_EQ(std::vector<uint32_t>(info_a.end() - 6, info_a.end() - 4), words_of(layout_a.region_entries(), 2));
  EXPECT_EQ(std::vector<uint32_t>(info_c.end() - 7, info_c.end() - 6), words_of(layout_c.region_entries(), 1));
  EXPECT_EQ(std::vector<uint32_t>(info_a.end() - 4, info_a.end()), words_of(layout_a.full_order(), 4));
  EXPECT_EQ(std::vector<uint32_t>(info_c.end() - 6, info_c.end()), words_of(layout_c.full_order(), 6));
  EXPECT_EQ(read<int32_t>(encoder_->tokens(), 6), (std::vector<int32_t>{1, 2, 3, 7, 20, 21}));
  encoder_->finish();
  // The next step of one sequence has one part again.
  encoder_->begin(b, nullptr);
  EXPECT_EQ(encoder_->parts(), 1);
  EXPECT_THROW(encoder_->step_info(1), std::out_of_range);
  encoder_->finish();
}

TEST_F(VulkanStepEncoder, OneRecordingPerStepSubmittedByFinish) {
  Buffer target(*context_, 256);
  const std::vector<uint32_t> ones(64, 1u);
  target.upload(ones.data(), 256);
  StepBatch batch = StepBatch::causal({1}, 0);
  encoder_->begin(batch, nullptr);
  fafo::vulkan::CommandSequence& seq = encoder_->commands();
  EXPECT_EQ(&encoder_->commands(), &seq);
  seq.zero(target);
  EXPECT_EQ(read<uint32_t>(target, 64), ones);  // recorded, not yet run
  encoder_->finish();
  EXPECT_EQ(read<uint32_t>(target, 64), std::vector<uint32_t>(64, 0u));
  EXPECT_THROW(encoder_->commands(), std::logic_error);
  EXPECT_THROW(encoder_->finish(), std::logic_error);
  EXPECT_EQ(&encoder_->batch(), &batch);  // the last step's, still

  // A recording dropped by abandon() is never submitted.
  target.upload(ones.data(), 256);
  encoder_->begin(batch, nullptr);
  encoder_->commands().zero(target);
  encoder_->abandon();
  EXPECT_THROW(encoder_->finish(), std::logic_error);
  EXPECT_EQ(read<uint32_t>(target, 64), ones);
}

TEST_F(VulkanStepEncoder, ASequenceReplaysOnlyWhileEveryBufferItNamesLives) {
  // The same copies twice: the second is submitted from the first's command buffer. A
  // buffer freed in between (forget, which moves the generation on) drops it, even
  // one the sequence does not name; so do other commands (another key).
  Buffer a(*context_, 64), b(*context_, 64), unrelated(*context_, 64);
  ReplayCache cache(*context_);
  auto copy_once = [&](VkDeviceSize bytes) {
    CommandSequence seq(*context_, *descriptors_);
    seq.copy(a, 0, b, 0, bytes);
    return seq.submit_and_wait(cache, descriptors_->generation());
  };
  EXPECT_FALSE(copy_once(64));
  EXPECT_TRUE(copy_once(64));
  EXPECT_FALSE(copy_once(32));  // other commands
  EXPECT_TRUE(copy_once(32));
  EXPECT_EQ(cache.size(), 2u);
  descriptors_->forget(unrelated.handle());
  EXPECT_FALSE(copy_once(64));
  EXPECT_EQ(cache.size(), 1u);  // the older generation's entries were freed
  EXPECT_TRUE(copy_once(64));
  EXPECT_EQ(cache.replays(), 3u);
  // A profiled or descriptor-less sequence is never kept.
  CommandSequence own_pool(*context_);
  own_pool.copy(a, 0, b, 0, 64);
  EXPECT_FALSE(own_pool.submit_and_wait(cache, descriptors_->generation()));
  EXPECT_EQ(cache.size(), 1u);
}

TEST_F(VulkanStepEncoder, GatheredActivationsKeepTheirRowCountForTheStep) {
  StepBatch batch = StepBatch::causal({1, 2, 3, 4, 5}, 0);
  const Activation a{0, 8, 16}, b{1, 8, 16}, c{2, 8, 16};
  encoder_->begin(batch, nullptr);
  EXPECT_EQ(encoder_->rows_of(a), 5u);
  encoder_->gathered(a, 2);
  encoder_->set_rows(b, encoder_->rows_of(a));  // a result computed from a
  encoder_->set_rows(c, 5);                      // the whole batch: nothing to remember
  EXPECT_EQ(encoder_->rows_of(a), 2u);
  EXPECT_EQ(encoder_->rows_of(b), 2u);
  EXPECT_EQ(encoder_->rows_of(c), 5u);
  encoder_->finish();
  EXPECT_EQ(encoder_->rows_of(a), 5u);  // forgotten with the step
  encoder_->begin(batch, nullptr);
  encoder_->gathered(a, 1);
  encoder_->begin(batch, nullptr);      // a new step forgets too
  EXPECT_EQ(encoder_->rows_of(a), 5u);
  encoder_->finish();
}

TEST_F(VulkanStepEncoder, EachRopeConfigurationGetsItsTableOnceAStep) {
  StepBatch batch = StepBatch::causal({1, 2, 3}, 10);
  RopeParams p;
  p.n_dims = 8;
  p.freq_base = 500000.0f;
  encoder_->begin(batch, nullptr);
  const Buffer& table = encoder_->rope_table(p);
  const std::vector<float> got = read<float>(table, 3 * 4 * 2);
  for (int32_t r = 0; r < 3; ++r)
    for (int32_t i = 0; i < 4; ++i) {
      const float theta = p.angle(batch.positions()[static_cast<size_t>(r)], i);
      EXPECT_EQ(got[static_cast<size_t>((r * 4 + i) * 2)], std::cos(theta)) << r << " " << i;
      EXPECT_EQ(got[static_cast<size_t>((r * 4 + i) * 2 + 1)], std::sin(theta)) << r << " " << i;
    }
  EXPECT_EQ(&encoder_->rope_table(p), &table);
  // Another configuration (Gemma 3's local layers) gets its own table, and the first
  // keeps its own; up to kMaxRopeTables in one step.
  RopeParams other = p;
  other.freq_scale = 0.5f;
  const Buffer& other_table = encoder_->rope_table(other);
  EXPECT_NE(&other_table, &table);
  const float theta = other.angle(batch.positions()[2], 3);
  EXPECT_EQ(read<float>(other_table, 1, (2 * 4 + 3) * 2)[0], std::cos(theta));
  EXPECT_EQ(read<float>(table, 3 * 4 * 2), got);
  EXPECT_EQ(&encoder_->rope_table(p), &table);
  for (size_t k = 2; k < StepEncoder::kMaxRopeTables; ++k) {
    other.freq_base += 1000.0f;
    encoder_->rope_table(other);
  }
  other.freq_base += 1000.0f;
  EXPECT_THROW(encoder_->rope_table(other), std::logic_error);
  encoder_->finish();
  encoder_->begin(batch, nullptr);
  EXPECT_NO_THROW(encoder_->rope_table(other));  // a new step starts with every table free
  encoder_->finish();
}

}  // namespace

#else  // !FAFO_HAVE_VULKAN

TEST(VulkanStepEncoder, Skipped) { GTEST_SKIP() << "fafo was built without Vulkan (FAFO_VULKAN=OFF or not found)"; }

#endif
