// Unicode helpers for the tokenizers (internal): UTF-8 decoding that never loses a byte,
// general categories, White_Space, and GPT-2's byte <-> printable-character mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fafo::detail {

// Unicode general categories. The order is the table generator's
// (tools/convert_tokenizer/gen_unicode_tables.py): keep the two in step.
enum class Category : uint8_t {
  Cn, Lu, Ll, Lt, Lm, Lo, Mn, Mc, Me, Nd, Nl, No, Pc, Pd, Ps, Pe, Pi, Pf, Po,
  Sm, Sc, Sk, So, Zs, Zl, Zp, Cc, Cf, Cs, Co,
};

struct CategoryRange {
  uint32_t first;
  uint8_t category;  // a Category
};
extern const CategoryRange kCategoryRanges[];
extern const size_t kCategoryRangeCount;
extern const char kUnicodeVersion[];

struct NfdRange {
  uint32_t first;
  uint32_t last;
  uint32_t value;  // the first code point of the canonical decomposition of each of them
};
extern const NfdRange kNfdRanges[];
extern const size_t kNfdRangeCount;

struct CodepointPair {
  uint32_t from;
  uint32_t to;
};
extern const CodepointPair kLowercase[];  // sorted by `from`
extern const size_t kLowercaseCount;

// Category of a code point (Cn for unassigned ones and for values above U+10FFFF).
Category category_of(uint32_t cp);

// Properties as the pre-tokenizer regexes use them (\p{L}, \p{N}, \p{P}, \p{S}, \p{M},
// \s). Whitespace is Unicode's White_Space property (as llama.cpp's table): U+0009..000D,
// U+0020, U+0085, U+00A0, U+1680, U+2000..200A, U+2028, U+2029, U+202F, U+205F, U+3000.
struct CodepointClass {
  bool letter = false;
  bool number = false;
  bool punctuation = false;
  bool symbol = false;
  bool mark = false;
  bool whitespace = false;
};
CodepointClass classify(uint32_t cp);
bool is_whitespace(uint32_t cp);
// The first code point of cp's canonical decomposition (cp itself when it has none):
// 'é' -> 'e', as llama.cpp's simplified NFD for WordPiece.
uint32_t nfd_first(uint32_t cp);
// Lower case (the first code point of the full mapping; cp itself when it has none).
uint32_t to_lower(uint32_t cp);

// One character of a text: its code point and where its bytes are. A byte that does not
// start a well-formed UTF-8 sequence becomes a character of its own with code point
// U+FFFD (llama.cpp's replacement, so that the text splits as it does there), but its
// byte range still points at the original byte, so nothing is lost.
struct Utf8Char {
  uint32_t cp;
  uint32_t offset;  // into the text
  uint8_t length;   // bytes, 1..4
};
// Decodes `text`; a sequence is well-formed when its lead byte announces 2..4 bytes and
// the continuation bytes are there (overlong forms are accepted, as in llama.cpp).
std::vector<Utf8Char> decode_utf8(std::string_view text);
// Length of the UTF-8 sequence a lead byte announces (1 for a continuation byte or a
// byte above 0xF7), as llama.cpp's unicode_len_utf8.
size_t utf8_lead_length(uint8_t lead);
// Appends the UTF-8 encoding of `cp` (which must be <= 0x10FFFF).
void append_utf8(std::string& out, uint32_t cp);

// GPT-2's byte-level alphabet: every byte has a printable code point (printable Latin-1
// bytes map to themselves, the other 68 to U+0100 onwards, in byte order).
uint32_t byte_to_codepoint(uint8_t byte);
// The byte for such a code point, or -1.
int codepoint_to_byte(uint32_t cp);
// Every byte of `bytes` as its GPT-2 character, UTF-8 encoded.
std::string byte_encode(std::string_view bytes);

}  // namespace fafo::detail
