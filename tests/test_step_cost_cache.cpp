// The on-disk cache of step-cost curves (fafo/step_cost_cache.h): a curve comes back as
// written, only for its own key; damaged files are ignored, never trusted; a folder that
// cannot be written is reported, not fatal; the key follows the model file, backend and
// cache type.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "fafo/backend.h"
#include "fafo/step_cost_cache.h"
#include "test_support.h"

namespace {

using namespace fafo;

StepCosts three_points() {
  StepCosts c;
  c.sizes = {1, 2, 4};
  c.seconds = {0.001, 0.0012345678901, 0.002};
  c.spread = {0.01, 0.02, 0.005};
  return c;
}

void write(const std::filesystem::path& file, const std::string& text) { std::ofstream(file, std::ios::trunc) << text; }

TEST(StepCostCache, ACurveComesBackAsWrittenForItsKeyOnly) {
  const auto dir = test::temp_dir("step-cost-cache");
  const StepCostCache cache(dir / "sub", "model A | cpu | f32");
  EXPECT_FALSE(cache.load());  // nothing yet
  ASSERT_EQ(cache.store(three_points()), "");
  const auto back = cache.load();
  ASSERT_TRUE(back);
  EXPECT_EQ(back->sizes, three_points().sizes);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(back->seconds[i], three_points().seconds[i], 1e-12);
  EXPECT_EQ(back->spread, three_points().spread);
  EXPECT_EQ(back->bounded, 0);
  StepCosts held = three_points();
  held.bounded = 2;  // the count of points make_plausible moved comes back too, for describe()
  held.context = 37;  // and the context they were timed after
  ASSERT_EQ(cache.store(held), "");
  EXPECT_EQ(cache.load()->bounded, 2);
  EXPECT_EQ(cache.load()->context, 37);
  ASSERT_EQ(cache.store(three_points()), "");
  EXPECT_EQ(back->source, cache.file().string());
  EXPECT_EQ(cache.file().parent_path(), dir / "sub");
  // Another key names another file, and finds nothing.
  const StepCostCache other(dir / "sub", "model A | cpu | f16");
  EXPECT_NE(other.file(), cache.file());
  EXPECT_FALSE(other.load());
  // A file holding another key (say a hash collision) is not trusted.
  std::filesystem::copy_file(cache.file(), other.file());
  EXPECT_FALSE(other.load());
  // Keys are one line.
  EXPECT_EQ(StepCostCache(dir, "a\nb").key(), "a b");
}

TEST(StepCostCache, DamagedFilesAreIgnored) {
  const auto dir = test::temp_dir("step-cost-cache-damaged");
  const StepCostCache cache(dir, "k");
  const std::string head = "fafo step costs 2\nkey k\nbounded 0\ncontext 0\n";
  for (const std::string& body : {std::string("1 0.5 0\n2 abc 0\n"), std::string("2 0.5 0\n4 0.6 0\n"), std::string("1 0.5 0\n2 -1 0\n"),
                                  std::string("1 0.5 0\n1 0.6 0\n"), std::string("1 nan 0\n"), std::string(""), std::string("1\n"),
                                  std::string("1 0.5 0\n2"), std::string("1 0.5 0 7\n"), std::string("1 0.5 -1\n"),
                                  std::string("1 0.5\n")}) {
    write(cache.file(), head + body);
    std::string why;
    EXPECT_FALSE(cache.load(&why)) << body;
    EXPECT_EQ(why, "") << "damaged, not implausible: " << body;
  }
  write(cache.file(), "fafo step costs 1\nkey k\n1 0.5\n");
  EXPECT_FALSE(cache.load()) << "another format version";
  for (const std::string& bounded : {std::string("1 0.5 0\n"), std::string("bounded\n1 0.5 0\n"), std::string("bounded -1\n1 0.5 0\n"),
                                     std::string("bounded 1 2\n1 0.5 0\n"), std::string("bounded 2\ncontext 0\n1 0.5 0\n"), std::string("bounded 0\n1 0.5 0\n"),
                                     std::string("bounded 0\ncontext -1\n1 0.5 0\n")}) {
    write(cache.file(), "fafo step costs 2\nkey k\n" + bounded);
    EXPECT_FALSE(cache.load()) << bounded;
  }
  write(cache.file(), head + "1 0.5 0.01\n2 0.75 0.02\n");
  ASSERT_TRUE(cache.load());
  EXPECT_DOUBLE_EQ(cache.load()->relative(2), 1.5);
  // Storing replaces a damaged file.
  write(cache.file(), "garbage");
  ASSERT_EQ(cache.store(three_points()), "");
  EXPECT_TRUE(cache.load());
}

// The file: t(2) = 56 t(1), one step timed while the machine was busy. Never
// trusted, and the reason says why.
TEST(StepCostCache, AnImplausibleCurveIsNotTrusted) {
  const auto dir = test::temp_dir("step-cost-cache-implausible");
  const StepCostCache cache(dir, "k");
  write(cache.file(), "fafo step costs 2\nkey k\nbounded 0\ncontext 0\n1 0.0001 0\n2 0.005609 0\n");
  std::string why;
  EXPECT_FALSE(cache.load(&why));
  EXPECT_NE(why.find("the kept curve was implausible (t(2) is 56.09 t(1)"), std::string::npos) << why;
  write(cache.file(), "fafo step costs 2\nkey k\nbounded 0\ncontext 0\n1 0.0001 0\n4 0.0002 0\n8 0.00015 0\n");
  EXPECT_FALSE(cache.load(&why));
  EXPECT_NE(why.find("a larger step cannot cost less"), std::string::npos) << why;
}

TEST(StepCostCache, AFolderThatCannotBeWrittenIsReported) {
  const auto dir = test::temp_dir("step-cost-cache-blocked");
  write(dir / "file", "not a folder");
  const StepCostCache cache(dir / "file" / "fafo", "k");
  const std::string why = cache.store(three_points());
  EXPECT_NE(why.find("cannot create"), std::string::npos) << why;
  EXPECT_FALSE(cache.load());
  StepCosts bad;
  bad.sizes = {2};
  bad.seconds = {1.0};
  EXPECT_NE(StepCostCache(dir, "k").store(bad).find("not a curve"), std::string::npos);
}

TEST(StepCostCache, TheKeyFollowsTheFileTheBackendAndTheCacheType) {
  const auto dir = test::temp_dir("step-cost-cache-key");
  write(dir / "m.gguf", "12345");
  const auto cpu = make_cpu_backend(1);
  const auto key = [&](KvCacheType t) { return StepCostCache::for_model(dir, dir / "m.gguf", *cpu, t).key(); };
  const std::string f32 = key(KvCacheType::F32);
  EXPECT_NE(f32, key(KvCacheType::F16));
  EXPECT_NE(f32.find(std::filesystem::canonical(dir / "m.gguf").string()), std::string::npos) << f32;
  EXPECT_NE(f32.find(cpu->description()), std::string::npos) << f32;
  EXPECT_NE(f32, StepCostCache::for_model(dir, dir / "m.gguf", *make_cpu_backend(2), KvCacheType::F32).key());
  // The file changed (size and time): another key.
  write(dir / "m.gguf", "123456");
  std::filesystem::last_write_time(dir / "m.gguf", std::filesystem::last_write_time(dir / "m.gguf") + std::chrono::seconds(5));
  EXPECT_NE(f32, key(KvCacheType::F32));
  EXPECT_THROW(StepCostCache::for_model(dir, dir / "missing.gguf", *cpu, KvCacheType::F32), std::filesystem::filesystem_error);
}

TEST(StepCosts, InvalidCurvesAndTheirDescription) {
  EXPECT_EQ(three_points().invalid_reason(), "");
  StepCosts c = three_points();
  c.source = "measured";
  EXPECT_EQ(c.describe(), "t(T)/t(1): 2 1.23 +-3%, 4 2.00 +-2% (measured)");
  c.spread.clear();
  EXPECT_EQ(c.describe(), "t(T)/t(1): 2 1.23, 4 2.00 (measured)");
  c.sizes = {1, 4, 2};
  EXPECT_NE(c.invalid_reason(), "");
  EXPECT_EQ(c.describe(), "no step costs");
  EXPECT_NE(StepCosts{}.invalid_reason(), "");
}

}  // namespace
