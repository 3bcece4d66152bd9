// GGUF v2/v3 reader. Every read is bounds-checked against the mapped file; any
// inconsistency raises GgufError(file, offset, what) before the value is used.
//
// Layout: magic "GGUF", u32 version, u64 tensor count, u64 metadata count,
// metadata (key string, u32 type, value), tensor infos (name, u32 n_dims, u64 ne[n_dims],
// u32 type, u64 offset), padding to general.alignment, tensor data.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "fafo/gguf.h"
#include "fafo/mapping_guard.h"

namespace fafo {

namespace {

constexpr uint32_t kMaxDims = 4;             // ggml tensors have at most 4 dimensions
constexpr int kMaxArrayNesting = 8;          // deeper nesting is treated as hostile
constexpr uint64_t kMaxStringBytes = 1ull << 30;
// Real vocabularies are below 300k tokens (tokens + scores + types + merges ~ 1.2M items).
constexpr uint64_t kMaxMetadataArrayItems = 1ull << 24;

std::string format_error(const std::string& file, uint64_t offset, const std::string& what) {
  return file + ": at byte offset " + std::to_string(offset) + ": " + what;
}

}  // namespace

GgufError::GgufError(const std::string& file, uint64_t offset, const std::string& what)
    : std::runtime_error(format_error(file, offset, what)) {}
GgufError::GgufError(const std::string& file, const std::string& what) : std::runtime_error(file + ": " + what) {}

// Sequential bounds-checked reader over the mapping.
class GgufParser {
 public:
  GgufParser(GgufFile& f) : f_(f) {}

  void parse() {
    if (f_.size_ < 4 || std::memcmp(f_.base_, "GGUF", 4) != 0) {
      if (f_.size_ >= 4 && std::memcmp(f_.base_, "FUGG", 4) == 0)
        fail(0, "big-endian GGUF files are not supported");
      fail(0, "bad magic: not a GGUF file (expected \"GGUF\")");
    }
    pos_ = 4;
    uint64_t at = pos_;
    f_.version_ = read_u32("version");
    if (f_.version_ == 1) fail(at, "GGUF version 1 is not supported (only versions 2 and 3)");
    if (f_.version_ != 2 && f_.version_ != 3)
      fail(at, "unknown GGUF version " + std::to_string(f_.version_) + " (supported: 2, 3)");

    at = pos_;
    const uint64_t n_tensors = read_u64("tensor count");
    // Each tensor info takes at least 8+4+8+4+8 bytes; reject counts the file cannot hold.
    if (n_tensors > remaining() / 32) fail(at, "tensor count " + std::to_string(n_tensors) + " exceeds what the file can hold");
    at = pos_;
    const uint64_t n_kv = read_u64("metadata count");
    if (n_kv > remaining() / 12) fail(at, "metadata count " + std::to_string(n_kv) + " exceeds what the file can hold");

    f_.kv_.reserve(n_kv);
    for (uint64_t k = 0; k < n_kv; ++k) read_kv(k);

    read_alignment();

    f_.tensors_.reserve(n_tensors);
    for (uint64_t t = 0; t < n_tensors; ++t) read_tensor_info(t);

    f_.data_offset_ = align_up(pos_, f_.alignment_);
    if (f_.data_offset_ > f_.size_ && n_tensors > 0)
      fail(pos_, "truncated: the tensor data section starts past the end of the file");
    check_tensor_data();
  }

 private:
  [[noreturn]] void fail(uint64_t offset, const std::string& what) { throw GgufError(f_.path_, offset, what); }

  uint64_t remaining() const { return f_.size_ - pos_; }

  void need(uint64_t n, const char* what) {
    if (n > remaining())
      fail(pos_, std::string("truncated: reading ") + what + " needs " + std::to_string(n) + " bytes, " +
                     std::to_string(remaining()) + " left in the file");
  }

  template <typename T>
  T read_raw(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, f_.base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint32_t read_u32(const char* what) { return read_raw<uint32_t>(what); }
  uint64_t read_u64(const char* what) { return read_raw<uint64_t>(what); }

  std::string read_string(const char* what) {
    const uint64_t at = pos_;
    const uint64_t len = read_u64(what);
    if (len > remaining())
      fail(at, std::string(what) + ": string length " + std::to_string(len) + " runs past the end of the file");
    if (len > kMaxStringBytes)
      fail(at, std::string(what) + ": string length " + std::to_string(len) + " is over the 1 GiB limit");
    std::string s(reinterpret_cast<const char*>(f_.base_ + pos_), len);
    pos_ += len;
    return s;
  }

  static uint64_t min_value_bytes(GgufType t) {
    switch (t) {
      case GgufType::UINT8: case GgufType::INT8: case GgufType::BOOL: return 1;
      case GgufType::UINT16: case GgufType::INT16: return 2;
      case GgufType::UINT32: case GgufType::INT32: case GgufType::FLOAT32: return 4;
      case GgufType::UINT64: case GgufType::INT64: case GgufType::FLOAT64: case GgufType::STRING: return 8;
      case GgufType::ARRAY: return 12;
    }
    return 1;
  }

  static bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::FLOAT64); }

  GgufValue read_value(GgufType type, const std::string& key, int depth) {
    GgufValue out;
    out.type = type;
    switch (type) {
      case GgufType::UINT8: out.v = uint64_t{read_raw<uint8_t>("u8 value")}; break;
      case GgufType::INT8: out.v = int64_t{read_raw<int8_t>("i8 value")}; break;
      case GgufType::UINT16: out.v = uint64_t{read_raw<uint16_t>("u16 value")}; break;
      case GgufType::INT16: out.v = int64_t{read_raw<int16_t>("i16 value")}; break;
      case GgufType::UINT32: out.v = uint64_t{read_raw<uint32_t>("u32 value")}; break;
      case GgufType::INT32: out.v = int64_t{read_raw<int32_t>("i32 value")}; break;
      case GgufType::UINT64: out.v = read_raw<uint64_t>("u64 value"); break;
      case GgufType::INT64: out.v = read_raw<int64_t>("i64 value"); break;
      case GgufType::FLOAT32: out.v = double{read_raw<float>("f32 value")}; break;
      case GgufType::FLOAT64: out.v = read_raw<double>("f64 value"); break;
      case GgufType::BOOL: {
        const uint64_t at = pos_;
        const uint8_t b = read_raw<uint8_t>("bool value");
        if (b > 1) fail(at, "key '" + key + "': bool value " + std::to_string(b) + " is neither 0 nor 1");
        out.v = b != 0;
        break;
      }
      case GgufType::STRING: out.v = read_string("string value"); break;
      case GgufType::ARRAY: {
        if (depth >= kMaxArrayNesting) fail(pos_, "key '" + key + "': arrays nested too deeply");
        const uint64_t at = pos_;
        const uint32_t elem = read_u32("array element type");
        if (!valid_type(elem)) fail(at, "key '" + key + "': unknown array element type " + std::to_string(elem));
        const uint64_t count_at = pos_;
        const uint64_t count = read_u64("array length");
        const GgufType elem_type = static_cast<GgufType>(elem);
        if (count > remaining() / min_value_bytes(elem_type))
          fail(count_at, "key '" + key + "': array length " + std::to_string(count) + " runs past the end of the file");
        // Each element becomes a GgufValue (tens of bytes): cap the total so a hostile
        // file cannot make the reader allocate many times its own size.
        array_items_ += count;
        if (array_items_ > kMaxMetadataArrayItems)
          fail(count_at, "key '" + key + "': metadata arrays hold more than " + std::to_string(kMaxMetadataArrayItems) +
                             " elements in total; refusing to load them");
        GgufValue::Array arr;
        arr.elem_type = elem_type;
        arr.items.reserve(count);
        for (uint64_t k = 0; k < count; ++k) arr.items.push_back(read_value(elem_type, key, depth + 1));
        out.v = std::move(arr);
        break;
      }
    }
    return out;
  }

  void read_kv(uint64_t index) {
    const uint64_t at = pos_;
    std::string key = read_string("metadata key");
    if (key.empty()) fail(at, "metadata entry " + std::to_string(index) + " has an empty key");
    if (!keys_seen_.insert(key).second) fail(at, "duplicate metadata key '" + key + "'");
    const uint64_t type_at = pos_;
    const uint32_t type = read_u32("metadata value type");
    if (!valid_type(type))
      fail(type_at, "key '" + key + "': unknown metadata value type " + std::to_string(type));
    GgufValue value = read_value(static_cast<GgufType>(type), key, 0);
    f_.kv_.emplace_back(std::move(key), std::move(value));
  }

  void read_alignment() {
    const GgufValue* a = f_.find("general.alignment");
    if (!a) return;
    if (a->type != GgufType::UINT32) throw GgufError(f_.path_, "general.alignment must be a u32, found " + std::string(gguf_type_name(a->type)));
    const uint64_t v = a->as_uint();
    if (v == 0 || (v & (v - 1)) != 0)
      throw GgufError(f_.path_, "general.alignment " + std::to_string(v) + " is not a power of two");
    if (v < 8)  // the GGUF spec asks for a multiple of 8; it also keeps f32/f16 data aligned
      throw GgufError(f_.path_, "general.alignment " + std::to_string(v) + " is smaller than 8");
    f_.alignment_ = v;
  }

  static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

  void read_tensor_info(uint64_t index) {
    const uint64_t at = pos_;
    GgufTensor t;
    t.name = read_string("tensor name");
    if (t.name.empty()) fail(at, "tensor " + std::to_string(index) + " has an empty name");
    if (f_.tensor_index_.count(t.name)) fail(at, "duplicate tensor name '" + t.name + "'");

    const uint64_t dims_at = pos_;
    const uint32_t n_dims = read_u32("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims)
      fail(dims_at, "tensor '" + t.name + "': " + std::to_string(n_dims) + " dimensions (expected 1 to 4)");
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne_at = pos_;
      const uint64_t ne = read_u64("tensor dimension");
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(ne_at, "tensor '" + t.name + "': dimension " + std::to_string(d) + " has invalid size " + std::to_string(ne));
      if (n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ne)
        fail(ne_at, "tensor '" + t.name + "': element count overflows 64 bits");
      n_elements *= ne;
      t.shape.push_back(static_cast<int64_t>(ne));
    }

    const uint64_t type_at = pos_;
    const uint32_t type = read_u32("tensor type");
    const TensorTypeInfo* info = tensor_type_info(type);
    if (!info) {
      const std::string_view known = unsupported_ggml_type_name(type);
      if (!known.empty())
        fail(type_at, "tensor '" + t.name + "' is " + std::string(known) + " (ggml type " + std::to_string(type) +
                          "), a weight format fafo does not read (it reads " + weight_type_names() + ")");
      fail(type_at, "tensor '" + t.name + "': unknown tensor type id " + std::to_string(type));
    }
    t.type = info->type;
    if (t.shape[0] % info->block_size != 0)
      fail(type_at, "tensor '" + t.name + "': row length " + std::to_string(t.shape[0]) + " is not a multiple of the " +
                        std::string(info->name) + " block size " + std::to_string(info->block_size));
    const uint64_t n_blocks = n_elements / info->block_size;  // exact: rows are whole blocks
    if (n_blocks > std::numeric_limits<uint64_t>::max() / info->block_bytes ||
        n_blocks * info->block_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(type_at, "tensor '" + t.name + "': byte size overflows 64 bits");
    t.n_bytes = n_blocks * info->block_bytes;

    const uint64_t off_at = pos_;
    t.offset = read_u64("tensor data offset");
    if (t.offset % f_.alignment_ != 0)
      fail(off_at, "tensor '" + t.name + "': data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                       std::to_string(f_.alignment_));
    f_.tensor_index_.emplace(t.name, f_.tensors_.size());
    f_.tensors_.push_back(std::move(t));
  }

  void check_tensor_data() {
    const uint64_t data_size = f_.size_ > f_.data_offset_ ? f_.size_ - f_.data_offset_ : 0;
    for (GgufTensor& t : f_.tensors_) {
      if (t.offset > data_size || t.n_bytes > data_size - t.offset)
        throw GgufError(f_.path_, f_.data_offset_ + t.offset,
                        "tensor '" + t.name + "': data (" + std::to_string(t.n_bytes) + " bytes at data offset " +
                            std::to_string(t.offset) + ") runs past the end of the file (" + std::to_string(data_size) +
                            " data bytes); the file is truncated or corrupt");
      t.data = f_.base_ + f_.data_offset_ + t.offset;
    }
  }

  GgufFile& f_;
  uint64_t pos_ = 0;
  std::unordered_set<std::string> keys_seen_;
  uint64_t array_items_ = 0;  // across all metadata arrays
};

std::unique_ptr<GgufFile> GgufFile::open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is rejected below).
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (f->fd_ < 0) throw GgufError(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(f->fd_, &st) != 0) throw GgufError(path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw GgufError(path, "not a regular file");
  f->size_ = static_cast<uint64_t>(st.st_size);
  f->mtime_ns_ = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (f->size_ == 0) throw GgufError(path, 0, "empty file: not a GGUF file");
  void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, f->fd_, 0);
  if (m == MAP_FAILED) throw GgufError(path, std::string("cannot map: ") + std::strerror(errno));
  f->base_ = static_cast<const uint8_t*>(m);
  f->guard_ = guard_mapping(m, f->size_);
  GgufParser(*f).parse();
  f->check_intact();
  return f;
}

void GgufFile::check_intact() const {
  struct stat st {};
  if (mapping_damaged(guard_))
    throw GgufError(path_, "the file shrank while in use (a read found it shorter than the " + std::to_string(size_) +
                               " bytes it had when opened); open it again");
  if (::fstat(fd_, &st) != 0) return;  // cannot tell
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (static_cast<uint64_t>(st.st_size) != size_)
    throw GgufError(path_, "the file changed while in use: it has " + std::to_string(st.st_size) + " bytes, not the " +
                               std::to_string(size_) + " it had when opened; open it again");
  if (mtime != mtime_ns_) throw GgufError(path_, "the file was modified while in use; open it again");
}

GgufFile::~GgufFile() {
  unguard_mapping(guard_);
  if (base_) ::munmap(const_cast<uint8_t*>(base_), size_);
  if (fd_ >= 0) ::close(fd_);
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return &v;
  return nullptr;
}

int64_t GgufFile::require_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) throw GgufError(path_, "missing required key '" + std::string(key) + "'");
  if (!v->is_integer())
    throw GgufError(path_, "key '" + std::string(key) + "' must be an integer, found " + std::string(gguf_type_name(v->type)));
  try {
    return v->as_int();
  } catch (const std::runtime_error& e) {
    throw GgufError(path_, "key '" + std::string(key) + "': " + e.what());
  }
}

double GgufFile::require_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) throw GgufError(path_, "missing required key '" + std::string(key) + "'");
  if (!v->is_float() && !v->is_integer())
    throw GgufError(path_, "key '" + std::string(key) + "' must be a number, found " + std::string(gguf_type_name(v->type)));
  return v->as_float();
}

const std::string& GgufFile::require_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) throw GgufError(path_, "missing required key '" + std::string(key) + "'");
  if (v->type != GgufType::STRING)
    throw GgufError(path_, "key '" + std::string(key) + "' must be a string, found " + std::string(gguf_type_name(v->type)));
  return v->as_string();
}

int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const { return find(key) ? require_int(key) : fallback; }
double GgufFile::get_float(std::string_view key, double fallback) const { return find(key) ? require_float(key) : fallback; }
std::string GgufFile::get_string(std::string_view key, const std::string& fallback) const {
  return find(key) ? require_string(key) : fallback;
}
bool GgufFile::get_bool(std::string_view key, bool fallback) const {
  const GgufValue* v = find(key);
  if (!v) return fallback;
  if (v->type != GgufType::BOOL && !v->is_integer())
    throw GgufError(path_, "key '" + std::string(key) + "' must be a bool, found " + std::string(gguf_type_name(v->type)));
  return v->as_bool();
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::require_tensor(std::string_view name) const {
  const GgufTensor* t = find_tensor(name);
  if (!t) throw GgufError(path_, "missing required tensor '" + std::string(name) + "'");
  return *t;
}

int64_t GgufTensor::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t GgufTensor::n_rows() const { return shape.empty() ? 0 : n_elements() / shape[0]; }

}  // namespace fafo
