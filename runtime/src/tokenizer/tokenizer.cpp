// Tokenizer: construction (token attributes as llama.cpp derives them), special-token
// partitioning, encoding (SPM and byte-level BPE) and end-of-generation ids.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "tokenizer/tokenizer_impl.h"

namespace fafo {
namespace {

Vocab checked(Vocab v) {
  if (v.model != "llama" && v.model != "gpt2" && v.model != "bert")
    throw std::invalid_argument("tokenizer: model '" + v.model +
                                "' is not supported (only 'llama', SentencePiece BPE, 'gpt2', byte-level BPE, and "
                                "'bert', WordPiece, are)");
  if (v.kinds.empty()) v.kinds.assign(v.tokens.size(), TokenKind::Normal);
  return v;
}

// Token texts that end a turn in common chat formats (llama.cpp's list): they end
// generation and are treated as control tokens whatever their stored type.
constexpr std::string_view kEndOfGenerationNames[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "[e~[",
};

uint8_t attr_of(TokenKind kind) {
  switch (kind) {
    case TokenKind::Normal: return kAttrNormal;
    case TokenKind::Unknown: return kAttrUnknown;
    case TokenKind::Control: return kAttrControl;
    case TokenKind::UserDefined: return kAttrUserDefined;
    case TokenKind::Unused: return kAttrUnused;
    case TokenKind::Byte: return kAttrByte;
    case TokenKind::Undefined: break;
  }
  return 0;
}

void warn_unknown_pre(const std::string& pre) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!warned.insert(pre).second) return;
  if (pre.empty())
    std::fprintf(stderr,
                 "fafo: warning: the vocabulary has no tokenizer.ggml.pre; using llama.cpp's 'default' "
                 "pre-tokenizer, so text may split differently from the model's own tokenizer\n");
  else
    std::fprintf(stderr,
                 "fafo: warning: unknown pre-tokenizer tokenizer.ggml.pre = '%s'; using llama.cpp's 'default' "
                 "pre-tokenizer, so text may split differently from the model's own tokenizer\n",
                 pre.c_str());
}

bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

std::string lowercase(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Tokenizer::Impl::Impl(Vocab v) : vocab(checked(std::move(v))), index(vocab) {
  bpe = vocab.model == "gpt2";
  wpm = vocab.model == "bert";
  const size_t n = vocab.tokens.size();
  if (bpe) {
    pre = detail::pre_tokenizer_spec(vocab.pre);
    if (!pre.known || vocab.pre.empty()) warn_unknown_pre(vocab.pre);
    merges = std::make_unique<detail::BpeModel>(index);
  }

  attrs.resize(n);
  for (size_t i = 0; i < n; ++i) attrs[i] = attr_of(vocab.kinds[i]);

  end_of_generation.assign(n, false);
  for (std::string_view name : kEndOfGenerationNames) {
    if (const int32_t id = index.find(name); id >= 0) {
      end_of_generation[static_cast<size_t>(id)] = true;
      attrs[static_cast<size_t>(id)] |= kAttrControl;
    }
  }
  // gpt-oss and Solar Open end a message with <|end|> but not generation.
  const auto exists = [&](std::string_view name) { return index.find(name) >= 0; };
  if (const int32_t end = index.find("<|end|>");
      end >= 0 && ((exists("<|return|>") && exists("<|call|>")) || (exists("<|calls|>") && exists("<|flush|>")))) {
    end_of_generation[static_cast<size_t>(end)] = false;
    attrs[static_cast<size_t>(end)] = kAttrUserDefined;
  }
  for (std::string_view name : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
    if (const int32_t id = index.find(name); id >= 0) attrs[static_cast<size_t>(id)] = kAttrUserDefined;
  for (int32_t id : {vocab.eos, vocab.eot, vocab.eom})
    if (id >= 0) end_of_generation[static_cast<size_t>(id)] = true;

  for (size_t i = 0; i < n; ++i)
    if (attrs[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special_tokens.push_back(static_cast<int32_t>(i));
  std::stable_sort(special_tokens.begin(), special_tokens.end(), [&](int32_t a, int32_t b) {
    return vocab.tokens[static_cast<size_t>(a)].size() > vocab.tokens[static_cast<size_t>(b)].size();
  });

  // Phi-3 drops the whitespace after its special tokens (llama.cpp's per-model rule).
  const std::string name = lowercase(vocab.name);
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (int32_t id : special_tokens) attrs[static_cast<size_t>(id)] |= kAttrRstrip;
    if (const int32_t id = index.find("</s>"); id >= 0) attrs[static_cast<size_t>(id)] |= kAttrRstrip;
    for (std::string_view keep : {"<unk>", "<s>", "<|endoftext|>"})
      if (const int32_t id = index.find(keep); id >= 0) attrs[static_cast<size_t>(id)] &= static_cast<uint8_t>(~kAttrRstrip);
  }
}

void Tokenizer::Impl::check_id(int32_t id) const {
  if (id < 0 || id >= vocab.size())
    throw std::out_of_range("tokenizer: token id " + std::to_string(id) + " is out of range (vocabulary of " +
                            std::to_string(vocab.size()) + " tokens)");
}

Tokenizer::Tokenizer(Vocab vocab) : impl_(new Impl(std::move(vocab))) {}
Tokenizer::~Tokenizer() { delete impl_; }
Tokenizer::Tokenizer(Tokenizer&& other) noexcept : impl_(std::exchange(other.impl_, nullptr)) {}
Tokenizer& Tokenizer::operator=(Tokenizer&& other) noexcept {
  if (this != &other) {
    delete impl_;
    impl_ = std::exchange(other.impl_, nullptr);
  }
  return *this;
}

const Vocab& Tokenizer::vocab() const { return impl_->vocab; }

std::vector<TextFragment> Tokenizer::Impl::partition(std::string_view text, bool parse_special) const {
  std::vector<TextFragment> fragments{TextFragment{-1, 0, text.size()}};
  std::vector<TextFragment> next;
  for (int32_t id : special_tokens) {
    if (!parse_special && has(id, kAttrControl | kAttrUnknown)) continue;
    const std::string& special = vocab.tokens[static_cast<size_t>(id)];
    const bool rstrip = has(id, kAttrRstrip);
    next.clear();
    bool found = false;
    for (const TextFragment& f : fragments) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t base = f.offset, length = f.length;
      while (length > 0) {
        const size_t match = text.substr(0, base + length).find(special, base);
        if (match == std::string_view::npos) {
          next.push_back(TextFragment{-1, base, length});
          break;
        }
        found = true;
        if (match > base) next.push_back(TextFragment{-1, base, match - base});
        next.push_back(TextFragment{id, 0, 0});
        size_t right = match + special.size();
        size_t right_length = base + length - right;
        if (rstrip)
          while (right_length > 0 && is_ascii_space(text[right])) {
            ++right;
            --right_length;
          }
        base = right;
        length = right_length;
      }
    }
    if (found) fragments.swap(next);
  }
  return fragments;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Impl& impl = *impl_;
  const Vocab& v = impl.vocab;
  std::vector<int32_t> out;
  if (add_special && v.add_bos && v.bos >= 0) out.push_back(v.bos);
  if (!text.empty()) {
    const std::vector<TextFragment> fragments = impl.partition(text, parse_special);
    // SPM: a fragment that starts the text or follows a special token gets the space
    // prefix (llama.cpp's "is_prev_special", true at the start even after a BOS).
    bool prev_special = true;
    std::string raw;
    for (const TextFragment& f : fragments) {
      if (f.token >= 0) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      const std::string_view piece = text.substr(f.offset, f.length);
      if (impl.bpe) {
        for (std::string_view word : detail::pre_tokenize(impl.pre.kind, piece))
          impl.merges->tokenize_word(word, impl.pre.ignore_merges, out);
      } else if (impl.wpm) {
        detail::wpm_tokenize(impl.index, piece, out);
      } else {
        raw.clear();
        if (v.add_space_prefix && prev_special) raw += ' ';
        raw += piece;
        detail::spm_tokenize(impl.index, detail::escape_whitespace(raw), out);
      }
      prev_special = false;
    }
  }
  if (add_special && v.add_eos && v.eos >= 0) out.push_back(v.eos);
  if (add_special && v.add_sep && v.sep >= 0) out.push_back(v.sep);
  return out;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return id >= 0 && id < impl_->vocab.size() && impl_->end_of_generation[static_cast<size_t>(id)];
}

bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < impl_->vocab.size() && impl_->has(id, kAttrControl);
}

}  // namespace fafo
