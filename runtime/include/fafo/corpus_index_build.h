// Building a corpus index (fafo/corpus_index.h): tokenizing text files with a model's
// tokenizer, sorting the suffixes (libdivsufsort), writing the file. Each stage is a wait
// reported to the process's progress sink (fafo/progress.h): "reading the corpus" and
// "tokenizing" (bytes of text; the tokens so far as the detail), "sorting suffixes" (the
// token count; ticked every 0.1 s as the sort runs on a thread of its own), "writing the
// index" (bytes of the file).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fafo/corpus_index.h"

namespace fafo {

class Tokenizer;

struct IndexBuildOptions {
  std::vector<std::string> corpus_files;  // each one document, followed by the end-of-text token (if any)
  std::string output;
  int threads = 0;                        // tokenizing threads; 0: every hardware thread
  // Memory the build may use; 0: what the machine has available now (MemAvailable).
  // A corpus that needs more is refused before sorting, with the sizes.
  uint64_t memory_limit = 0;
};

struct IndexBuildStats {
  uint64_t text_bytes = 0, tokens = 0, documents = 0, file_bytes = 0;
  double tokenize_seconds = 0, sort_seconds = 0, write_seconds = 0;
};

// Builds options.output from the corpus files. Text is cut into chunks at line ends and
// the chunks are tokenized in parallel, each after the first of a file without the
// tokenizer's space prefix: the tokens equal the whole file's except where a token would
// span a line end. Throws IndexError (a file that cannot be read, not enough memory,
// no tokens, a file that cannot be written) with nothing left behind at `output`.
IndexBuildStats build_corpus_index(const Tokenizer& tokenizer, const IndexBuildOptions& options);

struct IndexWriteOptions {
  uint64_t memory_limit = 0;  // as IndexBuildOptions::memory_limit
  // The 64-bit sort and 8-byte suffix entries are used past 2^31 bytes of tokens and 2^32
  // tokens; these force them on small corpora (tests).
  bool wide_sort = false;
  bool wide_suffixes = false;
};

// Writes an index of `tokens` (each < n_vocab) built with tokenizer `id`: sorts the
// suffixes and writes the file through a temporary that is renamed into place.
// `documents` is recorded in the header. Throws IndexError.
void write_corpus_index(const std::string& output, std::span<const int32_t> tokens, int32_t n_vocab,
                        const TokenizerId& id, uint64_t documents, const IndexWriteOptions& options = {},
                        IndexBuildStats* stats = nullptr);

// Memory the machine has available now (MemAvailable), 0 when unknown.
uint64_t available_memory();

}  // namespace fafo
