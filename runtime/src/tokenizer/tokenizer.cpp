// Tokenizer: construction, encoding (special tokens, space prefix) and end-of-generation ids.
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "tokenizer/tokenizer_impl.h"

namespace fafo {
namespace {

Vocab checked(Vocab v) {
  if (v.model != "llama")
    throw std::invalid_argument("tokenizer: model '" + v.model +
                                "' is not supported (only 'llama', SentencePiece BPE, is)");
  if (v.kinds.empty()) v.kinds.assign(v.tokens.size(), TokenKind::Normal);
  return v;
}

// Token texts that end a turn in common chat formats (llama.cpp's list).
constexpr std::string_view kEndOfTurnNames[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>",
};

}  // namespace

Tokenizer::Impl::Impl(Vocab v) : vocab(checked(std::move(v))), index(vocab) {
  end_of_generation.assign(vocab.tokens.size(), false);
  for (int32_t id : {vocab.eos, vocab.eot, vocab.eom})
    if (id >= 0) end_of_generation[static_cast<size_t>(id)] = true;
  for (std::string_view name : kEndOfTurnNames)
    if (const int32_t id = index.find(name); id >= 0) end_of_generation[static_cast<size_t>(id)] = true;
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

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  const Vocab& v = impl_->vocab;
  std::vector<int32_t> out;
  if (add_bos && v.bos >= 0) out.push_back(v.bos);
  // With special-token parsing off the whole text is one fragment, and llama.cpp
  // prefixes a fragment with a space when it comes first or follows a special token.
  if (!text.empty()) {
    std::string raw;
    raw.reserve(text.size() + 1);
    if (v.add_space_prefix) raw += ' ';
    raw += text;
    const std::string escaped = detail::escape_whitespace(raw);
    detail::spm_tokenize(impl_->index, escaped, out);
  }
  if (add_bos && v.add_eos && v.eos >= 0) out.push_back(v.eos);
  return out;
}

bool Tokenizer::is_end_of_generation(int32_t id) const {
  return id >= 0 && id < impl_->vocab.size() && impl_->end_of_generation[static_cast<size_t>(id)];
}

}  // namespace fafo
