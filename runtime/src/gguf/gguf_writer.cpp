// GGUF v3 writer: metadata, tensor infos, aligned tensor data.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

#include "fafo/gguf.h"

namespace fafo {

namespace {

class ByteSink {
 public:
  explicit ByteSink(std::ofstream& out) : out_(out) {}
  void bytes(const void* p, size_t n) {
    out_.write(static_cast<const char*>(p), static_cast<std::streamsize>(n));
    written_ += n;
  }
  template <typename T>
  void raw(T v) { bytes(&v, sizeof v); }
  void string(const std::string& s) {
    raw<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to(uint64_t alignment) {
    static const char zeros[256] = {};
    while (written_ % alignment) bytes(zeros, std::min<uint64_t>(alignment - written_ % alignment, sizeof zeros));
  }
  uint64_t written() const { return written_; }

 private:
  std::ofstream& out_;
  uint64_t written_ = 0;
};

void write_value(ByteSink& s, const GgufValue& v) {
  switch (v.type) {
    case GgufType::UINT8: s.raw<uint8_t>(static_cast<uint8_t>(v.as_uint())); break;
    case GgufType::INT8: s.raw<int8_t>(static_cast<int8_t>(v.as_int())); break;
    case GgufType::UINT16: s.raw<uint16_t>(static_cast<uint16_t>(v.as_uint())); break;
    case GgufType::INT16: s.raw<int16_t>(static_cast<int16_t>(v.as_int())); break;
    case GgufType::UINT32: s.raw<uint32_t>(static_cast<uint32_t>(v.as_uint())); break;
    case GgufType::INT32: s.raw<int32_t>(static_cast<int32_t>(v.as_int())); break;
    case GgufType::UINT64: s.raw<uint64_t>(v.as_uint()); break;
    case GgufType::INT64: s.raw<int64_t>(v.as_int()); break;
    case GgufType::FLOAT32: s.raw<float>(static_cast<float>(v.as_float())); break;
    case GgufType::FLOAT64: s.raw<double>(v.as_float()); break;
    case GgufType::BOOL: s.raw<uint8_t>(v.as_bool() ? 1 : 0); break;
    case GgufType::STRING: s.string(v.as_string()); break;
    case GgufType::ARRAY: {
      const auto& a = v.as_array();
      s.raw<uint32_t>(static_cast<uint32_t>(a.elem_type));
      s.raw<uint64_t>(a.items.size());
      for (const GgufValue& item : a.items) write_value(s, item);
      break;
    }
  }
}

// Checks a tensor's shape against its type and returns its size in bytes: 1 to 4
// dimensions, each > 0, a row length that is a whole number of the type's blocks, and a
// size that fits. Throws std::invalid_argument naming the tensor.
size_t checked_tensor_bytes(const std::string& name, TensorType type, const std::vector<int64_t>& shape) {
  auto bad = [&](const std::string& what) { throw std::invalid_argument("tensor '" + name + "': " + what); };
  if (shape.empty() || shape.size() > 4) bad("1 to 4 dimensions expected, got " + std::to_string(shape.size()));
  int64_t rows = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] <= 0)
      bad("dimension " + std::to_string(i) + " is " + std::to_string(shape[i]) + " (every dimension must be > 0)");
    if (i > 0) {
      if (rows > INT64_MAX / shape[i]) bad("too many elements");
      rows *= shape[i];
    }
  }
  const TensorTypeInfo& info = tensor_type_info(type);
  if (shape[0] % info.block_size != 0)
    bad("row length " + std::to_string(shape[0]) + " is not a multiple of " + std::string(info.name) + "'s block size " +
        std::to_string(info.block_size));
  const size_t row_bytes = tensor_row_bytes(type, shape[0]);
  if (static_cast<uint64_t>(rows) > SIZE_MAX / row_bytes) bad("too many bytes");
  return row_bytes * static_cast<size_t>(rows);
}

GgufValue scalar(GgufType t, std::variant<uint64_t, int64_t, double, bool, std::string, GgufValue::Array> v) {
  GgufValue out;
  out.type = t;
  out.v = std::move(v);
  return out;
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : kv_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  kv_.emplace_back(key, std::move(value));
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) { set(key, scalar(GgufType::UINT32, uint64_t{v})); }
void GgufWriter::set_i32(const std::string& key, int32_t v) { set(key, scalar(GgufType::INT32, int64_t{v})); }
void GgufWriter::set_f32(const std::string& key, float v) { set(key, scalar(GgufType::FLOAT32, double{v})); }
void GgufWriter::set_bool(const std::string& key, bool v) { set(key, scalar(GgufType::BOOL, v)); }
void GgufWriter::set_string(const std::string& key, const std::string& v) { set(key, scalar(GgufType::STRING, v)); }

void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  GgufValue::Array a{GgufType::STRING, {}};
  a.items.reserve(v.size());
  for (const auto& s : v) a.items.push_back(scalar(GgufType::STRING, s));
  set(key, scalar(GgufType::ARRAY, std::move(a)));
}

void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) {
  GgufValue::Array a{GgufType::FLOAT32, {}};
  a.items.reserve(v.size());
  for (float x : v) a.items.push_back(scalar(GgufType::FLOAT32, double{x}));
  set(key, scalar(GgufType::ARRAY, std::move(a)));
}

void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  GgufValue::Array a{GgufType::INT32, {}};
  a.items.reserve(v.size());
  for (int32_t x : v) a.items.push_back(scalar(GgufType::INT32, int64_t{x}));
  set(key, scalar(GgufType::ARRAY, std::move(a)));
}

void GgufWriter::add_tensor(const std::string& name, TensorType type, std::vector<int64_t> shape, std::vector<uint8_t> data) {
  const size_t expected = checked_tensor_bytes(name, type, shape);
  if (data.size() != expected)
    throw std::invalid_argument("tensor '" + name + "': " + std::to_string(data.size()) + " bytes given, " +
                                std::to_string(expected) + " expected");
  tensors_.push_back({name, type, std::move(shape), std::move(data), expected, false});
}

void GgufWriter::add_tensor_info(const std::string& name, TensorType type, std::vector<int64_t> shape) {
  const size_t n_bytes = checked_tensor_bytes(name, type, shape);
  tensors_.push_back({name, type, std::move(shape), {}, n_bytes, true});
}

void GgufWriter::write(const std::string& path, const TensorProducer& produce) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error(path + ": cannot open for writing");
  ByteSink s(out);
  s.bytes("GGUF", 4);
  s.raw<uint32_t>(3);
  s.raw<uint64_t>(tensors_.size());
  const bool has_alignment = [&] {
    for (const auto& [k, v] : kv_)
      if (k == "general.alignment") return true;
    return false;
  }();
  s.raw<uint64_t>(kv_.size() + (has_alignment || alignment_ == 32 ? 0 : 1));
  for (const auto& [k, v] : kv_) {
    s.string(k);
    s.raw<uint32_t>(static_cast<uint32_t>(v.type));
    write_value(s, v);
  }
  if (!has_alignment && alignment_ != 32) {
    s.string("general.alignment");
    s.raw<uint32_t>(static_cast<uint32_t>(GgufType::UINT32));
    s.raw<uint32_t>(static_cast<uint32_t>(alignment_));
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    s.string(t.name);
    s.raw<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) s.raw<uint64_t>(static_cast<uint64_t>(d));
    s.raw<uint32_t>(static_cast<uint32_t>(t.type));
    s.raw<uint64_t>(offset);
    offset += (t.n_bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  s.pad_to(alignment_);
  std::vector<uint8_t> produced;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const PendingTensor& t = tensors_[i];
    if (t.deferred) {
      if (!produce) throw std::invalid_argument("tensor '" + t.name + "' has no data and no producer was given");
      produced.assign(t.n_bytes, 0);
      produce(i, produced);
      if (produced.size() != t.n_bytes) throw std::runtime_error("tensor '" + t.name + "': producer wrote the wrong size");
      s.bytes(produced.data(), produced.size());
    } else {
      s.bytes(t.data.data(), t.data.size());
    }
    s.pad_to(alignment_);
    if (!out) throw std::runtime_error(path + ": write failed (disk full?)");
  }
  out.flush();
  if (!out) throw std::runtime_error(path + ": write failed (disk full?)");
}

}  // namespace fafo
