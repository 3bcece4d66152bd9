// Jinja2's tests (value is name(args)), with Python's notion of each type: an
// undefined value is iterable (as Jinja2's Undefined is), bool counts as a number.
#include <cctype>
#include <unordered_map>

#include "chat/jinja_builtins.h"

namespace fafo::jinja {

namespace {

using Test = bool (*)(const Value& v, const CallArgs& args);

const Value& operand(const CallArgs& a, const char* test) {
  const Value* other = a.get(0, "other");
  if (!other) other = a.get(0, "value");
  if (!other) fail_type(std::string("the test '") + test + "' needs an argument");
  return *other;
}

bool t_defined(const Value& v, const CallArgs&) { return !v.is_undefined(); }
bool t_undefined(const Value& v, const CallArgs&) { return v.is_undefined(); }
bool t_none(const Value& v, const CallArgs&) { return v.is_none(); }
bool t_boolean(const Value& v, const CallArgs&) { return v.is_bool(); }
bool t_true(const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(const Value& v, const CallArgs&) { return v.is_int(); }
bool t_float(const Value& v, const CallArgs&) { return v.is_float(); }
bool t_number(const Value& v, const CallArgs&) { return v.is_number(); }
bool t_string(const Value& v, const CallArgs&) { return v.is_string(); }
bool t_mapping(const Value& v, const CallArgs&) { return v.is_dict() && !v.is_namespace(); }
bool t_iterable(const Value& v, const CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace());
}
bool t_sequence(const Value& v, const CallArgs& a) { return t_iterable(v, a); }
bool t_callable(const Value& v, const CallArgs&) { return v.is_function(); }
bool t_escaped(const Value& v, const CallArgs&) { return v.is_markup(); }

bool t_sameas(const Value& v, const CallArgs& a) {
  const Value& other = operand(a, "sameas");
  if (v.type() != other.type()) return false;
  if (v.is_list()) return &v.as_list() == &other.as_list();
  if (v.is_dict()) return &v.as_dict() == &other.as_dict();
  return equals(v, other);
}

bool t_lower(const Value& v, const CallArgs&) {
  if (!v.is_string()) return false;
  for (const char c : v.as_string())
    if (std::isupper(static_cast<unsigned char>(c))) return false;
  return true;
}
bool t_upper(const Value& v, const CallArgs&) {
  if (!v.is_string()) return false;
  for (const char c : v.as_string())
    if (std::islower(static_cast<unsigned char>(c))) return false;
  return true;
}

int64_t integer_of(const Value& v, const char* test) {
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_int() && !v.is_bool()) fail_type(std::string("the test '") + test + "' needs an integer, not " + type_name(v));
  return v.as_int();
}
bool t_even(const Value& v, const CallArgs&) { return integer_of(v, "even") % 2 == 0; }
bool t_odd(const Value& v, const CallArgs&) { return integer_of(v, "odd") % 2 != 0; }
bool t_divisibleby(const Value& v, const CallArgs& a) {
  const int64_t d = integer_of(operand(a, "divisibleby"), "divisibleby");
  if (d == 0) fail_type("integer division or modulo by zero");
  const int64_t x = integer_of(v, "divisibleby");
  return d == -1 || x % d == 0;  // INT64_MIN % -1 would trap
}

bool t_eq(const Value& v, const CallArgs& a) { return equals(v, operand(a, "eq")); }
bool t_ne(const Value& v, const CallArgs& a) { return !equals(v, operand(a, "ne")); }
bool t_lt(const Value& v, const CallArgs& a) { return compare(v, operand(a, "lt"), "<") < 0; }
bool t_le(const Value& v, const CallArgs& a) { return compare(v, operand(a, "le"), "<=") <= 0; }
bool t_gt(const Value& v, const CallArgs& a) { return compare(v, operand(a, "gt"), ">") > 0; }
bool t_ge(const Value& v, const CallArgs& a) { return compare(v, operand(a, "ge"), ">=") >= 0; }
bool t_in(const Value& v, const CallArgs& a) { return contains(operand(a, "in"), v); }

bool t_filter(const Value& v, const CallArgs&) { return v.is_string() && is_known_filter(v.as_string()); }
bool t_test(const Value& v, const CallArgs&) { return v.is_string() && is_known_test(v.as_string()); }

const std::unordered_map<std::string_view, Test>& tests() {
  static const std::unordered_map<std::string_view, Test> table = {
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},
      {"boolean", t_boolean},   {"true", t_true},           {"false", t_false},
      {"integer", t_integer},   {"float", t_float},         {"number", t_number},
      {"string", t_string},     {"mapping", t_mapping},     {"iterable", t_iterable},
      {"sequence", t_sequence}, {"callable", t_callable},   {"escaped", t_escaped},
      {"sameas", t_sameas},     {"lower", t_lower},         {"upper", t_upper},
      {"even", t_even},         {"odd", t_odd},             {"divisibleby", t_divisibleby},
      {"eq", t_eq},             {"equalto", t_eq},          {"ne", t_ne},
      {"lt", t_lt},             {"lessthan", t_lt},         {"le", t_le},
      {"gt", t_gt},             {"greaterthan", t_gt},      {"ge", t_ge},
      {"in", t_in},             {"filter", t_filter},       {"test", t_test},
  };
  return table;
}

}  // namespace

bool is_known_test(std::string_view name) { return tests().count(name) != 0; }

bool apply_test(std::string_view name, const Value& subject, CallArgs& args) {
  const auto it = tests().find(name);
  if (it == tests().end())
    fail(ChatTemplateError::Kind::Unsupported, "unsupported construct: the test '" + std::string(name) + "'");
  return it->second(subject, args);
}

}  // namespace fafo::jinja
