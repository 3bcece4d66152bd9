// VocabIndex: validation of a Vocab and its text -> id and byte -> id tables.
#include "tokenizer/vocab_index.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fafo::detail {
namespace {

void check_special(const Vocab& vocab, int32_t id, const char* name) {
  if (id < -1 || id >= vocab.size())
    throw std::invalid_argument(std::string("tokenizer: ") + name + " id " + std::to_string(id) +
                                " is out of range for a vocabulary of " + std::to_string(vocab.size()) +
                                " tokens");
}

}  // namespace

VocabIndex::VocabIndex(const Vocab& vocab) : vocab_(vocab) {
  const size_t n = vocab.tokens.size();
  if (n == 0) throw std::invalid_argument("tokenizer: the vocabulary is empty");
  if (n > static_cast<size_t>(INT32_MAX)) throw std::invalid_argument("tokenizer: too many tokens");
  if (!vocab.scores.empty() && vocab.scores.size() != n)
    throw std::invalid_argument("tokenizer: " + std::to_string(vocab.scores.size()) + " scores for " +
                                std::to_string(n) + " tokens");
  if (vocab.kinds.size() != n)
    throw std::invalid_argument("tokenizer: " + std::to_string(vocab.kinds.size()) + " token kinds for " +
                                std::to_string(n) + " tokens");
  check_special(vocab, vocab.bos, "BOS");
  check_special(vocab, vocab.eos, "EOS");
  check_special(vocab, vocab.unk, "unknown-token");
  check_special(vocab, vocab.pad, "padding");
  check_special(vocab, vocab.eot, "EOT");
  check_special(vocab, vocab.eom, "EOM");
  check_special(vocab, vocab.sep, "separator");

  ids_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (vocab.tokens[i].empty()) continue;  // can never match a non-empty symbol
    ids_[vocab.tokens[i]] = static_cast<int32_t>(i);
    max_token_length_ = std::max(max_token_length_, vocab.tokens[i].size());
  }

  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    int32_t id = find(std::string_view(name, sizeof(name)));
    if (id < 0) {
      const char raw = static_cast<char>(b);
      id = find(std::string_view(&raw, 1));
    }
    byte_tokens_[static_cast<size_t>(b)] = id;
  }
}

int32_t VocabIndex::find(std::string_view text) const {
  const auto it = ids_.find(text);
  return it == ids_.end() ? -1 : it->second;
}

}  // namespace fafo::detail
