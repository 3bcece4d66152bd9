// A token corpus indexed by a suffix array (Infinigram, seed 001 chapter 4): which
// suffixes of a context occur in the corpus, and what follows them there, most
// frequent first. Corpus drafting verifies those continuations as candidates.
//
// The index is one file, memory-mapped (format in src/corpus/index_format.h): a header, the
// corpus tokens (16 or 32 bits each, big-endian so that byte order is token order), and
// the suffix array over token positions (32 or 64 bits each). Opening checks the header,
// the sizes, that every token is in the vocabulary and every suffix-array entry a
// position (not that the array is sorted: a file altered to unsorted gives wrong
// continuations, which verification rejects), so a truncated or corrupt file is a clear
// IndexError, never a crash.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace fafo {

struct Vocab;

class IndexError : public std::runtime_error {
 public:
  IndexError(const std::string& file, const std::string& what);
};

// What identifies a tokenizer: a hash of its model, pre-tokenizer, every token's text
// and kind, and its special ids; and a name for messages (general.name, else the model).
struct TokenizerId {
  uint64_t fingerprint = 0;
  std::string name;
};
TokenizerId tokenizer_id(const Vocab& vocab);

// The suffix-array range [begin, end) of the suffixes that start with a pattern: end -
// begin is the pattern's count in the corpus.
struct CorpusRange {
  uint64_t begin = 0, end = 0;
  uint64_t count() const { return end - begin; }
};

// The longest suffix of a context that occurs in the corpus.
struct CorpusMatch {
  int32_t length = 0;  // tokens matched (0: not even the last token occurs)
  CorpusRange range;   // where the matched suffix occurs
};

// A continuation of a matched suffix and how often it follows it in the corpus.
struct CorpusContinuation {
  std::vector<int32_t> tokens;
  uint64_t count = 0;
  bool estimated = false;  // counted from a sample of a very large range (see continuations())
};

class CorpusIndex {
 public:
  // Maps and checks `path`. Throws IndexError naming the file and what is wrong.
  static std::shared_ptr<const CorpusIndex> open(const std::string& path);
  ~CorpusIndex();
  CorpusIndex(const CorpusIndex&) = delete;
  CorpusIndex& operator=(const CorpusIndex&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return n_tokens_; }  // corpus tokens
  int32_t token_bytes() const { return token_bytes_; }
  int32_t suffix_bytes() const { return suffix_bytes_; }
  uint64_t documents() const { return documents_; }
  int32_t n_vocab() const { return n_vocab_; }
  const TokenizerId& tokenizer() const { return tokenizer_; }
  uint64_t file_bytes() const { return file_bytes_; }

  // Throws IndexError naming both tokenizers unless `vocab` is the one the index was
  // built with.
  void check_tokenizer(const Vocab& vocab) const;

  int32_t token(uint64_t position) const;  // position < size()
  uint64_t suffix(uint64_t rank) const;    // the position of the rank-th smallest suffix

  // Where `pattern` occurs (empty: the whole array).
  CorpusRange find(std::span<const int32_t> pattern) const;
  // The longest suffix of `context` of at most `max_length` tokens that occurs.
  CorpusMatch longest_suffix(std::span<const int32_t> context, int32_t max_length) const;
  // The `k` most frequent continuations of `n` tokens after the match (fewer where the
  // corpus ends first; ties in token order). Exact while the range holds at most
  // `max_groups` distinct continuations; past that the rest of the range is sampled
  // (`max_groups` evenly spaced entries) and those counts are estimates.
  std::vector<CorpusContinuation> continuations(const CorpusMatch& match, int32_t n, int32_t k,
                                                int32_t max_groups = 32) const;

 private:
  CorpusIndex() = default;
  // -1, 0, 1: the corpus suffix at `position` against `pattern` over the pattern's length.
  int compare(uint64_t position, std::span<const int32_t> pattern) const;
  CorpusRange narrow(CorpusRange within, std::span<const int32_t> pattern) const;

  std::string path_;
  int fd_ = -1;
  const uint8_t* map_ = nullptr;
  int guard_ = -1;  // fafo/mapping_guard.h
  uint64_t file_bytes_ = 0;
  const uint8_t* tokens_ = nullptr;
  const uint8_t* suffixes_ = nullptr;
  uint64_t n_tokens_ = 0;
  uint64_t documents_ = 0;
  int32_t token_bytes_ = 2;
  int32_t suffix_bytes_ = 4;
  int32_t n_vocab_ = 0;
  TokenizerId tokenizer_;
};

// The index at `path` (`kept` itself when it is that file's; null for an empty path),
// checked to have been built with `vocab`'s tokenizer. Throws IndexError.
std::shared_ptr<const CorpusIndex> open_corpus(const std::string& path, const Vocab& vocab,
                                               const std::shared_ptr<const CorpusIndex>& kept = nullptr);

}  // namespace fafo
