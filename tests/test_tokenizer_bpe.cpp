// Byte-level BPE (tokenizer.ggml.model = "gpt2") tokenizers: llama.cpp's test vectors for
// every vocabulary in ../shared/vocab, round trips, decoding of GPT-2's byte alphabet,
// special tokens, and hand-made vocabularies for the merge rules.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "convert_tokenizer.h"
#include "fafo/gguf.h"
#include "fafo/tokenizer.h"
#include "fafo/utf8_stream.h"
#include "test_support.h"
#include "tokenizer_test_support.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode.h"

namespace fafo {
namespace {

using Ids = std::vector<int32_t>;
using test::id_of;
using test::load_tokenizer;
using test::show;

// Every case of vocab/<name>.gguf.inp tokenized without BOS, as `fafo tokenize --vectors`
// prints it, must reproduce vocab/<name>.gguf.out byte for byte.
void expect_vectors_match(const Tokenizer& tok, const std::string& name) {
  const std::filesystem::path inp = test::shared_path("vocab/" + name + ".gguf.inp");
  const std::filesystem::path out = test::shared_path("vocab/" + name + ".gguf.out");
  const std::vector<std::string> cases = split_vocab_test_cases(fafo::test::read_text(inp));
  ASSERT_EQ(cases.size(), 46u);
  std::istringstream expected_lines(fafo::test::read_text(out));
  std::string printed;
  for (size_t k = 0; k < cases.size(); ++k) {
    SCOPED_TRACE(name + " case " + std::to_string(k) + ": \"" + cases[k] + "\"");
    std::string line;
    ASSERT_TRUE(std::getline(expected_lines, line));
    Ids want;
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) want.push_back(id);
    const Ids got = tok.encode(cases[k], false);
    EXPECT_EQ(got, want) << "got " << show(got) << " want " << show(want);
    printed += format_vocab_test_line(got);
  }
  EXPECT_EQ(printed, fafo::test::read_text(out));
}

void check_gguf_vectors(const std::string& name) {
  FAFO_REQUIRE_SHARED(vocab_path, "vocab/" + name + ".gguf");
  FAFO_REQUIRE_SHARED(inp, "vocab/" + name + ".gguf.inp");
  FAFO_REQUIRE_SHARED(out, "vocab/" + name + ".gguf.out");
  const Tokenizer tok = load_tokenizer(vocab_path);
  expect_vectors_match(tok, name);
}

TEST(TokenizerBpeVectors, Gpt2) { check_gguf_vectors("ggml-vocab-gpt-2"); }
TEST(TokenizerBpeVectors, Starcoder) { check_gguf_vectors("ggml-vocab-starcoder"); }
TEST(TokenizerBpeVectors, Falcon) { check_gguf_vectors("ggml-vocab-falcon"); }
TEST(TokenizerBpeVectors, DeepseekCoder) { check_gguf_vectors("ggml-vocab-deepseek-coder"); }
TEST(TokenizerBpeVectors, DeepseekLlm) { check_gguf_vectors("ggml-vocab-deepseek-llm"); }

// Llama 3 (llama-bpe) and Qwen2 have test vectors but no GGUF in ../shared: their
// tokenizers are converted to vocab-only GGUFs first.
Tokenizer converted(const convert::VocabFile& v, const std::string& file_name) {
  const std::filesystem::path dir = test::temp_dir("tokenizer_bpe_" + file_name);
  convert::write_vocab_gguf(v, dir / file_name);
  Tokenizer tok = load_tokenizer(dir / file_name);
  std::filesystem::remove_all(dir);
  return tok;
}

TEST(TokenizerBpeVectors, Llama3FromTiktoken) {
  FAFO_REQUIRE_SHARED(ranks, "tokenizers/llama3/tokenizer.model");
  FAFO_REQUIRE_SHARED(inp, "vocab/ggml-vocab-llama-bpe.gguf.inp");
  const Tokenizer tok = converted(convert::from_tiktoken(ranks, {}), "llama3.gguf");
  EXPECT_EQ(tok.vocab().pre, "llama-bpe");
  EXPECT_EQ(tok.vocab().size(), 128256);
  expect_vectors_match(tok, "ggml-vocab-llama-bpe");
}

TEST(TokenizerBpeVectors, Qwen2FromQwen3TokenizerJson) {
  FAFO_REQUIRE_SHARED(json_path, "tokenizers/qwen3-from-npm/tokenizer.json");
  FAFO_REQUIRE_SHARED(inp, "vocab/ggml-vocab-qwen2.gguf.inp");
  const Tokenizer tok = converted(convert::from_hf_tokenizer(json_path, {}), "qwen3.gguf");
  EXPECT_EQ(tok.vocab().pre, "qwen2");
  expect_vectors_match(tok, "ggml-vocab-qwen2");
  // DeepSeek-R1-Distill-Qwen shares Qwen2's pre-tokenizer and base vocabulary.
  expect_vectors_match(tok, "ggml-vocab-deepseek-r1-qwen");
}

// Every .inp/.out pair in ../shared/vocab is checked by a test above when a tokenizer for
// it is available; this keeps the list honest when files are added.
TEST(TokenizerBpeVectors, EveryPairInSharedVocabIsCovered) {
  FAFO_REQUIRE_SHARED(dir, "vocab");
  const std::vector<std::string> tested = {"gpt-2", "starcoder", "falcon", "deepseek-coder", "deepseek-llm",
                                           "llama-spm", "phi-3",  // test_tokenizer.cpp
                                           "llama-bpe", "qwen2", "deepseek-r1-qwen"};  // via the converter
  // No tokenizer for these in ../shared (no GGUF, no tokenizer.json): nothing to run.
  const std::vector<std::string> unavailable = {"chameleon", "command-r", "roberta-bpe"};
  // WordPiece (tokenizer.ggml.model = "bert"): test_tokenizer_wpm.cpp.
  const std::vector<std::string> other = {"bert-bge"};
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string file = entry.path().filename().string();
    const std::string prefix = "ggml-vocab-", suffix = ".gguf.inp";
    if (file.size() <= prefix.size() + suffix.size() || file.rfind(prefix, 0) != 0 ||
        file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string name = file.substr(prefix.size(), file.size() - prefix.size() - suffix.size());
    const bool has_gguf = std::filesystem::exists(dir / (prefix + name + ".gguf"));
    const auto listed = [&](const std::vector<std::string>& list) {
      return std::find(list.begin(), list.end(), name) != list.end();
    };
    EXPECT_TRUE(listed(tested) || listed(other) || (!has_gguf && listed(unavailable)))
        << name << " has test vectors" << (has_gguf ? " and a GGUF" : "") << " but no test";
  }
}

// ---------------------------------------------------------------- round trips, decoding

std::vector<std::string> round_trip_texts() {
  std::vector<std::string> texts = split_vocab_test_cases(fafo::test::read_text(test::shared_path("vocab/ggml-vocab-gpt-2.gguf.inp")));
  texts.push_back("Once upon a time, there was a little girl named Lily.");
  texts.push_back(std::string("bytes \x01\x7f\x00 and a lone continuation \x80 byte, a cut \xE2\x96", 50));
  texts.push_back("\xF0\x9F\xA6\x99\xF0\x9F\xA6 \xFF\xFE overlong \xC0\xAF end");
  texts.push_back("<|endoftext|> <|im_start|> <s> plain text that looks special");
  texts.push_back("   leading and trailing spaces\t\t\n\n  ");
  return texts;
}

// Texts that are not valid UTF-8 round-trip only through vocabularies with a normal
// token for every byte: several lack those for bytes that valid UTF-8 never has (C0, C1,
// F5..FF), and DeepSeek's have user-defined tokens with the literal texts "ÿ", "þ", ...
bool has_every_byte(const Tokenizer& tok) {
  const auto& t = tok.vocab().tokens;
  for (int b = 0; b < 256; ++b) {
    const auto it = std::find(t.begin(), t.end(), detail::byte_encode(std::string(1, static_cast<char>(b))));
    if (it == t.end() || tok.vocab().kinds[static_cast<size_t>(it - t.begin())] != TokenKind::Normal) return false;
  }
  return true;
}

bool is_valid_utf8(const std::string& s) {
  for (const detail::Utf8Char& c : detail::decode_utf8(s))
    if (c.cp == 0xFFFD && c.length == 1) return false;
  return true;
}

void expect_round_trips(const Tokenizer& tok, const std::string& label) {
  const bool every_byte = has_every_byte(tok);
  for (const std::string& text : round_trip_texts()) {
    if (!every_byte && !is_valid_utf8(text)) continue;
    SCOPED_TRACE(label + ": \"" + text + "\"");
    const Ids ids = tok.encode(text, false);
    EXPECT_EQ(tok.decode(ids), text);
    // Streaming the pieces through Utf8Stream gives the same bytes, never half a
    // character of a well-formed sequence in one chunk.
    Utf8Stream stream;
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(tok.token_to_piece(id));
    streamed += stream.flush();
    EXPECT_EQ(streamed, text);
  }
}

TEST(TokenizerBpeRoundTrip, EveryGgufVocabulary) {
  for (const std::string name : {"gpt-2", "starcoder", "falcon", "deepseek-coder", "deepseek-llm"}) {
    FAFO_REQUIRE_SHARED(path, "vocab/ggml-vocab-" + name + ".gguf");
    expect_round_trips(load_tokenizer(path), name);
  }
}

TEST(TokenizerBpeRoundTrip, ConvertedLlama3AndQwen3) {
  FAFO_REQUIRE_SHARED(ranks, "tokenizers/llama3/tokenizer.model");
  FAFO_REQUIRE_SHARED(qwen, "tokenizers/qwen3-from-npm/tokenizer.json");
  FAFO_REQUIRE_SHARED(inp, "vocab/ggml-vocab-gpt-2.gguf.inp");
  expect_round_trips(converted(convert::from_tiktoken(ranks, {}), "llama3.gguf"), "llama3");
  expect_round_trips(converted(convert::from_hf_tokenizer(qwen, {}), "qwen3.gguf"), "qwen3");
}

TEST(TokenizerBpeDecode, ByteAlphabetMapsBackToBytes) {
  FAFO_REQUIRE_SHARED(path, "vocab/ggml-vocab-gpt-2.gguf");
  const Tokenizer tok = load_tokenizer(path);
  const auto id_of = [&](const std::string& text) {
    const auto& t = tok.vocab().tokens;
    const auto it = std::find(t.begin(), t.end(), text);
    return it == t.end() ? -1 : static_cast<int32_t>(it - t.begin());
  };
  ASSERT_GE(id_of("\xC4\xA0the"), 0);  // "Ġthe"
  EXPECT_EQ(tok.token_to_piece(id_of("\xC4\xA0the")), " the");
  EXPECT_EQ(tok.token_to_piece(id_of("\xC4\x8A")), "\n");  // 'Ċ'
  EXPECT_EQ(tok.token_to_piece(id_of("\xC4\x80")), std::string(1, '\0'));  // 'Ā' is byte 0
  // <|endoftext|> is a control token: no text unless asked for.
  EXPECT_EQ(tok.token_to_piece(50256), "");
  EXPECT_EQ(tok.token_to_piece(50256, true), "<|endoftext|>");
  EXPECT_TRUE(tok.is_end_of_generation(50256));
  EXPECT_TRUE(tok.is_control(50256));
  EXPECT_FALSE(tok.is_control(id_of("\xC4\xA0the")));
  EXPECT_THROW(tok.token_to_piece(50257), std::out_of_range);
  // A character split over byte tokens streams out whole.
  const Ids llama = tok.encode("\xF0\x9F\xA6\x99", false);  // 🦙
  ASSERT_GT(llama.size(), 1u);
  Utf8Stream stream;
  std::string first;
  for (size_t k = 0; k + 1 < llama.size(); ++k) first += stream.push(tok.token_to_piece(llama[k]));
  EXPECT_EQ(first, "");
  EXPECT_EQ(stream.push(tok.token_to_piece(llama.back())), "\xF0\x9F\xA6\x99");
}

// ---------------------------------------------------------------- special tokens, BOS

TEST(TokenizerBpeSpecial, Llama3ChatTokensAndBos) {
  FAFO_REQUIRE_SHARED(ranks, "tokenizers/llama3/tokenizer.model");
  const Tokenizer tok = converted(convert::from_tiktoken(ranks, {}), "llama3.gguf");
  const Vocab& v = tok.vocab();
  EXPECT_EQ(v.bos, 128000);
  EXPECT_EQ(v.eos, 128001);
  EXPECT_EQ(v.eot, 128009);
  EXPECT_EQ(v.eom, 128008);
  EXPECT_TRUE(v.add_bos);
  for (int32_t id : {128001, 128008, 128009}) EXPECT_TRUE(tok.is_end_of_generation(id)) << id;
  for (int32_t id : {128000, 128006, 128007, 9906}) EXPECT_FALSE(tok.is_end_of_generation(id)) << id;

  const std::string prompt = "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>";
  const Ids with = tok.encode(prompt, true, true);
  EXPECT_EQ(with, (Ids{128000, 128006, 882, 128007, 271, 9906, 128009}));
  EXPECT_EQ(tok.decode(with), "user\n\nHello");  // control tokens print as nothing
  std::string shown;
  for (int32_t id : with) shown += tok.token_to_piece(id, true);
  EXPECT_EQ(shown, "<|begin_of_text|>" + prompt);
  // Without special-token parsing the same text is plain text.
  const Ids plain = tok.encode(prompt, false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 128006), 0);
  EXPECT_EQ(tok.decode(plain), prompt);
  // An empty text with add_special is just BOS; no EOS (add_eos is false).
  EXPECT_EQ(tok.encode("", true), Ids{128000});
  EXPECT_EQ(tok.encode("", false), Ids{});
}

TEST(TokenizerBpeSpecial, Qwen3ChatTokensNoBos) {
  FAFO_REQUIRE_SHARED(qwen, "tokenizers/qwen3-from-npm/tokenizer.json");
  const Tokenizer tok = converted(convert::from_hf_tokenizer(qwen, {}), "qwen3.gguf");
  const Vocab& v = tok.vocab();
  EXPECT_FALSE(v.add_bos);
  EXPECT_EQ(v.bos, -1);
  EXPECT_EQ(v.eos, 151645);  // <|im_end|>
  EXPECT_TRUE(tok.is_end_of_generation(151645));
  EXPECT_TRUE(tok.is_end_of_generation(151643));  // <|endoftext|>
  EXPECT_FALSE(tok.is_end_of_generation(151644));  // <|im_start|>

  const std::string prompt = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
  const Ids ids = tok.encode(prompt, true, true);  // add_special: still no BOS
  EXPECT_EQ(ids, (Ids{151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198, 151667, 271, 151668, 271}));
  // <think> is a user-defined token: a single token even without special parsing, and
  // printed as its text; <|im_start|> (control) is text then.
  const Ids plain = tok.encode(prompt, false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 151667), 1);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 151644), 0);
  EXPECT_EQ(tok.token_to_piece(151667), "<think>");
  EXPECT_EQ(tok.decode(plain), prompt);
}

// ---------------------------------------------------------------- hand-made vocabularies

// A byte-level vocabulary: the 256 byte characters, then `extra` tokens (byte-encoded
// texts) of the given kinds, with `merges`.
Vocab make_bpe_vocab(const std::vector<std::pair<std::string, TokenKind>>& extra, const std::vector<std::string>& merges,
                     const std::string& pre) {
  Vocab v;
  v.model = "gpt2";
  v.pre = pre;
  v.add_bos = false;
  v.add_space_prefix = false;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(detail::byte_encode(std::string(1, static_cast<char>(b))));
    v.kinds.push_back(TokenKind::Normal);
  }
  for (const auto& [text, kind] : extra) {
    v.tokens.push_back(text);
    v.kinds.push_back(kind);
  }
  v.merges = merges;
  return v;
}

TEST(TokenizerBpeMerges, LowestRankFirstThenLeftmost) {
  const Tokenizer tok(make_bpe_vocab({{"bc", TokenKind::Normal}, {"ab", TokenKind::Normal}}, {"b c", "a b"}, "gpt-2"));
  EXPECT_EQ(tok.encode("abc", false), (Ids{'a', id_of(tok, "bc")}));
  const Tokenizer tok2(make_bpe_vocab({{"bc", TokenKind::Normal}, {"ab", TokenKind::Normal}}, {"a b", "b c"}, "gpt-2"));
  EXPECT_EQ(tok2.encode("abc", false), (Ids{id_of(tok2, "ab"), 'c'}));
  const Tokenizer tok3(make_bpe_vocab({{"aa", TokenKind::Normal}}, {"a a"}, "gpt-2"));
  EXPECT_EQ(tok3.encode("aaaaa", false), (Ids{id_of(tok3, "aa"), id_of(tok3, "aa"), 'a'}));
  // Merged symbols merge on: "ab" + "c" is a merge of its own.
  const Tokenizer tok4(
      make_bpe_vocab({{"ab", TokenKind::Normal}, {"abc", TokenKind::Normal}}, {"a b", "ab c"}, "gpt-2"));
  EXPECT_EQ(tok4.encode("abc", false), (Ids{id_of(tok4, "abc")}));
}

TEST(TokenizerBpeMerges, WordsNeverMergeAcrossThePreTokenizer) {
  // "Ġ" is the byte character of ' '.
  const Tokenizer tok(make_bpe_vocab({{"a\xC4\xA0", TokenKind::Normal}, {"\xC4\xA0" "b", TokenKind::Normal}},
                                     {"a \xC4\xA0", "\xC4\xA0 b"}, "gpt-2"));
  EXPECT_EQ(tok.encode("a b", false), (Ids{'a', id_of(tok, "\xC4\xA0" "b")}));
}

TEST(TokenizerBpeMerges, IgnoreMergesEmitsWholeWordTokens) {
  // "abc" is a token that no merge builds: Llama 3's pre-tokenizer takes whole-word
  // tokens as they are (ignore_merges), GPT-2's does not.
  const auto vocab = [](const std::string& pre) {
    return make_bpe_vocab({{"abc", TokenKind::Normal}}, {}, pre);
  };
  const Tokenizer llama3(vocab("llama-bpe"));
  EXPECT_EQ(llama3.encode("abc", false), (Ids{256}));
  const Tokenizer gpt2(vocab("gpt-2"));
  EXPECT_EQ(gpt2.encode("abc", false), (Ids{'a', 'b', 'c'}));
}

TEST(TokenizerBpeSpecial, LongestSpecialTokenFirstAndUserDefinedAlways) {
  Vocab v = make_bpe_vocab({{"<|a|>", TokenKind::Control},
                            {"<|a|><|b|>", TokenKind::Control},
                            {"<tool>", TokenKind::UserDefined}},
                           {}, "gpt-2");
  v.bos = 256;
  const Tokenizer tok(v);
  EXPECT_EQ(tok.encode("x<|a|><|b|>y<|a|>", false, true), (Ids{'x', 257, 'y', 256}));
  EXPECT_EQ(tok.encode("<tool>z", false, false), (Ids{258, 'z'}));
  EXPECT_EQ(tok.encode("<tool>z", false, true), (Ids{258, 'z'}));
  EXPECT_EQ(tok.encode("<|a|>", false, false), (Ids{'<', '|', 'a', '|', '>'}));
  // add_bos is false: add_special adds nothing; with it set, BOS comes first.
  EXPECT_EQ(tok.encode("z", true), (Ids{'z'}));
  v.add_bos = true;
  v.add_eos = true;
  v.eos = 257;
  const Tokenizer with_bos(v);
  EXPECT_EQ(with_bos.encode("z", true), (Ids{256, 'z', 257}));
  EXPECT_EQ(with_bos.encode("z", false), (Ids{'z'}));
}

TEST(TokenizerBpePre, UnknownNameWarnsOnceAndFallsBack) {
  const Vocab v = make_bpe_vocab({}, {}, "no-such-pre-tokenizer-1");
  testing::internal::CaptureStderr();
  const Tokenizer a(v);
  const Tokenizer b(v);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("no-such-pre-tokenizer-1"), std::string::npos) << err;
  EXPECT_EQ(err.find("no-such-pre-tokenizer-1"), err.rfind("no-such-pre-tokenizer-1")) << "warned twice: " << err;
  EXPECT_EQ(a.decode(a.encode("Hello, world 123!", false)), "Hello, world 123!");
  const detail::PreTokenizerSpec spec = detail::pre_tokenizer_spec("no-such-pre-tokenizer-1");
  EXPECT_FALSE(spec.known);
  EXPECT_EQ(spec.kind, detail::PreTokenizerKind::Default);
  EXPECT_TRUE(detail::pre_tokenizer_spec("").known);  // missing pre: llama.cpp's 'default'
}

TEST(TokenizerBpeVocab, GgufWithoutMergesIsRejected) {
  const std::filesystem::path dir = test::temp_dir("tokenizer_bpe_no_merges");
  GgufWriter w;
  w.set_string("tokenizer.ggml.model", "gpt2");
  w.set_string_array("tokenizer.ggml.tokens", {"a", "b"});
  w.write((dir / "v.gguf").string());
  const std::unique_ptr<GgufFile> file = GgufFile::open((dir / "v.gguf").string());
  try {
    Vocab::from_gguf(*file);
    ADD_FAILURE() << "no error";
  } catch (const GgufError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.merges"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// ---------------------------------------------------------------- pre-tokenizers

std::vector<std::string> split(detail::PreTokenizerKind kind, const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view w : detail::pre_tokenize(kind, text)) out.emplace_back(w);
  return out;
}

using Words = std::vector<std::string>;
using K = detail::PreTokenizerKind;

TEST(TokenizerBpePre, Llama3AndQwen2) {
  const std::string text = "Hello, y'all! 12345 \n\n  x";
  EXPECT_EQ(split(K::Llama3, text), (Words{"Hello", ",", " y", "'all", "!", " ", "123", "45", " \n\n", " ", " x"}));
  EXPECT_EQ(split(K::Qwen2, text),
            (Words{"Hello", ",", " y", "'all", "!", " ", "1", "2", "3", "4", "5", " \n\n", " ", " x"}));
  EXPECT_EQ(split(K::Llama3, "I'M HERE'S"), (Words{"I", "'M", " HERE", "'S"}));  // (?i:'m|'s)
  EXPECT_EQ(split(K::Llama3, "(word) ...\r\n"), (Words{"(word", ")", " ...\r\n"}));
}

TEST(TokenizerBpePre, Gpt2StarcoderFalconDefault) {
  const std::string text = "Hello, y'all! 12345 \n\n  x";
  EXPECT_EQ(split(K::Gpt2, text), (Words{"Hello", ",", " y", "'", "all", "!", " 12345", " \n\n ", " x"}));
  EXPECT_EQ(split(K::Starcoder, text),
            (Words{"Hello", ",", " y", "'", "all", "!", " ", "1", "2", "3", "4", "5", " \n\n ", " x"}));
  EXPECT_EQ(split(K::Gpt2, "I'M"), (Words{"I", "'", "M"}));  // GPT-2's contractions are lower case
  EXPECT_EQ(split(K::Falcon, "a+=b 1234567"), (Words{"a", "+=", "b", " ", "123", "456", "7"}));
  EXPECT_EQ(split(K::Default, "a+=b 1234567"), (Words{"a", "+=", "b", " ", "123", "456", "7"}));
  EXPECT_EQ(split(K::Falcon, "x`+y"), (Words{"x", "`+", "y"}));  // '`' is in Falcon's punctuation class
  EXPECT_EQ(split(K::Default, "x`+y"), (Words{"x", "`", "+", "y"}));
}

TEST(TokenizerBpePre, CasedWordsBloomDeepseek) {
  EXPECT_EQ(split(K::Gpt4o, "HelloWORLD isn't 12345"), (Words{"Hello", "WORLD", " isn't", " ", "123", "45"}));
  EXPECT_EQ(split(K::Tekken, "HelloWORLD isn't 12"), (Words{"Hello", "WORLD", " isn", "'t", " ", "1", "2"}));
  EXPECT_EQ(split(K::Bloom, "Hello, world (x)"), (Words{"Hello", ",", " world", " (", "x", ")"}));
  EXPECT_EQ(split(K::Viking, "ab12"), (Words{"ab", "1", "2"}));
  EXPECT_EQ(split(K::DeepseekCoder, "if x:\n  return 42"),
            (Words{"if", " x", ":", "\n", " ", " return", " ", "4", "2"}));
  EXPECT_EQ(split(K::Deepseek3, "x.y 1234"), (Words{"x", ".y", " ", "123", "4"}));
  // DeepSeek LLM: U+3000 (an ideographic space) is whitespace, never in the punctuation
  // class that covers U+3000..3002; later regexes split pieces further (U+3001 is in
  // the CJK class).
  EXPECT_EQ(split(K::DeepseekLlm, "\xEF\xBC\x81\xE3\x80\x80"), (Words{"\xEF\xBC\x81", "\xE3\x80\x80"}));
  EXPECT_EQ(split(K::DeepseekLlm, "a\xE3\x80\x80\xE3\x80\x81"), (Words{"a", "\xE3\x80\x80", "\xE3\x80\x81"}));
}

TEST(TokenizerBpePre, InvalidUtf8IsKeptByteForByte) {
  const std::string text = "a\x80\xFF b\xE2\x96";
  std::string joined;
  for (const std::string& w : split(K::Llama3, text)) joined += w;
  EXPECT_EQ(joined, text);
  EXPECT_EQ(split(K::Gpt2, text), (Words{"a", "\x80\xFF", " b", "\xE2\x96"}));
}

TEST(TokenizerUnicode, CategoriesAndWhitespace) {
  using detail::classify;
  EXPECT_TRUE(classify('a').letter);
  EXPECT_TRUE(classify(0x00E9).letter);   // é
  EXPECT_TRUE(classify(0x4E16).letter);   // 世 (Lo)
  EXPECT_TRUE(classify('7').number);
  EXPECT_TRUE(classify(0x00BD).number);   // ½ (No)
  EXPECT_TRUE(classify(0x0661).number);   // Arabic-Indic one
  EXPECT_TRUE(classify('!').punctuation);
  EXPECT_TRUE(classify('$').symbol);
  EXPECT_TRUE(classify(0x1F999).symbol);  // 🦙 (So, outside the BMP)
  EXPECT_TRUE(classify(0x0301).mark);     // combining acute
  EXPECT_TRUE(classify(0x3000).whitespace);
  EXPECT_TRUE(classify(0x85).whitespace);
  EXPECT_FALSE(classify(0x1C).whitespace);
  EXPECT_FALSE(classify(0x200B).whitespace);  // zero width space is not White_Space
  EXPECT_EQ(detail::category_of(0x10FFFF), detail::Category::Cn);
  EXPECT_EQ(detail::category_of(0x110000), detail::Category::Cn);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(detail::codepoint_to_byte(detail::byte_to_codepoint(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(detail::byte_to_codepoint(' '), 0x120u);  // 'Ġ'
  EXPECT_EQ(detail::byte_to_codepoint('A'), static_cast<uint32_t>('A'));
}

}  // namespace
}  // namespace fafo
