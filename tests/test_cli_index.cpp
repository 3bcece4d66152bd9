// `fafo index build|info|bench` and `--corpus` as a user runs them: an index of text
// built with stories260K's tokenizer, corpus drafting that prints plain decoding's
// text, and clear errors for a missing, damaged or foreign index.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace {

using fafo::test::run_fafo;


// Text the model itself writes: its greedy continuations of a few prompts.
std::filesystem::path own_text(const std::filesystem::path& model, const std::filesystem::path& dir) {
  const auto path = dir / "own.txt";
  std::ofstream out(path);
  for (const char* p : {"Once upon a time", "Lily and Tom", "The dog"}) {
    const auto r = run_fafo("run -m " + fafo::test::shell_quote(model) + " -p '" + p + "' -n 200 --temp 0 --strategy ar");
    out << p << r.out << "\n";
  }
  return path;
}

}  // namespace

TEST(CliIndex, BuildInfoAndCorpusDrafting) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("cli-index");
  const auto text = own_text(model, dir);
  const auto index = dir / "own.fidx";
  const auto built = run_fafo("index build -m " + fafo::test::shell_quote(model) + " --corpus " + fafo::test::shell_quote(text) + " -o " + fafo::test::shell_quote(index));
  ASSERT_EQ(built.exit_code, 0) << built.err;
  EXPECT_HAS(built.err, "M tokens per minute");
  EXPECT_HAS(built.out, "in 1 document\n");
  const auto info = run_fafo("index info " + fafo::test::shell_quote(index) + " -m " + fafo::test::shell_quote(model));
  ASSERT_EQ(info.exit_code, 0) << info.err;
  EXPECT_HAS(info.out, "uses this tokenizer");
  EXPECT_HAS(info.out, "2 bytes per token, 4 per suffix-array entry");
  // Corpus drafting prints plain decoding's text, in fewer steps.
  const std::string run = "run -m " + fafo::test::shell_quote(model) + " -p 'Lily and Tom' -n 100 --temp 0 --json";
  const auto plain = nlohmann::json::parse(run_fafo(run + " --strategy ar").out);
  for (const char* s : {"corpus", "lookahead", "fafo", "auto"}) {
    const auto r = run_fafo(run + " --strategy " + s + " --corpus " + fafo::test::shell_quote(index));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["ids"], plain["ids"]) << s;
    if (std::string(s) == "corpus") {
      EXPECT_GT(j["tau"].get<double>(), 2.0);
      EXPECT_EQ(j["sources"][0]["source"], "corpus");
    }
  }
  // The lookup benchmark on this index.
  const auto bench = run_fafo("index bench " + fafo::test::shell_quote(index) + " --lookups 200");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  EXPECT_HAS(bench.out, "| all |");
}

TEST(CliIndex, MissingDamagedAndForeignIndexesAreClearErrors) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  FAFO_REQUIRE_SHARED(other, "vocab/ggml-vocab-llama-spm.gguf");
  const auto dir = fafo::test::temp_dir("cli-index-errors");
  std::ofstream(dir / "t.txt") << "Once upon a time there was a cat.\n";
  const auto foreign = dir / "foreign.fidx";
  ASSERT_EQ(run_fafo("index build -m " + fafo::test::shell_quote(other) + " --corpus " + fafo::test::shell_quote(dir / "t.txt") + " -o " + fafo::test::shell_quote(foreign)).exit_code, 0);
  const std::string run = "run -m " + fafo::test::shell_quote(model) + " -p 'Once' -n 8 --temp 0 --strategy corpus";
  auto r = run_fafo(run + " --corpus " + fafo::test::shell_quote(foreign));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.err, "built with the tokenizer of");
  EXPECT_HAS(r.err, "(32000 tokens");
  EXPECT_HAS(r.err, "but the model's tokenizer is 'llama' (512 tokens");
  r = run_fafo(run + " --corpus " + fafo::test::shell_quote(dir / "missing.fidx"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.err, "cannot open " + (dir / "missing.fidx").string() + ": No such file or directory");
  std::ofstream(dir / "bad.fidx") << "not an index at all, but long enough to have a header? no.";
  r = run_fafo(run + " --corpus " + fafo::test::shell_quote(dir / "bad.fidx"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.err, "bad.fidx: not a fafo corpus index");
  r = run_fafo(run);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_HAS(r.err, "--strategy corpus needs a corpus index");
  r = run_fafo("index build -m " + fafo::test::shell_quote(model) + " --corpus " + fafo::test::shell_quote(dir / "nothing.txt") + " -o " + fafo::test::shell_quote(dir / "x.fidx"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.err, "cannot open " + (dir / "nothing.txt").string() + ": No such file or directory");
  EXPECT_FALSE(std::filesystem::exists(dir / "x.fidx"));
  r = run_fafo("index info " + fafo::test::shell_quote(foreign) + " -m " + fafo::test::shell_quote(model));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_HAS(r.err, "built with the tokenizer of");
}
