// The pre-tokenizer regexes of byte-level BPE vocabularies, as hand-written matchers.
//
// Each matcher answers "does the regex match at character `pos` of the piece [.., end),
// and where does the match end?" with the regex's leftmost-first alternation and greedy,
// backtracking quantifiers. split_all() then does what a regex iterator does: the first
// position where the regex matches starts the next match, and the characters skipped
// before it form a piece of their own.
#include "tokenizer/pretokenizer.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

#include "tokenizer/unicode.h"

namespace fafo::detail {
namespace {

// ------------------------------------------------------------------ characters

enum Flag : uint8_t {
  kLetter = 1, kNumber = 2, kPunct = 4, kSymbol = 8, kMark = 16, kSpace = 32,
  kUpperish = 64,  // \p{Lu} \p{Lt} \p{Lm} \p{Lo} \p{M}
  kLowerish = 128, // \p{Ll} \p{Lm} \p{Lo} \p{M}
};

struct Text {
  std::vector<Utf8Char> chars;
  std::vector<uint8_t> flags;

  explicit Text(std::string_view s) : chars(decode_utf8(s)) {
    flags.reserve(chars.size());
    for (const Utf8Char& c : chars) {
      const CodepointClass k = classify(c.cp);
      uint8_t f = 0;
      if (k.letter) f |= kLetter;
      if (k.number) f |= kNumber;
      if (k.punctuation) f |= kPunct;
      if (k.symbol) f |= kSymbol;
      if (k.mark) f |= kMark | kUpperish | kLowerish;
      if (k.whitespace) f |= kSpace;
      switch (category_of(c.cp)) {
        case Category::Lu: case Category::Lt: f |= kUpperish; break;
        case Category::Ll: f |= kLowerish; break;
        case Category::Lm: case Category::Lo: f |= kUpperish | kLowerish; break;
        default: break;
      }
      flags.push_back(f);
    }
  }
  uint32_t cp(size_t i) const { return chars[i].cp; }
  bool has(size_t i, uint8_t f) const { return (flags[i] & f) != 0; }
  bool letter(size_t i) const { return has(i, kLetter); }
  bool number(size_t i) const { return has(i, kNumber); }
  bool space(size_t i) const { return has(i, kSpace); }
  // [^\s\p{L}\p{N}]
  bool other(size_t i) const { return !has(i, kSpace | kLetter | kNumber); }
  bool newline(size_t i) const { return cp(i) == '\r' || cp(i) == '\n'; }
};

// A piece of the text: characters [begin, end).
struct Span {
  size_t begin;
  size_t end;
};

// A matcher returns the end of the match that starts at `pos`, or `pos` for no match.
// Every regex here only has non-empty matches.
using Matcher = size_t (*)(const Text& t, size_t pos, size_t end);

template <typename Pred>
size_t run(size_t pos, size_t end, Pred pred) {
  while (pos < end && pred(pos)) ++pos;
  return pos;
}

// Re-splits every span into the regex's matches and the gaps between them.
std::vector<Span> split_all(const Text& t, const std::vector<Span>& spans, Matcher match) {
  std::vector<Span> out;
  out.reserve(spans.size() * 2);
  for (const Span& s : spans) {
    size_t gap = s.begin;
    size_t pos = s.begin;
    while (pos < s.end) {
      const size_t m = match(t, pos, s.end);
      if (m > pos) {
        if (gap < pos) out.push_back(Span{gap, pos});
        out.push_back(Span{pos, m});
        pos = gap = m;
      } else {
        ++pos;
      }
    }
    if (gap < s.end) out.push_back(Span{gap, s.end});
  }
  return out;
}

uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

// 's|'t|'re|'ve|'m|'ll|'d, case-insensitively (ASCII only, as llama.cpp's adaptation
// of (?i:...)) when `fold`.
size_t match_contraction(const Text& t, size_t pos, size_t end, bool fold) {
  if (t.cp(pos) != '\'' || pos + 1 >= end) return pos;
  const auto at = [&](size_t i) { return fold ? ascii_lower(t.cp(i)) : t.cp(i); };
  const uint32_t a = at(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
  if (pos + 2 < end) {
    const uint32_t b = at(pos + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
  }
  return pos;
}

// \s+(?!\S)|\s+ : a whitespace run, less its last character when a non-space follows.
size_t match_trailing_spaces(const Text& t, size_t pos, size_t end) {
  if (!t.space(pos)) return pos;
  const size_t e = run(pos, end, [&](size_t i) { return t.space(i); });
  return (e == end || e - pos == 1) ? e : e - 1;
}

// \s*[\r\n]+ : whitespace up to and including the last \r or \n of the whitespace run.
size_t match_spaces_to_newline(const Text& t, size_t pos, size_t end) {
  size_t last = pos;
  for (size_t i = pos; i < end && t.space(i); ++i)
    if (t.newline(i)) last = i + 1;
  return last;
}

// <lead>?X+ where the optional lead is `lead_ok`: greedy lead, then backtrack.
template <typename Lead, typename Body>
size_t match_led_run(size_t pos, size_t end, Lead lead_ok, Body body) {
  if (lead_ok(pos) && pos + 1 < end && body(pos + 1)) return run(pos + 1, end, body);
  if (body(pos)) return run(pos, end, body);
  return pos;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
size_t match_gpt2(const Text& t, size_t pos, size_t end) {
  if (const size_t m = match_contraction(t, pos, end, false); m > pos) return m;
  const auto is_space_char = [&](size_t i) { return t.cp(i) == ' '; };
  if (size_t m = match_led_run(pos, end, is_space_char, [&](size_t i) { return t.letter(i); }); m > pos) return m;
  if (size_t m = match_led_run(pos, end, is_space_char, [&](size_t i) { return t.number(i); }); m > pos) return m;
  if (size_t m = match_led_run(pos, end, is_space_char, [&](size_t i) { return t.other(i); }); m > pos) return m;
  return match_trailing_spaces(t, pos, end);
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}
//   | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
template <size_t max_digits>
size_t match_llama3(const Text& t, size_t pos, size_t end) {
  if (const size_t m = match_contraction(t, pos, end, true); m > pos) return m;
  const auto letter = [&](size_t i) { return t.letter(i); };
  const auto lead = [&](size_t i) { return !t.newline(i) && !t.letter(i) && !t.number(i); };
  if (size_t m = match_led_run(pos, end, lead, letter); m > pos) return m;
  if (t.number(pos)) return std::min(run(pos, end, [&](size_t i) { return t.number(i); }), pos + max_digits);
  const auto is_space_char = [&](size_t i) { return t.cp(i) == ' '; };
  if (size_t m = match_led_run(pos, end, is_space_char, [&](size_t i) { return t.other(i); }); m > pos)
    return run(m, end, [&](size_t i) { return t.newline(i); });
  if (size_t m = match_spaces_to_newline(t, pos, end); m > pos) return m;
  return match_trailing_spaces(t, pos, end);
}

// [^\r\n\p{L}\p{N}]?U*D+(?i:'s|...)?|[^\r\n\p{L}\p{N}]?U+D*(?i:'s|...)?|\p{N}{1,max_digits}
//   | ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
// with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and D = [\p{Ll}\p{Lm}\p{Lo}\p{M}] (GPT-4o,
// Llama 4; Mistral's tekken has single digits and no contractions).
template <size_t max_digits, bool contractions>
size_t match_cased_words(const Text& t, size_t pos, size_t end) {
  const auto upper = [&](size_t i) { return t.has(i, kUpperish); };
  const auto lower = [&](size_t i) { return t.has(i, kLowerish); };
  const auto tail = [&](size_t e) {
    if (!contractions || e >= end) return e;
    const size_t m = match_contraction(t, e, end, true);
    return m > e ? m : e;
  };
  const bool lead_ok = !t.newline(pos) && !t.letter(pos) && !t.number(pos);
  // U*D+ : the upper run gives back characters until a lower one can follow.
  const auto upper_then_lower = [&](size_t s) -> size_t {
    const size_t u = run(s, end, upper);
    for (size_t m = u + 1; m-- > s;)
      if (m < end && lower(m)) return tail(run(m, end, lower));
    return s;
  };
  const auto upper_run_then_lower = [&](size_t s) -> size_t {
    if (s >= end || !upper(s)) return s;
    return tail(run(run(s, end, upper), end, lower));
  };
  if (lead_ok && pos + 1 < end) {
    if (const size_t m = upper_then_lower(pos + 1); m > pos + 1) return m;
  }
  if (const size_t m = upper_then_lower(pos); m > pos) return m;
  if (lead_ok && pos + 1 < end) {
    if (const size_t m = upper_run_then_lower(pos + 1); m > pos + 1) return m;
  }
  if (const size_t m = upper_run_then_lower(pos); m > pos) return m;
  if (t.number(pos)) return std::min(run(pos, end, [&](size_t i) { return t.number(i); }), pos + max_digits);
  const auto is_space_char = [&](size_t i) { return t.cp(i) == ' '; };
  if (size_t m = match_led_run(pos, end, is_space_char, [&](size_t i) { return t.other(i); }); m > pos)
    return run(m, end, [&](size_t i) { return t.newline(i) || t.cp(i) == '/'; });
  if (size_t m = match_spaces_to_newline(t, pos, end); m > pos) return m;
  return match_trailing_spaces(t, pos, end);
}

// ------------------------------------------------------------------ simple classes

size_t match_one_number(const Text& t, size_t pos, size_t) { return t.number(pos) ? pos + 1 : pos; }

size_t match_numbers(const Text& t, size_t pos, size_t end) {
  return run(pos, end, [&](size_t i) { return t.number(i); });
}

size_t match_numbers_1_3(const Text& t, size_t pos, size_t end) { return std::min(match_numbers(t, pos, end), pos + 3); }

// [0-9][0-9][0-9]
size_t match_three_ascii_digits(const Text& t, size_t pos, size_t end) {
  if (pos + 3 > end) return pos;
  for (size_t i = pos; i < pos + 3; ++i)
    if (t.cp(i) < '0' || t.cp(i) > '9') return pos;
  return pos + 3;
}

// [\r\n]
size_t match_newline(const Text& t, size_t pos, size_t) { return t.newline(pos) ? pos + 1 : pos; }

bool in_ascii_set(uint32_t cp, std::string_view set) { return cp < 128 && set.find(static_cast<char>(cp)) != std::string_view::npos; }

// [\p{P}\$\+<=>\^~\|]+ (llama.cpp's default pre-tokenizer)
size_t match_punct_run_default(const Text& t, size_t pos, size_t end) {
  return run(pos, end, [&](size_t i) { return t.has(i, kPunct) || in_ascii_set(t.cp(i), "$+<=>^~|"); });
}

// [\p{P}\$\+<=>\^~\|`]+ (Falcon)
size_t match_punct_run_falcon(const Text& t, size_t pos, size_t end) {
  return run(pos, end, [&](size_t i) { return t.has(i, kPunct) || in_ascii_set(t.cp(i), "$+<=>^~|`"); });
}

struct CpRange {
  uint32_t first;
  uint32_t last;
};

template <size_t N>
bool in_ranges(uint32_t cp, const CpRange (&ranges)[N]) {
  for (const CpRange& r : ranges)
    if (cp >= r.first && cp <= r.last) return true;
  return false;
}

// [一-龥ࠀ-一가-퟿]+ (DeepSeek)
constexpr CpRange kDeepseekCjk[] = {{0x4E00, 0x9FA5}, {0x0800, 0x4E00}, {0xAC00, 0xD7FF}};
// [一-龥぀-ゟ゠-ヿ]+ (DeepSeek V3)
constexpr CpRange kDeepseek3Cjk[] = {{0x4E00, 0x9FA5}, {0x3040, 0x309F}, {0x30A0, 0x30FF}};

// llama.cpp matches these explicit classes with std::wregex on a copy of the text in
// which every non-ASCII whitespace character is replaced by U+000B: such characters
// never match a class, even one whose range covers them (U+3000 below).
template <size_t N>
bool in_class(const Text& t, size_t i, const CpRange (&ranges)[N]) {
  return !(t.cp(i) > 0x7F && t.space(i)) && in_ranges(t.cp(i), ranges);
}

size_t match_deepseek_cjk(const Text& t, size_t pos, size_t end) {
  return run(pos, end, [&](size_t i) { return in_class(t, i, kDeepseekCjk); });
}

size_t match_deepseek3_cjk(const Text& t, size_t pos, size_t end) {
  return run(pos, end, [&](size_t i) { return in_class(t, i, kDeepseek3Cjk); });
}

// DeepSeek LLM's letter class (a subset of \p{L}: Latin, Greek, Cyrillic, Armenian,
// Georgian, Cherokee, ... as in its tokenizer.json).
constexpr CpRange kDeepseekLetters[] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA}, {0x1BC, 0x1BF},
    {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377}, {0x37B, 0x37D}, {0x37F, 0x37F},
    {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481},
    {0x48A, 0x52F}, {0x531, 0x556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D},
    {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC},
    {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102},
    {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126},
    {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3},
    {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF},
    {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F},
    {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF},
    {0x1E900, 0x1E943},
};
// DeepSeek LLM's punctuation class: ASCII punctuation, full-width forms, quotes, CJK marks.
constexpr CpRange kDeepseekPunct[] = {{0x21, 0x2F}, {0x3A, 0x7E}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
                                      {0x2018, 0x201F}, {0x3000, 0x3002}};

// \s?[letters]+
size_t match_deepseek_letters(const Text& t, size_t pos, size_t end) {
  return match_led_run(pos, end, [&](size_t i) { return t.space(i); },
                       [&](size_t i) { return in_class(t, i, kDeepseekLetters); });
}

// \s?[punctuation]+
size_t match_deepseek_punct(const Text& t, size_t pos, size_t end) {
  return match_led_run(pos, end, [&](size_t i) { return t.space(i); },
                       [&](size_t i) { return in_class(t, i, kDeepseekPunct); });
}

// \s+$
size_t match_spaces_at_end(const Text& t, size_t pos, size_t end) {
  const size_t e = run(pos, end, [&](size_t i) { return t.space(i); });
  return e == end ? e : pos;
}

// \s?\p{L}+
size_t match_space_letters(const Text& t, size_t pos, size_t end) {
  return match_led_run(pos, end, [&](size_t i) { return t.space(i); }, [&](size_t i) { return t.letter(i); });
}

// \s?\p{P}+
size_t match_space_punct(const Text& t, size_t pos, size_t end) {
  return match_led_run(pos, end, [&](size_t i) { return t.space(i); }, [&](size_t i) { return t.has(i, kPunct); });
}

// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
//   | ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (DeepSeek V3)
size_t match_deepseek3(const Text& t, size_t pos, size_t end) {
  const auto ascii_letter = [&](size_t i) { return t.cp(i) < 128 && t.letter(i); };
  if (t.cp(pos) < 128 && (t.has(pos, kPunct) || t.has(pos, kSymbol)) && pos + 1 < end && ascii_letter(pos + 1))
    return run(pos + 1, end, ascii_letter);
  const auto lead = [&](size_t i) { return !t.newline(i) && !t.has(i, kLetter | kPunct | kSymbol); };
  if (size_t m = match_led_run(pos, end, lead, [&](size_t i) { return t.has(i, kLetter | kMark); }); m > pos) return m;
  const auto is_space_char = [&](size_t i) { return t.cp(i) == ' '; };
  if (size_t m = match_led_run(pos, end, is_space_char, [&](size_t i) { return t.has(i, kPunct | kSymbol); }); m > pos)
    return run(m, end, [&](size_t i) { return t.newline(i); });
  if (size_t m = match_spaces_to_newline(t, pos, end); m > pos) return m;
  return match_trailing_spaces(t, pos, end);
}

//  ?[^(\s|.,!?…。，、।۔،)]+  (BLOOM; the parentheses and '|' are part of the class)
size_t match_bloom(const Text& t, size_t pos, size_t end) {
  const auto word = [&](size_t i) {
    if (t.space(i)) return false;
    switch (t.cp(i)) {
      case '(': case '|': case '.': case ',': case '!': case '?': case ')':
      case 0x2026: case 0x3002: case 0xFF0C: case 0x3001: case 0x0964: case 0x06D4: case 0x060C:
        return false;
      default:
        return true;
    }
  };
  return match_led_run(pos, end, [&](size_t i) { return t.cp(i) == ' '; }, word);
}

std::vector<Matcher> matchers_for(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::Gpt2:
      return {match_gpt2};
    case PreTokenizerKind::Llama3:
      return {match_llama3<3>};
    case PreTokenizerKind::Qwen2:
      return {match_llama3<1>};
    case PreTokenizerKind::Starcoder:
      return {match_one_number, match_gpt2};
    case PreTokenizerKind::Falcon:
      return {match_punct_run_falcon, match_gpt2, match_three_ascii_digits};
    case PreTokenizerKind::DeepseekLlm:
      return {match_newline, match_deepseek_letters, match_deepseek_punct, match_spaces_at_end, match_deepseek_cjk,
              match_numbers};
    case PreTokenizerKind::DeepseekCoder:
      return {match_newline, match_space_letters, match_space_punct, match_deepseek_cjk, match_one_number};
    case PreTokenizerKind::Deepseek3:
      return {match_numbers_1_3, match_deepseek3_cjk, match_deepseek3};
    case PreTokenizerKind::Bloom:
      return {match_bloom};
    case PreTokenizerKind::Viking:
      return {match_bloom, match_one_number};
    case PreTokenizerKind::Gpt4o:
      return {match_cased_words<3, true>};
    case PreTokenizerKind::Tekken:
      return {match_cased_words<1, false>};
    case PreTokenizerKind::Default:
      break;
  }
  return {match_punct_run_default, match_gpt2, match_numbers, match_three_ascii_digits};
}

bool name_in(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

PreTokenizerSpec pre_tokenizer_spec(std::string_view name) {
  PreTokenizerSpec s;
  using K = PreTokenizerKind;
  if (name.empty() || name == "default") {
    s.kind = K::Default;
  } else if (name_in(name, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                            "jina-v5-nano"})) {
    s.kind = K::Llama3;
    s.ignore_merges = true;
    s.add_bos = true;
  } else if (name_in(name, {"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"})) {
    s.kind = K::Llama3;
  } else if (name == "deepseek-llm") {
    s.kind = K::DeepseekLlm;
  } else if (name == "deepseek-coder") {
    s.kind = K::DeepseekCoder;
  } else if (name_in(name, {"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"})) {
    s.kind = K::Deepseek3;
  } else if (name == "falcon") {
    s.kind = K::Falcon;
  } else if (name_in(name, {"gpt-2", "mpt", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                            "a.x-4.0", "mellum", "modern-bert", "olmo", "jais", "trillion", "granite-docling",
                            "exaone4", "jina-v1-en", "jina-v2-code", "roberta-bpe"})) {
    s.kind = K::Gpt2;
  } else if (name_in(name, {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b",
                            "mellum2"})) {
    s.kind = K::Starcoder;
  } else if (name_in(name, {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "stablelm2", "megrez", "hunyuan",
                            "solar-open", "grok-2"})) {
    s.kind = K::Qwen2;
  } else if (name_in(name, {"poro-chat", "bloom", "gpt3-finnish"})) {
    s.kind = K::Bloom;
  } else if (name == "viking") {
    s.kind = K::Viking;
  } else if (name_in(name, {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"})) {
    s.kind = K::Gpt4o;
  } else if (name == "tekken") {
    s.kind = K::Tekken;
    s.ignore_merges = true;
    s.add_bos = true;
  } else {
    s.kind = K::Default;
    s.known = false;
  }
  return s;
}

std::vector<std::string_view> pre_tokenize(PreTokenizerKind kind, std::string_view text) {
  std::vector<std::string_view> words;
  if (text.empty()) return words;
  const Text t(text);
  std::vector<Span> spans{Span{0, t.chars.size()}};
  for (Matcher m : matchers_for(kind)) spans = split_all(t, spans, m);
  words.reserve(spans.size());
  for (const Span& s : spans) {
    const size_t begin = t.chars[s.begin].offset;
    const Utf8Char& last = t.chars[s.end - 1];
    words.push_back(text.substr(begin, last.offset + last.length - begin));
  }
  return words;
}

}  // namespace fafo::detail
