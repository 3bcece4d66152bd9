// Text <-> token ids for the vocabulary stored in a GGUF file, with llama.cpp's results.
//
// Three vocabulary models are supported:
// - `tokenizer.ggml.model = llama`: SentencePiece BPE with scores and <0xXX> byte fallback
//   (stories260K, Llama 2, TinyLlama, Mistral 7B, Phi-3);
// - `tokenizer.ggml.model = gpt2`: byte-level BPE with `tokenizer.ggml.merges` and the
//   pre-tokenizer regexes that `tokenizer.ggml.pre` names (Llama 3, Qwen2/2.5/3, GPT-2,
//   StarCoder, SmolLM, DeepSeek, Falcon, ...). An unknown `pre` value prints one warning
//   to stderr and uses llama.cpp's 'default' pre-tokenizer;
// - `tokenizer.ggml.model = bert`: WordPiece (BERT-style embedding models), as llama.cpp.
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
  std::string model;               // tokenizer.ggml.model ("llama" or "gpt2")
  std::string pre;                 // tokenizer.ggml.pre, may be empty
  std::string name;                // general.name, may be empty (Phi-3 special-token rules)
  std::vector<std::string> tokens;
  std::vector<std::string> merges; // tokenizer.ggml.merges ("left right", best first); gpt2 only
  std::vector<float> scores;       // empty or one per token
  std::vector<TokenKind> kinds;    // one per token (Normal when the file has none)
  // Special token ids; -1 when the file has no such key or stores 0xFFFFFFFF (none).
  int32_t bos = -1, eos = -1, unk = -1, pad = -1;
  int32_t eot = -1, eom = -1;      // tokenizer.ggml.eot_token_id / eom_token_id
  int32_t sep = -1;                // tokenizer.ggml.seperator_token_id (sic; BERT's [SEP])
  // Defaults are llama.cpp's: for model "llama" (SPM) add_bos and add_space_prefix; for
  // "gpt2" add_bos only with a Llama 3 or tekken `pre`. Metadata keys override them.
  bool add_bos = true;
  bool add_eos = false;
  bool add_sep = false;            // append `sep` with add_special ("bert" defaults to true)
  bool add_space_prefix = true;

  // Reads tokenizer.ggml.* from the file. Throws GgufError (naming the file and the key)
  // when tokens are missing or not strings, when scores/token_type do not have one entry
  // per token, when a token type is not 0..6, when a special id is out of range, or when
  // a gpt2 vocabulary has no merges. Empty token texts become "[EMPTY_<id>]", as
  // llama.cpp does.
  static Vocab from_gguf(const GgufFile& file);
  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
};

class Tokenizer {
 public:
  // Indexes the vocabulary. Models "llama" (SPM), "gpt2" (byte-level BPE) and "bert"
  // (WordPiece) are supported; others (e.g. "t5", "rwkv") throw std::invalid_argument.
  // An unknown `pre` warns once per name on stderr. A moved-from Tokenizer may only be
  // assigned to or destroyed.
  explicit Tokenizer(Vocab vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  const Vocab& vocab() const;

  // Encodes text like llama.cpp's llama_tokenize(text, add_special, parse_special).
  //
  // `add_special`: BOS goes first when vocab().add_bos is set (and the vocab has a BOS),
  // EOS last when vocab().add_eos is set, and for WordPiece [SEP] last when add_sep is
  // set; false adds none of them (llama.cpp's test vectors).
  //
  // Special tokens: with `parse_special`, the texts of control tokens (e.g. "<s>",
  // "<|im_start|>", "<|eot_id|>") found in `text` become those single tokens; without
  // it they are tokenized as plain text. User-defined tokens (e.g. Phi-3's "<|user|>",
  // Qwen3's "<think>") always become single tokens, as in llama.cpp and Hugging Face.
  // Longer token texts are matched first; the text between them is tokenized normally.
  // Phi-3 vocabularies (general.name containing "phi-3"/"phi3") drop whitespace after
  // their special tokens, as llama.cpp does.
  //
  // SPM: a '▁' is prepended to each text fragment that starts the text or follows a
  // special token (when add_space_prefix). A character that is not a token becomes its
  // UTF-8 bytes as <0xXX> byte tokens; if a byte has none, the character becomes one
  // unk token. Throws std::runtime_error only when that happens and the vocab has no unk.
  //
  // BPE: each fragment is split by the pre-tokenizer, every word is mapped to GPT-2's
  // byte alphabet and merged by merge rank. Bytes that are not valid UTF-8 are kept as
  // byte tokens, so any input round-trips through decode() when the vocabulary has a
  // token for every byte (GPT-2, Llama 3, Qwen do; valid UTF-8 round-trips through all).
  //
  // WordPiece: lower case, accents dropped, split at whitespace and punctuation, greedy
  // longest tokens per word (llama.cpp's WPM); no round trip.
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special = false) const;

  // The raw bytes a token stands for when printed (possibly part of a UTF-8 character:
  // stream them through fafo::Utf8Stream). SPM: '▁' becomes ' ', <0xXX> the byte. BPE:
  // GPT-2's byte alphabet is mapped back to bytes. Control and unknown tokens (BOS, EOS,
  // <|im_end|>, ...) and unused tokens give "" unless `special` (then their text, as
  // llama.cpp's token_to_piece(special = true)); user-defined tokens give their text.
  // Throws std::out_of_range for a bad id.
  std::string token_to_piece(int32_t id, bool special = false) const;
  // Concatenated pieces, as llama.cpp's detokenize (remove_special = false,
  // unparse_special = false) without its BPE "clean spaces" pass: when add_space_prefix
  // (SPM), one leading ' ' of the *first* token's piece is dropped. So
  // decode(encode(s, false)) == s, but with a BOS first the BOS gives "" and the space is
  // kept: decode(encode("Hi", true)) == " Hi" for SPM, as in llama.cpp. Throws
  // std::out_of_range for a bad id.
  std::string decode(const std::vector<int32_t>& ids) const;
  // True for tokens that end generation: EOS, EOT/EOM ids, and tokens named
  // "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
  // "<|end_of_text|>", "<|eom_id|>", "</s>", "<eos>", "<EOT>", "_<EOT>",
  // "<｜end▁of▁sentence｜>", ... (llama.cpp's list; "<|end|>" not when the vocabulary
  // also has gpt-oss's "<|return|>" and "<|call|>"). False for out-of-range ids.
  bool is_end_of_generation(int32_t id) const;
  // True for control tokens, including tokens llama.cpp treats as control because of
  // their end-of-turn name. False for out-of-range ids.
  bool is_control(int32_t id) const;

 private:
  struct Impl;
  Impl* impl_;
};

// llama.cpp's tokenizer test vectors (tests/*.inp and *.out, also in ../shared/vocab).
// The cases of an .inp file: strings each followed by "\n__ggml_vocab_test__\n"; text
// after the last separator (normally none) is one more case.
std::vector<std::string> split_vocab_test_cases(std::string_view inp);
// One line of an .out file: " <id>" for every id, then "\n" (an empty case gives "\n").
std::string format_vocab_test_line(const std::vector<int32_t>& ids);

}  // namespace fafo
