// Lookup structures over a Vocab shared by the encoder and the detokenizer (internal).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "fafo/tokenizer.h"

namespace fafo::detail {

class VocabIndex {
 public:
  // Validates `vocab` (std::invalid_argument when inconsistent) and indexes it. The index
  // keeps views into vocab.tokens: `vocab` must outlive it and must not change.
  explicit VocabIndex(const Vocab& vocab);

  const Vocab& vocab() const { return vocab_; }
  // The id whose text is exactly `text`, or -1. With duplicate texts the last id wins
  // (as llama.cpp's token_to_id map).
  int32_t find(std::string_view text) const;
  float score(int32_t id) const { return vocab_.scores.empty() ? 0.0f : vocab_.scores[static_cast<size_t>(id)]; }
  TokenKind kind(int32_t id) const { return vocab_.kinds[static_cast<size_t>(id)]; }
  // The token for one raw byte: "<0xXX>" if present, else the one-byte text itself, else -1.
  int32_t byte_token(uint8_t byte) const { return byte_tokens_[byte]; }
  // Bytes of the longest token text.
  size_t max_token_length() const { return max_token_length_; }

 private:
  const Vocab& vocab_;
  std::unordered_map<std::string_view, int32_t> ids_;
  std::array<int32_t, 256> byte_tokens_{};
  size_t max_token_length_ = 0;
};

// Replaces every ' ' with U+2581 '▁' (SentencePiece's visible space).
std::string escape_whitespace(std::string_view text);

// Tokenizes one fragment of already escaped text with the SPM algorithm, appending ids.
void spm_tokenize(const VocabIndex& index, std::string_view escaped, std::vector<int32_t>& out);

}  // namespace fafo::detail

namespace fafo::detail {

// Tokenizes one fragment with WordPiece (model "bert"), as llama.cpp's WPM tokenizer:
// the text is lower-cased, accents are dropped (each character becomes the first code
// point of its canonical decomposition), control characters are removed, and it is split
// at whitespace, at punctuation, at ASCII symbols and around CJK ideographs. Each word,
// prefixed with '▁', is covered greedily by the longest tokens from the left; a word
// that cannot be covered becomes one unknown token.
void wpm_tokenize(const VocabIndex& index, std::string_view text, std::vector<int32_t>& out);

}  // namespace fafo::detail
