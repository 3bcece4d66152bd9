// WordPiece (tokenizer.ggml.model = "bert") as llama.cpp's WPM tokenizer: the bert-bge test
// vectors, [CLS]/[SEP] with add_special, and the normalisation rules.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fafo/gguf.h"
#include "fafo/tokenizer.h"
#include "test_support.h"

namespace fafo {
namespace {

using Ids = std::vector<int32_t>;

Tokenizer load(const std::filesystem::path& path) {
  const std::unique_ptr<GgufFile> file = GgufFile::open(path.string());
  return Tokenizer(Vocab::from_gguf(*file));
}

TEST(TokenizerWpm, BertBgeVectorsMatchLlamaCpp) {
  FAFO_REQUIRE_SHARED(path, "vocab/ggml-vocab-bert-bge.gguf");
  FAFO_REQUIRE_SHARED(inp, "vocab/ggml-vocab-bert-bge.gguf.inp");
  FAFO_REQUIRE_SHARED(out, "vocab/ggml-vocab-bert-bge.gguf.out");
  const Tokenizer tok = load(path);
  const std::vector<std::string> cases = split_vocab_test_cases(fafo::test::read_text(inp));
  ASSERT_EQ(cases.size(), 46u);
  std::istringstream lines(fafo::test::read_text(out));
  std::string printed;
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE("case " + std::to_string(k) + ": \"" + cases[k] + "\"");
    std::string line;
    ASSERT_TRUE(std::getline(lines, line));
    Ids want;
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) want.push_back(id);
    const Ids got = tok.encode(cases[k], false);
    EXPECT_EQ(got, want);
    printed += format_vocab_test_line(got);
  }
  EXPECT_EQ(printed, fafo::test::read_text(out));
}

TEST(TokenizerWpm, ClsAndSepWithAddSpecial) {
  FAFO_REQUIRE_SHARED(path, "vocab/ggml-vocab-bert-bge.gguf");
  const Tokenizer tok = load(path);
  const Vocab& v = tok.vocab();
  EXPECT_EQ(v.model, "bert");
  EXPECT_EQ(v.bos, 101);  // [CLS]
  EXPECT_EQ(v.sep, 102);  // [SEP]
  EXPECT_EQ(v.unk, 100);
  EXPECT_FALSE(v.add_space_prefix);
  EXPECT_EQ(tok.encode("Hello world", true), (Ids{101, 7592, 2088, 102}));
  EXPECT_EQ(tok.encode("Hello world", false), (Ids{7592, 2088}));
  EXPECT_EQ(tok.encode("[CLS] hi [SEP]", false, true).front(), 101);
  // Lower case, accents dropped, punctuation split off: "Héllo, WORLD!" reads "hello , world !".
  EXPECT_EQ(tok.encode("H\xC3\xA9llo, WORLD!", false), (Ids{7592, 1010, 2088, 999}));
  EXPECT_EQ(tok.decode({7592, 1010, 2088}), " hello , world");  // '▁' word starts print as spaces
  EXPECT_EQ(tok.token_to_piece(101), "");
}

}  // namespace
}  // namespace fafo
