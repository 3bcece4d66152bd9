// The layout of a corpus index file (.fidx), shared by the reader and the builder.
//
//   offset  size  field
//        0     8  magic "FAFOIDX\0"
//        8     4  format version (kIndexVersion)
//       12     4  bytes per token: 2 or 4
//       16     4  bytes per suffix-array entry: 4 or 8
//       20     4  vocabulary size of the tokenizer it was built with
//       24     8  corpus tokens n
//       32     8  documents (corpus files; each non-empty one followed by the end-of-text
//                 token when the vocabulary has one)
//       40     8  tokenizer fingerprint (tokenizer_id)
//       48     8  offset of the tokens (a multiple of 64)
//       56     8  offset of the suffix array (a multiple of 64)
//       64     8  file size
//       72   120  tokenizer name, NUL-padded
//      192    64  zero
//
// Integers are little-endian; the tokens are big-endian, so that comparing suffixes
// byte by byte compares them token by token (the suffix array is built over the bytes).
// The suffix array holds the n token positions in the order of their suffixes.
#pragma once

#include <cstdint>

namespace fafo::index_format {

inline constexpr char kMagic[8] = {'F', 'A', 'F', 'O', 'I', 'D', 'X', '\0'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint64_t kHeaderBytes = 256;
inline constexpr uint64_t kAlign = 64;
inline constexpr uint64_t kNameBytes = 120;

struct Header {
  uint32_t version = kVersion;
  uint32_t token_bytes = 2;
  uint32_t suffix_bytes = 4;
  uint32_t n_vocab = 0;
  uint64_t n_tokens = 0;
  uint64_t documents = 0;
  uint64_t fingerprint = 0;
  uint64_t tokens_offset = 0;
  uint64_t suffixes_offset = 0;
  uint64_t file_bytes = 0;
  char name[kNameBytes] = {};
};

inline uint64_t align_up(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Field offsets in the file.
inline constexpr uint64_t kVersionAt = 8, kTokenBytesAt = 12, kSuffixBytesAt = 16, kVocabAt = 20, kTokensAt = 24,
                          kDocumentsAt = 32, kFingerprintAt = 40, kTokensOffsetAt = 48, kSuffixesOffsetAt = 56,
                          kFileBytesAt = 64, kNameAt = 72;

}  // namespace fafo::index_format
