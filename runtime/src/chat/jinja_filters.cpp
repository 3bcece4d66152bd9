// Jinja2's filters (value | name(args)), with Jinja2 3.1's behaviour, and tojson
// as Hugging Face defines it for chat templates (json.dumps with ensure_ascii off,
// keys in insertion order).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <unordered_map>

#include "chat/jinja_builtins.h"

namespace fafo::jinja {

namespace {

using Kind = ChatTemplateError::Kind;
using Filter = Value (*)(const Value& v, CallArgs& args);
constexpr int64_t kMaxIndent = 1 << 16;  // indent / tojson widths (a bigger one is a template error)

bool flag(const CallArgs& a, size_t index, std::string_view name, bool fallback) {
  const Value* v = a.get(index, name);
  return v ? v->truthy() : fallback;
}

const Value* arg(const CallArgs& a, size_t index, std::string_view name) { return a.get(index, name); }

std::string text_of(const Value& v) { return to_str(v); }

// The items of a sequence; an undefined value gives none (as iterating Jinja2's
// Undefined does).
std::vector<Value> items_of(const Value& v) { return iterate(v); }

// make_attrgetter: "a.b.0" looks up each part, as a key first, then as an attribute.
Value lookup_path(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  for (;;) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      int64_t index = 0;
      if (std::from_chars(part.data(), part.data() + part.size(), index).ec != std::errc())
        fail_overflow("the index " + part);
      cur = get_item(cur, Value::integer(index));
    } else if (cur.is_dict() && !cur.is_namespace() && cur.as_dict().find(std::string_view(part))) {
      cur = *cur.as_dict().find(std::string_view(part));
    } else {
      cur = get_attribute(cur, part);
    }
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

std::string attribute_arg(const CallArgs& a, size_t index) {
  const Value* v = arg(a, index, "attribute");
  if (!v || v->is_none()) return "";
  if (v->is_int()) return std::to_string(v->as_int());
  if (!v->is_string()) fail_type("the attribute argument must be a string, not " + type_name(*v));
  return v->as_string();
}

std::string lowered(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The value sort/unique/min/max compare: lowercased strings unless case-sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value::string(lowered(v.as_string())) : v;
}

// ---- filters ----

Value f_abs(const Value& v, CallArgs&) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int() < 0 ? checked_neg(v.as_int()) : v.as_int());
  fail_type("bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_attr(const Value& v, CallArgs& a) {
  const Value* name = arg(a, 0, "name");
  if (!name || !name->is_string()) fail_type("attr() needs an attribute name");
  return get_attribute(v, name->as_string());
}

Value f_capitalize(const Value& v, CallArgs&) {
  std::string s = lowered(text_of(v));
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return Value::string(std::move(s));
}

Value f_length(const Value& v, CallArgs&) { return Value::integer(length(v)); }

Value f_default(const Value& v, CallArgs& a) {
  a.expect_at_most("default", 2, {"default_value", "boolean"});
  const Value* fallback = arg(a, 0, "default_value");
  const bool boolean = flag(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.truthy())) return fallback ? *fallback : Value::string("");
  return v;
}

Value f_dictsort(const Value& v, CallArgs& a) {
  a.expect_at_most("dictsort", 3, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict() || v.is_namespace()) fail_type("dictsort needs a dict, not " + type_name(v));
  const bool case_sensitive = flag(a, 0, "case_sensitive", false);
  const Value* by = arg(a, 1, "by");
  const bool by_value = by && by->is_string() && by->as_string() == "value";
  const bool reverse = flag(a, 2, "reverse", false);
  std::vector<Value> pairs;
  for (const auto& [k, item] : v.as_dict().entries) pairs.push_back(Value::tuple({k, item}));
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    const size_t i = by_value ? 1 : 0;
    return compare(sort_key(x.as_list().items[i], case_sensitive), sort_key(y.as_list().items[i], case_sensitive), "<") < 0;
  });
  if (reverse) std::reverse(pairs.begin(), pairs.end());
  return Value::list(std::move(pairs));
}

Value f_escape(const Value& v, CallArgs&) {
  return v.is_markup() ? v : Value::markup(html_escape(text_of(v)));
}

Value f_first(const Value& v, CallArgs&) {
  const std::vector<Value> items = items_of(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& v, CallArgs&) {
  const std::vector<Value> items = items_of(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_float(const Value& v, CallArgs& a) {
  const Value* fallback = arg(a, 0, "default");
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string()) {
    const std::string s = strip(v.as_string(), "", true, true);
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return Value::number(d);
  }
  return fallback ? *fallback : Value::number(0.0);
}

Value f_int(const Value& v, CallArgs& a) {
  const Value* fallback = arg(a, 0, "default");
  const Value* base_v = arg(a, 1, "base");
  const int base = base_v && base_v->is_int() ? static_cast<int>(base_v->as_int()) : 10;
  if (v.is_undefined()) fail_undefined(v);
  // A float truncated toward zero (NaN: the default, as Jinja2's ValueError; too large
  // for 64 bits: an overflow error).
  auto from_float = [&](double d) {
    if (std::isnan(d)) return fallback ? *fallback : Value::integer(0);
    if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) fail_overflow("int(" + to_str(Value::number(d)) + ")");
    return Value::integer(static_cast<int64_t>(d));
  };
  if (v.is_float()) return from_float(v.as_double());
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_string()) {
    const std::string s = strip(v.as_string(), "", true, true);
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(s.c_str(), &end, base);
    if (!s.empty() && end == s.c_str() + s.size()) {
      if (errno == ERANGE) fail_overflow("int('" + s + "')");
      return Value::integer(i);
    }
    const double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && end == s.c_str() + s.size()) return from_float(d);
  }
  return fallback ? *fallback : Value::integer(0);
}

Value f_items(const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::list();
  if (!v.is_dict() || v.is_namespace()) fail_type("Can only get item pairs from a mapping, not " + type_name(v));
  std::vector<Value> out;
  for (const auto& [k, item] : v.as_dict().entries) out.push_back(Value::tuple({k, item}));
  return Value::list(std::move(out));
}

Value f_join(const Value& v, CallArgs& a) {
  a.expect_at_most("join", 2, {"d", "attribute"});
  const Value* sep = arg(a, 0, "d");
  const std::string separator = sep ? text_of(*sep) : "";
  const std::string attribute = attribute_arg(a, 1);
  std::string out;
  bool first = true;
  for (const Value& item : items_of(v)) {
    if (!first) append_limited(out, separator, "join");
    first = false;
    append_limited(out, text_of(attribute.empty() ? item : lookup_path(item, attribute)), "join");
  }
  return Value::string(std::move(out));
}

Value f_list(const Value& v, CallArgs&) { return Value::list(items_of(v)); }

Value f_lower(const Value& v, CallArgs&) { return Value::string(lowered(text_of(v))); }

Value f_upper(const Value& v, CallArgs&) {
  std::string s = text_of(v);
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return Value::string(std::move(s));
}

Value f_title(const Value& v, CallArgs&) {
  // Jinja2's title: each word (after whitespace, '-', '(', '[', '{', '<') capitalized.
  std::string s = text_of(v);
  bool word_start = true;
  for (char& ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isspace(c) || ch == '-' || ch == '(' || ch == '[' || ch == '{' || ch == '<') {
      word_start = true;
    } else {
      ch = static_cast<char>(word_start ? std::toupper(c) : std::tolower(c));
      word_start = false;
    }
  }
  return Value::string(std::move(s));
}

Value select_impl(const Value& v, CallArgs& a, bool by_attribute, bool keep_matching) {
  std::vector<Value> out;
  size_t next_arg = 0;
  std::string attribute;
  if (by_attribute) {
    if (a.positional.empty()) fail_type("selectattr/rejectattr need an attribute name");
    attribute = to_str(a.positional[next_arg++]);
  }
  std::string test;
  if (next_arg < a.positional.size()) {
    if (!a.positional[next_arg].is_string()) fail_type("the test name must be a string");
    test = a.positional[next_arg++].as_string();
    if (!is_known_test(test)) fail(Kind::Unsupported, "unsupported construct: the test '" + test + "'");
  }
  CallArgs test_args;
  test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(next_arg), a.positional.end());
  if (!v.truthy()) return Value::list();  // Jinja2 selects nothing from None, as from an empty list
  for (const Value& item : items_of(v)) {
    const Value subject = by_attribute ? lookup_path(item, attribute) : item;
    const bool passed = test.empty() ? subject.truthy() : apply_test(test, subject, test_args);
    if (passed == keep_matching) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(const Value& v, CallArgs& a) { return select_impl(v, a, false, true); }
Value f_reject(const Value& v, CallArgs& a) { return select_impl(v, a, false, false); }
Value f_selectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, true); }
Value f_rejectattr(const Value& v, CallArgs& a) { return select_impl(v, a, true, false); }

Value f_map(const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (!v.truthy()) return Value::list();  // as Jinja2: mapping None gives nothing
  const std::string attribute = attribute_arg(a, 99);
  if (!attribute.empty()) {
    const Value* fallback = a.get(99, "default");
    for (const Value& item : items_of(v)) {
      Value x = lookup_path(item, attribute);
      out.push_back(x.is_undefined() && fallback ? *fallback : x);
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string()) fail_type("map() needs a filter name or attribute=");
  const std::string filter = a.positional[0].as_string();
  if (!is_known_filter(filter)) fail(Kind::Unsupported, "unsupported construct: the filter '" + filter + "'");
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : items_of(v)) {
    CallArgs call = rest;
    out.push_back(apply_filter(filter, item, call));
  }
  return Value::list(std::move(out));
}

Value extreme(const Value& v, CallArgs& a, bool want_max) {
  a.expect_at_most(want_max ? "max" : "min", 2, {"case_sensitive", "attribute"});
  const bool case_sensitive = flag(a, 0, "case_sensitive", false);
  const std::string attribute = attribute_arg(a, 1);
  const std::vector<Value> items = items_of(v);
  if (items.empty()) return Value::undefined(std::string("No aggregated item, sequence was empty."));
  const Value* best = &items[0];
  auto key = [&](const Value& x) { return sort_key(attribute.empty() ? x : lookup_path(x, attribute), case_sensitive); };
  for (const Value& x : items) {
    const int c = compare(key(x), key(*best), want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) best = &x;
  }
  return *best;
}
Value f_max(const Value& v, CallArgs& a) { return extreme(v, a, true); }
Value f_min(const Value& v, CallArgs& a) { return extreme(v, a, false); }

Value f_replace(const Value& v, CallArgs& a) {
  a.expect_at_most("replace", 3, {"count"});
  if (a.positional.size() < 2) fail_type("replace() needs the old and the new text");
  const std::string s = text_of(v), old_text = text_of(a.positional[0]), new_text = text_of(a.positional[1]);
  const Value* count_v = arg(a, 2, "count");
  if (count_v && !count_v->is_none() && !count_v->is_int() && !count_v->is_bool())
    fail_type("replace() count must be an integer, not " + type_name(*count_v));
  int64_t count = count_v && !count_v->is_none() ? count_v->as_int() : -1;
  if (old_text.empty()) {
    CallArgs m;
    m.positional = {Value::string(old_text), Value::string(new_text), Value::integer(count)};
    return get_attribute(Value::string(s), "replace").as_function().body(m);
  }
  std::string out;
  size_t start = 0;
  for (;;) {
    const size_t at = count == 0 ? std::string::npos : s.find(old_text, start);
    if (at == std::string::npos) break;
    out.append(s, start, at - start);
    append_limited(out, new_text, "replace");
    start = at + old_text.size();
    if (count > 0) --count;
  }
  out.append(s, start, std::string::npos);
  return Value::string(std::move(out));
}

Value f_reverse(const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::vector<std::string> chars = utf8_chars(v.as_string());
    std::reverse(chars.begin(), chars.end());
    std::string out;
    for (auto& c : chars) out += c;
    return Value::string(std::move(out));
  }
  std::vector<Value> items = items_of(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_round(const Value& v, CallArgs& a) {
  a.expect_at_most("round", 2, {"precision", "method"});
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) fail_type("round() needs a number, not " + type_name(v));
  const Value* p = arg(a, 0, "precision");
  const int precision = p && p->is_int() ? static_cast<int>(p->as_int()) : 0;
  const Value* m = arg(a, 1, "method");
  const std::string method = m && m->is_string() ? m->as_string() : "common";
  const double scale = std::pow(10.0, precision);
  const double x = v.as_double() * scale;
  double r;
  if (method == "common") {
    r = std::nearbyint(x);  // Python's round(): halves to even
  } else if (method == "ceil") {
    r = std::ceil(x);
  } else if (method == "floor") {
    r = std::floor(x);
  } else {
    fail_type("round() method must be 'common', 'ceil' or 'floor'");
  }
  return Value::number(r / scale);
}

Value f_safe(const Value& v, CallArgs&) { return v.is_markup() ? v : Value::markup(text_of(v)); }

Value f_sort(const Value& v, CallArgs& a) {
  a.expect_at_most("sort", 3, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = flag(a, 0, "reverse", false);
  const bool case_sensitive = flag(a, 1, "case_sensitive", false);
  const std::string attribute = attribute_arg(a, 2);
  std::vector<Value> items = items_of(v);
  auto key = [&](const Value& x) { return sort_key(attribute.empty() ? x : lookup_path(x, attribute), case_sensitive); };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    return reverse ? compare(key(y), key(x), "<") < 0 : compare(key(x), key(y), "<") < 0;
  });
  return Value::list(std::move(items));
}

Value f_string(const Value& v, CallArgs&) { return v.is_markup() ? v : Value::string(text_of(v)); }

Value f_sum(const Value& v, CallArgs& a) {
  a.expect_at_most("sum", 2, {"attribute", "start"});
  const std::string attribute = attribute_arg(a, 0);
  const Value* start = arg(a, 1, "start");
  Value total = start ? *start : Value::integer(0);
  for (const Value& x : items_of(v)) total = binary_op("+", total, attribute.empty() ? x : lookup_path(x, attribute));
  return total;
}

Value f_tojson(const Value& v, CallArgs& a) {
  a.expect_at_most("tojson", 1, {"indent", "sort_keys", "ensure_ascii", "separators"});
  JsonFormat format;
  if (const Value* indent = arg(a, 0, "indent"); indent && !indent->is_none()) {
    if (!indent->is_int()) fail_type("tojson indent must be an integer");
    if (indent->as_int() > kMaxIndent) fail(Kind::Limit, "tojson indent is limited to " + std::to_string(kMaxIndent));
    format.indent = static_cast<int>(std::max<int64_t>(0, indent->as_int()));
  }
  format.sort_keys = flag(a, 99, "sort_keys", false);
  format.ensure_ascii = flag(a, 99, "ensure_ascii", false);
  if (const Value* sep = arg(a, 99, "separators"); sep && !sep->is_none()) {
    if (!sep->is_list() || sep->as_list().items.size() != 2) fail_type("tojson separators must be a pair of strings");
    format.item_separator = text_of(sep->as_list().items[0]);
    format.key_separator = text_of(sep->as_list().items[1]);
  }
  return Value::string(to_json(v, format));
}

Value f_trim(const Value& v, CallArgs& a) {
  a.expect_at_most("trim", 1, {"chars"});
  const Value* chars = arg(a, 0, "chars");
  return Value::string(strip(text_of(v), chars && !chars->is_none() ? text_of(*chars) : "", true, true));
}

Value f_unique(const Value& v, CallArgs& a) {
  a.expect_at_most("unique", 2, {"case_sensitive", "attribute"});
  const bool case_sensitive = flag(a, 0, "case_sensitive", false);
  const std::string attribute = attribute_arg(a, 1);
  std::vector<Value> out, seen;
  for (const Value& x : items_of(v)) {
    const Value key = sort_key(attribute.empty() ? x : lookup_path(x, attribute), case_sensitive);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
    seen.push_back(key);
    out.push_back(x);
  }
  return Value::list(std::move(out));
}

Value f_wordcount(const Value& v, CallArgs&) {
  CallArgs none;
  return Value::integer(length(get_attribute(Value::string(text_of(v)), "split").as_function().body(none)));
}

// Jinja2 3.1's indent: every line but the first (and blank ones, unless blank=true)
// gets the indentation; first=true indents the first line too.
Value f_indent(const Value& v, CallArgs& a) {
  a.expect_at_most("indent", 3, {"width", "first", "blank"});
  const Value* width = arg(a, 0, "width");
  if (width && !width->is_string() && !width->is_int() && !width->is_bool())
    fail_type("indent width must be an integer or a string, not " + type_name(*width));
  if (width && !width->is_string() && width->as_int() > kMaxIndent)
    fail(Kind::Limit, "indent width is limited to " + std::to_string(kMaxIndent));
  const std::string indentation = !width ? std::string(4, ' ')
                                  : width->is_string() ? width->as_string()
                                                       : std::string(static_cast<size_t>(std::max<int64_t>(0, width->as_int())), ' ');
  const bool first = flag(a, 1, "first", false);
  const bool blank = flag(a, 2, "blank", false);
  CallArgs none;
  const Value lines_v = get_attribute(Value::string(text_of(v) + "\n"), "splitlines").as_function().body(none);
  const std::vector<Value>& lines = lines_v.as_list().items;
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i].as_string();
    if (i > 0) out += "\n";
    if (i > 0 && (blank || !line.empty())) append_limited(out, indentation, "indent");
    out += line;
  }
  if (first) out = indentation + out;
  return Value::string(std::move(out));
}

// printf-style "%s is %d" | format(a, b): %s %r %d %i %f %%.
Value f_format(const Value& v, CallArgs& a) {
  const std::string s = text_of(v);
  std::string out;
  size_t next_arg = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 1 >= s.size()) fail_type("format: incomplete format");
    const char spec = s[++i];
    if (spec == '%') {
      out += '%';
      continue;
    }
    if (next_arg >= a.positional.size()) fail_type("format: not enough arguments for format string");
    const Value& x = a.positional[next_arg++];
    switch (spec) {
      case 's': append_limited(out, to_str(x), "format"); break;
      case 'r': append_limited(out, to_repr(x), "format"); break;
      case 'd':
      case 'i':
        if (!x.is_number()) fail_type("format: %d needs a number, not " + type_name(x));
        if (x.is_int() || x.is_bool()) {
          out += std::to_string(x.as_int());
        } else {
          const double d = std::trunc(x.as_double());
          if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) fail_overflow("'%d' % " + to_str(x));
          out += std::to_string(static_cast<int64_t>(d));
        }
        break;
      case 'f': {
        if (!x.is_number()) fail_type("format: %f needs a number, not " + type_name(x));
        char buf[64];
        std::snprintf(buf, sizeof buf, "%f", x.as_double());
        out += buf;
        break;
      }
      default: fail(Kind::Unsupported, std::string("unsupported construct: the format conversion '%") + spec + "'");
    }
  }
  return Value::string(std::move(out));
}

const std::unordered_map<std::string_view, Filter>& filters() {
  static const std::unordered_map<std::string_view, Filter> table = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"capitalize", f_capitalize},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"format", f_format},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return table;
}

}  // namespace

bool is_known_filter(std::string_view name) { return filters().count(name) != 0; }

Value apply_filter(std::string_view name, const Value& subject, CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) fail(Kind::Unsupported, "unsupported construct: the filter '" + std::string(name) + "'");
  return it->second(subject, args);
}

}  // namespace fafo::jinja
