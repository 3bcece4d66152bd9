#include "chat/jinja_lexer.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "fafo/chat_template.h"
#include "tokenizer/unicode.h"

namespace fafo::jinja {

namespace {

using Kind = ChatTemplateError::Kind;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Jinja2 normalizes every newline sequence to "\n" (newline_sequence) and, unless
// keep_trailing_newline, drops a single newline at the end of the template.
std::string normalize_newlines(std::string_view source, bool keep_trailing_newline) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!keep_trailing_newline && !out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexOptions& options) : src_(std::move(source)), options_(options) {}

  std::vector<Token> run() {
    bool line_starting = true;  // the previous tag ended at the start of a line
    while (pos_ < src_.size()) {
      const size_t tag = find_tag_start(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      if (tag == src_.size()) {
        emit_text(std::move(text), line_);
        pos_ = tag;
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char control = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (control == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (control != '+' && kind != '{' && options_.lstrip_blocks) {
        const size_t line_begin = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        const bool only_blanks = std::all_of(text.begin() + static_cast<std::ptrdiff_t>(line_begin), text.end(),
                                             [](char c) { return c == ' ' || c == '\t'; });
        if ((line_begin > 0 || line_starting) && only_blanks) text.resize(line_begin);
      }
      const int text_line = line_;
      advance_to(tag);
      emit_text(std::move(text), text_line);
      const size_t body = tag + 2 + ((control == '-' || control == '+') ? 1 : 0);
      if (kind == '#') {
        lex_comment(tag, body);
      } else {
        lex_tag(kind, body);
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back(Token{Token::Type::End, "", line_, 0, 0.0});
    return std::move(tokens_);
  }

 private:
  size_t find_tag_start(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  // Moves pos_ forward, counting lines.
  void advance_to(size_t to) {
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(pos_),
                                         src_.begin() + static_cast<std::ptrdiff_t>(to), '\n'));
    pos_ = to;
  }

  void emit_text(std::string text, int line) {
    if (!text.empty()) tokens_.push_back(Token{Token::Type::Text, std::move(text), line, 0, 0.0});
  }

  [[noreturn]] void error(const std::string& message, int line) const {
    throw ChatTemplateError(Kind::Syntax, message, line);
  }

  // After a tag's closing delimiter at `end` (one past it): '-' strips the following
  // whitespace, and block/comment tags drop one newline when trim_blocks is on.
  void finish_tag(size_t end, char control, bool is_block_or_comment) {
    size_t p = end;
    if (control == '-') {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (control != '+' && is_block_or_comment && options_.trim_blocks && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    advance_to(p);
  }

  void lex_comment(size_t tag, size_t body) {
    const size_t close = src_.find("#}", body);
    if (close == std::string::npos) error("the comment opened here is never closed with '#}'", line_);
    const char control = close > body && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : '\0';
    finish_tag(close + 2, control, true);
  }

  void lex_tag(char kind, size_t body) {
    const int open_line = line_;
    const bool block = kind == '%';
    tokens_.push_back(Token{block ? Token::Type::BlockBegin : Token::Type::VarBegin, block ? "{%" : "{{", line_, 0, 0.0});
    advance_to(body);
    const char close_char = block ? '%' : '}';
    std::vector<char> brackets;  // the tag ends only where brackets balance, as in Jinja2
    for (;;) {
      while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= src_.size())
        error(std::string("the tag '") + (block ? "{%" : "{{") + "' opened here is never closed with '" +
                  (block ? "%}" : "}}") + "'",
              open_line);
      if (brackets.empty()) {
        size_t p = pos_;
        char control = '\0';
        const std::string closer{close_char, '}'};
        if ((src_[p] == '-' || (block && src_[p] == '+')) && src_.compare(p + 1, 2, closer) == 0) {
          control = src_[p];
          ++p;
        }
        if (src_.compare(p, 2, closer) == 0) {
          tokens_.push_back(Token{block ? Token::Type::BlockEnd : Token::Type::VarEnd, block ? "%}" : "}}", line_, 0, 0.0});
          finish_tag(p + 2, control, block);
          return;
        }
      }
      lex_expression_token(brackets);
    }
  }

  void lex_expression_token(std::vector<char>& brackets) {
    const char c = src_[pos_];
    if (c == '"' || c == '\'') return lex_string();
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number();
    if (is_name_start(c)) {
      size_t end = pos_;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      tokens_.push_back(Token{Token::Type::Name, src_.substr(pos_, end - pos_), line_, 0, 0.0});
      advance_to(end);
      return;
    }
    static const std::array<std::string_view, 27> operators = {
        "//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">",
        "=",  "(",  ")",  "[",  "]",  "{",  "}", ",", ".", ":", "|", ";", "!"};
    for (std::string_view op : operators) {
      if (src_.compare(pos_, op.size(), op) != 0) continue;
      if (op == ";" || op == "!") break;  // not Jinja operators
      if (op == "(" || op == "[" || op == "{") brackets.push_back(op[0]);
      if (op == ")" || op == "]" || op == "}") {
        const char open = op == ")" ? '(' : op == "]" ? '[' : '{';
        if (brackets.empty() || brackets.back() != open) error("unexpected '" + std::string(op) + "'", line_);
        brackets.pop_back();
      }
      tokens_.push_back(Token{Token::Type::Operator, std::string(op), line_, 0, 0.0});
      advance_to(pos_ + op.size());
      return;
    }
    error("unexpected character '" + std::string(1, c) + "'", line_);
  }

  void lex_number() {
    size_t end = pos_;
    auto digits = [&]() {
      while (end < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[end])) || src_[end] == '_')) ++end;
    };
    digits();
    bool is_float = false;
    if (end + 1 < src_.size() && src_[end] == '.' && std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) {
        is_float = true;
        end = e;
        digits();
      }
    }
    std::string text = src_.substr(pos_, end - pos_);
    text.erase(std::remove(text.begin(), text.end(), '_'), text.end());
    Token t{is_float ? Token::Type::Float : Token::Type::Integer, text, line_, 0, 0.0};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE)
        throw ChatTemplateError(Kind::Limit, "the integer " + text + " does not fit in 64 bits", line_);
    }
    tokens_.push_back(std::move(t));
    advance_to(end);
  }

  // A string literal with Python's escape sequences; unknown escapes stay as written.
  void lex_string() {
    const char quote = src_[pos_];
    const int start_line = line_;
    std::string value;
    size_t p = pos_ + 1;
    for (;;) {
      if (p >= src_.size()) error("unterminated string literal", start_line);
      const char c = src_[p];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) error("unterminated string literal", start_line);
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case 'a': value += '\a'; break;
        case '0': value += '\0'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case '\n': break;  // a backslash-newline continues the line
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (p + n > src_.size() || !std::all_of(src_.begin() + static_cast<std::ptrdiff_t>(p),
                                                  src_.begin() + static_cast<std::ptrdiff_t>(p + n),
                                                  [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); }))
            error(std::string("truncated \\") + e + " escape in a string literal", line_);
          detail::append_utf8(value, static_cast<uint32_t>(std::strtoul(src_.substr(p, n).c_str(), nullptr, 16)));
          p += n;
          break;
        }
        default:
          value += '\\';
          value += e;
      }
    }
    tokens_.push_back(Token{Token::Type::String, std::move(value), start_line, 0, 0.0});
    advance_to(p + 1);
  }

  std::string src_;
  LexOptions options_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source, const LexOptions& options) {
  return Lexer(normalize_newlines(source, options.keep_trailing_newline), options).run();
}

}  // namespace fafo::jinja
