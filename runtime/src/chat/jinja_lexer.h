// Splits a Jinja template source into tokens: literal text between tags, the
// delimiters of {{ ... }} and {% ... %}, and the tokens of the expressions and
// statements inside them. Comments {# ... #} are dropped.
//
// Whitespace control happens here, as in Jinja2's lexer: a '-' inside a delimiter
// ({%- ... -%}) strips all whitespace on that side; trim_blocks removes the first
// newline after a block or comment tag; lstrip_blocks removes spaces and tabs
// between the start of a line and a block or comment tag; '+' ({%+ ... +%})
// disables the latter two for that side of the tag.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fafo::jinja {

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  bool keep_trailing_newline = false;  // Jinja2's default drops one newline at the very end
};

struct Token {
  enum class Type {
    Text,        // literal template text (already whitespace-controlled)
    VarBegin,    // {{
    VarEnd,      // }}
    BlockBegin,  // {%
    BlockEnd,    // %}
    Name,        // identifiers and keywords (if, for, in, not, true, none, ...)
    String,      // text holds the unescaped value
    Integer,     // int_value
    Float,       // float_value
    Operator,    // + - * / // % ** ~ == != < > <= >= = ( ) [ ] { } , . : |
    End,         // end of the source
  };
  Type type = Type::End;
  std::string text;
  int line = 1;
  int64_t int_value = 0;
  double float_value = 0.0;
};

// Throws ChatTemplateError(Kind::Syntax) with the line for an unclosed tag, an
// unterminated string or a character that is not part of the expression syntax.
std::vector<Token> lex(std::string_view source, const LexOptions& options = {});

}  // namespace fafo::jinja
