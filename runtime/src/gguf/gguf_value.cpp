// GgufValue accessors and rendering.
#include <limits>
#include <sstream>
#include <stdexcept>

#include "fafo/gguf.h"

namespace fafo {

std::string_view gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::UINT8: return "u8";
    case GgufType::INT8: return "i8";
    case GgufType::UINT16: return "u16";
    case GgufType::INT16: return "i16";
    case GgufType::UINT32: return "u32";
    case GgufType::INT32: return "i32";
    case GgufType::FLOAT32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::UINT64: return "u64";
    case GgufType::INT64: return "i64";
    case GgufType::FLOAT64: return "f64";
  }
  return "unknown";
}

bool GgufValue::is_integer() const {
  return std::holds_alternative<uint64_t>(v) || std::holds_alternative<int64_t>(v);
}

bool GgufValue::is_float() const { return std::holds_alternative<double>(v); }

int64_t GgufValue::as_int() const {
  if (auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      throw std::runtime_error("integer " + std::to_string(*u) + " is too large");
    return static_cast<int64_t>(*u);
  }
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  if (auto* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
  throw std::runtime_error("expected an integer, found " + std::string(gguf_type_name(type)));
}

uint64_t GgufValue::as_uint() const {
  if (auto* u = std::get_if<uint64_t>(&v)) return *u;
  if (auto* i = std::get_if<int64_t>(&v)) {
    if (*i < 0) throw std::runtime_error("expected a non-negative integer, found " + std::to_string(*i));
    return static_cast<uint64_t>(*i);
  }
  throw std::runtime_error("expected an integer, found " + std::string(gguf_type_name(type)));
}

double GgufValue::as_float() const {
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (is_integer()) return static_cast<double>(as_int());
  throw std::runtime_error("expected a number, found " + std::string(gguf_type_name(type)));
}

bool GgufValue::as_bool() const {
  if (auto* b = std::get_if<bool>(&v)) return *b;
  if (is_integer()) return as_int() != 0;
  throw std::runtime_error("expected a bool, found " + std::string(gguf_type_name(type)));
}

const std::string& GgufValue::as_string() const {
  if (auto* s = std::get_if<std::string>(&v)) return *s;
  throw std::runtime_error("expected a string, found " + std::string(gguf_type_name(type)));
}

const GgufValue::Array& GgufValue::as_array() const {
  if (auto* a = std::get_if<Array>(&v)) return *a;
  throw std::runtime_error("expected an array, found " + std::string(gguf_type_name(type)));
}

std::string GgufValue::summary(size_t max_items) const {
  std::ostringstream out;
  if (auto* u = std::get_if<uint64_t>(&v)) {
    out << *u;
  } else if (auto* i = std::get_if<int64_t>(&v)) {
    out << *i;
  } else if (auto* d = std::get_if<double>(&v)) {
    out << *d;
  } else if (auto* b = std::get_if<bool>(&v)) {
    out << (*b ? "true" : "false");
  } else if (auto* s = std::get_if<std::string>(&v)) {
    std::string shown = s->size() > 60 ? s->substr(0, 57) + "..." : *s;
    for (char& c : shown)
      if (c == '\n' || c == '\r' || c == '\t') c = ' ';
    out << '"' << shown << '"';
  } else if (auto* a = std::get_if<Array>(&v)) {
    if (a->items.size() > max_items) {
      out << "[" << a->items.size() << " x " << gguf_type_name(a->elem_type) << "]";
    } else {
      out << "[";
      for (size_t k = 0; k < a->items.size(); ++k) out << (k ? ", " : "") << a->items[k].summary(max_items);
      out << "]";
    }
  }
  return out.str();
}

}  // namespace fafo
