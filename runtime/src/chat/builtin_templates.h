// The chat formats fafo knows by name (--chat-template NAME), as Jinja sources
// rendered by the same interpreter as a model's own template.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fafo::chat {

struct BuiltinTemplate {
  std::string_view name;
  std::string_view source;  // Jinja
};

const std::vector<BuiltinTemplate>& builtin_templates();
const BuiltinTemplate* find_builtin_template(std::string_view name);

}  // namespace fafo::chat
