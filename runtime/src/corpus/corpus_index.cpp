// Opening, checking and searching a corpus index (fafo/corpus_index.h).
#include "fafo/corpus_index.h"
#include "fafo/mapping_guard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <map>

#include "corpus/index_format.h"
#include "fafo/tokenizer.h"

namespace fafo {

static_assert(std::endian::native == std::endian::little, "the index format is read as little-endian");

namespace {

uint64_t fnv(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

template <typename T>
T read_at(const uint8_t* map, uint64_t offset) {
  T v;
  std::memcpy(&v, map + offset, sizeof v);
  return v;
}

std::string size_text(uint64_t bytes) { return std::to_string(bytes) + " bytes"; }

}  // namespace

IndexError::IndexError(const std::string& file, const std::string& what) : std::runtime_error(file + ": " + what) {}

TokenizerId tokenizer_id(const Vocab& vocab) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto add_string = [&](const std::string& s) {
    const uint64_t n = s.size();
    h = fnv(h, &n, sizeof n);
    h = fnv(h, s.data(), s.size());
  };
  add_string(vocab.model);
  add_string(vocab.pre);
  const uint64_t n = vocab.tokens.size();
  h = fnv(h, &n, sizeof n);
  for (size_t i = 0; i < vocab.tokens.size(); ++i) {
    add_string(vocab.tokens[i]);
    const int32_t kind = i < vocab.kinds.size() ? static_cast<int32_t>(vocab.kinds[i]) : 1;
    h = fnv(h, &kind, sizeof kind);
  }
  for (int32_t id : {vocab.bos, vocab.eos, vocab.unk, vocab.eot})
    h = fnv(h, &id, sizeof id);
  const bool flags[] = {vocab.add_bos, vocab.add_eos, vocab.add_space_prefix};
  h = fnv(h, flags, sizeof flags);
  return {h, vocab.name.empty() ? vocab.model + " tokenizer" : vocab.name};
}

std::shared_ptr<const CorpusIndex> CorpusIndex::open(const std::string& path) {
  namespace f = index_format;
  std::shared_ptr<CorpusIndex> ix(new CorpusIndex());
  ix->path_ = path;
  ix->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // never blocks on a FIFO
  if (ix->fd_ < 0) throw IndexError(path, errno == ENOENT ? "no such file" : std::strerror(errno));
  struct stat st {};
  if (::fstat(ix->fd_, &st) != 0) throw IndexError(path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw IndexError(path, "not a file");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < f::kHeaderBytes)
    throw IndexError(path, "not a fafo corpus index: " + size_text(size) + ", shorter than the header (" +
                               size_text(f::kHeaderBytes) + ")");
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, ix->fd_, 0);
  if (m == MAP_FAILED) throw IndexError(path, std::string("cannot map the file: ") + std::strerror(errno));
  ix->map_ = static_cast<const uint8_t*>(m);
  ix->file_bytes_ = size;
  // An index that shrinks under us reads as zeros instead of killing the process: its
  // continuations are guesses that decoding verifies, so zeros cost speed, not text.
  ix->guard_ = guard_mapping(m, size);
  const uint8_t* map = ix->map_;
  if (std::memcmp(map, f::kMagic, sizeof f::kMagic) != 0) throw IndexError(path, "not a fafo corpus index (bad magic)");
  const uint32_t version = read_at<uint32_t>(map, f::kVersionAt);
  if (version != f::kVersion)
    throw IndexError(path, "index format version " + std::to_string(version) + ", but this fafo reads version " +
                               std::to_string(f::kVersion) + "; build the index again with `fafo index build`");
  const uint32_t tb = read_at<uint32_t>(map, f::kTokenBytesAt), sb = read_at<uint32_t>(map, f::kSuffixBytesAt);
  if (tb != 2 && tb != 4) throw IndexError(path, "corrupt header: " + std::to_string(tb) + " bytes per token (2 or 4)");
  if (sb != 4 && sb != 8)
    throw IndexError(path, "corrupt header: " + std::to_string(sb) + " bytes per suffix-array entry (4 or 8)");
  ix->token_bytes_ = static_cast<int32_t>(tb);
  ix->suffix_bytes_ = static_cast<int32_t>(sb);
  const uint32_t n_vocab = read_at<uint32_t>(map, f::kVocabAt);
  if (n_vocab == 0 || n_vocab > (1u << 31) - 1 || (tb == 2 && n_vocab > 65536))
    throw IndexError(path, "corrupt header: vocabulary of " + std::to_string(n_vocab) + " tokens stored in " +
                               std::to_string(tb) + " bytes each");
  ix->n_vocab_ = static_cast<int32_t>(n_vocab);
  const uint64_t n = read_at<uint64_t>(map, f::kTokensAt);
  ix->n_tokens_ = n;
  ix->documents_ = read_at<uint64_t>(map, f::kDocumentsAt);
  ix->tokenizer_.fingerprint = read_at<uint64_t>(map, f::kFingerprintAt);
  const char* name = reinterpret_cast<const char*>(map + f::kNameAt);
  ix->tokenizer_.name.assign(name, strnlen(name, f::kNameBytes));
  const uint64_t tokens_at = read_at<uint64_t>(map, f::kTokensOffsetAt);
  const uint64_t suffixes_at = read_at<uint64_t>(map, f::kSuffixesOffsetAt);
  const uint64_t recorded = read_at<uint64_t>(map, f::kFileBytesAt);
  if (recorded != size)
    throw IndexError(path, "the file has " + size_text(size) + " but its header says " + size_text(recorded) +
                               (size < recorded ? " (truncated?)" : ""));
  // Every region inside the file, without overflow: n is bounded by the file size first.
  if (n == 0 || n > size) throw IndexError(path, "corrupt header: " + std::to_string(n) + " tokens");
  if (tokens_at < f::kHeaderBytes || tokens_at % f::kAlign || tokens_at > size || n * tb > size - tokens_at ||
      suffixes_at < tokens_at + n * tb || suffixes_at % f::kAlign || suffixes_at > size || n * sb != size - suffixes_at)
    throw IndexError(path, "corrupt header: the tokens (at " + std::to_string(tokens_at) + ") and the suffix array (at " +
                               std::to_string(suffixes_at) + ") of " + std::to_string(n) + " tokens do not fit the file's " +
                               size_text(size));
  if (sb == 4 && n > 0xffffffffull) throw IndexError(path, "corrupt header: too many tokens for 4-byte suffix entries");
  ix->tokens_ = map + tokens_at;
  ix->suffixes_ = map + suffixes_at;
  // Every token in the vocabulary and every suffix entry a position: lookups then never
  // read outside the file.
  for (uint64_t i = 0; i < n; ++i)
    if (static_cast<uint32_t>(ix->token(i)) >= n_vocab)
      throw IndexError(path, "corrupt tokens: token " + std::to_string(i) + " is " +
                                 std::to_string(static_cast<uint32_t>(ix->token(i))) +
                                 ", outside the vocabulary of " + std::to_string(n_vocab));
  for (uint64_t r = 0; r < n; ++r)
    if (ix->suffix(r) >= n)
      throw IndexError(path, "corrupt suffix array: entry " + std::to_string(r) + " is " + std::to_string(ix->suffix(r)) +
                                 ", past the " + std::to_string(n) + " tokens");
  ::madvise(const_cast<uint8_t*>(ix->map_), size, MADV_RANDOM);
  return ix;
}

CorpusIndex::~CorpusIndex() {
  unguard_mapping(guard_);
  if (map_) ::munmap(const_cast<uint8_t*>(map_), file_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

void CorpusIndex::check_tokenizer(const Vocab& vocab) const {
  const TokenizerId id = tokenizer_id(vocab);
  if (id.fingerprint != tokenizer_.fingerprint || vocab.size() != n_vocab_) {
    char a[32], b[32];
    std::snprintf(a, sizeof a, "%016llx", static_cast<unsigned long long>(tokenizer_.fingerprint));
    std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(id.fingerprint));
    throw IndexError(path_, "built with the tokenizer of '" + tokenizer_.name + "' (" + std::to_string(n_vocab_) +
                                " tokens, fingerprint " + a + "), but the model's tokenizer is '" + id.name + "' (" +
                                std::to_string(vocab.size()) + " tokens, fingerprint " + b +
                                "); build an index with this model: fafo index build -m MODEL ...");
  }
}

std::shared_ptr<const CorpusIndex> open_corpus(const std::string& path, const Vocab& vocab,
                                               const std::shared_ptr<const CorpusIndex>& kept) {
  if (path.empty()) return nullptr;
  std::shared_ptr<const CorpusIndex> index = kept && kept->path() == path ? kept : CorpusIndex::open(path);
  index->check_tokenizer(vocab);
  return index;
}

int32_t CorpusIndex::token(uint64_t position) const {
  const uint8_t* p = tokens_ + position * static_cast<uint64_t>(token_bytes_);
  if (token_bytes_ == 2) return static_cast<int32_t>((uint32_t{p[0]} << 8) | p[1]);
  return static_cast<int32_t>((uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3]);
}

uint64_t CorpusIndex::suffix(uint64_t rank) const {
  if (suffix_bytes_ == 4) return read_at<uint32_t>(suffixes_, rank * 4);
  return read_at<uint64_t>(suffixes_, rank * 8);
}

int CorpusIndex::compare(uint64_t position, std::span<const int32_t> pattern) const {
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (position + i >= n_tokens_) return -1;  // the suffix ends first: it sorts before
    const int32_t t = token(position + i);
    if (t != pattern[i]) return t < pattern[i] ? -1 : 1;
  }
  return 0;
}

CorpusRange CorpusIndex::narrow(CorpusRange within, std::span<const int32_t> pattern) const {
  // The first rank whose suffix is not below the pattern, then the first above it.
  uint64_t lo = within.begin, hi = within.end;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    const int c = compare(suffix(mid), pattern);
    if (c < 0) {
      lo = mid + 1;
    } else if (c > 0) {
      hi = mid;
    } else {
      // A match: the lower bound lies in [lo, mid], the upper in (mid, hi].
      uint64_t a = lo, b = mid;
      while (a < b) {
        const uint64_t m = a + (b - a) / 2;
        if (compare(suffix(m), pattern) < 0) a = m + 1;
        else b = m;
      }
      uint64_t c2 = mid + 1, d = hi;
      while (c2 < d) {
        const uint64_t m = c2 + (d - c2) / 2;
        if (compare(suffix(m), pattern) > 0) d = m;
        else c2 = m + 1;
      }
      return {a, c2};
    }
  }
  return {lo, lo};
}

CorpusRange CorpusIndex::find(std::span<const int32_t> pattern) const { return narrow({0, n_tokens_}, pattern); }

CorpusMatch CorpusIndex::longest_suffix(std::span<const int32_t> context, int32_t max_length) const {
  const int32_t most = std::min<int32_t>(std::max(max_length, 0), static_cast<int32_t>(context.size()));
  // Occurrence is monotone in the length (a suffix occurs wherever a longer one does):
  // binary search for the longest length that occurs.
  CorpusMatch best;
  best.range = {0, n_tokens_};
  int32_t lo = 1, hi = most;
  while (lo <= hi) {
    const int32_t L = lo + (hi - lo) / 2;
    const CorpusRange r = find(context.last(static_cast<size_t>(L)));
    if (r.count() > 0) {
      best = {L, r};
      lo = L + 1;
    } else {
      hi = L - 1;
    }
  }
  return best;
}

std::vector<CorpusContinuation> CorpusIndex::continuations(const CorpusMatch& match, int32_t n, int32_t k,
                                                           int32_t max_groups) const {
  std::vector<CorpusContinuation> out;
  if (n <= 0 || k <= 0 || match.range.count() == 0) return out;
  const uint64_t skip = static_cast<uint64_t>(match.length);
  // The continuation after the suffix of rank r (shorter where the corpus ends).
  auto continuation = [&](uint64_t r, std::vector<int32_t>& into) {
    into.clear();
    const uint64_t start = suffix(r) + skip;
    for (uint64_t p = start; p < n_tokens_ && p < start + static_cast<uint64_t>(n); ++p) into.push_back(token(p));
  };
  auto same = [&](uint64_t r, const std::vector<int32_t>& key) {
    const uint64_t start = suffix(r) + skip;
    const uint64_t len = std::min<uint64_t>(static_cast<uint64_t>(n), n_tokens_ > start ? n_tokens_ - start : 0);
    if (len != key.size()) return false;
    for (uint64_t i = 0; i < len; ++i)
      if (token(start + i) != key[i]) return false;
    return true;
  };
  // Suffixes in the range share the matched tokens, so they are sorted by what follows:
  // equal continuations are runs. Walk the runs (galloping to each run's end).
  std::map<std::vector<int32_t>, std::pair<uint64_t, bool>> counts;
  std::vector<int32_t> key;
  uint64_t r = match.range.begin;
  const uint64_t end = match.range.end;
  int32_t groups = 0;
  while (r < end && groups < std::max(max_groups, 1)) {
    continuation(r, key);
    uint64_t inside = r, step = 1, probe = r + 1;
    while (probe < end && same(probe, key)) {
      inside = probe;
      step *= 2;
      probe = r + step;
    }
    uint64_t a = inside + 1, b = std::min(probe, end);  // the run ends in [a, b]
    while (a < b) {
      const uint64_t m = a + (b - a) / 2;
      if (same(m, key)) a = m + 1;
      else b = m;
    }
    if (!key.empty()) counts[key].first += a - r;
    r = a;
    ++groups;
  }
  if (r < end) {
    // Too many distinct continuations to walk: sample the rest evenly.
    const uint64_t rest = end - r, samples = std::min<uint64_t>(rest, static_cast<uint64_t>(std::max(max_groups, 1)));
    for (uint64_t j = 0; j < samples; ++j) {
      continuation(r + j * rest / samples, key);
      if (key.empty()) continue;
      auto& c = counts[key];
      c.first += (rest * (j + 1)) / samples - (rest * j) / samples;
      c.second = true;
    }
  }
  for (auto& [tokens, c] : counts) out.push_back({tokens, c.first, c.second});
  std::stable_sort(out.begin(), out.end(), [](const CorpusContinuation& x, const CorpusContinuation& y) { return x.count > y.count; });
  if (out.size() > static_cast<size_t>(k)) out.resize(static_cast<size_t>(k));
  return out;
}

}  // namespace fafo
