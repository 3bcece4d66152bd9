// Tokenizer's private state, shared by tokenizer.cpp and detokenize.cpp (internal).
#pragma once

#include <cstdint>
#include <vector>

#include "fafo/tokenizer.h"
#include "tokenizer/vocab_index.h"

namespace fafo {

struct Tokenizer::Impl {
  explicit Impl(Vocab v);

  Vocab vocab;               // owned; `index` points into it, so Impl never moves
  detail::VocabIndex index;
  std::vector<bool> end_of_generation;  // one per token

  void check_id(int32_t id) const;  // std::out_of_range for a bad id
};

}  // namespace fafo
