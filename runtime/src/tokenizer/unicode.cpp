// Unicode helpers: category lookup, White_Space, lossless UTF-8 decoding, GPT-2 bytes.
#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace fafo::detail {
namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr uint32_t kReplacement = 0xFFFD;

Category lookup_category(uint32_t cp) {
  const CategoryRange* begin = kCategoryRanges;
  const CategoryRange* end = kCategoryRanges + kCategoryRangeCount;
  const CategoryRange* it =
      std::upper_bound(begin, end, cp, [](uint32_t value, const CategoryRange& r) { return value < r.first; });
  return it == begin ? Category::Cn : static_cast<Category>((it - 1)->category);
}

// The Basic Multilingual Plane, expanded once: most text never needs a binary search.
const std::array<Category, 0x10000>& bmp_categories() {
  static const std::array<Category, 0x10000> table = [] {
    std::array<Category, 0x10000> t{};
    size_t r = 0;
    for (uint32_t cp = 0; cp < 0x10000; ++cp) {
      while (r + 1 < kCategoryRangeCount && kCategoryRanges[r + 1].first <= cp) ++r;
      t[cp] = static_cast<Category>(kCategoryRanges[r].category);
    }
    return t;
  }();
  return table;
}

struct ByteTables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 512> from_cp{};  // every mapped code point is below U+0200
};

const ByteTables& byte_tables() {
  static const ByteTables tables = [] {
    ByteTables t;
    t.from_cp.fill(-1);
    const auto printable = [](int b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = printable(b) ? static_cast<uint32_t>(b) : next++;
      t.to_cp[static_cast<size_t>(b)] = cp;
      t.from_cp[cp] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return tables;
}

}  // namespace

Category category_of(uint32_t cp) {
  if (cp < 0x10000) return bmp_categories()[cp];
  if (cp > kMaxCodepoint) return Category::Cn;
  return lookup_category(cp);
}

bool is_whitespace(uint32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
  if (cp < 0x85) return false;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

CodepointClass classify(uint32_t cp) {
  CodepointClass c;
  switch (category_of(cp)) {
    case Category::Lu: case Category::Ll: case Category::Lt: case Category::Lm: case Category::Lo:
      c.letter = true;
      break;
    case Category::Nd: case Category::Nl: case Category::No:
      c.number = true;
      break;
    case Category::Pc: case Category::Pd: case Category::Ps: case Category::Pe: case Category::Pi:
    case Category::Pf: case Category::Po:
      c.punctuation = true;
      break;
    case Category::Sm: case Category::Sc: case Category::Sk: case Category::So:
      c.symbol = true;
      break;
    case Category::Mn: case Category::Mc: case Category::Me:
      c.mark = true;
      break;
    default:
      break;
  }
  c.whitespace = is_whitespace(cp);
  return c;
}

uint32_t nfd_first(uint32_t cp) {
  const NfdRange* end = kNfdRanges + kNfdRangeCount;
  const NfdRange* it = std::upper_bound(kNfdRanges, end, cp, [](uint32_t value, const NfdRange& r) { return value < r.first; });
  if (it == kNfdRanges) return cp;
  --it;
  return cp <= it->last ? it->value : cp;
}

uint32_t to_lower(uint32_t cp) {
  if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
  const CodepointPair* end = kLowercase + kLowercaseCount;
  const CodepointPair* it =
      std::lower_bound(kLowercase, end, cp, [](const CodepointPair& p, uint32_t value) { return p.from < value; });
  return it != end && it->from == cp ? it->to : cp;
}

size_t utf8_lead_length(uint8_t lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF8) return 4;
  return 1;
}

std::vector<Utf8Char> decode_utf8(std::string_view text) {
  std::vector<Utf8Char> chars;
  chars.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const auto lead = static_cast<uint8_t>(text[pos]);
    size_t len = lead < 0x80 ? 1 : (lead < 0xC0 ? 0 : utf8_lead_length(lead));
    if (lead >= 0xF8) len = 0;
    uint32_t cp = lead;
    if (len > 1) {
      if (pos + len > text.size()) {
        len = 0;
      } else {
        cp = lead & (0xFFu >> (len + 1));
        for (size_t k = 1; k < len; ++k) {
          const auto c = static_cast<uint8_t>(text[pos + k]);
          if ((c & 0xC0) != 0x80) {
            len = 0;
            break;
          }
          cp = (cp << 6) | (c & 0x3F);
        }
      }
    }
    if (len == 0) {  // not a well-formed sequence: this byte alone, as U+FFFD
      chars.push_back(Utf8Char{kReplacement, static_cast<uint32_t>(pos), 1});
      ++pos;
      continue;
    }
    chars.push_back(Utf8Char{cp, static_cast<uint32_t>(pos), static_cast<uint8_t>(len)});
    pos += len;
  }
  return chars;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

uint32_t byte_to_codepoint(uint8_t byte) { return byte_tables().to_cp[byte]; }

int codepoint_to_byte(uint32_t cp) { return cp < 512 ? byte_tables().from_cp[cp] : -1; }

std::string byte_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, byte_to_codepoint(static_cast<uint8_t>(c)));
  return out;
}

}  // namespace fafo::detail
