#include "synthetic_vocab.h"

#include <cstdio>
#include <stdexcept>
#include <unordered_set>

namespace fafo::synth {

namespace {

const char* const kWords[] = {
    "the", "and", "a", "to", "was", "he", "she", "it", "of", "in", "that", "is", "Once", "upon", "time", "there",
    "little", "girl", "boy", "named", "Lily", "Tom", "day", "saw", "big", "park", "play", "with", "her", "his",
    "they", "were", "happy", "said", "mom", "friend", "dog", "cat", "ball", "tree", "sun", "went", "for", "on",
    "had", "so", "very", "not", "but", "you", "I", "we", "can", "what", "do", "one", "two", "three", "number",
    "answer", "question", "code", "def", "return", "if", "else", "for", "while", "print", "value", "list",
};

constexpr const char* kSpace = "\xE2\x96\x81";  // U+2581, SentencePiece's word boundary

}  // namespace

SyntheticVocab make_synthetic_vocab(int32_t n_vocab) {
  if (n_vocab < 259) throw std::invalid_argument("a synthetic vocabulary needs at least 259 tokens (3 special + 256 bytes)");
  SyntheticVocab v;
  std::unordered_set<std::string> seen;
  auto add = [&](const std::string& piece, int32_t type) {
    if (static_cast<int32_t>(v.tokens.size()) >= n_vocab || !seen.insert(piece).second) return;
    v.tokens.push_back(piece);
    v.scores.push_back(type == 1 ? -static_cast<float>(v.tokens.size()) : 0.0f);
    v.types.push_back(type);
  };
  add("<unk>", 2);
  add("<s>", 3);
  add("</s>", 3);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    add(name, 6);
  }
  add(kSpace, 1);
  for (char c : std::string("etaoinshrdlucmfwypvbgkjqxzETAOINSHRDLUCMFWYPVBGKJQXZ0123456789.,!?'\"-:;()\n"))
    add(std::string(1, c), 1);
  // Words with every prefix, so merges can build them left to right.
  auto add_word = [&](const std::string& word) {
    for (size_t len = 1; len <= word.size(); ++len) add(kSpace + word.substr(0, len), 1);
  };
  for (const char* w : kWords) add_word(w);
  // Then synthetic words "ab", "ac", ... until the vocabulary is full.
  const std::string letters = "etaoinshrdlucmfwypvbgk";
  for (size_t n = 0; static_cast<int32_t>(v.tokens.size()) < n_vocab; ++n) {
    std::string w;
    for (size_t k = n + letters.size(); k > 0; k /= letters.size()) w += letters[k % letters.size()];
    add_word(w);
  }
  return v;
}

}  // namespace fafo::synth
