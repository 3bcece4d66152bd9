// Building a corpus index file (fafo/corpus_index_build.h).
#include <divsufsort.h>
#include <divsufsort64.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <system_error>
#include <thread>

#include "corpus/index_format.h"
#include "fafo/corpus_index_build.h"
#include "fafo/progress.h"
#include "fafo/tokenizer.h"

namespace fafo {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string gib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw IndexError(path, "no such file");
  if (!std::filesystem::is_regular_file(path, ec)) throw IndexError(path, "not a regular file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IndexError(path, "cannot be read");
  std::string text;
  in.seekg(0, std::ios::end);
  text.resize(static_cast<size_t>(in.tellg()));
  in.seekg(0);
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (!in) throw IndexError(path, "cannot be read");
  return text;
}

// A piece of one file to tokenize on its own.
struct Chunk {
  size_t file = 0;
  size_t begin = 0, end = 0;
  bool first = false;  // the file's first chunk (tokenized with the space prefix)
  std::vector<int32_t> tokens;
};

// Cuts `text` into chunks of about `target` bytes, each ending at a line end.
void cut(size_t file, const std::string& text, size_t target, std::vector<Chunk>& out) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = std::min(text.size(), begin + target);
    if (end < text.size()) {
      const size_t nl = text.find('\n', end);
      end = nl == std::string::npos ? text.size() : nl + 1;
    }
    out.push_back({file, begin, end, begin == 0, {}});
    begin = end;
  }
}

// Writes n bytes, 64 MiB at a time, each counted in `progress`.
void write_bytes(std::ofstream& out, const void* data, size_t n, ProgressTask& progress) {
  constexpr size_t kPiece = size_t{64} << 20;
  const char* bytes = static_cast<const char*>(data);
  for (size_t at = 0; at < n && out; at += kPiece) {
    const size_t piece = std::min(kPiece, n - at);
    out.write(bytes + at, static_cast<std::streamsize>(piece));
    progress.advance(piece);
  }
}

// Runs `work`; where `task` is reported, on another thread while this one ticks the task
// every 0.1 s, so that a terminal shows the time passing in a step that reports nothing
// (libdivsufsort's sort).
void run_ticking(ProgressTask& task, const std::function<void()>& work) {
  std::future<void> running;
  if (task.reported()) {
    try {
      running = std::async(std::launch::async, work);
    } catch (const std::system_error&) {
      // No thread to spare: the work runs here, without ticks.
    }
  }
  if (!running.valid()) return work();
  while (running.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) task.tick();
  running.get();
}

std::string millions(uint64_t tokens) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f M tokens", static_cast<double>(tokens) / 1e6);
  return buf;
}

template <typename T>
void put(uint8_t* header, uint64_t at, T v) {
  std::memcpy(header + at, &v, sizeof v);
}

}  // namespace

uint64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

void write_corpus_index(const std::string& output, std::span<const int32_t> tokens, int32_t n_vocab, const TokenizerId& id,
                        uint64_t documents, const IndexWriteOptions& options, IndexBuildStats* stats) {
  namespace f = index_format;
  const uint64_t n = tokens.size();
  if (n == 0) throw IndexError(output, "the corpus has no tokens");
  if (n_vocab <= 0) throw IndexError(output, "no vocabulary");
  const uint32_t tb = n_vocab <= 65536 ? 2 : 4;
  const uint32_t sb = n <= 0xffffffffull && !options.wide_suffixes ? 4 : 8;
  const uint64_t text_bytes = n * tb;
  const bool wide = text_bytes > static_cast<uint64_t>(INT32_MAX) || options.wide_sort;
  // Sorting needs the token bytes and a suffix entry per byte; the tokens and the kept
  // entries are held too.
  const uint64_t need = text_bytes + text_bytes * (wide ? 8 : 4) + n * sizeof(int32_t) + n * sb;
  const uint64_t have = options.memory_limit ? options.memory_limit : available_memory();
  if (have && need > have)
    throw IndexError(output, "the corpus has " + std::to_string(n) + " tokens: sorting them needs " + gib(need) +
                                 " of memory but " + gib(have) + " are available; index a smaller corpus or split it");
  for (int32_t t : tokens)
    if (t < 0 || t >= n_vocab) throw IndexError(output, "token " + std::to_string(t) + " is outside the vocabulary");

  // The tokens as big-endian bytes: byte order is then token order.
  const Clock::time_point t0 = Clock::now();
  ProgressTask sorting("sorting suffixes", 0, ProgressUnit::Tokens);
  sorting.set_done(n);
  std::vector<uint8_t> text(text_bytes);
  for (uint64_t i = 0; i < n; ++i) {
    const uint32_t t = static_cast<uint32_t>(tokens[i]);
    uint8_t* p = text.data() + i * tb;
    if (tb == 2) {
      p[0] = static_cast<uint8_t>(t >> 8), p[1] = static_cast<uint8_t>(t);
    } else {
      p[0] = static_cast<uint8_t>(t >> 24), p[1] = static_cast<uint8_t>(t >> 16), p[2] = static_cast<uint8_t>(t >> 8),
      p[3] = static_cast<uint8_t>(t);
    }
  }
  // Sort every byte suffix, keep those at token boundaries (in order: the token order).
  std::vector<uint8_t> suffixes(n * sb);
  uint64_t kept = 0;
  auto keep = [&](uint64_t byte_offset) {
    if (byte_offset % tb) return;
    const uint64_t position = byte_offset / tb;
    if (sb == 4) {
      const uint32_t v = static_cast<uint32_t>(position);
      std::memcpy(suffixes.data() + kept * 4, &v, 4);
    } else {
      std::memcpy(suffixes.data() + kept * 8, &position, 8);
    }
    ++kept;
  };
  run_ticking(sorting, [&] {
    if (!wide) {
      std::vector<saidx_t> sa(text_bytes);
      if (divsufsort(text.data(), sa.data(), static_cast<saidx_t>(text_bytes)) != 0)
        throw IndexError(output, "suffix sorting failed (libdivsufsort)");
      for (saidx_t s : sa) keep(static_cast<uint64_t>(s));
    } else {
      std::vector<saidx64_t> sa(text_bytes);
      if (divsufsort64(text.data(), sa.data(), static_cast<saidx64_t>(text_bytes)) != 0)
        throw IndexError(output, "suffix sorting failed (libdivsufsort64)");
      for (saidx64_t s : sa) keep(static_cast<uint64_t>(s));
    }
  });
  if (kept != n) throw IndexError(output, "suffix sorting lost entries");
  sorting.finish();
  if (stats) stats->sort_seconds = seconds_since(t0);

  // The file, through a temporary renamed into place.
  const Clock::time_point t1 = Clock::now();
  const uint64_t tokens_at = f::align_up(f::kHeaderBytes);
  const uint64_t suffixes_at = f::align_up(tokens_at + text_bytes);
  const uint64_t file_bytes = suffixes_at + n * sb;
  uint8_t header[f::kHeaderBytes] = {};
  std::memcpy(header, f::kMagic, sizeof f::kMagic);
  put<uint32_t>(header, f::kVersionAt, f::kVersion);
  put<uint32_t>(header, f::kTokenBytesAt, tb);
  put<uint32_t>(header, f::kSuffixBytesAt, sb);
  put<uint32_t>(header, f::kVocabAt, static_cast<uint32_t>(n_vocab));
  put<uint64_t>(header, f::kTokensAt, n);
  put<uint64_t>(header, f::kDocumentsAt, documents);
  put<uint64_t>(header, f::kFingerprintAt, id.fingerprint);
  put<uint64_t>(header, f::kTokensOffsetAt, tokens_at);
  put<uint64_t>(header, f::kSuffixesOffsetAt, suffixes_at);
  put<uint64_t>(header, f::kFileBytesAt, file_bytes);
  std::memcpy(header + f::kNameAt, id.name.data(), std::min<size_t>(id.name.size(), f::kNameBytes - 1));
  const std::string temporary = output + ".tmp" + std::to_string(::getpid());
  ProgressTask writing("writing the index", file_bytes, ProgressUnit::Bytes);
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw IndexError(output, "cannot be written (" + temporary + ": " + std::strerror(errno) + ")");
    const std::vector<uint8_t> zeros(f::kAlign, 0);
    write_bytes(out, header, sizeof header, writing);
    write_bytes(out, zeros.data(), tokens_at - f::kHeaderBytes, writing);
    write_bytes(out, text.data(), text.size(), writing);
    write_bytes(out, zeros.data(), suffixes_at - tokens_at - text_bytes, writing);
    write_bytes(out, suffixes.data(), suffixes.size(), writing);
    out.flush();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(temporary, ec);
      throw IndexError(output, "cannot be written (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(temporary, output, ec);
  if (ec) {
    std::filesystem::remove(temporary, ec);
    throw IndexError(output, "cannot be written: " + ec.message());
  }
  writing.finish();
  if (stats) {
    stats->write_seconds = seconds_since(t1);
    stats->file_bytes = file_bytes;
    stats->tokens = n;
    stats->documents = documents;
  }
}

IndexBuildStats build_corpus_index(const Tokenizer& tokenizer, const IndexBuildOptions& options) {
  if (options.corpus_files.empty()) throw IndexError(options.output, "no corpus files");
  if (options.output.empty()) throw IndexError("(no output)", "no output file named");
  IndexBuildStats stats;
  const Clock::time_point t0 = Clock::now();
  std::vector<std::string> texts;
  std::vector<Chunk> chunks;
  {
    uint64_t expected = 0;  // the files' sizes now (one that cannot be examined counts 0: read_file says why)
    for (const std::string& path : options.corpus_files) {
      std::error_code ec;
      const uintmax_t size = std::filesystem::file_size(path, ec);
      if (!ec) expected += size;
    }
    ProgressTask reading("reading the corpus", expected, ProgressUnit::Bytes);
    for (size_t f = 0; f < options.corpus_files.size(); ++f) {
      texts.push_back(read_file(options.corpus_files[f]));
      stats.text_bytes += texts.back().size();
      reading.advance(texts.back().size());
      cut(f, texts.back(), 1 << 20, chunks);
    }
  }
  ProgressTask tokenizing("tokenizing", stats.text_bytes, ProgressUnit::Bytes);
  // Chunks after a file's first continue its text: no space prefix.
  Vocab rest_vocab = tokenizer.vocab();
  rest_vocab.add_space_prefix = false;
  const Tokenizer rest(std::move(rest_vocab));
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes_done{0}, tokens_done{0};
  std::exception_ptr failure;
  std::atomic<bool> failed{false};
  auto work = [&] {
    try {
      for (size_t c; !failed && (c = next.fetch_add(1)) < chunks.size();) {
        Chunk& ch = chunks[c];
        const std::string_view piece(texts[ch.file].data() + ch.begin, ch.end - ch.begin);
        ch.tokens = (ch.first ? tokenizer : rest).encode(piece, /*add_special=*/false);
        bytes_done += piece.size();
        tokens_done += ch.tokens.size();
      }
    } catch (...) {
      if (!failed.exchange(true)) failure = std::current_exception();
    }
  };
  const unsigned threads = options.threads > 0 ? static_cast<unsigned>(options.threads)
                                               : std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::jthread> pool;  // joined however this scope is left
  try {
    for (unsigned i = 0; i < threads; ++i) pool.emplace_back(work);
  } catch (const std::system_error&) {
    if (pool.empty()) throw;  // not even one thread: nothing runs the work
  }
  while (tokenizing.reported() && next.load() < chunks.size() && !failed) {
    tokenizing.set_detail(millions(tokens_done.load()));
    tokenizing.set_done(bytes_done.load());
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (std::jthread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
  tokenizing.set_detail(millions(tokens_done.load()));
  tokenizing.set_done(stats.text_bytes);
  tokenizing.finish();
  // One document per file, each followed by the end-of-text token when the vocabulary
  // has one (an empty file has no chunk, so nothing at all).
  const int32_t eos = tokenizer.vocab().eos;
  std::vector<int32_t> tokens;
  tokens.reserve(tokens_done.load() + options.corpus_files.size());
  for (size_t c = 0; c < chunks.size(); ++c) {
    tokens.insert(tokens.end(), chunks[c].tokens.begin(), chunks[c].tokens.end());
    std::vector<int32_t>().swap(chunks[c].tokens);
    if (eos >= 0 && (c + 1 == chunks.size() || chunks[c + 1].file != chunks[c].file)) tokens.push_back(eos);
  }
  std::vector<std::string>().swap(texts);
  stats.tokenize_seconds = seconds_since(t0);
  write_corpus_index(options.output, tokens, tokenizer.vocab().size(), tokenizer_id(tokenizer.vocab()),
                     options.corpus_files.size(), IndexWriteOptions{options.memory_limit}, &stats);
  return stats;
}

}  // namespace fafo
