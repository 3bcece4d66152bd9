// Renders a parsed template (jinja_parser.h) to text.
//
// Scoping follows Jinja2: a for loop and a macro call get a scope of their own,
// so `set` inside them does not change the variables outside (templates use
// namespace() objects for that); if blocks do not. Macros see the variables of
// the scope they were defined in. Errors carry the line of the expression or
// statement that raised them.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace fafo::jinja {

struct RenderLimits {
  int max_call_depth = 200;              // nested macro calls (recursive macros)
  // Of one rendering, macro outputs included; ChatTemplate lowers it to what the
  // context can use (chat_rendering_cap). 2 MiB: the cap of a 256k-token context.
  size_t max_output_bytes = 2u << 20;
  int64_t max_loop_iterations = 1'000'000;  // for-loop bodies run, over the whole rendering
  // The bytes of strings it may make in all: four times its output, 4 to 64 MiB.
  size_t string_bytes() const {
    return std::clamp(4 * max_output_bytes, kMinRenderStringBytes, kMaxRenderStringBytes);
  }
};

// Renders `tmpl` with `variables` (messages, bos_token, raise_exception, ...) on
// top of Jinja2's own globals (range, namespace, dict). Throws ChatTemplateError.
std::string render(const Template& tmpl, const std::vector<std::pair<std::string, Value>>& variables,
                   const RenderLimits& limits = {});

}  // namespace fafo::jinja
