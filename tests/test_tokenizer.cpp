// SPM (tokenizer.ggml.model = "llama") tokenizer: llama.cpp's outputs on real vocabularies,
// round trips, merge-order and fallback rules on small hand-made vocabularies, and the
// validation of vocab metadata.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fafo/gguf.h"
#include "fafo/tokenizer.h"
#include "test_support.h"
#include "tokenizer_test_support.h"

namespace fafo {
namespace {

using Ids = std::vector<int32_t>;
using test::id_of;
using test::load_tokenizer;
using test::show;

struct Case {
  std::string text;
  Ids ids;
};

// llama.cpp's tokenizer test vectors: .inp holds the strings, each followed by
// "\n__ggml_vocab_test__\n"; .out holds one line of space-separated ids per string.
std::vector<Case> read_vocab_cases(const std::filesystem::path& inp, const std::filesystem::path& out) {
  const std::string separator = "\n__ggml_vocab_test__\n";
  const std::string text = fafo::test::read_text(inp);
  std::vector<Case> cases;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = text.find(separator, pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "text after the last separator in " << inp;
      break;
    }
    cases.push_back(Case{text.substr(pos, end - pos), {}});
    pos = end + separator.size();
  }
  std::istringstream lines(fafo::test::read_text(out));
  std::string line;
  size_t k = 0;
  for (; std::getline(lines, line); ++k) {
    if (k >= cases.size()) {
      ADD_FAILURE() << out << " has more lines than " << inp << " has strings";
      break;
    }
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) cases[k].ids.push_back(id);
  }
  EXPECT_EQ(k, cases.size()) << "line count of " << out;
  return cases;
}

struct GoldenCase {
  std::string text;
  Ids ids_no_bos;
  Ids ids_with_bos;
  std::string detok;
};

std::vector<GoldenCase> read_golden(const std::filesystem::path& path) {
  std::vector<GoldenCase> cases;
  std::istringstream lines(fafo::test::read_text(path));
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    cases.push_back(GoldenCase{j.at("text").get<std::string>(), j.at("ids_no_bos").get<Ids>(),
                               j.at("ids_with_bos").get<Ids>(), j.at("detok").get<std::string>()});
  }
  return cases;
}

// ---------------------------------------------------------------- real vocabularies

TEST(TokenizerStories, VocabMetadata) {
  FAFO_REQUIRE_SHARED(path, "models/stories260K.gguf");
  const Tokenizer tok = load_tokenizer(path);
  const Vocab& v = tok.vocab();
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.pre, "");
  EXPECT_EQ(v.size(), 512);
  EXPECT_EQ(v.scores.size(), 512u);
  EXPECT_EQ(v.kinds.size(), 512u);
  EXPECT_EQ(v.unk, 0);
  EXPECT_EQ(v.bos, 1);
  EXPECT_EQ(v.eos, 2);
  EXPECT_EQ(v.pad, -1);  // stored as 0xFFFFFFFF
  EXPECT_EQ(v.eot, -1);  // absent
  EXPECT_TRUE(v.add_bos);  // absent: llama default
  EXPECT_FALSE(v.add_eos);
  EXPECT_TRUE(v.add_space_prefix);
  EXPECT_EQ(v.kinds[0], TokenKind::Unknown);
  EXPECT_EQ(v.kinds[1], TokenKind::Control);
  EXPECT_EQ(v.kinds[3], TokenKind::Byte);
}

TEST(TokenizerStories, GoldenCasesMatchLlamaCpp) {
  FAFO_REQUIRE_SHARED(vocab_path, "models/stories260K.gguf");
  FAFO_REQUIRE_SHARED(golden_path, "golden/stories260K.tokenize.jsonl");
  const Tokenizer tok = load_tokenizer(vocab_path);
  const std::vector<GoldenCase> cases = read_golden(golden_path);
  ASSERT_EQ(cases.size(), 46u);
  for (size_t k = 0; k < cases.size(); ++k) {
    const GoldenCase& c = cases[k];
    SCOPED_TRACE("case " + std::to_string(k) + ": \"" + c.text + "\"");
    const Ids no_bos = tok.encode(c.text, false);
    EXPECT_EQ(no_bos, c.ids_no_bos) << "got " << show(no_bos) << " want " << show(c.ids_no_bos);
    const Ids with_bos = tok.encode(c.text, true);
    EXPECT_EQ(with_bos, c.ids_with_bos) << "got " << show(with_bos) << " want " << show(c.ids_with_bos);
    EXPECT_EQ(tok.decode(c.ids_no_bos), c.detok);
  }
}

TEST(TokenizerLlamaSpm, VocabMetadata) {
  FAFO_REQUIRE_SHARED(path, "vocab/ggml-vocab-llama-spm.gguf");
  const Tokenizer tok = load_tokenizer(path);
  const Vocab& v = tok.vocab();
  EXPECT_EQ(v.model, "llama");
  EXPECT_EQ(v.pre, "default");
  EXPECT_EQ(v.size(), 32000);
  EXPECT_EQ(v.bos, 1);
  EXPECT_EQ(v.eos, 2);
  EXPECT_EQ(v.unk, 0);
  EXPECT_TRUE(v.add_bos);
  EXPECT_FALSE(v.add_eos);
}

// Checks every llama.cpp test vector of vocab/<name>.gguf.{inp,out} (ids without BOS).
void check_test_vectors(const std::string& name) {
  FAFO_REQUIRE_SHARED(vocab_path, "vocab/" + name + ".gguf");
  FAFO_REQUIRE_SHARED(inp, "vocab/" + name + ".gguf.inp");
  FAFO_REQUIRE_SHARED(out, "vocab/" + name + ".gguf.out");
  const Tokenizer tok = load_tokenizer(vocab_path);
  const std::vector<Case> cases = read_vocab_cases(inp, out);
  ASSERT_EQ(cases.size(), 46u);  // the .inp ends with a separator: no trailing empty case
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(name + " case " + std::to_string(k) + ": \"" + cases[k].text + "\"");
    const Ids got = tok.encode(cases[k].text, false);
    EXPECT_EQ(got, cases[k].ids) << "got " << show(got) << " want " << show(cases[k].ids);
    Ids with_bos = {tok.vocab().bos};
    with_bos.insert(with_bos.end(), cases[k].ids.begin(), cases[k].ids.end());
    EXPECT_EQ(tok.encode(cases[k].text, true), with_bos);
  }
}

TEST(TokenizerLlamaSpm, TestVectorsMatchLlamaCpp) { check_test_vectors("ggml-vocab-llama-spm"); }

// Phi-3 uses the same SPM model with user-defined chat tokens and EOS = <|endoftext|>.
TEST(TokenizerPhi3, TestVectorsMatchLlamaCpp) { check_test_vectors("ggml-vocab-phi-3"); }

TEST(TokenizerPhi3, EndOfGenerationAndChatTokens) {
  FAFO_REQUIRE_SHARED(path, "vocab/ggml-vocab-phi-3.gguf");
  const Tokenizer tok = load_tokenizer(path);
  const Vocab& v = tok.vocab();
  EXPECT_EQ(v.eos, 32000);
  EXPECT_EQ(v.pad, 32000);
  EXPECT_EQ(v.tokens[32000], "<|endoftext|>");
  EXPECT_TRUE(tok.is_end_of_generation(32000));
  const auto end = std::find(v.tokens.begin(), v.tokens.end(), "<|end|>");
  ASSERT_NE(end, v.tokens.end());
  const auto end_id = static_cast<int32_t>(end - v.tokens.begin());
  EXPECT_TRUE(tok.is_end_of_generation(end_id));
  EXPECT_FALSE(tok.is_end_of_generation(v.bos));
}

// decode(encode(s)) == s: these vocabularies have all 256 byte tokens, so every string does.
TEST(TokenizerRoundTrip, EveryTestStringOnEveryVocab) {
  FAFO_REQUIRE_SHARED(stories, "models/stories260K.gguf");
  FAFO_REQUIRE_SHARED(spm, "vocab/ggml-vocab-llama-spm.gguf");
  FAFO_REQUIRE_SHARED(phi3, "vocab/ggml-vocab-phi-3.gguf");
  FAFO_REQUIRE_SHARED(inp, "vocab/ggml-vocab-llama-spm.gguf.inp");
  FAFO_REQUIRE_SHARED(out, "vocab/ggml-vocab-llama-spm.gguf.out");
  std::vector<std::string> texts;
  for (const Case& c : read_vocab_cases(inp, out)) texts.push_back(c.text);
  texts.push_back("Once upon a time, there was a little girl named Lily.");
  texts.push_back(std::string("bytes \x01\x7f and a lone continuation \x80 byte", 40));
  for (const auto& path : {stories, spm, phi3}) {
    const Tokenizer tok = load_tokenizer(path);
    for (const std::string& s : texts) {
      SCOPED_TRACE(path.filename().string() + ": \"" + s + "\"");
      EXPECT_EQ(tok.decode(tok.encode(s, false)), s);
    }
  }
}

TEST(TokenizerStories, DecodeKeepsTheSpaceAfterBosLikeLlamaCpp) {
  FAFO_REQUIRE_SHARED(path, "models/stories260K.gguf");
  const Tokenizer tok = load_tokenizer(path);
  // llama.cpp drops the prefix space only from the first token's piece; a leading BOS
  // has the empty piece, so the space stays.
  EXPECT_EQ(tok.decode(tok.encode("Hello world", true)), " Hello world");
  EXPECT_EQ(tok.decode(tok.encode("Hello world", false)), "Hello world");
  EXPECT_EQ(tok.decode({}), "");
  EXPECT_EQ(tok.decode({tok.vocab().bos, tok.vocab().eos}), "");
}

TEST(TokenizerStories, TokenToPiece) {
  FAFO_REQUIRE_SHARED(path, "models/stories260K.gguf");
  const Tokenizer tok = load_tokenizer(path);
  const Vocab& v = tok.vocab();
  EXPECT_EQ(tok.token_to_piece(v.bos), "");
  EXPECT_EQ(tok.token_to_piece(v.eos), "");
  EXPECT_EQ(tok.token_to_piece(v.unk), "");
  const auto id_of = [&](const std::string& text) {
    const auto it = std::find(v.tokens.begin(), v.tokens.end(), text);
    return it == v.tokens.end() ? -1 : static_cast<int32_t>(it - v.tokens.begin());
  };
  ASSERT_GE(id_of("<0x41>"), 0);
  EXPECT_EQ(tok.token_to_piece(id_of("<0x41>")), "A");
  EXPECT_EQ(tok.token_to_piece(id_of("<0x0A>")), "\n");
  EXPECT_EQ(tok.token_to_piece(id_of("<0xE2>")), "\xE2");
  ASSERT_GE(id_of("\xE2\x96\x81"), 0);
  EXPECT_EQ(tok.token_to_piece(id_of("\xE2\x96\x81")), " ");
  for (int32_t id = 0; id < v.size(); ++id) {
    const std::string& text = v.tokens[static_cast<size_t>(id)];
    if (v.kinds[static_cast<size_t>(id)] == TokenKind::Normal && text.rfind("\xE2\x96\x81", 0) == 0) {
      EXPECT_EQ(tok.token_to_piece(id)[0], ' ') << text;
    }
  }
  EXPECT_THROW(tok.token_to_piece(-1), std::out_of_range);
  EXPECT_THROW(tok.token_to_piece(v.size()), std::out_of_range);
  EXPECT_THROW(tok.decode({5, 100000}), std::out_of_range);
}

TEST(TokenizerStories, EndOfGeneration) {
  FAFO_REQUIRE_SHARED(path, "models/stories260K.gguf");
  const Tokenizer tok = load_tokenizer(path);
  EXPECT_TRUE(tok.is_end_of_generation(2));
  EXPECT_FALSE(tok.is_end_of_generation(1));
  EXPECT_FALSE(tok.is_end_of_generation(0));
  EXPECT_FALSE(tok.is_end_of_generation(300));
  EXPECT_FALSE(tok.is_end_of_generation(-1));
  EXPECT_FALSE(tok.is_end_of_generation(512));
}

TEST(TokenizerStories, MovedTokenizerKeepsWorking) {
  FAFO_REQUIRE_SHARED(path, "models/stories260K.gguf");
  Tokenizer a = load_tokenizer(path);
  const Ids ids = a.encode("Hello world", true);
  Tokenizer b(std::move(a));
  EXPECT_EQ(b.encode("Hello world", true), ids);
  Tokenizer c = load_tokenizer(path);
  c = std::move(b);
  EXPECT_EQ(c.decode(ids), " Hello world");
}

// ---------------------------------------------------------------- hand-made vocabularies

constexpr const char* kSpace = "\xE2\x96\x81";  // '▁'

// <unk>, <s>, </s>, optionally <0x00>..<0xFF>, then `pieces` (Normal) with their scores.
Vocab make_vocab(const std::vector<std::pair<std::string, float>>& pieces, bool byte_tokens) {
  Vocab v;
  v.model = "llama";
  const auto add = [&](const std::string& text, float score, TokenKind kind) {
    v.tokens.push_back(text);
    v.scores.push_back(score);
    v.kinds.push_back(kind);
  };
  add("<unk>", 0, TokenKind::Unknown);
  add("<s>", 0, TokenKind::Control);
  add("</s>", 0, TokenKind::Control);
  if (byte_tokens) {
    static const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) add(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", 0, TokenKind::Byte);
  }
  for (const auto& [text, score] : pieces) add(text, score, TokenKind::Normal);
  v.unk = 0;
  v.bos = 1;
  v.eos = 2;
  return v;
}

TEST(TokenizerMerges, HighestScorePairMergesFirst) {
  Vocab v = make_vocab({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -3}, {"bc", -2}}, false);
  v.add_space_prefix = false;
  const Tokenizer tok(v);
  EXPECT_EQ(tok.encode("abc", false), (Ids{id_of(tok, "a"), id_of(tok, "bc")}));

  Vocab w = make_vocab({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -2}, {"bc", -3}}, false);
  w.add_space_prefix = false;
  const Tokenizer tok2(w);
  EXPECT_EQ(tok2.encode("abc", false), (Ids{id_of(tok2, "ab"), id_of(tok2, "c")}));
}

TEST(TokenizerMerges, LeftmostPairWinsATie) {
  Vocab v = make_vocab({{"a", -1}, {"aa", -2}}, false);
  v.add_space_prefix = false;
  const Tokenizer tok(v);
  const int32_t a = id_of(tok, "a"), aa = id_of(tok, "aa");
  EXPECT_EQ(tok.encode("aaa", false), (Ids{aa, a}));
  EXPECT_EQ(tok.encode("aaaaa", false), (Ids{aa, aa, a}));
}

TEST(TokenizerMerges, MergedSymbolsKeepMerging) {
  // "▁abc": "bc" (-1.5) merges first, then "▁a" (-2), then the merged symbols "▁a" and
  // "bc" form "▁abc", a pair that did not exist among the single characters.
  Vocab v = make_vocab({{kSpace, -1}, {"a", -1}, {"b", -1}, {"c", -1}, {"bc", -1.5f},
                        {std::string(kSpace) + "a", -2}, {std::string(kSpace) + "abc", -5}},
                       false);
  const Tokenizer tok(v);
  EXPECT_EQ(tok.encode("abc", false), (Ids{id_of(tok, std::string(kSpace) + "abc")}));
  EXPECT_EQ(tok.decode(tok.encode("abc", false)), "abc");
}

TEST(TokenizerMerges, SpacesBecomeSpaceMarksAndAPrefixIsAdded) {
  Vocab v = make_vocab({{kSpace, -1}, {"a", -1}, {"b", -1}, {std::string(kSpace) + "a", -2}}, false);
  const Tokenizer tok(v);
  const int32_t sp = id_of(tok, kSpace), spa = id_of(tok, std::string(kSpace) + "a"), b = id_of(tok, "b");
  EXPECT_EQ(tok.encode("a b", false), (Ids{spa, sp, b}));
  EXPECT_EQ(tok.encode(" a", false), (Ids{sp, spa}));
  EXPECT_EQ(tok.encode("", false), Ids{});
  EXPECT_EQ(tok.encode("", true), Ids{1});
  EXPECT_EQ(tok.decode({spa, sp, b}), "a b");

  v.add_space_prefix = false;
  const Tokenizer raw(v);
  EXPECT_EQ(raw.encode("b a", false), (Ids{b, spa}));
  EXPECT_EQ(raw.encode("b", true), (Ids{1, b}));
  EXPECT_EQ(raw.decode({spa}), " a");  // no prefix to remove
}

TEST(TokenizerMerges, EosIsAppendedWhenTheVocabAsksForIt) {
  Vocab v = make_vocab({{kSpace, -1}, {"a", -1}}, false);
  v.add_eos = true;
  const Tokenizer tok(v);
  const int32_t sp = id_of(tok, kSpace), a = id_of(tok, "a");
  EXPECT_EQ(tok.encode("a", true), (Ids{1, sp, a, 2}));
  EXPECT_EQ(tok.encode("a", false), (Ids{sp, a}));
}

TEST(TokenizerFallback, UnknownCharactersBecomeByteTokens) {
  Vocab v = make_vocab({{kSpace, -1}, {"a", -1}}, true);
  const Tokenizer tok(v);
  // 'é' is C3 A9; byte token <0xXX> has id 3 + XX.
  EXPECT_EQ(tok.encode("a\xC3\xA9", false), (Ids{id_of(tok, kSpace), id_of(tok, "a"), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok.decode(tok.encode("a\xC3\xA9", false)), "a\xC3\xA9");
  // A truncated sequence at the end and a stray continuation byte are bytes too.
  EXPECT_EQ(tok.encode("\xE2\x96", false), (Ids{id_of(tok, kSpace), 3 + 0xE2, 3 + 0x96}));
  EXPECT_EQ(tok.encode("\x80", false), (Ids{id_of(tok, kSpace), 3 + 0x80}));
}

TEST(TokenizerFallback, UnkWithoutByteTokens) {
  Vocab v = make_vocab({{kSpace, -1}, {"a", -1}}, false);
  const Tokenizer tok(v);
  EXPECT_EQ(tok.encode("a\xC3\xA9" "a", false), (Ids{id_of(tok, kSpace), id_of(tok, "a"), 0, id_of(tok, "a")}));
  EXPECT_EQ(tok.decode(tok.encode("a\xC3\xA9", false)), "a");  // <unk> prints as nothing

  v.unk = -1;
  const Tokenizer no_unk(v);
  EXPECT_THROW(no_unk.encode("\xC3\xA9", false), std::runtime_error);
}

TEST(TokenizerPieces, UserDefinedAndUnusedTokens) {
  Vocab v = make_vocab({{kSpace, -1}, {"<tool>", 0}, {"<pad0>", 0}}, false);
  v.kinds[static_cast<size_t>(v.size() - 2)] = TokenKind::UserDefined;
  v.kinds[static_cast<size_t>(v.size() - 1)] = TokenKind::Unused;
  const Tokenizer tok(v);
  EXPECT_EQ(tok.token_to_piece(v.size() - 2), "<tool>");
  EXPECT_EQ(tok.token_to_piece(v.size() - 1), "");
}

TEST(TokenizerEndOfGeneration, EndOfTurnTokensByName) {
  Vocab v = make_vocab({{"<|im_end|>", 0}, {"<|eot_id|>", 0}, {"<end_of_turn>", 0}, {"<|end|>", 0}, {"end", 0}}, false);
  const Tokenizer tok(v);
  EXPECT_TRUE(tok.is_end_of_generation(2));
  EXPECT_TRUE(tok.is_end_of_generation(id_of(tok, "<|im_end|>")));
  EXPECT_TRUE(tok.is_end_of_generation(id_of(tok, "<|eot_id|>")));
  EXPECT_TRUE(tok.is_end_of_generation(id_of(tok, "<end_of_turn>")));
  EXPECT_TRUE(tok.is_end_of_generation(id_of(tok, "<|end|>")));
  EXPECT_FALSE(tok.is_end_of_generation(id_of(tok, "end")));
  EXPECT_FALSE(tok.is_end_of_generation(1));

  Vocab w = make_vocab({{"stop", 0}}, false);
  w.eos = -1;
  w.eot = id_of(tok, "<s>");  // any id: eot marks it
  w.tokens[2] = "</eos>";  // "</s>" itself ends generation by name (llama.cpp's list)
  const Tokenizer t2(w);
  EXPECT_FALSE(t2.is_end_of_generation(2));
  EXPECT_TRUE(t2.is_end_of_generation(1));
}

TEST(TokenizerVocab, InconsistentVocabIsRejected) {
  Vocab v = make_vocab({{"a", 0}}, false);
  Vocab bad = v;
  bad.model = "t5";  // Unigram: not supported
  EXPECT_THROW(Tokenizer{bad}, std::invalid_argument);
  bad = v;
  bad.scores.pop_back();
  EXPECT_THROW(Tokenizer{bad}, std::invalid_argument);
  bad = v;
  bad.bos = bad.size();
  EXPECT_THROW(Tokenizer{bad}, std::invalid_argument);
  bad = v;
  bad.tokens.clear();
  bad.scores.clear();
  bad.kinds.clear();
  EXPECT_THROW(Tokenizer{bad}, std::invalid_argument);
  bad = v;
  bad.kinds.clear();  // allowed: all Normal
  EXPECT_NO_THROW(Tokenizer{bad});
}

// ---------------------------------------------------------------- GGUF metadata errors

class TokenizerGguf : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::temp_dir("tokenizer"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A valid 4-token vocab; `edit` changes it before writing.
  std::string write(const std::function<void(GgufWriter&)>& edit) {
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xE2\x96\x81"});
    w.set_f32_array("tokenizer.ggml.scores", {0, 0, 0, -1});
    w.set_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 1});
    w.set_u32("tokenizer.ggml.bos_token_id", 1);
    w.set_u32("tokenizer.ggml.eos_token_id", 2);
    w.set_u32("tokenizer.ggml.unknown_token_id", 0);
    edit(w);
    const std::string path = (dir_ / ("v" + std::to_string(n_++) + ".gguf")).string();
    w.write(path);
    return path;
  }

  Vocab load(const std::string& path) {
    const std::unique_ptr<GgufFile> file = GgufFile::open(path);
    return Vocab::from_gguf(*file);
  }

  // Expects GgufError whose message contains every one of `parts`.
  void expect_error(const std::function<void(GgufWriter&)>& edit, const std::vector<std::string>& parts) {
    const std::string path = write(edit);
    try {
      load(path);
      ADD_FAILURE() << "no error; expected one mentioning " << parts.front();
    } catch (const GgufError& e) {
      const std::string msg = e.what();
      for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "message: " << msg;
      EXPECT_NE(msg.find(path), std::string::npos) << "message should name the file: " << msg;
    }
  }

  std::filesystem::path dir_;
  int n_ = 0;
};

TEST_F(TokenizerGguf, ValidFileAndDefaults) {
  const Vocab v = load(write([](GgufWriter&) {}));
  EXPECT_EQ(v.size(), 4);
  EXPECT_EQ(v.bos, 1);
  EXPECT_EQ(v.pad, -1);
  EXPECT_TRUE(v.add_bos);
  EXPECT_FALSE(v.add_eos);
  EXPECT_TRUE(v.add_space_prefix);
  EXPECT_EQ(v.pre, "");

  const Vocab w = load(write([](GgufWriter& g) {
    g.set_u32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
    g.set_i32("tokenizer.ggml.eot_token_id", -1);
    g.set_bool("tokenizer.ggml.add_bos_token", false);
    g.set_bool("tokenizer.ggml.add_eos_token", true);
    g.set_bool("tokenizer.ggml.add_space_prefix", false);
    g.set_string("tokenizer.ggml.pre", "default");
  }));
  EXPECT_EQ(w.pad, -1);
  EXPECT_EQ(w.eot, -1);
  EXPECT_FALSE(w.add_bos);
  EXPECT_TRUE(w.add_eos);
  EXPECT_FALSE(w.add_space_prefix);
  EXPECT_EQ(w.pre, "default");

  // Without token_type every token is Normal; without scores, scores stay empty.
  const Vocab x = load(write([](GgufWriter& g) {
    GgufWriter fresh;
    g = fresh;
    g.set_string("tokenizer.ggml.model", "llama");
    g.set_string_array("tokenizer.ggml.tokens", {"a", "", "c"});
  }));
  EXPECT_EQ(x.kinds, std::vector<TokenKind>(3, TokenKind::Normal));
  EXPECT_TRUE(x.scores.empty());
  EXPECT_EQ(x.tokens[1], "[EMPTY_1]");
  EXPECT_EQ(x.bos, -1);
  EXPECT_NO_THROW(Tokenizer{x});
}

TEST_F(TokenizerGguf, MissingModelOrTokens) {
  expect_error([](GgufWriter& g) { g = GgufWriter(); g.set_string_array("tokenizer.ggml.tokens", {"a"}); },
               {"tokenizer.ggml.model", "missing"});
  expect_error([](GgufWriter& g) { g = GgufWriter(); g.set_string("tokenizer.ggml.model", "llama"); },
               {"tokenizer.ggml.tokens", "missing"});
  expect_error([](GgufWriter& g) { g.set_string_array("tokenizer.ggml.tokens", {}); },
               {"tokenizer.ggml.tokens", "empty"});
  expect_error([](GgufWriter& g) { g.set_i32_array("tokenizer.ggml.tokens", {1, 2, 3, 4}); },
               {"tokenizer.ggml.tokens", "strings"});
  expect_error([](GgufWriter& g) { g.set_string("tokenizer.ggml.tokens", "abc"); },
               {"tokenizer.ggml.tokens", "array"});
  expect_error([](GgufWriter& g) { g.set_u32("tokenizer.ggml.model", 1); },
               {"tokenizer.ggml.model", "string"});
}

TEST_F(TokenizerGguf, LengthMismatches) {
  expect_error([](GgufWriter& g) { g.set_f32_array("tokenizer.ggml.scores", {0, 0, 0}); },
               {"tokenizer.ggml.scores", "3 entries", "4"});
  expect_error([](GgufWriter& g) { g.set_i32_array("tokenizer.ggml.token_type", {1, 1, 1, 1, 1}); },
               {"tokenizer.ggml.token_type", "5 entries", "4"});
  expect_error([](GgufWriter& g) { g.set_string_array("tokenizer.ggml.scores", {"a", "b", "c", "d"}); },
               {"tokenizer.ggml.scores", "not a number"});
}

TEST_F(TokenizerGguf, NonFiniteScores) {
  // A NaN score breaks the merge heap's comparator; inf is no usable score either.
  expect_error([](GgufWriter& g) {
    g.set_f32_array("tokenizer.ggml.scores", {0, 0, std::numeric_limits<float>::quiet_NaN(), -1});
  }, {"tokenizer.ggml.scores", "entry 2", "finite"});
  expect_error([](GgufWriter& g) {
    g.set_f32_array("tokenizer.ggml.scores", {0, 0, 0, std::numeric_limits<float>::infinity()});
  }, {"tokenizer.ggml.scores", "entry 3", "finite"});
  expect_error([](GgufWriter& g) {
    g.set_f32_array("tokenizer.ggml.scores", {-std::numeric_limits<float>::infinity(), 0, 0, -1});
  }, {"tokenizer.ggml.scores", "entry 0", "finite"});
}

TEST_F(TokenizerGguf, BadTokenTypes) {
  expect_error([](GgufWriter& g) { g.set_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 9}); },
               {"tokenizer.ggml.token_type", "entry 3", "9"});
  expect_error([](GgufWriter& g) { g.set_i32_array("tokenizer.ggml.token_type", {2, 3, -1, 1}); },
               {"tokenizer.ggml.token_type", "entry 2"});
}

TEST_F(TokenizerGguf, SpecialIdsOutOfRange) {
  expect_error([](GgufWriter& g) { g.set_u32("tokenizer.ggml.bos_token_id", 4); },
               {"tokenizer.ggml.bos_token_id", "out of range", "4 tokens"});
  expect_error([](GgufWriter& g) { g.set_u32("tokenizer.ggml.eos_token_id", 1000); },
               {"tokenizer.ggml.eos_token_id", "1000"});
  expect_error([](GgufWriter& g) { g.set_u32("tokenizer.ggml.unknown_token_id", 0xFFFFFFFEu); },
               {"tokenizer.ggml.unknown_token_id"});
  expect_error([](GgufWriter& g) { g.set_u32("tokenizer.ggml.padding_token_id", 7); },
               {"tokenizer.ggml.padding_token_id"});
  expect_error([](GgufWriter& g) { g.set_string("tokenizer.ggml.bos_token_id", "1"); },
               {"tokenizer.ggml.bos_token_id", "integer"});
  expect_error([](GgufWriter& g) { g.set_string("tokenizer.ggml.add_bos_token", "yes"); },
               {"tokenizer.ggml.add_bos_token", "bool"});
}

// ---------------------------------------------------------------- special tokens (SPM)

TEST(TokenizerSpecial, Phi3ChatPromptDropsNewlinesAfterSpecialTokens) {
  FAFO_REQUIRE_SHARED(path, "vocab/ggml-vocab-phi-3.gguf");
  const Tokenizer tok = load_tokenizer(path);
  EXPECT_EQ(tok.vocab().name, "Phi3");
  const std::string prompt = "<|user|>\nHello<|end|>\n<|assistant|>";
  // llama.cpp: Phi-3's special tokens strip the whitespace after them, and the text
  // after a special token gets the SentencePiece space prefix.
  EXPECT_EQ(tok.encode(prompt, true, true), (Ids{1, 32010, 15043, 32007, 32001}));
  const Ids plain = tok.encode(prompt, true, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 32010), 0);
  EXPECT_EQ(tok.decode(tok.encode(prompt, false, false)), prompt);
  EXPECT_EQ(tok.token_to_piece(32010), "");
  EXPECT_EQ(tok.token_to_piece(32010, true), "<|user|>");
  EXPECT_TRUE(tok.is_control(32007));
}

TEST(TokenizerSpecial, SpacePrefixAfterEverySpecialToken) {
  FAFO_REQUIRE_SHARED(path, "models/stories260K.gguf");
  const Tokenizer tok = load_tokenizer(path);
  const Ids plain = tok.encode("Hello", false);
  Ids expected = {1, 1};  // BOS, then "<s>" from the text
  expected.insert(expected.end(), plain.begin(), plain.end());
  expected.push_back(2);
  const Ids world = tok.encode(" world", false);  // "▁▁world": the prefix and the text's space
  expected.insert(expected.end(), world.begin(), world.end());
  EXPECT_EQ(tok.encode("<s>Hello</s> world", true, true), expected);
  EXPECT_EQ(tok.token_to_piece(1, true), "<s>");
  // Without parsing, "<s>" is text.
  EXPECT_EQ(tok.decode(tok.encode("<s>Hello</s>", false)), "<s>Hello</s>");
}

TEST(TokenizerSpecial, UserDefinedTokensAreAlwaysSingleTokens) {
  Vocab v = make_vocab({{kSpace, -1}, {"a", -1}, {"b", -1}, {std::string(kSpace) + "a", -2},
                        {std::string(kSpace) + "b", -2}, {"<tool>", 0}, {"<tool_call>", 0}},
                       false);
  v.kinds[static_cast<size_t>(v.size() - 2)] = TokenKind::UserDefined;
  v.kinds[static_cast<size_t>(v.size() - 1)] = TokenKind::UserDefined;
  const Tokenizer tok(v);
  const int32_t sa = id_of(tok, std::string(kSpace) + "a"), sb = id_of(tok, std::string(kSpace) + "b");
  const int32_t tool = id_of(tok, "<tool>"), tool_call = id_of(tok, "<tool_call>");
  EXPECT_EQ(tok.encode("a<tool>b", false), (Ids{sa, tool, sb}));
  EXPECT_EQ(tok.encode("a<tool_call>b<tool>", false, true), (Ids{sa, tool_call, sb, tool}));  // longest first
  EXPECT_EQ(tok.decode(tok.encode("a<tool>b", false)), "a<tool> b");  // the prefix space shows
  // Control tokens: only with parse_special.
  EXPECT_EQ(tok.encode("<s>", false, true), (Ids{1}));
  EXPECT_NE(tok.encode("<s>", false, false), (Ids{1}));
}

}  // namespace
}  // namespace fafo
