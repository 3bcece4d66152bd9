// Token ids -> text: token_to_piece and decode, as llama.cpp's detokenizer.
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace fafo {
namespace {

// "<0xXX>" -> the byte; -1 when the text is not of that form.
int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

// '▁' (U+2581) -> ' '.
std::string unescape_whitespace(std::string_view text) {
  static constexpr std::string_view kSpaceMark = "\xE2\x96\x81";
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    if (text.compare(pos, kSpaceMark.size(), kSpaceMark) == 0) {
      out += ' ';
      pos += kSpaceMark.size();
    } else {
      out += text[pos++];
    }
  }
  return out;
}

// GPT-2's byte alphabet back to bytes. A character outside the alphabet (a hand-made
// vocabulary) is kept as its UTF-8 text.
std::string byte_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const detail::Utf8Char& c : detail::decode_utf8(text)) {
    const int byte = c.length > 1 || c.cp < 0x80 ? detail::codepoint_to_byte(c.cp) : -1;
    if (byte >= 0)
      out += static_cast<char>(byte);
    else
      out.append(text.substr(c.offset, c.length));
  }
  return out;
}

}  // namespace

std::string Tokenizer::token_to_piece(int32_t id, bool special) const {
  impl_->check_id(id);
  const std::string& text = impl_->vocab.tokens[static_cast<size_t>(id)];
  // llama.cpp's order: control and unknown tokens print only when asked for, their text
  // as is (as do user-defined tokens); then normal and byte tokens; anything else is "".
  if (impl_->has(id, kAttrControl | kAttrUnknown)) return special ? text : std::string();
  if (impl_->has(id, kAttrUserDefined)) return text;
  if (impl_->has(id, kAttrNormal)) return impl_->bpe ? byte_decode(text) : unescape_whitespace(text);
  if (impl_->has(id, kAttrByte)) {
    const int byte = parse_byte_token(text);
    return byte < 0 ? std::string() : std::string(1, static_cast<char>(byte));
  }
  return {};
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  // Only the first token's piece loses a leading space, even when that piece is empty
  // (a BOS): that is what llama.cpp's detokenize does.
  bool strip_space = impl_->vocab.add_space_prefix;
  for (int32_t id : ids) {
    const std::string piece = token_to_piece(id);
    const bool strip = strip_space && !piece.empty() && piece.front() == ' ';
    out.append(piece, strip ? 1 : 0, std::string::npos);
    strip_space = false;
  }
  return out;
}

}  // namespace fafo
