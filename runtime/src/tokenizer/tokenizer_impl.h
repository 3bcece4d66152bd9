// Tokenizer's private state, shared by tokenizer.cpp and detokenize.cpp (internal).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "fafo/tokenizer.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocab_index.h"

namespace fafo {

// Token attributes as llama.cpp keeps them (a token can be both control and
// user-defined once an end-of-turn name marked it control).
enum TokenAttr : uint8_t {
  kAttrNormal = 1,
  kAttrUnknown = 2,
  kAttrControl = 4,
  kAttrUserDefined = 8,
  kAttrUnused = 16,
  kAttrByte = 32,
  kAttrRstrip = 64,  // whitespace after the token's text is dropped when partitioning
};

// A piece of the input text: raw text [offset, offset + length), or one special token.
struct TextFragment {
  int32_t token;  // -1 for raw text
  size_t offset;
  size_t length;
};

struct Tokenizer::Impl {
  explicit Impl(Vocab v);

  Vocab vocab;               // owned; `index` points into it, so Impl never moves
  detail::VocabIndex index;
  bool bpe = false;          // model "gpt2"
  bool wpm = false;          // model "bert"
  detail::PreTokenizerSpec pre;
  std::unique_ptr<detail::BpeModel> merges;  // BPE only
  std::vector<uint8_t> attrs;                // TokenAttr bits, one per token
  // Control, user-defined and unknown tokens, longest text first (ties: lower id first):
  // the order in which their texts are cut out of the input.
  std::vector<int32_t> special_tokens;
  std::vector<bool> end_of_generation;  // one per token

  void check_id(int32_t id) const;  // std::out_of_range for a bad id
  // Cuts special-token texts out of `text`, as llama.cpp's tokenizer_st_partition: for
  // each special token in turn (longest first), every occurrence in every raw fragment
  // becomes a token fragment. Control and unknown tokens are cut only with
  // `parse_special`; user-defined ones always.
  std::vector<TextFragment> partition(std::string_view text, bool parse_special) const;
  bool has(int32_t id, uint8_t attr) const { return (attrs[static_cast<size_t>(id)] & attr) != 0; }
};

}  // namespace fafo
