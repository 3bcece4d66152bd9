// The values a Jinja template computes with, modelled on the Python objects Jinja2
// hands to templates: undefined, None, bool, int, float, str, list / tuple, dict,
// namespace and callables (macros, builtins, bound methods).
//
// Lists, dicts and namespaces are shared by reference, as in Python: a namespace
// passed to a macro and changed there is changed for the caller too. Strings are
// UTF-8; lengths, indexing and slicing count code points, as Python does.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "fafo/chat_template.h"

namespace fafo::jinja {

// Charges `bytes` read to the running rendering's budget of reads (kReadsPerStringByte
// times its budget of strings made); a Limit error past it. Free outside a rendering.
void count_read(size_t bytes);

class Value;
struct ListObject;
struct DictObject;
struct Function;
struct CallArgs;

class Value {
 public:
  enum class Type { Undefined, None, Bool, Int, Float, String, List, Dict, Function };

  // An undefined value; `hint` says why ("'tools' is undefined") for the error raised
  // when the value is used.
  Value() : data_(UndefinedData{}) {}
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s);
  // A string marked safe (Jinja2's Markup, from `| safe` or `| escape`): adding a
  // plain string to it HTML-escapes the plain string, as Markup.__add__ does.
  static Value markup(std::string s);
  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items);
  static Value dict();
  static Value namespace_object();
  static Value function(std::string name, std::function<Value(CallArgs&)> body);

  Type type() const { return static_cast<Type>(data_.index()); }
  bool is_undefined() const { return type() == Type::Undefined; }
  bool is_none() const { return type() == Type::None; }
  bool is_bool() const { return type() == Type::Bool; }
  bool is_int() const { return type() == Type::Int; }
  bool is_float() const { return type() == Type::Float; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // Python: bool is an int
  bool is_string() const { return type() == Type::String; }
  bool is_markup() const { return is_string() && std::get<StringData>(data_).markup; }
  bool is_list() const { return type() == Type::List; }      // lists and tuples
  bool is_dict() const { return type() == Type::Dict; }      // dicts and namespaces
  bool is_function() const { return type() == Type::Function; }
  bool is_tuple() const;
  bool is_namespace() const;

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;  // Int or Bool
  double as_double() const;  // Int, Bool or Float
  // Every read of a string's bytes is charged to the rendering's budget of bytes read
  // (count_read): a template that compares, searches or prints a large string in a
  // loop runs out of it rather than of time.
  const std::string& as_string() const {
    const std::string& s = *std::get<StringData>(data_).text;
    count_read(s.size());
    return s;
  }
  ListObject& as_list() const { return *std::get<std::shared_ptr<ListObject>>(data_); }
  DictObject& as_dict() const { return *std::get<std::shared_ptr<DictObject>>(data_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<Function>>(data_); }
  const std::string& undefined_hint() const { return std::get<UndefinedData>(data_).hint; }

  // Python truthiness: undefined, None, False, 0, 0.0, "", [] and {} are false.
  bool truthy() const;

 private:
  struct UndefinedData {
    std::string hint;
  };
  struct NoneData {};
  // Strings are immutable and shared: a copy (a list repeated, an item appended a
  // million times) costs a reference, not the bytes.
  struct StringData {
    std::shared_ptr<const std::string> text;
    bool markup = false;
  };
  using Data = std::variant<UndefinedData, NoneData, bool, int64_t, double, StringData, std::shared_ptr<ListObject>,
                            std::shared_ptr<DictObject>, std::shared_ptr<Function>>;
  explicit Value(Data d) : data_(std::move(d)) {}
  Data data_;
};

struct ListObject {
  std::vector<Value> items;
  bool is_tuple = false;
};

// An insertion-ordered dict (Python 3.7+ semantics). Also the storage of
// namespace() objects, whose attributes templates may assign.
struct DictObject {
  std::vector<std::pair<Value, Value>> entries;
  bool is_namespace = false;

  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};

// Arguments of a call: f(1, 2, indent=4).
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name` (a keyword wins), or nullptr.
  const Value* get(size_t index, std::string_view name) const;
  // Throws a Type error naming `function` when an argument is neither in the first
  // `max_positional` positions nor one of `names`.
  void expect_at_most(std::string_view function, size_t max_positional, std::initializer_list<std::string_view> names) const;
};

struct Function {
  std::string name;
  std::function<Value(CallArgs&)> body;
};

// ---- errors -----------------------------------------------------------------------

[[noreturn]] void fail(ChatTemplateError::Kind kind, std::string message);
[[noreturn]] void fail_type(std::string message);
// The most bytes one string may hold: what a whole rendering may produce
// (RenderLimits::max_output_bytes' default). Whatever builds a string piece by piece
// (join, replace, format, indent, printing and tojson of lists) checks before growing
// past it, so a template cannot allocate gigabytes before the output limit is seen.
constexpr size_t kMaxStringBytes = size_t{64} << 20;
// The bytes of strings one rendering may make in all (each string counted when made,
// so a template cannot keep a million distinct large strings alive either, nor spend a
// second copying strings it never prints): four times what it may output, within
// these bounds (RenderLimits::string_bytes()).
constexpr size_t kMinRenderStringBytes = size_t{4} << 20;
constexpr size_t kMaxRenderStringBytes = size_t{64} << 20;
// The most work one rendering may do, in steps: a loop iteration, a string or list
// element made (1 each), a macro call (kMacroCallWork: a scope and its arguments). What a rendering costs is what it makes and runs, not
// only the memory it holds: with these two budgets the costliest template renders or
// fails in tens of milliseconds (tests/test_jinja.cpp, JinjaCost).
constexpr int64_t kMaxRenderWork = 250'000;
// Fails as count_work would if `steps` more were counted, without counting them: for a
// list about to be made.
void expect_work(int64_t steps);
constexpr int64_t kMacroCallWork = 4;
// The bytes of strings one rendering may read (compare, search, print): four times
// what it may make, at least 64 MiB (64 to 256 MiB: milliseconds of memcmp). Decoding
// UTF-8 a character at a time is charged 4 bytes per byte, making a string per
// character (utf8_chars) 32.
constexpr size_t kReadsPerStringByte = 4;
constexpr size_t kMinRenderReadBytes = size_t{64} << 20;
// Starts counting toward `string_bytes` of strings, the reads that gives, and
// kMaxRenderWork (jinja::render calls it; end_render_budget ends it).
void start_render_budget(size_t string_bytes = kMinRenderStringBytes);
void end_render_budget();
// Counts `steps` of work; a Limit error past kMaxRenderWork.
void count_work(int64_t steps);
// out += piece, or a Limit error naming `what` when that would pass kMaxStringBytes.
void append_limited(std::string& out, std::string_view piece, const char* what);
// Raises the UndefinedError an undefined value stands for.
[[noreturn]] void fail_undefined(const Value& v);
// A Limit error for an integer result that does not fit in 64 bits (Jinja2's integers
// are unbounded): "integer overflow: WHAT does not fit in 64 bits".
[[noreturn]] void fail_overflow(const std::string& what);
// x + y, x - y, x * y and -x, or fail_overflow.
int64_t checked_add(int64_t x, int64_t y);
int64_t checked_sub(int64_t x, int64_t y);
int64_t checked_mul(int64_t x, int64_t y);
int64_t checked_neg(int64_t x);

// ---- conversions ------------------------------------------------------------------

// Python's str(): strings as they are, None as "None", True as "True", floats
// as repr() prints them, containers as their repr; undefined prints as "".
std::string to_str(const Value& v);
// to_str for the output: a list or dict whose printed form would pass max_bytes stops
// there with a Limit error, before the rest of it is made.
std::string to_str_within(const Value& v, size_t max_bytes);
// Python's repr(): strings quoted ('a'), containers as Python prints them.
std::string to_repr(const Value& v);

struct JsonFormat {
  int indent = -1;  // < 0: one line
  std::string item_separator;  // default: ", " on one line, "," with an indent
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// json.dumps(v, ...) as Hugging Face's tojson filter calls it. Undefined values,
// functions and namespaces are not JSON: a Type error.
std::string to_json(const Value& v, const JsonFormat& format);
// JSON (as ordered_json keeps key order) to a value: objects become dicts.
Value from_json(const nlohmann::ordered_json& j);

// "str", "int", "list", "dict", "NoneType", ... (Python's type names, for messages).
std::string type_name(const Value& v);

// ---- operations -------------------------------------------------------------------

bool equals(const Value& a, const Value& b);
// -1, 0, 1 for <, ==, >: numbers with numbers, strings with strings, lists
// element-wise. Other pairs: a Type error naming `op`.
int compare(const Value& a, const Value& b, std::string_view op);
// `item in container`: a substring, a list element, a dict key.
bool contains(const Value& container, const Value& item);
// Python's binary operators + - * / // % ** and Jinja's ~ (string concatenation).
// Adding a plain string to a markup string escapes the plain one (Markup.__add__).
Value binary_op(std::string_view op, const Value& a, const Value& b);
// The items a for loop visits: list items, dict keys, string characters; nothing for
// an undefined value.
std::vector<Value> iterate(const Value& v);
// Python len(): code points of a string, items of a list or dict.
int64_t length(const Value& v);
// obj[key] as Jinja evaluates it: missing keys and out-of-range indexes give an
// undefined value (an error only once it is used); subscribing undefined fails.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] for strings and lists, with Python's semantics; absent
// bounds are undefined values.
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// ---- UTF-8 ------------------------------------------------------------------------

// The characters (code points, as UTF-8 substrings) of a string; an invalid byte is
// one character of its own.
std::vector<std::string> utf8_chars(std::string_view s);
bool is_ascii(std::string_view s);
// The bytes of the character at s[i]: its UTF-8 sequence, or 1 for an invalid byte.
size_t utf8_char_bytes(std::string_view s, size_t i);
// The characters (code points; an invalid byte counts as one) of UTF-8 text, as
// utf8_chars(s).size() without making them.
size_t utf8_count(std::string_view s);
// HTML escaping as markupsafe.escape does it: & < > " '.
std::string html_escape(std::string_view s);

}  // namespace fafo::jinja
