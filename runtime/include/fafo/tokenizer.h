// Text <-> token ids for the vocabulary stored in a GGUF file.
//
// This covers `tokenizer.ggml.model = llama` (SentencePiece BPE with scores and byte
// fallback), which stories260K, Llama 2, TinyLlama and Mistral use.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fafo {

class GgufFile;

// Token attribute ids as GGUF stores them in tokenizer.ggml.token_type.
enum class TokenKind : int32_t {
  Undefined = 0, Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6,
};

struct Vocab {
  std::string model;               // tokenizer.ggml.model ("llama")
  std::string pre;                 // tokenizer.ggml.pre, may be empty
  std::vector<std::string> tokens;
  std::vector<float> scores;       // empty or one per token
  std::vector<TokenKind> kinds;    // one per token (Normal when the file has none)
  // Special token ids; -1 when the file has no such key or stores 0xFFFFFFFF (none).
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  int32_t eot = -1, eom = -1;      // tokenizer.ggml.eot_token_id / eom_token_id
  // Defaults are llama.cpp's for model "llama" (SPM); other models default all to false.
  bool add_bos = true;
  bool add_eos = false;
  bool add_space_prefix = true;

  // Reads tokenizer.ggml.* from the file. Throws GgufError (naming the file and the key)
  // when tokens are missing or not strings, when scores/token_type do not have one entry
  // per token, when a token type is not 0..6, or when a special id is out of range.
  // Empty token texts become "[EMPTY_<id>]", as llama.cpp does.
  static Vocab from_gguf(const GgufFile& file);
  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
};

class Tokenizer {
 public:
  // Indexes the vocabulary. Only model "llama" (SPM) is supported; other models throw
  // std::invalid_argument. A moved-from Tokenizer may only be assigned to or destroyed.
  explicit Tokenizer(Vocab vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  const Vocab& vocab() const;

  // Encodes text like llama.cpp's SPM tokenizer with special-token parsing off (control
  // token texts such as "<s>" in `text` are tokenized as plain text). `add_bos` plays the
  // role of llama.cpp's add_special: BOS goes first when it is true and the vocab has one,
  // and EOS is appended when it is true and vocab().add_eos is set. Pass vocab().add_bos
  // for the model's default. A '▁' is prepended to non-empty text when add_space_prefix.
  // A character that is not a token (and not merged into one) becomes its UTF-8 bytes
  // as <0xXX> byte tokens; if a byte has none, the character becomes one unk token.
  // Throws std::runtime_error only when that happens and the vocab has no unk.
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;
  // The bytes a token stands for when printed: '▁' becomes ' ', <0xXX> becomes the
  // byte; control and unknown tokens (BOS/EOS/<unk>) and unused tokens give "";
  // user-defined tokens give their text. Throws std::out_of_range for a bad id.
  std::string token_to_piece(int32_t id) const;
  // Concatenated pieces, as llama.cpp's detokenize (remove_special = false,
  // unparse_special = false): when add_space_prefix, one leading ' ' of the *first*
  // token's piece is dropped. So decode(encode(s, false)) == s, but with a BOS first the
  // BOS gives "" and the space is kept: decode(encode("Hi", true)) == " Hi", as in
  // llama.cpp. Throws std::out_of_range for a bad id.
  std::string decode(const std::vector<int32_t>& ids) const;
  // True for tokens that end generation: EOS, EOT/EOM ids, and tokens named
  // "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
  // "<|eom_id|>", "<EOT>", "_<EOT>" (llama.cpp's list). False for out-of-range ids.
  bool is_end_of_generation(int32_t id) const;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace fafo
