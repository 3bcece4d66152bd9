// GGUF v2/v3 files: a memory-mapped reader that validates everything it returns,
// and a writer (used by tools and tests).
//
// The reader checks every length, offset and dimension against the file size before
// use; a malformed file raises GgufError naming the file, the byte offset and the
// problem. Tensor data stays in the mapping: GgufTensor::data points into it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "fafo/tensor_type.h"

namespace fafo {

class GgufError : public std::runtime_error {
 public:
  GgufError(const std::string& file, uint64_t offset, const std::string& what);
  GgufError(const std::string& file, const std::string& what);  // no meaningful offset
};

// GGUF metadata value type ids.
enum class GgufType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view gguf_type_name(GgufType t);

// A metadata value. Arrays hold elements of one type; nested arrays are allowed.
struct GgufValue {
  struct Array {
    GgufType elem_type = GgufType::UINT8;
    std::vector<GgufValue> items;
  };
  GgufType type = GgufType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;

  bool is_integer() const;
  bool is_float() const;
  // Converting accessors; throw std::runtime_error on a type mismatch.
  int64_t as_int() const;
  uint64_t as_uint() const;
  double as_float() const;
  bool as_bool() const;
  const std::string& as_string() const;
  const Array& as_array() const;
  // Short human-readable rendering ("[512 strings]" for long arrays).
  std::string summary(size_t max_items = 8) const;
};

struct GgufTensor {
  std::string name;
  TensorType type = TensorType::F32;
  std::vector<int64_t> shape;   // ggml ne order: shape[0] is the contiguous row length
  uint64_t offset = 0;          // relative to the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping

  int64_t n_elements() const;
  int64_t n_rows() const;  // product of shape[1..]
};

class GgufFile {
 public:
  // Maps and validates the file. Throws GgufError.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  // Typed lookups: `require_*` throws GgufError("missing required key ...") when absent
  // or of the wrong type; `get_*` returns the fallback when absent.
  int64_t require_int(std::string_view key) const;
  double require_float(std::string_view key) const;
  const std::string& require_string(std::string_view key) const;
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;
  std::string get_string(std::string_view key, const std::string& fallback) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;
  const GgufTensor& require_tensor(std::string_view name) const;  // throws GgufError

  // Throws GgufError when the file changed while mapped: it is shorter or longer than
  // when opened, was modified since, or a read of the map met its end (fafo/mapping_guard.h).
  // The tensors' bytes are then not what was loaded; the file must be opened again.
  void check_intact() const;

 private:
  GgufFile() = default;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  uint64_t size_ = 0;
  const uint8_t* base_ = nullptr;
  int fd_ = -1;
  int guard_ = -1;               // fafo/mapping_guard.h
  int64_t mtime_ns_ = 0;         // when opened
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  friend class GgufParser;
};

// Writes GGUF v3 files. Add metadata and tensors, then write().
class GgufWriter {
 public:
  explicit GgufWriter(uint64_t alignment = 32) : alignment_(alignment) {}
  void set(const std::string& key, GgufValue value);
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  // `data` must hold exactly the bytes of the tensor in its type.
  void add_tensor(const std::string& name, TensorType type, std::vector<int64_t> shape,
                  std::vector<uint8_t> data);
  // Declares a tensor whose bytes are produced while writing (see write()), so that
  // multi-gigabyte files never sit in memory.
  void add_tensor_info(const std::string& name, TensorType type, std::vector<int64_t> shape);
  // Produces the bytes of tensor `index` (in add order) into `out`, resized by the writer.
  using TensorProducer = std::function<void(size_t index, std::vector<uint8_t>& out)>;
  // Writes the file; tensors declared with add_tensor_info get their bytes from
  // `produce`. Throws std::runtime_error on I/O failure.
  void write(const std::string& path, const TensorProducer& produce = {}) const;
  size_t tensor_count() const { return tensors_.size(); }

 private:
  struct PendingTensor {
    std::string name;
    TensorType type;
    std::vector<int64_t> shape;
    std::vector<uint8_t> data;
    size_t n_bytes = 0;
    bool deferred = false;
  };
  uint64_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace fafo
