// What templates can call on values: Jinja2's filters (x | trim), tests
// (x is defined), and attribute access including the Python methods of str,
// dict and list (x.strip(), d.items(), d.get(k)).
//
// The parser asks is_known_filter / is_known_test so that a template naming one this
// interpreter lacks fails when it is loaded, naming it, rather than midway through
// a conversation.
#pragma once

#include <string>
#include <string_view>

#include "chat/jinja_value.h"

namespace fafo::jinja {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

// subject | name(args). Throws ChatTemplateError (Type / Undefined) for bad input.
Value apply_filter(std::string_view name, const Value& subject, CallArgs& args);
// subject is name(args).
bool apply_test(std::string_view name, const Value& subject, CallArgs& args);

// obj.name as Jinja2's sandbox resolves it: a Python method of the object if it has
// one by that name (returned as a bound function), else the dict entry or namespace
// attribute of that name, else an undefined value. obj undefined: UndefinedError.
Value get_attribute(const Value& obj, const std::string& name);

// Python's str.strip(chars) family; `chars` empty means whitespace.
std::string strip(std::string_view s, std::string_view chars, bool left, bool right);

}  // namespace fafo::jinja
