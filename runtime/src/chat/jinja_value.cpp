#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

namespace fafo::jinja {

using Kind = ChatTemplateError::Kind;

// ---- construction -----------------------------------------------------------------

Value Value::undefined(std::string hint) { return Value(Data(UndefinedData{std::move(hint)})); }
Value Value::none() { return Value(Data(NoneData{})); }
Value Value::boolean(bool b) { return Value(Data(b)); }
Value Value::integer(int64_t i) { return Value(Data(i)); }
Value Value::number(double d) { return Value(Data(d)); }
// Bytes of the strings made, and steps of work, since the rendering began (on this thread).
static thread_local size_t t_string_bytes = 0;
static thread_local size_t t_string_budget = kMinRenderStringBytes;
static thread_local int64_t t_work = 0;
// Bytes of strings read, and what may be; 0: no rendering runs (reads are free).
static thread_local size_t t_read_bytes = 0;
static thread_local size_t t_read_budget = 0;

void start_render_budget(size_t string_bytes) {
  t_string_bytes = 0;
  t_string_budget = string_bytes;
  t_work = 0;
  t_read_bytes = 0;
  t_read_budget = std::max(kMinRenderReadBytes, kReadsPerStringByte * string_bytes);
}

void end_render_budget() {
  start_render_budget();
  t_read_budget = 0;
}

void count_read(size_t bytes) {
  if (t_read_budget == 0) return;
  t_read_bytes += bytes;
  if (t_read_bytes > t_read_budget)
    fail(Kind::Limit, "the template reads more than " + std::to_string(t_read_budget >> 20) +
                          " MiB of strings (comparing, searching, iterating, printing)");
}

void expect_work(int64_t steps) {
  if (t_work + steps > kMaxRenderWork)
    fail(Kind::Limit, "the template does more than " + std::to_string(kMaxRenderWork) +
                          " steps of work (loop iterations, macro calls, values made)");
}

void count_work(int64_t steps) {
  expect_work(steps);
  t_work += steps;
}

static void count_string(size_t bytes) {
  if (bytes > kMaxStringBytes) fail(Kind::Limit, "a string would exceed 64 MiB");
  t_string_bytes += bytes + 64;  // and what each string value costs besides its bytes
  if (t_string_bytes > t_string_budget)
    fail(Kind::Limit, "the template makes more than " + std::to_string(t_string_budget >> 20) + " MiB of strings");
  count_work(1);
}

Value Value::string(std::string s) {
  count_string(s.size());
  return Value(Data(StringData{std::make_shared<const std::string>(std::move(s)), false}));
}
Value Value::markup(std::string s) {
  count_string(s.size());
  return Value(Data(StringData{std::make_shared<const std::string>(std::move(s)), true}));
}

// What a string built piece by piece may grow to: kMaxStringBytes, and no more than the
// rendering may still make (past that it fails anyway once the string is made or
// printed; failing first saves copying up to 64 MiB for nothing).
// While a value is printed to the output (to_str_within), what the output has left.
static thread_local size_t t_print_cap = SIZE_MAX;

static size_t piece_limit() {
  const size_t left = t_string_budget > t_string_bytes ? t_string_budget - t_string_bytes : 0;
  return std::min({kMaxStringBytes, left, t_print_cap});
}

[[noreturn]] static void fail_piece(const char* what) {
  const size_t limit = piece_limit();
  if (limit == t_print_cap)
    fail(Kind::Limit, std::string(what) + " would pass the rendering's cap (" + std::to_string(limit) + " bytes left)");
  fail(Kind::Limit, std::string(what) + " would exceed " +
                        (limit == kMaxStringBytes ? std::string("64 MiB")
                                                  : std::to_string(limit) + " bytes, what is left of the " +
                                                        std::to_string(t_string_budget >> 20) +
                                                        " MiB of strings the template may make"));
}

void append_limited(std::string& out, std::string_view piece, const char* what) {
  const size_t limit = piece_limit();
  if (piece.size() > limit - std::min(out.size(), limit)) fail_piece(what);
  out += piece;
}

Value Value::list(std::vector<Value> items) {
  count_work(static_cast<int64_t>(items.size()));
  auto l = std::make_shared<ListObject>();
  l->items = std::move(items);
  return Value(Data(std::move(l)));
}

Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.as_list().is_tuple = true;
  return v;
}

Value Value::dict() { return Value(Data(std::make_shared<DictObject>())); }

Value Value::namespace_object() {
  Value v = dict();
  v.as_dict().is_namespace = true;
  return v;
}

Value Value::function(std::string name, std::function<Value(CallArgs&)> body) {
  return Value(Data(std::make_shared<Function>(Function{std::move(name), std::move(body)})));
}

bool Value::is_tuple() const { return is_list() && as_list().is_tuple; }
bool Value::is_namespace() const { return is_dict() && as_dict().is_namespace; }

int64_t Value::as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(data_); }

double Value::as_double() const {
  if (is_float()) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

bool Value::truthy() const {
  switch (type()) {
    case Type::Undefined:
    case Type::None: return false;
    case Type::Bool: return as_bool();
    case Type::Int: return as_int() != 0;
    case Type::Float: return as_double() != 0.0;
    case Type::String: return !as_string().empty();
    case Type::List: return !as_list().items.empty();
    case Type::Dict: return as_dict().is_namespace || !as_dict().entries.empty();
    case Type::Function: return true;
  }
  return false;
}

const Value* DictObject::find(const Value& key) const {
  for (const auto& [k, v] : entries)
    if (equals(k, key)) return &v;
  return nullptr;
}

const Value* DictObject::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void DictObject::set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

const Value* CallArgs::get(size_t index, std::string_view name) const {
  for (const auto& [k, v] : keyword)
    if (k == name) return &v;
  return index < positional.size() ? &positional[index] : nullptr;
}

void CallArgs::expect_at_most(std::string_view function, size_t max_positional,
                              std::initializer_list<std::string_view> names) const {
  if (positional.size() > max_positional)
    fail_type(std::string(function) + "() takes at most " + std::to_string(max_positional) + " positional argument(s), " +
              std::to_string(positional.size()) + " given");
  for (const auto& [k, v] : keyword)
    if (std::find(names.begin(), names.end(), k) == names.end())
      fail_type(std::string(function) + "() got an unexpected keyword argument '" + k + "'");
}

// ---- errors -----------------------------------------------------------------------

void fail(Kind kind, std::string message) { throw ChatTemplateError(kind, std::move(message)); }
void fail_type(std::string message) { fail(Kind::Type, std::move(message)); }
void fail_undefined(const Value& v) {
  fail(Kind::Undefined, v.is_undefined() && !v.undefined_hint().empty() ? v.undefined_hint() : "a value is undefined");
}

// ---- UTF-8 ------------------------------------------------------------------------

std::string html_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

size_t utf8_char_bytes(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) n = 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) n = 1;
  return n;
}

std::vector<std::string> utf8_chars(std::string_view s) {
  count_read(32 * s.size());  // a string (32 bytes) made per character
  std::vector<std::string> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_char_bytes(s, i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t utf8_count(std::string_view s) {
  count_read(4 * s.size());  // decoded a character at a time
  size_t count = 0;
  for (size_t i = 0; i < s.size(); ++count) i += utf8_char_bytes(s, i);
  return count;
}

// Decodes one code point at s[i] (advancing i); invalid bytes decode as themselves.
static uint32_t next_code_point(std::string_view s, size_t& i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) n = 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) n = 1;
  uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
  for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

// ---- type names and text ----------------------------------------------------------

std::string type_name(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return "Undefined";
    case Value::Type::None: return "NoneType";
    case Value::Type::Bool: return "bool";
    case Value::Type::Int: return "int";
    case Value::Type::Float: return "float";
    case Value::Type::String: return "str";
    case Value::Type::List: return v.is_tuple() ? "tuple" : "list";
    case Value::Type::Dict: return v.is_namespace() ? "Namespace" : "dict";
    case Value::Type::Function: return "function";
  }
  return "object";
}

// Python's repr() of a float: the shortest digits that round-trip, in positional
// notation for exponents -4..15 and scientific notation (1e+16, 1e-05) otherwise.
static std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  const size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string out;
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exponent) + 1) + "." + digits.substr(static_cast<size_t>(exponent) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp;
  }
  return negative ? "-" + out : out;
}

static std::string repr_string(const std::string& s) {
  const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  const size_t limit = piece_limit();
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (out.size() >= limit) fail_piece("printing a string");
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      static constexpr char kHex[] = "0123456789abcdef";
      const char hex[4] = {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
      out.append(hex, 4);
    } else {
      out += ch;
    }
  }
  out += quote;
  return out;
}

static std::string repr_at_depth(const Value& v, int depth);

static std::string str_at_depth(const Value& v, int depth) {
  switch (v.type()) {
    case Value::Type::Undefined: return "";
    case Value::Type::None: return "None";
    case Value::Type::Bool: return v.as_bool() ? "True" : "False";
    case Value::Type::Int: return std::to_string(v.as_int());
    case Value::Type::Float: return format_float(v.as_double());
    case Value::Type::String: return v.as_string();
    default: return repr_at_depth(v, depth);
  }
}

static std::string repr_at_depth(const Value& v, int depth) {
  if (depth > 64) fail(Kind::Limit, "a value nests too deeply (or contains itself) to be printed");
  switch (v.type()) {
    case Value::Type::Undefined: return "Undefined";
    case Value::Type::String: return repr_string(v.as_string());
    case Value::Type::List: {
      const ListObject& l = v.as_list();
      std::string out = l.is_tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        append_limited(out, repr_at_depth(l.items[i], depth + 1), "printing a list");
      }
      if (l.is_tuple && l.items.size() == 1) out += ",";
      return out + (l.is_tuple ? ")" : "]");
    }
    case Value::Type::Dict: {
      const DictObject& d = v.as_dict();
      std::string out = d.is_namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& [k, item] : d.entries) {
        if (!first) out += ", ";
        first = false;
        append_limited(out, repr_at_depth(k, depth + 1) + ": " + repr_at_depth(item, depth + 1), "printing a dict");
      }
      return out + (d.is_namespace ? "}>" : "}");
    }
    case Value::Type::Function: return "<function " + v.as_function().name + ">";
    default: return str_at_depth(v, depth);
  }
}

std::string to_str(const Value& v) { return str_at_depth(v, 0); }

std::string to_str_within(const Value& v, size_t max_bytes) {
  struct Cap {  // restored however printing ends
    size_t saved = t_print_cap;
    explicit Cap(size_t cap) { t_print_cap = std::min(t_print_cap, cap); }
    ~Cap() { t_print_cap = saved; }
  } cap(max_bytes);
  return str_at_depth(v, 0);
}
std::string to_repr(const Value& v) { return repr_at_depth(v, 0); }

// ---- JSON -------------------------------------------------------------------------

// \uXXXX for one UTF-16 code unit.
static void append_u16_escape(std::string& out, uint32_t unit) {
  static constexpr char kHex[] = "0123456789abcdef";
  const char e[6] = {'\\', 'u', kHex[(unit >> 12) & 15], kHex[(unit >> 8) & 15], kHex[(unit >> 4) & 15], kHex[unit & 15]};
  out.append(e, 6);
}

static void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  const size_t limit = piece_limit();
  size_t i = 0;
  while (i < s.size()) {
    if (out.size() >= limit) fail_piece("tojson");
    const char ch = s[i];
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
      ++i;
    } else if (ch == '\n') {
      out += "\\n", ++i;
    } else if (ch == '\r') {
      out += "\\r", ++i;
    } else if (ch == '\t') {
      out += "\\t", ++i;
    } else if (ch == '\b') {
      out += "\\b", ++i;
    } else if (ch == '\f') {
      out += "\\f", ++i;
    } else if (c < 0x20) {
      append_u16_escape(out, c), ++i;
    } else if (c >= 0x80 && ensure_ascii) {
      uint32_t cp = next_code_point(s, i);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        append_u16_escape(out, 0xD800 + (cp >> 10));
        append_u16_escape(out, 0xDC00 + (cp & 0x3FF));
      } else {
        append_u16_escape(out, cp);
      }
    } else {
      out += ch, ++i;
    }
  }
  out += '"';
}

static std::string json_key(const Value& k) {
  switch (k.type()) {
    case Value::Type::String: return k.as_string();
    case Value::Type::Bool: return k.as_bool() ? "true" : "false";
    case Value::Type::None: return "null";
    case Value::Type::Int:
    case Value::Type::Float: return to_str(k);
    default: fail_type("keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

static void json_value(std::string& out, const Value& v, const JsonFormat& f, int depth) {
  if (depth > 64) fail(Kind::Limit, "a value nests too deeply (or contains itself) for tojson");
  const std::string newline = f.indent >= 0 ? "\n" + std::string(static_cast<size_t>(f.indent) * (depth + 1), ' ') : "";
  const std::string closing = f.indent >= 0 ? "\n" + std::string(static_cast<size_t>(f.indent) * depth, ' ') : "";
  const std::string item_sep = !f.item_separator.empty() ? f.item_separator : f.indent >= 0 ? "," : ", ";
  switch (v.type()) {
    case Value::Type::None: out += "null"; return;
    case Value::Type::Bool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::Int: out += std::to_string(v.as_int()); return;
    case Value::Type::Float: {
      const double d = v.as_double();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d < 0 ? "-Infinity" : "Infinity") : format_float(d);
      return;
    }
    case Value::Type::String: json_string(out, v.as_string(), f.ensure_ascii); return;
    case Value::Type::List: {
      const auto& items = v.as_list().items;
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_sep;
        out += newline;
        json_value(out, items[i], f, depth + 1);
        if (out.size() > piece_limit()) fail_piece("tojson");
      }
      out += closing + "]";
      return;
    }
    case Value::Type::Dict: {
      if (v.is_namespace()) break;
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, item] : v.as_dict().entries) entries.emplace_back(json_key(k), &item);
      if (f.sort_keys)
        std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      if (entries.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += item_sep;
        out += newline;
        json_string(out, entries[i].first, f.ensure_ascii);
        out += f.key_separator;
        json_value(out, *entries[i].second, f, depth + 1);
        if (out.size() > piece_limit()) fail_piece("tojson");
      }
      out += closing + "}";
      return;
    }
    default: break;
  }
  fail_type("Object of type " + type_name(v) + " is not JSON serializable");
}

std::string to_json(const Value& v, const JsonFormat& format) {
  std::string out;
  json_value(out, v, format, 0);
  return out;
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) fail_overflow("the integer " + std::to_string(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      for (const auto& item : j) items.push_back(from_json(item));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = Value::dict();
      for (const auto& [k, item] : j.items()) d.as_dict().entries.emplace_back(Value::string(k), from_json(item));
      return d;
    }
    default: return Value();
  }
}

}  // namespace fafo::jinja
