// `fafo perplexity` prints llama-perplexity's running values and final estimate, labels
// the lossy modes, and refuses contradictory or incomplete requests; `fafo run` labels
// its lossy modes on stderr and in --json.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace {

using fafo::test::run_fafo;


std::filesystem::path write_text() {
  const auto path = fafo::test::temp_dir("cli-perplexity") / "text.txt";
  std::ofstream out(path);
  for (int i = 0; i < 60; ++i) out << "Once upon a time there was a little girl named Lily. She liked to play in the park. ";
  return path;
}

}  // namespace

TEST(CliPerplexity, PrintsRunningValuesAndTheFinalEstimate) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto text = write_text();
  const std::string base = "perplexity -m " + fafo::test::shell_quote(model) + " -f " + fafo::test::shell_quote(text) + " -c 128 --backend cpu ";
  const auto r = run_fafo(base + "--chunks 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_HAS(r.out, "[1]");
  EXPECT_HAS(r.out, "[3]");
  EXPECT_HAS(r.out, "Final estimate: PPL = ");
  EXPECT_HAS(r.err, "calculating perplexity over 3 chunks, n_ctx=128");
  const auto j = nlohmann::json::parse(run_fafo(base + "--chunks 3 --json").out);
  EXPECT_EQ(j["chunks"], 3);
  EXPECT_EQ(j["running"].size(), 3u);
  EXPECT_TRUE(j["lossy"].empty());
  const auto lossy = run_fafo(base + "--chunks 2 --json --kv-drop speckv --kv-budget 16 --draft-model self");
  ASSERT_EQ(lossy.exit_code, 0) << lossy.err;
  EXPECT_EQ(nlohmann::json::parse(lossy.out)["lossy"][0], "kv-drop speckv budget 16");
  EXPECT_HAS(lossy.err, "LOSSY: kv-drop speckv budget 16");

  auto e = run_fafo(base + "--kv-drop speckv");
  EXPECT_NE(e.exit_code, 0);
  EXPECT_HAS(e.err, "draft model");
  e = run_fafo("perplexity -m " + fafo::test::shell_quote(model) + " -f " + fafo::test::shell_quote(text) + " -c 8192 --backend cpu");
  EXPECT_NE(e.exit_code, 0);
  EXPECT_HAS(e.err, "less than one chunk");
  e = run_fafo("perplexity -m " + fafo::test::shell_quote(model) + " -f /nonexistent/text --backend cpu");
  EXPECT_NE(e.exit_code, 0);
  EXPECT_HAS(e.err, "cannot open /nonexistent/text: No such file or directory");
}

TEST(CliPerplexity, RunLabelsLossyModes) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::string base = "run -m " + fafo::test::shell_quote(model) + " -p 'Once upon a time' -n 16 --temp 0 --backend cpu ";
  const auto r = run_fafo(base + "--json --kv-drop snapkv --kv-budget 4 --recent 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["lossy"][0], "kv-drop snapkv budget 4");
  EXPECT_HAS(r.err, "LOSSY: kv-drop snapkv budget 4");
  EXPECT_TRUE(nlohmann::json::parse(run_fafo(base + "--json").out)["lossy"].empty());
  auto e = run_fafo(base + "--kv-drop snapkv --kv-policy stream");
  EXPECT_EQ(e.exit_code, 2);
  EXPECT_HAS(e.err, "excludes");
  e = run_fafo(base + "--kv-drop snapkv --strategy fafo");
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_HAS(e.err, "plain decoding only");
  e = run_fafo(base + "--prompt-compress speckv --prompt-budget 2");
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_HAS(e.err, "draft model");
}
