// Corpus indexes (fafo/corpus_index.h): the suffix array is sorted; counts, longest
// suffixes and continuations equal a brute-force scan of the tokens; files built from
// text hold the tokenizer's tokens; every damaged or foreign file is a clear error; a
// build reports its stages' progress.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "corpus/index_format.h"
#include "fafo/corpus_index.h"
#include "fafo/corpus_index_build.h"
#include "fafo/gguf.h"
#include "fafo/tokenizer.h"
#include "progress_recorder.h"
#include "test_support.h"

namespace {

using namespace fafo;
namespace fs = std::filesystem;

// Text-like tokens: phrases repeated with noise.
std::vector<int32_t> corpus_tokens(size_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> phrases(12);
  for (auto& p : phrases) {
    p.resize(3 + rng() % 5);
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  }
  std::vector<int32_t> out;
  while (out.size() < n) {
    if (rng() % 4) {
      for (int32_t t : phrases[rng() % phrases.size()])
        if (out.size() < n) out.push_back(t);
    } else {
      out.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
    }
  }
  return out;
}

uint64_t brute_count(const std::vector<int32_t>& c, const std::vector<int32_t>& p) {
  uint64_t n = 0;
  for (size_t i = 0; i + p.size() <= c.size(); ++i)
    if (std::equal(p.begin(), p.end(), c.begin() + static_cast<std::ptrdiff_t>(i))) ++n;
  return n;
}

std::shared_ptr<const CorpusIndex> build(const std::vector<int32_t>& tokens, int32_t vocab, const std::string& name) {
  const fs::path path = test::temp_dir("corpus-" + name) / "c.fidx";
  write_corpus_index(path.string(), tokens, vocab, {42, "test tokenizer"}, 3);
  return CorpusIndex::open(path.string());
}

// The first IndexError message `f` throws, or "" when it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const IndexError& e) {
    return e.what();
  }
  return "";
}

TEST(CorpusIndex, SuffixesAreSortedAndEveryPositionAppearsOnce) {
  for (int32_t vocab : {50, 70000}) {  // 2- and 4-byte tokens
    const auto tokens = corpus_tokens(5000, vocab, 1);
    const auto ix = build(tokens, vocab, "sorted" + std::to_string(vocab));
    EXPECT_EQ(ix->size(), tokens.size());
    EXPECT_EQ(ix->token_bytes(), vocab > 65536 ? 4 : 2);
    EXPECT_EQ(ix->suffix_bytes(), 4);
    EXPECT_EQ(ix->documents(), 3u);
    EXPECT_EQ(ix->tokenizer().name, "test tokenizer");
    for (uint64_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(ix->token(i), tokens[i]);
    std::vector<bool> seen(tokens.size(), false);
    for (uint64_t r = 0; r < ix->size(); ++r) {
      const uint64_t p = ix->suffix(r);
      ASSERT_FALSE(seen[p]);
      seen[p] = true;
      if (r > 0) {
        const uint64_t q = ix->suffix(r - 1);
        ASSERT_TRUE(std::lexicographical_compare(tokens.begin() + static_cast<std::ptrdiff_t>(q), tokens.end(),
                                                 tokens.begin() + static_cast<std::ptrdiff_t>(p), tokens.end()))
            << "rank " << r;
      }
    }
    // Beyond the tokens: about 4 bytes per token for the suffix array, plus the header.
    EXPECT_LE(static_cast<double>(ix->file_bytes()) / static_cast<double>(ix->size()) - ix->token_bytes(), 4.2);
  }
}

// The 64-bit sort (used past 2^31 bytes of tokens) and 8-byte suffix entries (past 2^32
// tokens), forced on a small corpus: the same index.
TEST(CorpusIndex, TheWideSortAndWideEntriesGiveTheSameIndex) {
  const auto tokens = corpus_tokens(3000, 60, 7);
  const fs::path dir = test::temp_dir("corpus-wide");
  write_corpus_index((dir / "narrow.fidx").string(), tokens, 60, {42, "t"}, 1);
  IndexWriteOptions wide;
  wide.wide_sort = true;
  wide.wide_suffixes = true;
  write_corpus_index((dir / "wide.fidx").string(), tokens, 60, {42, "t"}, 1, wide);
  const auto a = CorpusIndex::open((dir / "narrow.fidx").string()), b = CorpusIndex::open((dir / "wide.fidx").string());
  EXPECT_EQ(a->suffix_bytes(), 4);
  EXPECT_EQ(b->suffix_bytes(), 8);
  ASSERT_EQ(a->size(), b->size());
  for (uint64_t r = 0; r < a->size(); ++r) ASSERT_EQ(a->suffix(r), b->suffix(r)) << r;
  const std::vector<int32_t> p(tokens.begin() + 100, tokens.begin() + 104);
  EXPECT_EQ(b->find(p).count(), brute_count(tokens, p));
}

TEST(CorpusIndex, CountsLongestSuffixesAndContinuationsEqualABruteForceScan) {
  const int32_t vocab = 40;
  const auto tokens = corpus_tokens(4000, vocab, 2);
  const auto ix = build(tokens, vocab, "brute");
  std::mt19937_64 rng(3);
  for (int i = 0; i < 300; ++i) {
    // Patterns taken from the corpus (found) and random ones (mostly not).
    std::vector<int32_t> p;
    const size_t len = 1 + rng() % 6;
    if (i % 2) {
      const size_t at = rng() % (tokens.size() - len);
      p.assign(tokens.begin() + static_cast<std::ptrdiff_t>(at), tokens.begin() + static_cast<std::ptrdiff_t>(at + len));
    } else {
      for (size_t k = 0; k < len; ++k) p.push_back(static_cast<int32_t>(rng() % vocab));
    }
    ASSERT_EQ(ix->find(p).count(), brute_count(tokens, p)) << "pattern " << i;
    // The longest suffix of p (as a context) that occurs.
    const CorpusMatch m = ix->longest_suffix(p, 5);
    int32_t expected = 0;
    for (int32_t L = 1; L <= std::min<int32_t>(5, static_cast<int32_t>(p.size())); ++L)
      if (brute_count(tokens, std::vector<int32_t>(p.end() - L, p.end())) > 0) expected = L;
    ASSERT_EQ(m.length, expected) << "pattern " << i;
    ASSERT_EQ(m.range.count(), brute_count(tokens, std::vector<int32_t>(p.end() - m.length, p.end())));
    // Its continuations of 3 tokens, most frequent first, with exact counts.
    std::map<std::vector<int32_t>, uint64_t> counts;
    for (size_t s = 0; s + static_cast<size_t>(m.length) <= tokens.size(); ++s) {
      if (!std::equal(p.end() - m.length, p.end(), tokens.begin() + static_cast<std::ptrdiff_t>(s))) continue;
      const size_t from = s + static_cast<size_t>(m.length);
      const std::vector<int32_t> next(tokens.begin() + static_cast<std::ptrdiff_t>(from),
                                      tokens.begin() + static_cast<std::ptrdiff_t>(std::min(tokens.size(), from + 3)));
      if (!next.empty()) ++counts[next];
    }
    const auto c = ix->continuations(m, 3, 4, /*max_groups=*/100000);
    std::vector<std::pair<uint64_t, std::vector<int32_t>>> want;
    for (auto& [k, n] : counts) want.push_back({n, k});
    std::stable_sort(want.begin(), want.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    ASSERT_EQ(c.size(), std::min<size_t>(4, want.size()));
    for (size_t k = 0; k < c.size(); ++k) {
      EXPECT_EQ(c[k].tokens, want[k].second) << "pattern " << i << " continuation " << k;
      EXPECT_EQ(c[k].count, want[k].first);
      EXPECT_FALSE(c[k].estimated);
    }
  }
}

TEST(CorpusIndex, LargeRangesAreSampledAndSayWhere) {
  const auto tokens = corpus_tokens(20000, 30, 4);
  const auto ix = build(tokens, 30, "sampled");
  const CorpusMatch m = ix->longest_suffix(std::vector<int32_t>{tokens[100]}, 1);  // one token: a large range
  ASSERT_EQ(m.length, 1);
  const auto c = ix->continuations(m, 4, 1000, /*max_groups=*/8);
  ASSERT_FALSE(c.empty());
  uint64_t total = 0;
  bool estimated = false;
  for (const auto& x : c) {
    total += x.count;
    estimated |= x.estimated;
  }
  EXPECT_TRUE(estimated);
  EXPECT_LE(total, m.range.count());
  EXPECT_GE(total + 4, m.range.count());  // every entry counted once (the corpus's last ones have no continuation)
  // Nothing to continue: no continuations.
  EXPECT_TRUE(ix->continuations(CorpusMatch{}, 4, 8).empty());
  EXPECT_TRUE(ix->continuations(m, 0, 8).empty());
}

TEST(CorpusIndex, DamagedFilesAreClearErrors) {
  const auto tokens = corpus_tokens(1000, 40, 5);
  const fs::path dir = test::temp_dir("corpus-damaged");
  const fs::path good = dir / "good.fidx";
  write_corpus_index(good.string(), tokens, 40, {42, "t"}, 1);
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto variant = [&](const std::string& name, const std::string& content) {
    const fs::path p = dir / name;
    std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
    return error_of([&] { CorpusIndex::open(p.string()); });
  };
  auto patched = [&](uint64_t at, const void* v, size_t n) {
    std::string b = bytes;
    std::memcpy(b.data() + at, v, n);
    return b;
  };
  namespace f = index_format;
  EXPECT_NE(error_of([&] { CorpusIndex::open((dir / "missing.fidx").string()); }).find("no such file"), std::string::npos);
  EXPECT_NE(variant("empty", "").find("shorter than the header"), std::string::npos);
  EXPECT_NE(variant("magic", "X" + bytes.substr(1)).find("bad magic"), std::string::npos);
  const uint32_t v2 = 2;
  EXPECT_NE(variant("version", patched(f::kVersionAt, &v2, 4)).find("format version 2"), std::string::npos);
  EXPECT_NE(variant("truncated", bytes.substr(0, bytes.size() - 100)).find("truncated"), std::string::npos);
  const uint32_t three = 3;
  EXPECT_NE(variant("width", patched(f::kTokenBytesAt, &three, 4)).find("bytes per token"), std::string::npos);
  const uint64_t many = uint64_t{1} << 40;
  EXPECT_NE(variant("count", patched(f::kTokensAt, &many, 8)).find("corrupt header"), std::string::npos);
  const uint64_t more = tokens.size() + 10;
  EXPECT_NE(variant("fit", patched(f::kTokensAt, &more, 8)).find("do not fit"), std::string::npos);
  // A token outside the vocabulary, a suffix entry past the end.
  const uint64_t tokens_at = f::align_up(f::kHeaderBytes);
  const uint8_t big[2] = {0xff, 0xff};
  EXPECT_NE(variant("token", patched(tokens_at + 10, big, 2)).find("outside the vocabulary"), std::string::npos);
  const uint64_t sa_at = f::align_up(tokens_at + tokens.size() * 2);
  const uint32_t past = 5000;
  EXPECT_NE(variant("suffix", patched(sa_at + 4 * 7, &past, 4)).find("corrupt suffix array"), std::string::npos);
  // The intact file opens.
  EXPECT_EQ(error_of([&] { CorpusIndex::open(good.string()); }), "");
  // 4-byte tokens: one with the top bit set is outside the vocabulary too.
  const fs::path wide = dir / "wide.fidx";
  write_corpus_index(wide.string(), corpus_tokens(100, 70000, 6), 70000, {42, "t"}, 1);
  std::string wb;
  {
    std::ifstream in(wide, std::ios::binary);
    wb.assign(std::istreambuf_iterator<char>(in), {});
  }
  wb[static_cast<size_t>(tokens_at + 8)] = static_cast<char>(0x80);
  EXPECT_NE(variant("wide-token", wb).find("outside the vocabulary"), std::string::npos);
}

TEST(CorpusIndex, BuiltFromTextWithAModelsTokenizer) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  FAFO_REQUIRE_SHARED(other_path, "vocab/ggml-vocab-llama-spm.gguf");
  const Tokenizer tok(Vocab::from_gguf(*GgufFile::open(model_path.string())));
  const fs::path dir = test::temp_dir("corpus-text");
  const std::string a = "Once upon a time, there was a little girl named Lily.\nShe loved to play outside.\n";
  const std::string b = "Tom had a big red ball. He liked to throw it high.\n";
  std::ofstream(dir / "a.txt") << a;
  std::ofstream(dir / "b.txt") << b;
  IndexBuildOptions o;
  o.corpus_files = {(dir / "a.txt").string(), (dir / "b.txt").string()};
  o.output = (dir / "ab.fidx").string();
  o.threads = 2;
  const IndexBuildStats s = build_corpus_index(tok, o);
  // Each file: its tokens (one chunk each), then the end-of-text token.
  std::vector<int32_t> expected = tok.encode(a, false);
  expected.push_back(tok.vocab().eos);
  const auto eb = tok.encode(b, false);
  expected.insert(expected.end(), eb.begin(), eb.end());
  expected.push_back(tok.vocab().eos);
  EXPECT_EQ(s.tokens, expected.size());
  EXPECT_EQ(s.documents, 2u);
  const auto ix = CorpusIndex::open(o.output);
  ASSERT_EQ(ix->size(), expected.size());
  for (uint64_t i = 0; i < expected.size(); ++i) ASSERT_EQ(ix->token(i), expected[i]);
  EXPECT_NO_THROW(ix->check_tokenizer(tok.vocab()));
  // Another tokenizer: an error naming both.
  const Vocab other = Vocab::from_gguf(*GgufFile::open(other_path.string()));
  const std::string why = error_of([&] { ix->check_tokenizer(other); });
  EXPECT_NE(why.find(tokenizer_id(tok.vocab()).name), std::string::npos) << why;
  EXPECT_NE(why.find(tokenizer_id(other).name), std::string::npos) << why;
  // Bad builds leave nothing behind.
  o.output = (dir / "none.fidx").string();
  o.memory_limit = 100;
  EXPECT_NE(error_of([&] { build_corpus_index(tok, o); }).find("of memory but"), std::string::npos);
  o.memory_limit = 0;
  o.corpus_files = {(dir / "missing.txt").string()};
  EXPECT_NE(error_of([&] { build_corpus_index(tok, o); }).find("no such file"), std::string::npos);
  std::ofstream(dir / "empty.txt") << "";
  o.corpus_files = {(dir / "empty.txt").string()};
  EXPECT_NE(error_of([&] { build_corpus_index(tok, o); }).find("no tokens"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir / "none.fidx"));
  for (const auto& e : fs::directory_iterator(dir)) EXPECT_EQ(e.path().string().find(".tmp"), std::string::npos);
}

TEST(CorpusIndex, ABuildReportsTheProgressOfEachStage) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const Tokenizer tok(Vocab::from_gguf(*GgufFile::open(model_path.string())));
  const fs::path dir = test::temp_dir("corpus-progress");
  std::string text;  // three 1 MB chunks
  for (int i = 0; text.size() < (3u << 20); ++i) text += "Tom saw " + std::to_string(i % 89) + " fish in the pond.\n";
  std::ofstream(dir / "a.txt") << text;
  std::ofstream(dir / "b.txt") << "A short one.\n";
  IndexBuildOptions o;
  o.corpus_files = {(dir / "a.txt").string(), (dir / "b.txt").string()};
  o.output = (dir / "p.fidx").string();
  o.threads = 2;
  test::ProgressRecorder rec;
  const IndexBuildStats s = build_corpus_index(tok, o);
  EXPECT_EQ(rec.labels(), (std::vector<std::string>{"reading the corpus", "tokenizing", "sorting suffixes", "writing the index"}));
  // Each stage ends once, its count at its total.
  auto last = [&](const std::string& label) {
    const auto r = rec.of(label);
    EXPECT_FALSE(r.empty()) << label;
    if (r.empty()) return test::ProgressRecorder::Report{};
    for (size_t i = 0; i + 1 < r.size(); ++i) EXPECT_FALSE(r[i].finished) << label;
    EXPECT_TRUE(r.back().finished) << label;
    return r.back();
  };
  const auto reading = last("reading the corpus"), tokenizing = last("tokenizing"), sorting = last("sorting suffixes"),
             writing = last("writing the index");
  EXPECT_EQ(reading.unit, ProgressUnit::Bytes);
  EXPECT_EQ(reading.done, s.text_bytes);
  EXPECT_EQ(reading.total, s.text_bytes);
  EXPECT_EQ(tokenizing.unit, ProgressUnit::Bytes);
  EXPECT_EQ(tokenizing.done, s.text_bytes);
  EXPECT_EQ(tokenizing.total, s.text_bytes);
  char tokens[32];  // without the end-of-text tokens, which are added after tokenizing
  std::snprintf(tokens, sizeof tokens, "%.2f M tokens", static_cast<double>(s.tokens - s.documents) / 1e6);
  EXPECT_EQ(tokenizing.detail, tokens);
  EXPECT_EQ(sorting.unit, ProgressUnit::Tokens);
  EXPECT_EQ(sorting.done, s.tokens);
  EXPECT_EQ(writing.unit, ProgressUnit::Bytes);
  EXPECT_EQ(writing.done, s.file_bytes);
  EXPECT_EQ(writing.total, s.file_bytes);
  EXPECT_EQ(fs::file_size(o.output), s.file_bytes);
  // The tokenizing count only grows.
  const auto steps = rec.of("tokenizing");
  for (size_t i = 1; i < steps.size(); ++i) EXPECT_GE(steps[i].done, steps[i - 1].done);
}

TEST(CorpusIndex, ChunksOfALongFileTokenizeAsTheWholeFile) {
  // Chunks start at line ends and continue without the space prefix: for text whose
  // tokens never span a line end, the same tokens as the whole file.
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const Tokenizer tok(Vocab::from_gguf(*GgufFile::open(model_path.string())));
  const fs::path dir = test::temp_dir("corpus-chunks");
  std::string text;
  for (int i = 0; text.size() < (3u << 20); ++i) text += "Lily saw " + std::to_string(i % 97) + " birds in the sky.\n";
  std::ofstream(dir / "long.txt") << text;
  IndexBuildOptions o;
  o.corpus_files = {(dir / "long.txt").string()};
  o.output = (dir / "long.fidx").string();
  build_corpus_index(tok, o);
  std::vector<int32_t> expected = tok.encode(text, false);
  expected.push_back(tok.vocab().eos);
  const auto ix = CorpusIndex::open(o.output);
  ASSERT_EQ(ix->size(), expected.size());
  for (uint64_t i = 0; i < expected.size(); i += 997) ASSERT_EQ(ix->token(i), expected[i]) << i;
}

}  // namespace
