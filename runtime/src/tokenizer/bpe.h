// Byte-level BPE merging (internal), with the same results as llama.cpp's BPE session.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/vocab_index.h"

namespace fafo::detail {

class BpeModel {
 public:
  // Reads the merge ranks from vocab.merges: "left right" split at the first space after
  // the first byte (a merge without one never applies); rank = position in the list, the
  // first of duplicates wins. `index` must outlive the model.
  explicit BpeModel(const VocabIndex& index);

  // Appends the ids of one pre-tokenized word given as raw bytes. The word is mapped to
  // GPT-2's byte alphabet, split into characters, and the adjacent pair with the lowest
  // merge rank (the leftmost among equals) is merged until no pair has a rank. With
  // `ignore_merges`, a word that is a whole token is emitted as that token directly.
  // A final symbol that is not a token is emitted byte by byte as the tokens whose text
  // is that single byte, skipping bytes that have none (as llama.cpp does).
  void tokenize_word(std::string_view word, bool ignore_merges, std::vector<int32_t>& out) const;

  size_t merge_count() const { return ranks_.size(); }

 private:
  int32_t rank(std::string_view left, std::string_view right, std::string& key) const;

  const VocabIndex& index_;
  std::unordered_map<std::string, int32_t> ranks_;  // "left right" -> rank
};

}  // namespace fafo::detail
