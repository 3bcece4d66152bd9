// The Vulkan products' tuning (backend/vulkan/matmul_tuning.h, matmul_tuner.h): the
// shape names, the choice from timings (medians, the default kept unless another is
// clearly faster, impossible timings dropped), re-measuring a candidate whose samples
// spread, the file in the cache folder, every candidate's bits, and a backend that
// tunes on its own (lavapipe here: forced on, as CPU devices do not tune by default).
#include <gtest/gtest.h>

#if FAFO_HAVE_VULKAN

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/kernels.h"
#include "backend/vulkan/matmul_tuner.h"
#include "backend/vulkan/matmul_tuning.h"
#include "backend/vulkan/vulkan_backend.h"
#include "backend/vulkan/weight_kernels.h"
#include "fafo/sequence.h"
#include "synthetic_model.h"
#include "fafo/vulkan_tuning.h"
#include "random_weights.h"
#include "test_support.h"
#include "vulkan_test_support.h"

namespace {

using fafo::TensorType;
using fafo::vulkan::Buffer;
using fafo::vulkan::CandidateTiming;
using fafo::vulkan::Kernels;
using fafo::vulkan::CommandSequence;
using fafo::vulkan::MatmulTuning;
using fafo::vulkan::TunedShape;
using fafo::vulkan::WeightShaderKey;

TunedShape shape(TensorType type, uint32_t rows, uint32_t cols, WeightShaderKey::Kind kind, uint32_t tile) {
  TunedShape s;
  s.type = type;
  s.rows = rows;
  s.cols = cols;
  s.key.kind = kind;
  s.key.tile = tile;
  return s;
}

TEST(VulkanTuning, ShapesReadBackFromTheirNames) {
  TunedShape s = shape(TensorType::Q4_K, 4096, 14336, WeightShaderKey::Kind::SplitRows, 8);
  s.key.subgroup = s.key.gated = s.key.int8 = s.key.dot = true;
  EXPECT_EQ(s.text(), "Q4_K 4096x14336 split-rows t8 subgroup gated int8 dot");
  ASSERT_TRUE(TunedShape::parse(s.text()));
  EXPECT_EQ(*TunedShape::parse(s.text()), s);
  const TunedShape w = shape(TensorType::F16, 7, 256, WeightShaderKey::Kind::WholeRows, 1);
  EXPECT_EQ(*TunedShape::parse(w.text()), w);
  EXPECT_NE(*TunedShape::parse(w.text()), s);
  for (const char* bad : {"", "Q4_K", "Q9_K 1x1 split-rows t1", "Q4_K 1by1 split-rows t1", "Q4_K 1x1 rows t1",
                          "Q4_K 1x1 split-rows 1", "Q4_K 1x1 split-rows t1 gated gated", "Q4_K 1x1 split-rows t1 fast"})
    EXPECT_FALSE(TunedShape::parse(bad)) << bad;
}

TEST(VulkanTuning, TheFastestMedianWinsUnlessTheDefaultIsAsFast) {
  auto timing = [](uint32_t rows, std::vector<double> s) { return CandidateTiming{rows, std::move(s)}; };
  // Medians 3, 2 and 4 ms (one outlier each, which a mean would follow).
  const std::vector<CandidateTiming> three = {timing(1, {3e-3, 3e-3, 9e-3}), timing(2, {2e-3, 2e-3, 1e-3}),
                                              timing(4, {4e-3, 4e-3, 1e-4})};
  const fafo::vulkan::RowChoice c = fafo::vulkan::choose_rows(three, 4, 0.0);
  EXPECT_EQ(c.rows, 2u);
  EXPECT_EQ(c.default_rows, 4u);
  EXPECT_DOUBLE_EQ(c.gain(), 2.0);
  // 2 % faster than the default: not worth leaving it.
  EXPECT_EQ(fafo::vulkan::choose_rows({timing(1, {0.98e-3}), timing(2, {1e-3})}, 2, 0.0).rows, 2u);
  EXPECT_EQ(fafo::vulkan::choose_rows({timing(1, {0.9e-3}), timing(2, {1e-3})}, 2, 0.0).rows, 1u);
  // Faster than any device could be: not a measurement.
  EXPECT_EQ(fafo::vulkan::choose_rows({timing(1, {1e-7}), timing(2, {1e-3})}, 2, 1e-6).rows, 2u);
  EXPECT_THROW(fafo::vulkan::choose_rows({timing(1, {1e-3})}, 2, 0.0), std::invalid_argument);
  EXPECT_THROW(fafo::vulkan::choose_rows({timing(2, {1e-7})}, 2, 1e-6), std::invalid_argument);
}

TEST(VulkanTuning, ACandidateWhoseSamplesSpreadIsMeasuredAgain) {
  // Rows 1: steady. Rows 2: its first set spreads (one sample disturbed), the second is
  // steady. Rows 4: always spreading, measured kAttempts times, its steadiest set kept.
  std::map<uint32_t, int> batches;
  const fafo::vulkan::BatchTimer timer = [&](uint32_t rows, uint32_t count) {
    const int n = batches[rows]++;
    if (count < 4) return 5e-3;  // the warm-up
    if (rows == 2 && n == 4) return 9e-3;  // 2 (warm-up, sizing) + the first set's third
    if (rows == 4) return 1e-3 * (1 + (n % 2) * (n < 9 ? 1.0 : 0.5));  // spreads 2, then 1.5
    return 1e-3;
  };
  const std::vector<CandidateTiming> t = fafo::vulkan::time_candidates({1, 2, 4}, timer);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(batches[1], 2 + fafo::vulkan::kSamples);
  EXPECT_EQ(batches[2], 2 + 2 * fafo::vulkan::kSamples);
  EXPECT_DOUBLE_EQ(t[1].spread(), 1.0);
  EXPECT_EQ(batches[4], 2 + fafo::vulkan::kAttempts * fafo::vulkan::kSamples);
  EXPECT_GT(t[2].spread(), fafo::vulkan::kMaxSpread);
  EXPECT_LE(t[2].spread(), 1.5);
}

TEST(VulkanTuning, ChoicesAreKeptPerDeviceAndBuild) {
  const std::filesystem::path dir = fafo::test::temp_dir("vk-tuning-file");
  const std::string key = fafo::vulkan::tuning_device_key("Some GPU", 0x10de, 0x2335, 42);
  EXPECT_NE(key, fafo::vulkan::tuning_device_key("Some GPU", 0x10de, 0x2335, 43));  // another driver
  MatmulTuning kept(dir, key);
  EXPECT_EQ(kept.load(), "");  // nothing yet
  const TunedShape s = shape(TensorType::Q6_K, 512, 4096, WeightShaderKey::Kind::SplitRows, 1);
  kept.set(s, fafo::vulkan::RowChoice{8, 4, {{4, {2e-3, 2.1e-3}}, {8, {1e-3, 1.1e-3}}}});
  ASSERT_EQ(kept.store(), "");
  MatmulTuning again(dir, key);
  ASSERT_EQ(again.load(), "");
  ASSERT_EQ(again.choices().size(), 1u);
  EXPECT_EQ(again.rows_for(s), 8u);
  EXPECT_EQ(again.choices().at(s).candidates.size(), 2u);
  EXPECT_DOUBLE_EQ(again.choices().at(s).gain(), 2.05e-3 / 1.05e-3);  // the medians' ratio
  // Another key reads its own file; a damaged file is ignored with the reason.
  MatmulTuning other(dir, fafo::vulkan::tuning_device_key("Other GPU", 1, 2, 3));
  EXPECT_EQ(other.load(), "");
  EXPECT_TRUE(other.choices().empty());
  std::ofstream(kept.file(), std::ios::trunc) << "{\"format\": 1";
  EXPECT_NE(again.load().find("is not JSON"), std::string::npos);
  EXPECT_TRUE(again.choices().empty());
  std::ofstream(kept.file(), std::ios::trunc) << "{\"format\": \"fafo vulkan matmul tuning 1\", \"key\": \"x\", \"shapes\": {}}";
  EXPECT_NE(again.load().find("another device or build"), std::string::npos);
}

using VulkanTuner = fafo::test::ValidatedVulkanSuite<fafo::vulkan::WeightKernels>;

// Every candidate gives the default's bits (matmul.comp's order does not depend on the
// rows per workgroup): split rows (portable and with subgroups), whole rows, plain,
// gated, with a norm and with integer products (every candidate for one form, the
// smallest, largest and default for the others: lavapipe compiles each for about a
// second); and the tuner measures and chooses.
TEST_F(VulkanTuner, EveryCandidateGivesTheDefaultsBitsAndTheTunerChoosesOne) {
  using fafo::vulkan::MatmulMapping;
  using fafo::vulkan::MatmulReduction;
  using fafo::vulkan::MatmulVariant;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  const uint32_t rows = 37, cols = 512, T = 8;
  fafo::vulkan::Kernels kernels(*context_);
  std::vector<float> x(size_t{T} * cols), gain(cols);
  for (float& v : x) v = value(rng);
  for (float& v : gain) v = value(rng);
  const Buffer bx = fafo::test::make_buffer(*context_, x.data(), x.size() * 4);
  const Buffer bg = fafo::test::make_buffer(*context_, gain.data(), gain.size() * 4);
  const uint32_t words = Kernels::q8_row_words(cols);
  const Buffer bq(*context_, size_t{T} * words * 4);
  {
    CommandSequence seq(*context_);
    kernels.quantize_rows(seq, bx, bq, T, cols, cols);
    seq.submit_and_wait();
  }
  struct Form {
    TensorType type;
    MatmulMapping mapping;
    MatmulReduction reduction;
    bool gated, norm, int8;
  };
  std::vector<Form> forms = {{TensorType::Q4_K, MatmulMapping::WholeRows, MatmulReduction::Auto, false, false, false},
                             {TensorType::Q4_K, MatmulMapping::SplitRows, MatmulReduction::Portable, true, false, true},
                             {TensorType::F16, MatmulMapping::SplitRows, MatmulReduction::Portable, false, true, false},
                             {TensorType::Q8_0, MatmulMapping::WholeRows, MatmulReduction::Auto, true, false, true}};
  if (kernels_->has_subgroup_variant(T))
    forms.push_back({TensorType::Q6_K, MatmulMapping::SplitRows, MatmulReduction::Subgroup, false, false, false});
  for (size_t k = 0; k < forms.size(); ++k) {
    const Form& f = forms[k];
    std::vector<uint8_t> bytes = fafo::test::random_block_bytes(f.type, 2 * rows, cols, 5);
    bytes.resize(fafo::vulkan::WeightKernels::weight_bytes(f.type, 2 * rows, cols), 0);
    const Buffer bw = fafo::test::make_buffer(*context_, bytes.data(), bytes.size());
    MatmulVariant v;
    v.mapping = f.mapping;
    v.reduction = f.reduction;
    v.int8 = f.int8;
    if (f.int8 && f.mapping == MatmulMapping::SplitRows) v.dot = false;
    const fafo::vulkan::MatmulShape s{T, rows, cols, f.int8 ? words : cols, rows, 0};
    const fafo::vulkan::InputNorm norm = f.norm ? fafo::vulkan::InputNorm{&bg, 1e-5f} : fafo::vulkan::InputNorm{};
    const TunedShape tuned = kernels_->shape_of(f.type, s, v, f.gated, f.norm);
    SCOPED_TRACE(tuned.text());
    std::vector<uint32_t> candidates = kernels_->row_candidates(tuned);
    EXPECT_GE(candidates.size(), 3u);
    const uint32_t default_rows = kernels_->default_rows(tuned);
    EXPECT_NE(std::ranges::find(candidates, default_rows), candidates.end());
    if (k > 0) candidates = {default_rows, candidates.front(), candidates.back()};
    std::vector<uint32_t> want;
    for (const uint32_t r : candidates) {
      v.rows_per_group = r;
      const Buffer out(*context_, size_t{T} * rows * 4);
      CommandSequence seq(*context_);
      if (f.gated)
        kernels_->matmul_gated(seq, f.type, bw, f.int8 ? bq : bx, out, s, v, norm);
      else
        kernels_->matmul(seq, f.type, bw, f.int8 ? bq : bx, out, s, v, norm);
      seq.submit_and_wait();
      std::vector<uint32_t> got(size_t{T} * rows);
      out.download(got.data(), got.size() * 4);
      if (want.empty()) want = got;
      ASSERT_EQ(got, want) << r << " rows per workgroup";
    }
    // Not a candidate: a clear error.
    v.rows_per_group = 3;
    CommandSequence seq(*context_);
    EXPECT_THROW(kernels_->matmul(seq, f.type, bw, f.int8 ? bq : bx, bx, s, v, norm), std::invalid_argument);
    if (k == 0) {
      // The tuner on it: a choice among the candidates, each timed.
      const fafo::vulkan::RowChoice c = fafo::vulkan::MatmulTuner(*context_, *kernels_).tune(tuned, {&bw, &bw});
      EXPECT_EQ(c.default_rows, default_rows);
      EXPECT_EQ(c.candidates.size(), kernels_->row_candidates(tuned).size());
      for (const CandidateTiming& t : c.candidates) EXPECT_EQ(t.samples.size(), static_cast<size_t>(fafo::vulkan::kSamples));
      const std::vector<uint32_t> all = kernels_->row_candidates(tuned);
      EXPECT_NE(std::ranges::find(all, c.rows), all.end());
    }
  }
}

// A backend that tunes: the shapes a step runs are measured at its end and kept in the
// folder; the logits are the untuned backend's; a second backend on
// the same folder measures nothing (the file is not rewritten) and `vulkan_tune_now`
// lists the choices; FAFO_VULKAN_TUNE takes only 0, 1 or again.
TEST(VulkanTuningBackend, ABackendTunesWhatItRunsAndKeepsIt) {
  fafo::synth::SyntheticConfig c;
  c.n_layer = 2, c.n_embd = 256, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 512, c.n_vocab = 300, c.n_ctx = 64;
  c.weight_type = "Q4_K_M";
  const std::string path = (fafo::test::temp_dir("vk-tune-model") / "m.gguf").string();
  fafo::synth::write_synthetic_model(c, path);
  const std::filesystem::path dir = fafo::test::temp_dir("vk-tune-cache");
  auto open = [&](bool tune) {
    fafo::vulkan::VulkanBackendOptions o;
    o.tune = tune;
    o.tuning_dir = dir.string();
    std::unique_ptr<fafo::Backend> be;
    try {
      be = fafo::vulkan::make_backend(o);
    } catch (const std::exception& e) {
      return std::unique_ptr<fafo::Sequence>();
    }
    fafo::SequenceOptions mo;
    mo.n_ctx = 64;
    return std::make_unique<fafo::Sequence>(fafo::GgufFile::open(path), std::move(be), mo);
  };
  std::unique_ptr<fafo::Sequence> plain = open(false);
  if (!plain) GTEST_SKIP() << "no Vulkan device";
  auto steps = [](fafo::Sequence& m) {
    std::vector<std::vector<float>> out;
    for (const int32_t T : {1, 3, 1}) {
      m.truncate(0);
      fafo::StepBatch b = fafo::StepBatch::causal(std::vector<int32_t>(static_cast<size_t>(T), 7), 0);
      out.push_back(m.forward(b));
    }
    return out;
  };
  const auto want = steps(*plain);
  EXPECT_EQ(fafo::vulkan_tune_now(plain->backend()), std::vector<std::string>{});
  EXPECT_EQ(fafo::vulkan_tuning_file(plain->backend()), "");
  std::unique_ptr<fafo::Sequence> tuned = open(true);
  EXPECT_NE(tuned->backend().description().find("rows per workgroup tuned"), std::string::npos);
  EXPECT_EQ(steps(*tuned), want);  // tuned at the end of the first two steps
  const std::vector<std::string> lines = fafo::vulkan_tune_now(tuned->backend());
  EXPECT_GE(lines.size(), 4u);  // T = 1 and 2 (the 2-token tile): plain, gated products at least
  for (const std::string& line : lines) EXPECT_NE(line.find("rows per workgroup (default"), std::string::npos) << line;
  const std::filesystem::path file = fafo::vulkan_tuning_file(tuned->backend());
  ASSERT_TRUE(std::filesystem::exists(file)) << file;
  EXPECT_EQ(file.parent_path(), dir);
  const auto written = std::filesystem::last_write_time(file);
  std::unique_ptr<fafo::Sequence> again = open(true);
  EXPECT_EQ(steps(*again), want);
  EXPECT_EQ(fafo::vulkan_tune_now(again->backend()), lines);
  EXPECT_EQ(std::filesystem::last_write_time(file), written);  // nothing measured
  // The settings' variables take only their values.
  const struct {
    const char *name, *value, *message;
  } bad[] = {{"FAFO_VULKAN_TUNE", "sometimes", "FAFO_VULKAN_TUNE=sometimes: expected 0, 1 or again"},
             {"FAFO_VULKAN_TILES", "2", "FAFO_VULKAN_TILES=2: expected 0, 1 or loops"},
             {"FAFO_VULKAN_ATTENTION", "fast", "FAFO_VULKAN_ATTENTION=fast: expected workgroup, serial or grouped"}};
  for (const auto& b : bad) {
    ::setenv(b.name, b.value, 1);
    try {
      fafo::vulkan::make_backend(fafo::vulkan::VulkanBackendOptions{});
      ADD_FAILURE() << b.name << ": no error";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(b.message), std::string::npos) << e.what();
    }
    ::unsetenv(b.name);
  }
}

}  // namespace

#else  // !FAFO_HAVE_VULKAN

TEST(VulkanTuning, Skipped) { GTEST_SKIP() << "fafo was built without Vulkan (FAFO_VULKAN=OFF or not found)"; }

#endif
