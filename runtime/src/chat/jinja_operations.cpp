// The operations on template values (jinja_value.h's "operations"): Python's comparisons,
// its binary operators (64-bit integers that fail on overflow), and iterating, measuring,
// subscripting and slicing strings, lists and dicts.
#include "chat/jinja_value.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fafo::jinja {

using Kind = ChatTemplateError::Kind;

// ---- comparisons ------------------------------------------------------------------

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::Undefined:
    case Value::Type::None: return true;
    case Value::Type::String: return a.as_string() == b.as_string();
    case Value::Type::List: {
      const auto &x = a.as_list().items, &y = b.as_list().items;
      if (a.is_tuple() != b.is_tuple() || x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case Value::Type::Dict: {
      if (a.is_namespace() || b.is_namespace()) return &a.as_dict() == &b.as_dict();
      const DictObject &x = a.as_dict(), &y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Type::Function: return &a.as_function() == &b.as_function();
    default: return false;
  }
}

int compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto &x = a.as_list().items, &y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fail_type("'" + std::string(op) + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::Undefined: return false;  // iterating an undefined value gives nothing
    case Value::Type::String:
      if (!item.is_string()) fail_type("'in <string>' requires string as left operand, not " + type_name(item));
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Type::List:
      return std::any_of(container.as_list().items.begin(), container.as_list().items.end(),
                         [&](const Value& v) { return equals(v, item); });
    case Value::Type::Dict:
      if (container.is_namespace()) break;
      return container.as_dict().find(item) != nullptr;
    default: break;
  }
  fail_type("argument of type '" + type_name(container) + "' is not iterable");
}

// ---- arithmetic -------------------------------------------------------------------

void fail_overflow(const std::string& what) {
  fail(Kind::Limit, "integer overflow: " + what + " does not fit in 64 bits");
}

int64_t checked_add(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_add_overflow(x, y, &r)) fail_overflow(std::to_string(x) + " + " + std::to_string(y));
  return r;
}

int64_t checked_sub(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_sub_overflow(x, y, &r)) fail_overflow(std::to_string(x) + " - " + std::to_string(y));
  return r;
}

int64_t checked_mul(int64_t x, int64_t y) {
  int64_t r;
  if (__builtin_mul_overflow(x, y, &r)) fail_overflow(std::to_string(x) + " * " + std::to_string(y));
  return r;
}

int64_t checked_neg(int64_t x) {
  if (x == INT64_MIN) fail_overflow("-(" + std::to_string(x) + ")");
  return -x;
}

// Python's a // b (b != 0); INT64_MIN // -1 overflows.
static int64_t floor_div(int64_t a, int64_t b) {
  if (b == -1) return checked_neg(a);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Python's a % b (b != 0): the sign of b.
static int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  const int64_t m = a % b;
  return m != 0 && ((m < 0) != (b < 0)) ? m + b : m;
}

// Python's a ** b for b >= 0, by squaring.
static int64_t int_power(int64_t a, int64_t b) {
  if (a == 0 || a == 1) return b == 0 ? 1 : a;
  if (a == -1) return b % 2 ? -1 : 1;
  int64_t result = 1, base = a;
  for (int64_t e = b;;) {
    if (e & 1) {
      if (__builtin_mul_overflow(result, base, &result)) break;
    }
    e >>= 1;
    if (e == 0) return result;
    if (__builtin_mul_overflow(base, base, &base)) break;
  }
  fail_overflow(std::to_string(a) + " ** " + std::to_string(b));
}

static Value repeat(const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  if (seq.is_string() ? seq.as_string().empty() : seq.as_list().items.empty()) times = std::min<int64_t>(times, 1);
  if (seq.is_string()) {
    if (static_cast<double>(seq.as_string().size()) * static_cast<double>(times) > 16e6)
      fail(Kind::Limit, "string repetition would exceed 16 MB");
    // Doubling: a handful of copies, not one append per repetition.
    const std::string& piece = seq.as_string();
    const size_t total = piece.size() * static_cast<size_t>(times);
    std::string out;
    out.reserve(total);
    if (times > 0) out = piece;
    while (out.size() < total) out.append(out, 0, std::min(out.size(), total - out.size()));
    return Value::string(std::move(out));
  }
  const auto& items = seq.as_list().items;
  if (static_cast<double>(items.size()) * static_cast<double>(times) > 1e6) fail(Kind::Limit, "list repetition would exceed 1e6 items");
  expect_work(static_cast<int64_t>(items.size()) * times);  // before the list is made
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value binary_op(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  auto unsupported = [&]() -> Value {
    if (op == "+" && (a.is_string() || a.is_list()))  // Python's wording for str + int, list + str, ...
      fail_type("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
    fail_type("unsupported operand type(s) for " + std::string(op) + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  };
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      if (a.is_markup() == b.is_markup()) {
        std::string sum = a.as_string() + b.as_string();
        return a.is_markup() ? Value::markup(std::move(sum)) : Value::string(std::move(sum));
      }
      return Value::markup((a.is_markup() ? a.as_string() : html_escape(a.as_string())) +
                           (b.is_markup() ? b.as_string() : html_escape(b.as_string())));
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return a.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
  }
  if (!a.is_number() || !b.is_number()) return unsupported();
  const bool floating = a.is_float() || b.is_float();
  if (op == "/") {
    if (b.as_double() == 0.0) fail_type("division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "**") {
    if (!floating && b.as_int() >= 0) return Value::integer(int_power(a.as_int(), b.as_int()));
    return Value::number(std::pow(a.as_double(), b.as_double()));
  }
  if (floating) {
    const double x = a.as_double(), y = b.as_double();
    if (op == "+") return Value::number(x + y);
    if (op == "-") return Value::number(x - y);
    if (op == "*") return Value::number(x * y);
    if (y == 0.0 && (op == "//" || op == "%")) fail_type("float division by zero");
    if (op == "//") return Value::number(std::floor(x / y));
    if (op == "%") {
      double m = std::fmod(x, y);
      if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
      return Value::number(m);
    }
  } else {
    const int64_t x = a.as_int(), y = b.as_int();
    if (op == "+") return Value::integer(checked_add(x, y));
    if (op == "-") return Value::integer(checked_sub(x, y));
    if (op == "*") return Value::integer(checked_mul(x, y));
    if (y == 0 && (op == "//" || op == "%")) fail_type("integer division or modulo by zero");
    if (op == "//") return Value::integer(floor_div(x, y));
    if (op == "%") return Value::integer(floor_mod(x, y));
  }
  return unsupported();
}

// ---- containers -------------------------------------------------------------------

std::vector<Value> iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return {};
    case Value::Type::List: return v.as_list().items;
    case Value::Type::Dict: {
      if (v.is_namespace()) break;
      std::vector<Value> keys;
      for (const auto& [k, item] : v.as_dict().entries) keys.push_back(k);
      return keys;
    }
    case Value::Type::String: {
      // A value per character: as many as a list may hold (range(), repetition).
      const std::string& s = v.as_string();
      expect_work(static_cast<int64_t>(s.size() / 4));  // characters >= bytes / 4: fails before counting them
      const size_t n = utf8_count(s);
      if (n > 1000000) fail(Kind::Limit, "iterating over a string is limited to 1e6 characters");
      expect_work(static_cast<int64_t>(n));  // before a value per character is made
      std::vector<Value> chars;
      chars.reserve(n);
      for (auto& c : utf8_chars(s)) chars.push_back(Value::string(std::move(c)));
      return chars;
    }
    default: break;
  }
  fail_type("'" + type_name(v) + "' object is not iterable");
}

int64_t length(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return 0;
    case Value::Type::String:
      return static_cast<int64_t>(utf8_count(v.as_string()));
    case Value::Type::List: return static_cast<int64_t>(v.as_list().items.size());
    case Value::Type::Dict:
      if (v.is_namespace()) break;
      return static_cast<int64_t>(v.as_dict().entries.size());
    default: break;
  }
  fail_type("object of type '" + type_name(v) + "' has no len()");
}

static std::string object_description(const Value& obj) {
  return obj.is_none() ? "'None'" : "'" + type_name(obj) + " object'";
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  auto missing = [&]() {
    if (key.is_string()) return Value::undefined(object_description(obj) + " has no attribute '" + key.as_string() + "'");
    return Value::undefined(type_name(obj) + " object has no element " + to_repr(key));
  };
  if (obj.is_dict() && !obj.is_namespace()) {
    const Value* v = obj.as_dict().find(key);
    return v ? *v : missing();
  }
  if (obj.is_namespace() && key.is_string()) {
    const Value* v = obj.as_dict().find(key);
    return v ? *v : missing();
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto& items = obj.as_list().items;
      if (i < 0) i += static_cast<int64_t>(items.size());
      if (i < 0 || i >= static_cast<int64_t>(items.size())) return missing();
      return items[static_cast<size_t>(i)];
    }
    const std::vector<std::string> chars = utf8_chars(obj.as_string());
    if (i < 0) i += static_cast<int64_t>(chars.size());
    if (i < 0 || i >= static_cast<int64_t>(chars.size())) return missing();
    return Value::string(chars[static_cast<size_t>(i)]);
  }
  return missing();
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) fail_undefined(obj);
  auto bound = [](const Value& b, const char* what) -> std::optional<int64_t> {
    if (b.is_undefined() || b.is_none()) return std::nullopt;
    if (!b.is_int() && !b.is_bool()) fail_type(std::string("slice ") + what + " must be an integer or None, not " + type_name(b));
    return b.as_int();
  };
  const int64_t step = bound(step_v, "step").value_or(1);
  if (step == 0) fail_type("slice step cannot be zero");
  std::vector<std::string> chars;
  int64_t n = 0;
  if (obj.is_string()) {
    chars = utf8_chars(obj.as_string());
    n = static_cast<int64_t>(chars.size());
  } else if (obj.is_list()) {
    n = static_cast<int64_t>(obj.as_list().items.size());
  } else {
    fail_type("'" + type_name(obj) + "' object is not subscriptable");
  }
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](std::optional<int64_t> b, int64_t dflt) {
    if (!b) return dflt;
    int64_t i = *b;
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t start = adjust(bound(start_v, "start"), step < 0 ? n - 1 : 0);
  const int64_t stop = adjust(bound(stop_v, "stop"), step < 0 ? -1 : n);
  std::vector<size_t> picked;
  for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
    picked.push_back(static_cast<size_t>(i));
    if (__builtin_add_overflow(i, step, &i)) break;  // past any bound
  }
  if (obj.is_string()) {
    std::string out;
    for (size_t i : picked) out += chars[i];
    return Value::string(std::move(out));
  }
  std::vector<Value> items;
  for (size_t i : picked) items.push_back(obj.as_list().items[i]);
  return obj.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

}  // namespace fafo::jinja
