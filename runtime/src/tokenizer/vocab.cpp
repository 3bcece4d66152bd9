// Vocab::from_gguf: reads and validates the tokenizer.ggml.* metadata of a GGUF file.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

#include "fafo/gguf.h"
#include "fafo/tokenizer.h"
#include "tokenizer/pretokenizer.h"

namespace fafo {
namespace {

constexpr uint64_t kNoToken = 0xFFFFFFFFull;  // how GGUF files spell "no such token"

class VocabReader {
 public:
  explicit VocabReader(const GgufFile& file) : file_(file) {}

  [[noreturn]] void fail(std::string_view key, const std::string& what) const {
    throw GgufError(file_.path(), "tokenizer metadata '" + std::string(key) + "': " + what);
  }

  // The array stored under `key`, or nullptr when absent. Throws when it is not an array.
  const GgufValue::Array* array(std::string_view key) const {
    const GgufValue* v = file_.find(key);
    if (!v) return nullptr;
    if (v->type != GgufType::ARRAY)
      fail(key, "expected an array, found " + std::string(gguf_type_name(v->type)));
    return &v->as_array();
  }

  std::string string(std::string_view key, bool required) const {
    const GgufValue* v = file_.find(key);
    if (!v) {
      if (required) fail(key, "missing (a GGUF file without a vocabulary cannot be tokenized)");
      return {};
    }
    if (v->type != GgufType::STRING)
      fail(key, "expected a string, found " + std::string(gguf_type_name(v->type)));
    return v->as_string();
  }

  bool flag(std::string_view key, bool fallback) const {
    const GgufValue* v = file_.find(key);
    if (!v) return fallback;
    if (v->type != GgufType::BOOL && !v->is_integer())
      fail(key, "expected a bool, found " + std::string(gguf_type_name(v->type)));
    return v->as_bool();
  }

  // A special token id: -1 when absent or 0xFFFFFFFF (or negative); else must be < n_tokens.
  int32_t special_id(std::string_view key, size_t n_tokens) const {
    const GgufValue* v = file_.find(key);
    if (!v) return -1;
    if (!v->is_integer())
      fail(key, "expected an integer token id, found " + std::string(gguf_type_name(v->type)));
    if (const auto* s = std::get_if<int64_t>(&v->v); s && *s < 0) return -1;
    const uint64_t id = v->as_uint();
    if (id == kNoToken || id == UINT64_MAX) return -1;
    if (id >= n_tokens)
      fail(key, "token id " + std::to_string(id) + " is out of range (the vocabulary has " +
                    std::to_string(n_tokens) + " tokens)");
    return static_cast<int32_t>(id);
  }

 private:
  const GgufFile& file_;
};

std::string length_mismatch(size_t got, size_t n_tokens) {
  return "has " + std::to_string(got) + " entries but tokenizer.ggml.tokens has " +
         std::to_string(n_tokens) + " (one per token expected)";
}

}  // namespace

Vocab Vocab::from_gguf(const GgufFile& file) {
  const VocabReader r(file);
  Vocab vocab;
  vocab.model = r.string("tokenizer.ggml.model", true);
  vocab.pre = r.string("tokenizer.ggml.pre", false);
  if (const GgufValue* name = file.find("general.name"); name && name->type == GgufType::STRING)
    vocab.name = name->as_string();  // informative only: any other type is ignored

  const GgufValue::Array* tokens = r.array("tokenizer.ggml.tokens");
  if (!tokens) r.fail("tokenizer.ggml.tokens", "missing");
  if (tokens->items.empty()) r.fail("tokenizer.ggml.tokens", "the array is empty");
  if (tokens->items.size() > static_cast<size_t>(INT32_MAX))
    r.fail("tokenizer.ggml.tokens", "too many tokens");
  if (tokens->elem_type != GgufType::STRING)
    r.fail("tokenizer.ggml.tokens",
           "expected an array of strings, found an array of " + std::string(gguf_type_name(tokens->elem_type)));
  const size_t n = tokens->items.size();
  vocab.tokens.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const GgufValue& item = tokens->items[i];
    if (item.type != GgufType::STRING)
      r.fail("tokenizer.ggml.tokens", "entry " + std::to_string(i) + " is not a string");
    // llama.cpp renames empty tokens so that every token has a distinct, non-empty text.
    vocab.tokens.push_back(item.as_string().empty() ? "[EMPTY_" + std::to_string(i) + "]" : item.as_string());
  }

  if (const GgufValue::Array* scores = r.array("tokenizer.ggml.scores")) {
    if (scores->items.size() != n) r.fail("tokenizer.ggml.scores", length_mismatch(scores->items.size(), n));
    vocab.scores.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const GgufValue& item = scores->items[i];
      if (!item.is_float() && !item.is_integer())
        r.fail("tokenizer.ggml.scores", "entry " + std::to_string(i) + " is not a number");
      // A NaN score would break the merge heap's ordering (and inf is no score either);
      // checked after the conversion so that an F64 beyond float's range is caught too.
      const float score = static_cast<float>(item.as_float());
      if (!std::isfinite(score))
        r.fail("tokenizer.ggml.scores", "entry " + std::to_string(i) + " is not a finite number (" +
                                            std::to_string(item.as_float()) + ")");
      vocab.scores.push_back(score);
    }
  }

  if (const GgufValue::Array* types = r.array("tokenizer.ggml.token_type")) {
    if (types->items.size() != n) r.fail("tokenizer.ggml.token_type", length_mismatch(types->items.size(), n));
    vocab.kinds.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const GgufValue& item = types->items[i];
      if (!item.is_integer())
        r.fail("tokenizer.ggml.token_type", "entry " + std::to_string(i) + " is not an integer");
      const int64_t t = item.as_int();
      if (t < static_cast<int64_t>(TokenKind::Undefined) || t > static_cast<int64_t>(TokenKind::Byte))
        r.fail("tokenizer.ggml.token_type",
               "entry " + std::to_string(i) + " has type " + std::to_string(t) + " (valid types are 0..6)");
      vocab.kinds.push_back(static_cast<TokenKind>(t));
    }
  } else {
    vocab.kinds.assign(n, TokenKind::Normal);
  }

  if (const GgufValue::Array* merges = r.array("tokenizer.ggml.merges")) {
    if (merges->elem_type != GgufType::STRING)
      r.fail("tokenizer.ggml.merges",
             "expected an array of strings, found an array of " + std::string(gguf_type_name(merges->elem_type)));
    vocab.merges.reserve(merges->items.size());
    for (size_t i = 0; i < merges->items.size(); ++i) {
      const GgufValue& item = merges->items[i];
      if (item.type != GgufType::STRING)
        r.fail("tokenizer.ggml.merges", "entry " + std::to_string(i) + " is not a string");
      vocab.merges.push_back(item.as_string());
    }
  } else if (vocab.model == "gpt2") {
    r.fail("tokenizer.ggml.merges", "missing (a 'gpt2' byte-level BPE vocabulary needs its merges)");
  }

  vocab.bos = r.special_id("tokenizer.ggml.bos_token_id", n);
  vocab.eos = r.special_id("tokenizer.ggml.eos_token_id", n);
  vocab.unk = r.special_id("tokenizer.ggml.unknown_token_id", n);
  vocab.pad = r.special_id("tokenizer.ggml.padding_token_id", n);
  vocab.eot = r.special_id("tokenizer.ggml.eot_token_id", n);
  vocab.eom = r.special_id("tokenizer.ggml.eom_token_id", n);
  vocab.sep = r.special_id("tokenizer.ggml.seperator_token_id", n);  // llama.cpp's spelling

  // llama.cpp's defaults: SPM adds BOS and a space prefix; BPE adds BOS only for the
  // pre-tokenizers that ask for it (Llama 3, tekken).
  // WordPiece: [CLS] first and [SEP] last (llama.cpp's WPM defaults).
  const bool spm = vocab.model == "llama";
  const bool wpm = vocab.model == "bert";
  const bool bpe_bos = vocab.model == "gpt2" && detail::pre_tokenizer_spec(vocab.pre).add_bos;
  if (wpm && vocab.bos < 0) vocab.bos = r.special_id("tokenizer.ggml.cls_token_id", n);
  vocab.add_bos = r.flag("tokenizer.ggml.add_bos_token", spm || wpm || bpe_bos);
  vocab.add_eos = r.flag("tokenizer.ggml.add_eos_token", false);
  vocab.add_sep = r.flag("tokenizer.ggml.add_sep_token", wpm);
  vocab.add_space_prefix = r.flag("tokenizer.ggml.add_space_prefix", spm);
  return vocab;
}

}  // namespace fafo
