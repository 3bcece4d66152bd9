// `fafo tokenize` as a user runs it: --text / -f / --pieces, --vectors output identical to
// llama.cpp's .out files for every vocabulary in ../shared/vocab that has a GGUF and for
// Llama 3 / Qwen2 through fafo-convert-tokenizer, and clear errors.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "fafo/gguf.h"
#include "test_support.h"

namespace {

using Outcome = fafo::test::CommandResult;
using fafo::test::run_command;

Outcome fafo(const std::string& args) { return run_command(fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo")) + " " + args); }


TEST(CliTokenize, TextWithAndWithoutBos) {
  FAFO_REQUIRE_SHARED(model, "vocab/ggml-vocab-llama-spm.gguf");
  const Outcome with = fafo("tokenize -m " + fafo::test::shell_quote(model) + " --text 'Hello world'");
  EXPECT_EQ(with.exit_code, 0) << with.err;
  EXPECT_EQ(with.out, "1 15043 3186\n");
  const Outcome without = fafo("tokenize -m " + fafo::test::shell_quote(model) + " --text 'Hello world' --no-bos");
  EXPECT_EQ(without.out, "15043 3186\n");
}

TEST(CliTokenize, FileAndPieces) {
  FAFO_REQUIRE_SHARED(model, "vocab/ggml-vocab-gpt-2.gguf");
  const auto dir = fafo::test::temp_dir("cli_tokenize_file");
  std::ofstream(dir / "prompt.txt") << "Hello world\n";
  const Outcome ids = fafo("tokenize -m " + fafo::test::shell_quote(model) + " -f " + fafo::test::shell_quote(dir / "prompt.txt"));
  EXPECT_EQ(ids.exit_code, 0) << ids.err;
  EXPECT_EQ(ids.out, "15496 995 198\n");  // GPT-2 adds no BOS
  const Outcome pieces = fafo("tokenize -m " + fafo::test::shell_quote(model) + " -f " + fafo::test::shell_quote(dir / "prompt.txt") + " --pieces");
  EXPECT_EQ(pieces.out, "15496 'Hello'\n995 ' world'\n198 '\\n'\n");
  std::filesystem::remove_all(dir);
}

TEST(CliTokenize, ParseSpecial) {
  FAFO_REQUIRE_SHARED(model, "vocab/ggml-vocab-phi-3.gguf");
  const std::string text = " --text '<|user|>\nHello<|end|>\n<|assistant|>'";
  const Outcome special = fafo("tokenize -m " + fafo::test::shell_quote(model) + text + " --parse-special");
  EXPECT_EQ(special.exit_code, 0) << special.err;
  EXPECT_EQ(special.out, "1 32010 15043 32007 32001\n");  // Phi-3 drops the newlines after them
  const Outcome plain = fafo("tokenize -m " + fafo::test::shell_quote(model) + text + " --pieces");
  EXPECT_HAS(plain.out, "'user'");
  EXPECT_EQ(plain.out.find("32010"), std::string::npos) << plain.out;
}

// --vectors must print exactly the .out file.
void expect_vectors(const std::filesystem::path& model, const std::string& name) {
  const std::filesystem::path inp = fafo::test::shared_path("vocab/ggml-vocab-" + name + ".gguf.inp");
  const std::filesystem::path out = fafo::test::shared_path("vocab/ggml-vocab-" + name + ".gguf.out");
  const Outcome o = fafo("tokenize -m " + fafo::test::shell_quote(model) + " --vectors " + fafo::test::shell_quote(inp));
  EXPECT_EQ(o.exit_code, 0) << name << ": " << o.err;
  EXPECT_EQ(o.out, fafo::test::read_text(out)) << name;
}

TEST(CliTokenize, VectorsEqualTheOutFileForEveryGgufVocab) {
  for (const std::string name :
       {"llama-spm", "phi-3", "gpt-2", "starcoder", "falcon", "deepseek-coder", "deepseek-llm", "bert-bge"}) {
    FAFO_REQUIRE_SHARED(model, "vocab/ggml-vocab-" + name + ".gguf");
    expect_vectors(model, name);
  }
}

TEST(CliTokenize, VectorsThroughTheConverterForLlama3AndQwen2) {
  FAFO_REQUIRE_SHARED(ranks, "tokenizers/llama3/tokenizer.model");
  FAFO_REQUIRE_SHARED(qwen, "tokenizers/qwen3-from-npm/tokenizer.json");
  FAFO_REQUIRE_SHARED(inp, "vocab/ggml-vocab-llama-bpe.gguf.inp");
  const auto dir = fafo::test::temp_dir("cli_tokenize_convert");
  const std::string convert = fafo::test::shell_quote(fafo::test::binary_path("tools/convert_tokenizer/fafo-convert-tokenizer"));
  const Outcome l = run_command(convert + " -q --tiktoken " + fafo::test::shell_quote(ranks) + " -o " + fafo::test::shell_quote(dir / "llama3.gguf"));
  ASSERT_EQ(l.exit_code, 0) << l.err;
  const Outcome q = run_command(convert + " -q " + fafo::test::shell_quote(qwen) + " -o " + fafo::test::shell_quote(dir / "qwen3.gguf"));
  ASSERT_EQ(q.exit_code, 0) << q.err;
  expect_vectors(dir / "llama3.gguf", "llama-bpe");
  expect_vectors(dir / "qwen3.gguf", "qwen2");
  expect_vectors(dir / "qwen3.gguf", "deepseek-r1-qwen");
  // Llama 3 adds <|begin_of_text|>; Qwen adds no BOS.
  EXPECT_EQ(fafo("tokenize -m " + fafo::test::shell_quote(dir / "llama3.gguf") + " --text 'Hello world'").out, "128000 9906 1917\n");
  EXPECT_EQ(fafo("tokenize -m " + fafo::test::shell_quote(dir / "qwen3.gguf") + " --text 'Hello world'").out, "9707 1879\n");
  std::filesystem::remove_all(dir);
}

TEST(CliTokenize, ClearErrors) {
  FAFO_REQUIRE_SHARED(model, "vocab/ggml-vocab-gpt-2.gguf");
  const Outcome none = fafo("tokenize -m " + fafo::test::shell_quote(model));
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_HAS(none.err, "fafo: error: give exactly one of --text");
  const Outcome two = fafo("tokenize -m " + fafo::test::shell_quote(model) + " --text a --vectors b");
  EXPECT_EQ(two.exit_code, 1);
  const Outcome missing = fafo("tokenize -m /nonexistent/model.gguf --text a");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_HAS(missing.err, "/nonexistent/model.gguf");
  const Outcome no_inp = fafo("tokenize -m " + fafo::test::shell_quote(model) + " --vectors /nonexistent/x.inp");
  EXPECT_EQ(no_inp.exit_code, 1);
  EXPECT_HAS(no_inp.err, "/nonexistent/x.inp");
  const Outcome flag = fafo("tokenize -m " + fafo::test::shell_quote(model) + " --text a --no-such-flag");
  EXPECT_EQ(flag.exit_code, 2);
  const auto dir = fafo::test::temp_dir("cli_tokenize_errors");
  fafo::GgufWriter w;
  w.set_string("tokenizer.ggml.model", "rwkv");
  w.set_string_array("tokenizer.ggml.tokens", {"a", "b"});
  w.write((dir / "rwkv.gguf").string());
  const Outcome rwkv = fafo("tokenize -m " + fafo::test::shell_quote(dir / "rwkv.gguf") + " --text a");
  EXPECT_EQ(rwkv.exit_code, 1);
  EXPECT_HAS(rwkv.err, "model 'rwkv' is not supported");
  std::filesystem::remove_all(dir);
}

}  // namespace
