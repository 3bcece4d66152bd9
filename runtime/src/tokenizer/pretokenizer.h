// Pre-tokenizers of byte-level BPE vocabularies (internal): the regex splits that
// `tokenizer.ggml.pre` names, written out by hand.
//
// A pre-tokenizer is a list of regexes applied one after the other, as llama.cpp's
// unicode_regex_split does: each regex splits every piece the previous ones produced
// into its matches and the text between them (leftmost-first regex semantics, lookahead
// and `$` see only the piece). The resulting words are what BPE merges within.
#pragma once

#include <string_view>
#include <vector>

namespace fafo::detail {

enum class PreTokenizerKind {
  Default,        // llama.cpp's fallback: punctuation runs, GPT-2, digit runs, 3 ASCII digits
  Gpt2,           // GPT-2's regex
  Llama3,         // Llama 3 (tiktoken cl100k-like): digits in groups of 1..3
  Qwen2,          // the Llama 3 regex with single digits
  Starcoder,      // single digits, then GPT-2 (StarCoder, SmolLM, Command-R, ...)
  Falcon,         // punctuation runs, GPT-2, 3 ASCII digits
  DeepseekLlm,    // DeepSeek LLM's explicit letter and punctuation classes
  DeepseekCoder,  // DeepSeek Coder
  Deepseek3,      // DeepSeek V3 / R1
  Bloom,          // BLOOM, Poro, GPT-3 Finnish
  Viking,         // Bloom's regex, then single digits
  Gpt4o,          // GPT-4o / Llama 4: upper/lower-case aware words
  Tekken,         // Mistral's tekken: like Gpt4o with single digits
};

struct PreTokenizerSpec {
  PreTokenizerKind kind = PreTokenizerKind::Default;
  bool known = true;           // false: the name was not recognised (kind is the fallback)
  bool ignore_merges = false;  // a word that is a whole token is emitted without merging
  bool add_bos = false;        // llama.cpp's add_bos default for this pre (before metadata)
};

// The pre-tokenizer that `tokenizer.ggml.pre` names, with llama.cpp's aliases. An empty
// name is llama.cpp's 'default'. An unknown name gives the 'default' pre-tokenizer with
// `known` false (the caller warns).
PreTokenizerSpec pre_tokenizer_spec(std::string_view name);

// Splits `text` (one fragment without special tokens) into words, in order; their
// concatenation is `text`. Bytes that are not well-formed UTF-8 are kept, each as one
// character that classifies like U+FFFD.
std::vector<std::string_view> pre_tokenize(PreTokenizerKind kind, std::string_view text);

}  // namespace fafo::detail
