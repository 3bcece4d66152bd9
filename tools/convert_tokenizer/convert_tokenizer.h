// Vocab-only GGUF files from a Hugging Face tokenizer.json (byte-level BPE) or from a
// tiktoken rank file (Llama 3), so that tokenizers without a GGUF can be tested and used.
//
// The GGUF holds general.architecture / general.name and the tokenizer.ggml.* keys that
// llama.cpp writes (model, pre, tokens, token_type, merges, special ids, add_bos_token /
// add_eos_token) plus tokenizer.chat_template when the tokenizer config has one; no
// tensors. Errors throw ConvertError with a message naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace fafo::convert {

class ConvertError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Everything the vocab-only GGUF will hold.
struct VocabFile {
  std::string architecture = "llama";
  std::string name;
  std::string model = "gpt2";               // tokenizer.ggml.model
  std::string pre;                          // tokenizer.ggml.pre
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;         // GGUF token types (1 normal, 3 control, ...)
  std::vector<std::string> merges;          // "left right"
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;  // -1: not written
  std::optional<bool> add_bos, add_eos;     // written only when set
  std::string chat_template;                // written when not empty
};

struct HfOptions {
  std::string pre;           // tokenizer.ggml.pre; empty: recognised from the pre_tokenizer
  std::string architecture;  // empty: "qwen2" for a qwen2 pre, else "llama"
  std::string name;          // general.name; empty: the tokenizer.json folder's name
  int32_t vocab_size = 0;    // pad the token list with "[PAD<id>]" (unused) tokens up to this
  // tokenizer_config.json (special tokens, add_bos_token, chat_template); empty: the
  // file of that name beside tokenizer.json, when there is one.
  std::filesystem::path config;
};

// A byte-level BPE tokenizer.json ("model": {"type": "BPE"} with a ByteLevel
// pre-tokenizer or decoder). Added tokens that are "special", or that look special
// (<|...|>, <｜...｜>), become control tokens, other added tokens user-defined ones, as
// llama.cpp's convert_hf_to_gguf.py does. BOS/EOS/UNK/PAD come from the config's
// bos_token/eos_token/unk_token/pad_token, add_bos/add_eos from add_bos_token /
// add_eos_token. The pre-tokenizer is recognised for Llama 3 ("llama-bpe"),
// Qwen2/2.5/3 ("qwen2"), GPT-2 ("gpt-2") and StarCoder/SmolLM ("starcoder"); others
// need HfOptions::pre.
VocabFile from_hf_tokenizer(const std::filesystem::path& tokenizer_json, const HfOptions& options);

struct TiktokenOptions {
  std::string name = "llama-3";
  std::string architecture = "llama";
};

// A tiktoken rank file (one "base64-token rank" per line, ranks 0..N-1) with Llama 3's
// 256 special tokens after it (<|begin_of_text|> = N, ... as in Meta's tokenizer.py):
// pre "llama-bpe", BOS <|begin_of_text|>, EOS <|end_of_text|>, EOT <|eot_id|>, EOM
// <|eom_id|>, add_bos true. Merges are derived from the ranks as Hugging Face's
// tiktoken conversion does: every split of a token into two tokens is a merge, ordered
// by the token's rank, then by the ranks of the two parts.
VocabFile from_tiktoken(const std::filesystem::path& rank_file, const TiktokenOptions& options);

// Writes the vocab-only GGUF (v3). Throws ConvertError when the vocabulary is
// inconsistent (no tokens, a token type per token, special ids in range) and
// std::runtime_error on I/O failure.
void write_vocab_gguf(const VocabFile& vocab, const std::filesystem::path& out);

}  // namespace fafo::convert
