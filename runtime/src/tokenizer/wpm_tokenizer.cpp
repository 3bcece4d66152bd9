// WordPiece (tokenizer.ggml.model = "bert"), with the same results as llama.cpp's WPM
// tokenizer: normalise and split into words, then greedy longest-match per word.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/unicode.h"
#include "tokenizer/vocab_index.h"

namespace fafo::detail {
namespace {

// BERT's "Chinese character" blocks (CJK ideographs), which become words of their own.
bool is_cjk_ideograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

bool is_control_character(uint32_t cp) {
  switch (category_of(cp)) {
    case Category::Cc: case Category::Cf: case Category::Cs: case Category::Co:
      return true;
    default:
      return false;
  }
}

std::vector<std::string> words_of(std::string_view text) {
  std::vector<std::string> words(1);
  for (const Utf8Char& c : decode_utf8(text)) {
    const uint32_t cp = nfd_first(c.cp);
    const CodepointClass k = classify(cp);
    if (k.whitespace) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (cp == 0 || cp == 0xFFFD || is_control_character(cp)) continue;
    std::string s;
    append_utf8(s, to_lower(cp));
    if (k.punctuation || (cp < 0x7F && k.symbol) || is_cjk_ideograph(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = s;
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

}  // namespace

void wpm_tokenize(const VocabIndex& index, std::string_view text, std::vector<int32_t>& out) {
  static constexpr std::string_view kPhantomSpace = "\xE2\x96\x81";  // '▁' starts a word
  const size_t max_len = index.max_token_length();
  for (const std::string& word : words_of(text)) {
    const std::string w = std::string(kPhantomSpace) + word;
    const size_t n = w.size();
    const size_t before = out.size();
    for (size_t i = 0; i < n;) {
      size_t matched = 0;
      for (size_t j = std::min(n, i + max_len + 1); j > i; --j) {
        if (const int32_t id = index.find(std::string_view(w).substr(i, j - i)); id >= 0) {
          out.push_back(id);
          matched = j;
          break;
        }
      }
      if (matched == 0) {  // a piece of the word has no token: the whole word is unknown
        out.resize(before);
        break;
      }
      i = matched;
    }
    if (out.size() == before && index.vocab().unk >= 0) out.push_back(index.vocab().unk);
  }
}

}  // namespace fafo::detail
