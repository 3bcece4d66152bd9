// Attribute access and the Python methods templates call on strings, dicts and
// lists (message.content.strip(), tool.items(), param.get("type", "any")).
#include <algorithm>
#include <charconv>
#include <cctype>
#include <optional>
#include <unordered_map>

#include "chat/jinja_builtins.h"

namespace fafo::jinja {

namespace {

using Kind = ChatTemplateError::Kind;
using Method = Value (*)(const Value& self, CallArgs& args);

// Python's str.isspace() for one code point given as UTF-8.
bool is_space_char(std::string_view c) {
  if (c.size() == 1) {
    const char b = c[0];
    return b == ' ' || (b >= '\t' && b <= '\r') || (b >= '\x1c' && b <= '\x1f');
  }
  static constexpr std::string_view unicode_spaces[] = {
      "\xC2\x85",     "\xC2\xA0",     "\xE1\x9A\x80", "\xE2\x80\x80", "\xE2\x80\x81", "\xE2\x80\x82",
      "\xE2\x80\x83", "\xE2\x80\x84", "\xE2\x80\x85", "\xE2\x80\x86", "\xE2\x80\x87", "\xE2\x80\x88",
      "\xE2\x80\x89", "\xE2\x80\x8A", "\xE2\x80\xA8", "\xE2\x80\xA9", "\xE2\x80\xAF", "\xE2\x81\x9F",
      "\xE3\x80\x80"};
  return std::find(std::begin(unicode_spaces), std::end(unicode_spaces), c) != std::end(unicode_spaces);
}

const std::string& self_string(const Value& self) { return self.as_string(); }

std::string string_arg(const CallArgs& args, size_t index, std::string_view name, std::string_view method) {
  const Value* v = args.get(index, name);
  if (!v) fail_type(std::string(method) + "() is missing the argument '" + std::string(name) + "'");
  if (v->is_undefined()) fail_undefined(*v);
  if (!v->is_string()) fail_type(std::string(method) + "() argument '" + std::string(name) + "' must be str, not " + type_name(*v));
  return v->as_string();
}

// An optional string argument; absent or None gives nullopt.
std::optional<std::string> optional_string_arg(const CallArgs& args, size_t index, std::string_view name, std::string_view method) {
  const Value* v = args.get(index, name);
  if (!v || v->is_none()) return std::nullopt;
  return string_arg(args, index, name, method);
}

int64_t int_arg(const CallArgs& args, size_t index, std::string_view name, int64_t fallback) {
  const Value* v = args.get(index, name);
  if (!v || v->is_none()) return fallback;
  if (!v->is_int() && !v->is_bool()) fail_type("argument '" + std::string(name) + "' must be an integer, not " + type_name(*v));
  return v->as_int();
}

// Code point index of a byte offset.
int64_t char_index(const std::string& s, size_t byte_offset) {
  return static_cast<int64_t>(utf8_count(std::string_view(s).substr(0, byte_offset)));
}

// ---- str ----

Value str_strip(const Value& self, CallArgs& a) {
  a.expect_at_most("str.strip", 1, {"chars"});
  return Value::string(strip(self_string(self), optional_string_arg(a, 0, "chars", "str.strip").value_or(""), true, true));
}
Value str_lstrip(const Value& self, CallArgs& a) {
  a.expect_at_most("str.lstrip", 1, {"chars"});
  return Value::string(strip(self_string(self), optional_string_arg(a, 0, "chars", "str.lstrip").value_or(""), true, false));
}
Value str_rstrip(const Value& self, CallArgs& a) {
  a.expect_at_most("str.rstrip", 1, {"chars"});
  return Value::string(strip(self_string(self), optional_string_arg(a, 0, "chars", "str.rstrip").value_or(""), false, true));
}

std::vector<Value> split_whitespace(const std::string& s, int64_t maxsplit, bool from_right) {
  std::vector<std::string> chars = utf8_chars(s);
  if (from_right) std::reverse(chars.begin(), chars.end());
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < chars.size()) {
    while (i < chars.size() && is_space_char(chars[i])) ++i;
    if (i == chars.size()) break;
    std::string word;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      size_t end = chars.size();
      while (end > i && is_space_char(chars[end - 1])) --end;
      for (size_t k = i; k < end; ++k) word += chars[k];
      i = chars.size();
    } else {
      while (i < chars.size() && !is_space_char(chars[i])) word += chars[i++];
    }
    parts.push_back(std::move(word));
  }
  std::vector<Value> out;
  for (auto& p : parts) {
    if (from_right) {
      std::vector<std::string> cs = utf8_chars(p);
      std::reverse(cs.begin(), cs.end());
      p.clear();
      for (auto& c : cs) p += c;
    }
    out.push_back(Value::string(std::move(p)));
  }
  if (from_right) std::reverse(out.begin(), out.end());
  return out;
}

Value split_impl(const Value& self, CallArgs& a, bool from_right) {
  const char* name = from_right ? "str.rsplit" : "str.split";
  a.expect_at_most(name, 2, {"sep", "maxsplit"});
  const std::string& s = self_string(self);
  const std::optional<std::string> sep = optional_string_arg(a, 0, "sep", name);
  const int64_t maxsplit = int_arg(a, 1, "maxsplit", -1);
  if (!sep) return Value::list(split_whitespace(s, maxsplit, from_right));
  if (sep->empty()) fail_type("empty separator");
  std::vector<std::string> parts;
  if (!from_right) {
    size_t start = 0;
    for (;;) {
      const size_t at = (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) ? std::string::npos : s.find(*sep, start);
      if (at == std::string::npos) {
        parts.push_back(s.substr(start));
        break;
      }
      parts.push_back(s.substr(start, at - start));
      start = at + sep->size();
    }
  } else {
    size_t end = s.size();
    for (;;) {
      const size_t at = (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) || end < sep->size()
                            ? std::string::npos
                            : s.rfind(*sep, end - sep->size());
      if (at == std::string::npos) {
        parts.push_back(s.substr(0, end));
        break;
      }
      parts.push_back(s.substr(at + sep->size(), end - at - sep->size()));
      end = at;
    }
    std::reverse(parts.begin(), parts.end());
  }
  std::vector<Value> out;
  for (auto& p : parts) out.push_back(Value::string(std::move(p)));
  return Value::list(std::move(out));
}
Value str_split(const Value& self, CallArgs& a) { return split_impl(self, a, false); }
Value str_rsplit(const Value& self, CallArgs& a) { return split_impl(self, a, true); }

Value affix_impl(const Value& self, CallArgs& a, bool prefix) {
  const char* name = prefix ? "str.startswith" : "str.endswith";
  a.expect_at_most(name, 1, {});
  const Value* arg = a.get(0, "");
  if (!arg) fail_type(std::string(name) + "() takes at least 1 argument");
  std::vector<Value> candidates = arg->is_tuple() ? arg->as_list().items : std::vector<Value>{*arg};
  const std::string& s = self_string(self);
  for (const Value& c : candidates) {
    if (c.is_undefined()) fail_undefined(c);
    if (!c.is_string()) fail_type(std::string(name) + "() argument must be str or a tuple of str, not " + type_name(c));
    const std::string& x = c.as_string();
    if (x.size() <= s.size() && (prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0))
      return Value::boolean(true);
  }
  return Value::boolean(false);
}
Value str_startswith(const Value& self, CallArgs& a) { return affix_impl(self, a, true); }
Value str_endswith(const Value& self, CallArgs& a) { return affix_impl(self, a, false); }

std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) c = static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(c)) : std::tolower(static_cast<unsigned char>(c)));
  return s;
}
Value str_upper(const Value& self, CallArgs& a) {
  a.expect_at_most("str.upper", 0, {});
  return Value::string(ascii_case(self_string(self), true));
}
Value str_lower(const Value& self, CallArgs& a) {
  a.expect_at_most("str.lower", 0, {});
  return Value::string(ascii_case(self_string(self), false));
}
Value str_title(const Value& self, CallArgs& a) {
  a.expect_at_most("str.title", 0, {});
  std::string s = self_string(self);
  bool previous_cased = false;
  for (char& c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(previous_cased ? std::tolower(u) : std::toupper(u));
      previous_cased = true;
    } else {
      previous_cased = false;
    }
  }
  return Value::string(std::move(s));
}
Value str_capitalize(const Value& self, CallArgs& a) {
  a.expect_at_most("str.capitalize", 0, {});
  std::string s = ascii_case(self_string(self), false);
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return Value::string(std::move(s));
}

Value str_replace(const Value& self, CallArgs& a) {
  a.expect_at_most("str.replace", 3, {"count"});
  const std::string old_text = string_arg(a, 0, "old", "str.replace");
  const std::string new_text = string_arg(a, 1, "new", "str.replace");
  int64_t count = int_arg(a, 2, "count", -1);
  const std::string& s = self_string(self);
  std::string out;
  if (old_text.empty()) {  // Python inserts `new` before every character and at the end
    const std::vector<std::string> chars = utf8_chars(s);
    for (const std::string& c : chars) {
      if (count != 0) {
        append_limited(out, new_text, "str.replace");
        if (count > 0) --count;  // a negative count means every place
      }
      out += c;
    }
    if (count != 0) out += new_text;
    return Value::string(std::move(out));
  }
  size_t start = 0;
  for (;;) {
    const size_t at = count == 0 ? std::string::npos : s.find(old_text, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    append_limited(out, new_text, "str.replace");
    start = at + old_text.size();
    if (count > 0) --count;
  }
  out.append(s, start, std::string::npos);
  return Value::string(std::move(out));
}

Value find_impl(const Value& self, CallArgs& a, bool reverse, bool must_exist, const char* name) {
  a.expect_at_most(name, 1, {});
  const std::string sub = string_arg(a, 0, "sub", name);
  const std::string& s = self_string(self);
  const size_t at = reverse ? s.rfind(sub) : s.find(sub);
  if (at == std::string::npos) {
    if (must_exist) fail_type("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(char_index(s, at));
}
Value str_find(const Value& self, CallArgs& a) { return find_impl(self, a, false, false, "str.find"); }
Value str_rfind(const Value& self, CallArgs& a) { return find_impl(self, a, true, false, "str.rfind"); }
Value str_index(const Value& self, CallArgs& a) { return find_impl(self, a, false, true, "str.index"); }

Value str_count(const Value& self, CallArgs& a) {
  a.expect_at_most("str.count", 1, {});
  const std::string sub = string_arg(a, 0, "sub", "str.count");
  const std::string& s = self_string(self);
  if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_count(s)) + 1);
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
  return Value::integer(n);
}

Value str_join(const Value& self, CallArgs& a) {
  a.expect_at_most("str.join", 1, {});
  const Value* items = a.get(0, "iterable");
  if (!items) fail_type("str.join() takes exactly one argument");
  if (items->is_undefined()) fail_undefined(*items);
  std::string out;
  bool first = true;
  for (const Value& v : iterate(*items)) {
    if (!v.is_string()) fail_type("sequence item: expected str instance, " + type_name(v) + " found");
    if (!first) append_limited(out, self_string(self), "str.join");
    first = false;
    append_limited(out, v.as_string(), "str.join");
  }
  return Value::string(std::move(out));
}

// "{} and {0} and {name}" with positional and keyword arguments; no format specs.
Value str_format(const Value& self, CallArgs& a) {
  const std::string& s = self_string(self);
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '{' && i + 1 < s.size() && s[i + 1] == '{') {
      out += '{', ++i;
    } else if (s[i] == '}' && i + 1 < s.size() && s[i + 1] == '}') {
      out += '}', ++i;
    } else if (s[i] == '{') {
      const size_t close = s.find('}', i);
      if (close == std::string::npos) fail_type("str.format(): single '{' encountered in format string");
      const std::string field = s.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos)
        fail(Kind::Unsupported, "unsupported construct: str.format() field '{" + field + "}' (only {}, {0} and {name})");
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_index < a.positional.size() ? &a.positional[auto_index] : nullptr;
        ++auto_index;
      } else if (std::all_of(field.begin(), field.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
        size_t k = 0;
        const auto parsed = std::from_chars(field.data(), field.data() + field.size(), k);
        v = parsed.ec == std::errc() && k < a.positional.size() ? &a.positional[k] : nullptr;
      } else {
        for (const auto& [k, kv] : a.keyword)
          if (k == field) v = &kv;
      }
      if (!v) fail_type("str.format(): no argument for the field '{" + field + "}'");
      append_limited(out, to_str(*v), "str.format");
      i = close;
    } else {
      out += s[i];
    }
  }
  return Value::string(std::move(out));
}

template <bool (*Pred)(unsigned char)>
Value char_class(const Value& self, CallArgs& a) {
  a.expect_at_most("str.is...", 0, {});
  const std::string& s = self_string(self);
  return Value::boolean(!s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return Pred(static_cast<unsigned char>(c)); }));
}
bool digit(unsigned char c) { return std::isdigit(c) != 0; }
bool alpha(unsigned char c) { return std::isalpha(c) != 0; }
bool alnum(unsigned char c) { return std::isalnum(c) != 0; }
bool space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

Value case_test(const Value& self, bool upper) {
  const std::string& s = self_string(self);
  bool cased = false;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (upper ? std::islower(c) : std::isupper(c)) return Value::boolean(false);
    if (std::isalpha(c)) cased = true;
  }
  return Value::boolean(cased);
}
Value str_islower(const Value& self, CallArgs&) { return case_test(self, false); }
Value str_isupper(const Value& self, CallArgs&) { return case_test(self, true); }

Value str_splitlines(const Value& self, CallArgs& a) {
  a.expect_at_most("str.splitlines", 1, {"keepends"});
  const Value* keep = a.get(0, "keepends");
  const bool keepends = keep && keep->truthy();
  const std::string& s = self_string(self);
  std::vector<Value> lines;
  size_t start = 0, i = 0;
  while (i < s.size()) {
    if (s[i] == '\n' || s[i] == '\r') {
      size_t end = i + 1;
      if (s[i] == '\r' && end < s.size() && s[end] == '\n') ++end;
      lines.push_back(Value::string(s.substr(start, (keepends ? end : i) - start)));
      start = i = end;
    } else {
      ++i;
    }
  }
  if (start < s.size()) lines.push_back(Value::string(s.substr(start)));
  return Value::list(std::move(lines));
}

Value str_removeprefix(const Value& self, CallArgs& a) {
  const std::string p = string_arg(a, 0, "prefix", "str.removeprefix");
  const std::string& s = self_string(self);
  return Value::string(s.compare(0, p.size(), p) == 0 ? s.substr(p.size()) : s);
}
Value str_removesuffix(const Value& self, CallArgs& a) {
  const std::string p = string_arg(a, 0, "suffix", "str.removesuffix");
  const std::string& s = self_string(self);
  const bool has = p.size() <= s.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
  return Value::string(has && !p.empty() ? s.substr(0, s.size() - p.size()) : s);
}

// ---- dict ----

Value dict_items(const Value& self, CallArgs& a) {
  a.expect_at_most("dict.items", 0, {});
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().entries) out.push_back(Value::tuple({k, v}));
  return Value::list(std::move(out));
}
Value dict_keys(const Value& self, CallArgs& a) {
  a.expect_at_most("dict.keys", 0, {});
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().entries) out.push_back(k);
  return Value::list(std::move(out));
}
Value dict_values(const Value& self, CallArgs& a) {
  a.expect_at_most("dict.values", 0, {});
  std::vector<Value> out;
  for (const auto& [k, v] : self.as_dict().entries) out.push_back(v);
  return Value::list(std::move(out));
}
Value dict_get(const Value& self, CallArgs& a) {
  a.expect_at_most("dict.get", 2, {});
  const Value* key = a.get(0, "");
  if (!key) fail_type("dict.get() takes at least 1 argument");
  const Value* found = self.as_dict().find(*key);
  if (found) return *found;
  const Value* fallback = a.get(1, "");
  return fallback ? *fallback : Value::none();
}
Value dict_copy(const Value& self, CallArgs&) {
  Value d = Value::dict();
  d.as_dict().entries = self.as_dict().entries;
  return d;
}

// ---- list ----

Value list_index(const Value& self, CallArgs& a) {
  a.expect_at_most("list.index", 1, {});
  const Value* x = a.get(0, "");
  if (!x) fail_type("list.index() takes exactly one argument");
  const auto& items = self.as_list().items;
  for (size_t i = 0; i < items.size(); ++i)
    if (equals(items[i], *x)) return Value::integer(static_cast<int64_t>(i));
  fail_type(to_repr(*x) + " is not in list");
}
Value list_count(const Value& self, CallArgs& a) {
  a.expect_at_most("list.count", 1, {});
  const Value* x = a.get(0, "");
  if (!x) fail_type("list.count() takes exactly one argument");
  const auto& items = self.as_list().items;
  return Value::integer(std::count_if(items.begin(), items.end(), [&](const Value& v) { return equals(v, *x); }));
}
Value list_copy(const Value& self, CallArgs&) { return Value::list(self.as_list().items); }

Value immutable(const Value& self, CallArgs&) {
  fail_type("the template tried to modify a " + type_name(self) +
            ", which the sandbox forbids (Hugging Face renders chat templates in an immutable sandbox)");
}

const std::unordered_map<std::string_view, Method>& string_methods() {
  static const std::unordered_map<std::string_view, Method> m = {
      {"strip", str_strip},
      {"lstrip", str_lstrip},
      {"rstrip", str_rstrip},
      {"split", str_split},
      {"rsplit", str_rsplit},
      {"startswith", str_startswith},
      {"endswith", str_endswith},
      {"upper", str_upper},
      {"lower", str_lower},
      {"title", str_title},
      {"capitalize", str_capitalize},
      {"replace", str_replace},
      {"find", str_find},
      {"rfind", str_rfind},
      {"index", str_index},
      {"count", str_count},
      {"join", str_join},
      {"format", str_format},
      {"isdigit", char_class<digit>},
      {"isnumeric", char_class<digit>},
      {"isdecimal", char_class<digit>},
      {"isalpha", char_class<alpha>},
      {"isalnum", char_class<alnum>},
      {"isspace", char_class<space>},
      {"islower", str_islower},
      {"isupper", str_isupper},
      {"splitlines", str_splitlines},
      {"removeprefix", str_removeprefix},
      {"removesuffix", str_removesuffix},
  };
  return m;
}

const std::unordered_map<std::string_view, Method>& dict_methods() {
  static const std::unordered_map<std::string_view, Method> m = {
      {"items", dict_items}, {"keys", dict_keys},   {"values", dict_values}, {"get", dict_get},
      {"copy", dict_copy},   {"update", immutable}, {"pop", immutable},      {"popitem", immutable},
      {"setdefault", immutable}, {"clear", immutable},
  };
  return m;
}

const std::unordered_map<std::string_view, Method>& list_methods() {
  static const std::unordered_map<std::string_view, Method> m = {
      {"index", list_index},  {"count", list_count},  {"copy", list_copy},     {"append", immutable},
      {"extend", immutable},  {"insert", immutable},  {"pop", immutable},      {"remove", immutable},
      {"clear", immutable},   {"sort", immutable},    {"reverse", immutable},
  };
  return m;
}

Value bound_method(const Value& self, const std::string& type, const std::string& name, Method method) {
  return Value::function(type + "." + name, [self, method](CallArgs& args) { return method(self, args); });
}

}  // namespace

std::string strip(std::string_view s, std::string_view chars, bool left, bool right) {
  // The characters to strip, sorted for lookup; one pass over s, nothing made per character.
  std::vector<std::string_view> set;
  for (size_t i = 0; i < chars.size();) {
    const size_t n = utf8_char_bytes(chars, i);
    set.push_back(chars.substr(i, n));
    i += n;
  }
  std::sort(set.begin(), set.end());
  auto strippable = [&](std::string_view c) {
    return chars.empty() ? is_space_char(c) : std::binary_search(set.begin(), set.end(), c);
  };
  count_read(4 * s.size());  // decoded a character at a time
  size_t begin = s.size(), end = 0;  // of the first and past the last character kept
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_char_bytes(s, i);
    if (!strippable(s.substr(i, n))) {
      begin = std::min(begin, i);
      end = i + n;
    }
    i += n;
  }
  if (begin >= end) return "";  // nothing kept: stripping from either side leaves nothing
  return std::string(s.substr(left ? begin : 0, (right ? end : s.size()) - (left ? begin : 0)));
}

Value get_attribute(const Value& obj, const std::string& name) {
  switch (obj.type()) {
    case Value::Type::Undefined: fail_undefined(obj);
    case Value::Type::String: {
      const auto& m = string_methods();
      if (auto it = m.find(name); it != m.end()) return bound_method(obj, "str", name, it->second);
      break;
    }
    case Value::Type::List: {
      const auto& m = list_methods();
      if (auto it = m.find(name); it != m.end()) return bound_method(obj, "list", name, it->second);
      break;
    }
    case Value::Type::Dict: {
      if (!obj.is_namespace()) {
        const auto& m = dict_methods();
        if (auto it = m.find(name); it != m.end()) return bound_method(obj, "dict", name, it->second);
      }
      if (const Value* v = obj.as_dict().find(std::string_view(name))) return *v;
      break;
    }
    default: break;
  }
  std::string hint = obj.is_none() ? std::string("None") : type_name(obj) + " object";
  hint = "'" + hint + "'";
  hint += " has no attribute '";
  hint += name;
  hint += "'";
  return Value::undefined(std::move(hint));
}

}  // namespace fafo::jinja
