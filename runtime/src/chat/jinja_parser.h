// Builds the syntax tree of a Jinja template from its tokens (jinja_lexer.h).
//
// Statements: if/elif/else, for (with an `if` filter and an else block), set (to
// names, tuples of names, namespace attributes, or a block), macro, filter blocks,
// with, break/continue and Hugging Face's {% generation %}. Expressions follow
// Jinja2's grammar and precedence. Anything else (include, import, extends, block,
// call, raw, recursive loops, *args) is a ChatTemplateError(Kind::Unsupported)
// naming the construct and its line; malformed input is Kind::Syntax.
#pragma once

#include <memory>
#include <string_view>

#include "chat/jinja_ast.h"
#include "chat/jinja_lexer.h"

namespace fafo::jinja {

std::shared_ptr<const Template> parse_template(std::string_view source, const LexOptions& options = {});

}  // namespace fafo::jinja
