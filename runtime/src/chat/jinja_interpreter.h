// Renders a parsed template (jinja_parser.h) to text.
//
// Scoping follows Jinja2: a for loop and a macro call get a scope of their own,
// so `set` inside them does not change the variables outside (templates use
// namespace() objects for that); if blocks do not. Macros see the variables of
// the scope they were defined in. Errors carry the line of the expression or
// statement that raised them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"

namespace fafo::jinja {

struct RenderLimits {
  int max_call_depth = 200;              // nested macro calls (recursive macros)
  size_t max_output_bytes = 64u << 20;   // of one rendering, macro outputs included
  int64_t max_loop_iterations = 1'000'000;  // for-loop bodies run, over the whole rendering
};

// Renders `tmpl` with `variables` (messages, bos_token, raise_exception, ...) on
// top of Jinja2's own globals (range, namespace, dict). Throws ChatTemplateError.
std::string render(const Template& tmpl, const std::vector<std::pair<std::string, Value>>& variables,
                   const RenderLimits& limits = {});

}  // namespace fafo::jinja
