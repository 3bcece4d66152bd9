// A valid SentencePiece-style vocabulary of any size >= 259 for synthetic models:
// <unk>, <s>, </s>, the 256 byte-fallback tokens, then English-like word pieces
// whose every prefix is also a token, so the SPM merge procedure can reach them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fafo::synth {

struct SyntheticVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;  // GGUF token types: 1 normal, 2 unknown, 3 control, 6 byte
};

SyntheticVocab make_synthetic_vocab(int32_t n_vocab);

}  // namespace fafo::synth
