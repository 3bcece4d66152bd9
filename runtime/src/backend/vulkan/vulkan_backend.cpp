#include "backend/vulkan/vulkan_backend.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <tuple>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "backend/vulkan/buffer.h"
#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/descriptor_cache.h"
#include "backend/vulkan/kernels.h"
#include "backend/vulkan/transfer.h"
#include "backend/vulkan/vulkan_error.h"
#include "backend/vulkan/weight_kernels.h"
#include "fafo/vulkan_devices.h"
#include "fafo/tensor_type.h"
#include "fafo/top_k.h"

namespace fafo {
namespace vulkan {

static_assert(Kernels::kMaxTopK == static_cast<uint32_t>(kMaxTopK), "shaders/top_k.comp's MAX_K follows fafo::kMaxTopK");

namespace {

std::string gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / double(1ull << 30));
  return text;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// One buffer of a weight: rows [first_row, first_row + n_rows).
struct WeightPart {
  Buffer buffer;
  uint32_t first_row = 0;
  uint32_t n_rows = 0;
};

struct DeviceWeight {
  TensorType type = TensorType::F32;
  int64_t rows = 0, cols = 0;
  std::vector<WeightPart> parts;
};

struct DeviceActivation {
  Buffer buffer;
  int64_t max_rows = 0, cols = 0;
};

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(const VulkanBackendOptions& options)
      : context_(make_context_options(options)),
        kernels_(context_),
        weight_kernels_(context_),
        descriptors_(context_),
        transfer_(context_) {
    const VkPhysicalDeviceMemoryProperties& mem = context_.memory_properties();
    for (uint32_t h = 0; h < mem.memoryHeapCount; ++h)
      if (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
        heap_bytes_ = std::max<uint64_t>(heap_bytes_, mem.memoryHeaps[h].size);
    if (heap_bytes_ == 0 && mem.memoryHeapCount > 0) heap_bytes_ = mem.memoryHeaps[0].size;
    max_range_ = context_.properties().limits.maxStorageBufferRange;
    if (options.max_buffer_bytes > 0) max_range_ = std::min<uint64_t>(max_range_, options.max_buffer_bytes & ~uint64_t{3});
  }

  ~VulkanBackend() override { seq_.reset(); }

  std::string name() const override { return "vulkan"; }
  std::string description() const override {
    const char* types[] = {"other", "integrated GPU", "discrete GPU", "virtual GPU", "CPU"};
    const int t = static_cast<int>(context_.properties().deviceType);
    // Then what matmul runs and the optional features in use, detected but unused, or
    // turned off by FAFO_VULKAN_FEATURES (backend/vulkan/devices.h).
    return "Vulkan device " + std::to_string(context_.device_index()) + ": " + context_.device_name() + " (" +
           (t >= 0 && t <= 4 ? types[t] : "other") + ", " + gib(heap_bytes_) + "); " + weight_kernels_.describe() +
           "; f16 KV cache reads: " + (kernels_.half_storage_exact() ? "16-bit storage" : "32-bit words") + "; " +
           describe_features(context_.features(), context_.detected_features());
  }

  // --- memory -----------------------------------------------------------------------
  Weight upload_weight(TensorType type, int64_t rows, int64_t cols, const void* data) override {
    DeviceWeight w;
    w.rows = rows;
    w.cols = cols;
    if (rows == 1) {
      // Vectors (norm gains, biases) are kept as F32: the element-wise kernels read floats.
      std::vector<float> dense(static_cast<size_t>(cols));
      dequantize_row(type, data, dense.data(), cols);
      w.type = TensorType::F32;
      WeightPart part{allocate(dense.size() * sizeof(float), "a weight vector"), 0, 1};
      transfer_.upload(part.buffer, dense.data(), dense.size() * sizeof(float));
      w.parts.push_back(std::move(part));
    } else {
      if (!WeightKernels::supports(type))
        throw std::runtime_error("the Vulkan backend has no kernel for weights of type " +
                                 std::string(tensor_type_name(type)));
      w.type = type;
      weight_kernels_.prepare(type);  // this format's pipelines, at load time rather than in a step
      const size_t row_bytes = tensor_row_bytes(type, cols);
      // Split by rows so that no buffer exceeds maxStorageBufferRange.
      const int64_t rows_per_part = std::max<int64_t>(1, static_cast<int64_t>((max_range_ - 4) / row_bytes));
      if (row_bytes > max_range_)
        throw std::runtime_error("a weight row of " + std::to_string(row_bytes) + " bytes exceeds the device's " +
                                 "maxStorageBufferRange of " + std::to_string(max_range_) + " bytes");
      const auto* bytes = static_cast<const uint8_t*>(data);
      for (int64_t first = 0; first < rows; first += rows_per_part) {
        const int64_t n = std::min(rows_per_part, rows - first);
        WeightPart part{allocate(WeightKernels::weight_bytes(type, static_cast<uint32_t>(n), static_cast<uint32_t>(cols)),
                                 "a weight matrix"),
                        static_cast<uint32_t>(first),
                        static_cast<uint32_t>(n)};
        transfer_.upload(part.buffer, bytes + static_cast<size_t>(first) * row_bytes, static_cast<size_t>(n) * row_bytes);
        w.parts.push_back(std::move(part));
      }
    }
    weights_.push_back(std::move(w));
    return Weight{static_cast<int32_t>(weights_.size() - 1), type, rows, cols};
  }

  int64_t max_activation_rows(int64_t cols) const override {
    return cols > 0 ? static_cast<int64_t>(max_range_ / (static_cast<uint64_t>(cols) * sizeof(float))) : 0;
  }

  Activation alloc_activation(int64_t max_rows, int64_t cols) override {
    const uint64_t bytes = static_cast<uint64_t>(max_rows) * static_cast<uint64_t>(cols) * sizeof(float);
    if (bytes > max_range_)
      throw std::runtime_error("an activation of " + std::to_string(max_rows) + " x " + std::to_string(cols) +
                               " floats exceeds the device's maxStorageBufferRange of " + std::to_string(max_range_) +
                               " bytes");
    activations_.push_back(DeviceActivation{allocate(bytes, "activations"), max_rows, cols});
    max_step_rows_ = std::max(max_step_rows_, max_rows);
    return Activation{static_cast<int32_t>(activations_.size() - 1), max_rows, cols};
  }

  void alloc_kv_cache(int32_t n_layer, int32_t n_ctx, int32_t kv_dim, KvCacheType type) override {
    if (type == KvCacheType::F16 && kv_dim % 2 != 0)
      throw std::invalid_argument("an f16 KV cache needs an even KV width; this model's is " + std::to_string(kv_dim));
    kv_type_ = type;
    const uint64_t bytes = static_cast<uint64_t>(n_ctx) * static_cast<uint64_t>(kv_dim) * kv_value_bytes(type);
    if (bytes > max_range_)
      throw std::runtime_error("one layer's KV cache for a context of " + std::to_string(n_ctx) + " tokens needs " +
                               std::to_string(bytes) + " bytes, more than the device's maxStorageBufferRange (" +
                               std::to_string(max_range_) + " bytes); use a smaller --ctx-size");
    const uint64_t total = 2 * bytes * static_cast<uint64_t>(n_layer);
    if (allocated_ + total > heap_bytes_)
      throw std::runtime_error("the KV cache for a context of " + std::to_string(n_ctx) + " tokens needs " + gib(total) +
                               " but only " + gib(heap_bytes_ > allocated_ ? heap_bytes_ - allocated_ : 0) + " of " +
                               gib(heap_bytes_) + " device memory is left after the weights; use a smaller --ctx-size");
    keys_.clear();
    values_.clear();
    for (int32_t l = 0; l < n_layer; ++l) {
      keys_.push_back(allocate(bytes, "the KV cache"));
      values_.push_back(allocate(bytes, "the KV cache"));
    }
    kv_ctx_ = n_ctx;
    kv_dim_ = kv_dim;
    // Per-step inputs: prefix flags, in-step masks and the logical order of the cache.
    const uint64_t T = static_cast<uint64_t>(StepBatch::kMaxTokens);
    mask_words_max_ = static_cast<uint32_t>((T + 31) / 32);
    step_info_ = Buffer(context_, (T + T * mask_words_max_ + static_cast<uint64_t>(n_ctx)) * sizeof(uint32_t),
                        Memory::HostVisible);
    tokens_ = Buffer(context_, T * sizeof(int32_t), Memory::HostVisible);
  }
  int32_t kv_capacity() const override { return kv_ctx_; }

  // --- a step -----------------------------------------------------------------------
  void begin_step(const StepBatch& batch, const KvView& kv) override {
    if (kv_ctx_ == 0) throw std::logic_error("begin_step before alloc_kv_cache");
    if (batch.n_past() + batch.size() > kv_ctx_)
      throw std::length_error("step needs KV slots up to " + std::to_string(batch.n_past() + batch.size()) +
                              " but the cache holds " + std::to_string(kv_ctx_));
    if (batch.size() > max_step_rows_)
      throw std::length_error("a step of " + std::to_string(batch.size()) + " tokens exceeds the " +
                              std::to_string(max_step_rows_) + " rows the activations hold");
    batch_ = &batch;
    kv_view_ = kv;
    gathered_rows_.clear();
    rope_key_.reset();
    const uint32_t T = static_cast<uint32_t>(batch.size());
    mask_words_ = (T + 31) / 32;
    // step_info: [T prefix flags][T x mask_words masks][n_past logical order]
    std::vector<uint32_t> info(T + static_cast<size_t>(T) * mask_words_, 0);
    for (uint32_t i = 0; i < T; ++i) {
      info[i] = batch.prefix(static_cast<int32_t>(i)) == PrefixView::Compressed ? 1u : 0u;
      for (uint32_t j = 0; j <= i; ++j)
        if (batch.sees(static_cast<int32_t>(i), static_cast<int32_t>(j))) info[T + i * mask_words_ + j / 32] |= 1u << (j % 32);
    }
    step_info_.upload(info.data(), info.size() * sizeof(uint32_t));
    use_order_ = kv.full_order != nullptr && batch.n_past() > 0;
    if (use_order_) {
      if (static_cast<int32_t>(kv.full_order->size()) < batch.n_past())
        throw std::invalid_argument("KvView::full_order is shorter than n_past");
      step_info_.upload(kv.full_order->data(), static_cast<size_t>(batch.n_past()) * sizeof(int32_t),
                        info.size() * sizeof(uint32_t));
    }
    tokens_.upload(batch.tokens().data(), batch.tokens().size() * sizeof(int32_t));
    seq_ = std::make_unique<CommandSequence>(context_, descriptors_);
  }

  void embed(const Weight& table, Activation& out) override {
    const DeviceWeight& w = weight(table);
    for (int32_t tok : batch_->tokens())
      if (tok < 0 || tok >= w.rows)
        throw std::out_of_range("token id " + std::to_string(tok) + " is outside the vocabulary (" +
                                std::to_string(w.rows) + " tokens)");
    for (const WeightPart& part : w.parts)
      weight_kernels_.embed(step(), w.type, part.buffer, tokens_, act(out), static_cast<uint32_t>(batch_->size()),
                            static_cast<uint32_t>(w.cols), part.first_row, part.n_rows);
  }

  void rms_norm(const Activation& x, const Weight& gain, float eps, Activation& out) override {
    kernels_.rms_norm(step(), act(x), vector(gain), act(out), rows_of(x), static_cast<uint32_t>(x.cols), eps);
    set_rows(out, rows_of(x));
  }

  void matmul(const Weight& weight_id, const Activation& x, Activation& out) override {
    const DeviceWeight& w = weight(weight_id);
    const uint32_t T = rows_of(x);
    for (const WeightPart& part : w.parts)
      weight_kernels_.matmul(step(), w.type, part.buffer, act(x), act(out),
                             WeightKernels::MatmulShape{T, part.n_rows, static_cast<uint32_t>(w.cols), static_cast<uint32_t>(x.cols),
                                         static_cast<uint32_t>(out.cols), part.first_row});
    set_rows(out, T);
  }

  void add_bias(const Weight& bias, Activation& x) override {
    const uint32_t n = rows_of(x) * static_cast<uint32_t>(x.cols);
    kernels_.add_bias(step(), act(x), vector(bias), act(x), n, static_cast<uint32_t>(x.cols));
  }

  void rope(Activation& x, int32_t n_heads, int32_t head_dim, const RopeParams& p) override {
    const uint32_t n_pairs = static_cast<uint32_t>(p.n_dims / 2);
    prepare_rope_table(p);
    kernels_.rope(step(), act(x), *rope_table_, static_cast<uint32_t>(batch_->size()), static_cast<uint32_t>(n_heads),
                  static_cast<uint32_t>(head_dim), n_pairs, static_cast<uint32_t>(x.cols), p.neox);
  }

  void store_kv(int32_t layer, const Activation& k, const Activation& v) override {
    check_layer(layer);
    if (k.cols != kv_dim_ || v.cols != kv_dim_) throw std::invalid_argument("store_kv: rows are not kv_dim wide");
    if (kv_type_ == KvCacheType::F16) {
      kernels_.kv_store_f16(step(), act(k), act(v), keys_[static_cast<size_t>(layer)], values_[static_cast<size_t>(layer)],
                            static_cast<uint32_t>(batch_->size()), static_cast<uint32_t>(kv_dim_),
                            static_cast<uint32_t>(batch_->n_past()));
      return;
    }
    const VkDeviceSize row_bytes = static_cast<VkDeviceSize>(kv_dim_) * sizeof(float);
    const VkDeviceSize at = static_cast<VkDeviceSize>(batch_->n_past()) * row_bytes;
    const VkDeviceSize bytes = static_cast<VkDeviceSize>(batch_->size()) * row_bytes;
    step().copy(act(k), 0, keys_[static_cast<size_t>(layer)], at, bytes);
    step().copy(act(v), 0, values_[static_cast<size_t>(layer)], at, bytes);
  }

  void write_kv(int32_t layer, int32_t first, int32_t count, const float* k, const float* v) override {
    if (layer < 0 || layer >= static_cast<int32_t>(keys_.size()) || first < 0 || count < 0 || first + count > kv_ctx_)
      throw std::out_of_range("write_kv: outside the cache");
    const size_t values = static_cast<size_t>(count) * static_cast<size_t>(kv_dim_);
    const size_t n = values * kv_value_bytes(kv_type_);
    const size_t at = static_cast<size_t>(first) * static_cast<size_t>(kv_dim_) * kv_value_bytes(kv_type_);
    if (kv_type_ == KvCacheType::F16) {
      std::vector<uint16_t> halves(values);
      for (size_t i = 0; i < values; ++i) halves[i] = fp32_to_fp16(k[i]);
      transfer_.upload(keys_[static_cast<size_t>(layer)], halves.data(), n, at);
      for (size_t i = 0; i < values; ++i) halves[i] = fp32_to_fp16(v[i]);
      transfer_.upload(values_[static_cast<size_t>(layer)], halves.data(), n, at);
      return;
    }
    transfer_.upload(keys_[static_cast<size_t>(layer)], k, n, at);
    transfer_.upload(values_[static_cast<size_t>(layer)], v, n, at);
  }

  void swap_kv(const std::vector<std::pair<int32_t, int32_t>>& pairs) override { permute_kv(pairs, true, "swap_kv"); }
  void move_kv(const std::vector<std::pair<int32_t, int32_t>>& moves) override { permute_kv(moves, false, "move_kv"); }

  std::vector<float> read_keys(int32_t layer, const std::vector<int32_t>& slots) override {
    check_layer(layer);
    const VkDeviceSize row_bytes = static_cast<VkDeviceSize>(kv_dim_) * kv_value_bytes(kv_type_);
    std::vector<VkBufferCopy> regions;
    for (int32_t s : slots) {
      if (s < 0 || s >= kv_ctx_) throw std::out_of_range("read_keys: slot outside the cache");
      regions.push_back(VkBufferCopy{static_cast<VkDeviceSize>(s) * row_bytes, 0, row_bytes});
    }
    std::vector<float> out(slots.size() * static_cast<size_t>(kv_dim_));
    if (regions.empty()) return out;
    if (kv_type_ == KvCacheType::F16) {
      std::vector<uint16_t> halves(out.size());
      transfer_.download_regions(keys_[static_cast<size_t>(layer)], regions, halves.data());
      for (size_t i = 0; i < out.size(); ++i) out[i] = fp16_to_fp32(halves[i]);
    } else {
      transfer_.download_regions(keys_[static_cast<size_t>(layer)], regions, out.data());
    }
    return out;
  }

  void set_query_capture(const std::vector<int32_t>& rows) override { capture_rows_ = rows; }
  std::vector<float> captured_queries(int32_t layer) override {
    if (layer < 0 || layer >= static_cast<int32_t>(captures_.size())) return {};
    const Capture& c = captures_[static_cast<size_t>(layer)];
    std::vector<float> out(static_cast<size_t>(c.rows) * static_cast<size_t>(c.cols));
    if (!out.empty()) transfer_.download(c.buffer, out.data(), out.size() * sizeof(float));
    return out;
  }

  void attention(int32_t layer, const Activation& q, const AttentionShape& s, Activation& out) override {
    check_layer(layer);
    const uint32_t T = static_cast<uint32_t>(batch_->size());
    const uint32_t n_past = static_cast<uint32_t>(batch_->n_past());
    capture_queries(layer, q);
    const uint64_t per_part = static_cast<uint64_t>(T) * static_cast<uint64_t>(s.n_head) *
                              (static_cast<uint64_t>(s.head_dim) + 2);
    ensure_partials(static_cast<uint64_t>(max_step_rows_) * static_cast<uint64_t>(s.n_head) *
                    (static_cast<uint64_t>(s.head_dim) + 2));
    // Split each row's keys into parts so that a long context keeps the device busy
    // even for one token; the parts of all rows must fit in the partials buffer.
    const uint64_t n_keys = uint64_t{n_past} + T;
    constexpr uint64_t kMinKeysPerPart = 128;
    uint64_t n_parts = std::max<uint64_t>(1, (n_keys + kMinKeysPerPart - 1) / kMinKeysPerPart);
    n_parts = std::min<uint64_t>({n_parts, partials_floats_ / per_part, 65535});
    n_parts = std::max<uint64_t>(n_parts, 1);
    const uint64_t part_keys = (n_keys + n_parts - 1) / n_parts;
    Kernels::AttentionArgs a{};
    a.T = T;
    a.n_past = n_past;
    a.n_head = static_cast<uint32_t>(s.n_head);
    a.n_head_kv = static_cast<uint32_t>(s.n_head_kv);
    a.head_dim = static_cast<uint32_t>(s.head_dim);
    a.kv_dim = static_cast<uint32_t>(kv_dim_);
    a.q_stride = static_cast<uint32_t>(q.cols);
    a.out_stride = static_cast<uint32_t>(out.cols);
    a.region = static_cast<uint32_t>(std::max(0, kv_view_.region_count));
    a.dense = layer < kv_view_.dense_layers ? 1u : 0u;
    a.use_order = use_order_ ? 1u : 0u;
    a.part_keys = static_cast<uint32_t>(part_keys);
    a.n_parts = static_cast<uint32_t>(n_parts);
    a.mask_words = mask_words_;
    a.mask_offset = T;
    a.order_offset = T + T * mask_words_;
    a.scale = s.scale;
    a.kv_f16 = kv_type_ == KvCacheType::F16;
    kernels_.attention(step(), act(q), keys_[static_cast<size_t>(layer)], values_[static_cast<size_t>(layer)],
                       step_info_, partials_, act(out), a);
    set_rows(out, T);
  }

  void swiglu(const Activation& gate, const Activation& up, Activation& out) override {
    const uint32_t n = rows_of(gate) * static_cast<uint32_t>(gate.cols);
    kernels_.swiglu(step(), act(gate), act(up), act(out), n);
    set_rows(out, rows_of(gate));
  }

  void add(Activation& x, const Activation& y) override {
    kernels_.add(step(), act(x), act(y), act(x), rows_of(x) * static_cast<uint32_t>(x.cols));
  }

  void gather_rows(const Activation& src, const std::vector<int32_t>& rows, Activation& dst) override {
    if (static_cast<int64_t>(rows.size()) > dst.rows) throw std::out_of_range("gather_rows: destination too small");
    if (src.cols != dst.cols) throw std::invalid_argument("gather_rows: rows of different widths");
    const VkDeviceSize row_bytes = static_cast<VkDeviceSize>(src.cols) * sizeof(float);
    std::vector<VkBufferCopy> regions;
    for (size_t k = 0; k < rows.size(); ++k) {
      if (rows[k] < 0 || rows[k] >= batch_->size()) throw std::out_of_range("gather_rows: row outside the batch");
      regions.push_back(VkBufferCopy{static_cast<VkDeviceSize>(rows[k]) * row_bytes, k * row_bytes, row_bytes});
    }
    step().copy(act(src), act(dst), regions);
    gathered_rows_[dst.id] = static_cast<uint32_t>(rows.size());
  }

  void argmax_rows(const Activation& x) override {
    const uint32_t rows = rows_of(x);
    if (!argmax_ids_ || argmax_ids_->size() < std::max<uint64_t>(rows, 1) * sizeof(int32_t)) {
      if (argmax_ids_) descriptors_.forget(argmax_ids_->handle());
      argmax_ids_ = std::make_unique<Buffer>(context_, std::max<uint64_t>(max_step_rows_, 1) * sizeof(int32_t),
                                             Memory::HostVisible);
    }
    kernels_.argmax(step(), act(x), *argmax_ids_, rows, static_cast<uint32_t>(x.cols));
    argmax_count_ = rows;
  }
  std::vector<int32_t> read_argmax(int64_t n_rows) override {
    if (n_rows < 0 || n_rows > argmax_count_) throw std::out_of_range("read_argmax: more rows than argmax_rows computed");
    std::vector<int32_t> ids(static_cast<size_t>(n_rows));
    if (n_rows > 0) argmax_ids_->download(ids.data(), ids.size() * sizeof(int32_t));
    return ids;
  }

  void top_k_rows(const Activation& x, int32_t k) override {
    const uint32_t rows = rows_of(x);
    if (k < 1 || k > kMaxTopK || k > x.cols) throw std::invalid_argument("top_k_rows: k out of range");
    const uint64_t bytes = Kernels::top_k_words(std::max<uint32_t>(static_cast<uint32_t>(max_step_rows_), 1),
                                                static_cast<uint32_t>(k)) * sizeof(uint32_t);
    if (!top_k_result_ || top_k_result_->size() < bytes) {
      if (top_k_result_) descriptors_.forget(top_k_result_->handle());
      top_k_result_.reset();
      top_k_result_ = std::make_unique<Buffer>(context_, bytes, Memory::HostVisible);
    }
    kernels_.top_k(step(), act(x), *top_k_result_, rows, static_cast<uint32_t>(x.cols), static_cast<uint32_t>(k));
    top_k_rows_ = rows;
    top_k_k_ = k;
  }
  TopK read_top_k(int64_t n_rows) override {
    if (n_rows < 0 || n_rows > top_k_rows_) throw std::out_of_range("read_top_k: more rows than top_k_rows computed");
    const size_t stride = 1 + 2 * static_cast<size_t>(top_k_k_);
    std::vector<uint32_t> words(static_cast<size_t>(n_rows) * stride);
    if (!words.empty()) top_k_result_->download(words.data(), words.size() * sizeof(uint32_t));
    TopK top;
    top.k = top_k_k_;
    top.ids.resize(static_cast<size_t>(n_rows * top_k_k_));
    top.values.resize(top.ids.size());
    top.has_nan.resize(static_cast<size_t>(n_rows));
    for (int64_t r = 0; r < n_rows; ++r) {
      const uint32_t* w = words.data() + static_cast<size_t>(r) * stride;
      top.has_nan[static_cast<size_t>(r)] = w[0] != 0 ? 1 : 0;
      for (int32_t j = 0; j < top_k_k_; ++j) {
        top.ids[static_cast<size_t>(r * top_k_k_ + j)] = static_cast<int32_t>(w[1 + j]);
        std::memcpy(&top.values[static_cast<size_t>(r * top_k_k_ + j)], &w[1 + top_k_k_ + j], sizeof(float));
      }
    }
    return top;
  }

  void finish_step() override {
    if (!seq_) throw std::logic_error("finish_step without begin_step");
    std::unique_ptr<CommandSequence> seq = std::move(seq_);
    seq->submit_and_wait();
    gathered_rows_.clear();
  }

  std::vector<float> read_rows(const Activation& x, int64_t n_rows) override {
    if (n_rows < 0 || n_rows > x.rows) throw std::out_of_range("read_rows: more rows than the buffer holds");
    std::vector<float> out(static_cast<size_t>(n_rows * x.cols));
    if (!out.empty()) transfer_.download(act(x), out.data(), out.size() * sizeof(float));
    return out;
  }

 private:
  struct Capture {
    Buffer buffer;
    uint32_t rows = 0, cols = 0;
  };

  static ContextOptions make_context_options(const VulkanBackendOptions& options) {
    ContextOptions c;
    c.device_index = options.device.empty() ? -1 : resolve_device(options.device);
    const char* env = std::getenv("FAFO_VULKAN_VALIDATION");
    c.validation = options.validation || (env && std::string(env) == "1");
    c.validation_log = options.validation_log;
    c.features = options.features;
    return c;
  }

  // Allocates device memory, counted against the device's heap.
  Buffer allocate(uint64_t bytes, const char* what) {
    bytes = std::max<uint64_t>(bytes, 4);
    if (allocated_ + bytes > heap_bytes_)
      throw std::runtime_error("out of device memory on " + context_.device_name() + ": " + what + " needs " +
                               gib(bytes) + " with " + gib(allocated_) + " already allocated of " + gib(heap_bytes_) +
                               "; the model does not fit on this device");
    Buffer b(context_, bytes, Memory::Device);
    allocated_ += bytes;
    // Zeroed, like the CPU backend's memory: no step ever reads uninitialised values.
    CommandSequence seq(context_, 1);
    seq.zero(b);
    seq.submit_and_wait();
    return b;
  }

  CommandSequence& step() {
    if (!seq_) throw std::logic_error("a kernel was issued outside begin_step/finish_step");
    return *seq_;
  }
  const DeviceWeight& weight(const Weight& w) const { return weights_.at(static_cast<size_t>(w.id)); }
  const Buffer& vector(const Weight& w) const { return weight(w).parts.front().buffer; }
  const Buffer& act(const Activation& a) const { return activations_.at(static_cast<size_t>(a.id)).buffer; }
  void check_layer(int32_t layer) const {
    if (layer < 0 || layer >= static_cast<int32_t>(keys_.size())) throw std::out_of_range("layer outside the KV cache");
  }
  uint32_t rows_of(const Activation& a) const {
    auto it = gathered_rows_.find(a.id);
    return it != gathered_rows_.end() ? it->second : static_cast<uint32_t>(batch_->size());
  }
  // Results written into a gathered buffer keep its row count for the rest of the step.
  void set_rows(const Activation& out, uint32_t rows) {
    if (rows != static_cast<uint32_t>(batch_->size())) gathered_rows_[out.id] = rows;
  }

  // cos/sin of every (batch row, pair) of this step, computed like the CPU reference.
  void prepare_rope_table(const RopeParams& p) {
    const auto key = std::make_tuple(p.n_dims, p.freq_base, p.freq_scale, p.freq_factors);
    if (rope_key_) {
      if (*rope_key_ != key) throw std::logic_error("rope: one RoPE configuration per step");
      return;
    }
    const int32_t half = p.n_dims / 2;
    const size_t floats = static_cast<size_t>(batch_->size()) * static_cast<size_t>(half) * 2;
    std::vector<float> table(floats);
    for (int32_t r = 0; r < batch_->size(); ++r) {
      const float position = static_cast<float>(batch_->positions()[static_cast<size_t>(r)]) * p.freq_scale;
      for (int32_t i = 0; i < half; ++i) {
        float theta = position * std::pow(p.freq_base, -2.0f * static_cast<float>(i) / static_cast<float>(p.n_dims));
        if (!p.freq_factors.empty()) theta /= p.freq_factors[static_cast<size_t>(i)];
        table[(static_cast<size_t>(r) * static_cast<size_t>(half) + static_cast<size_t>(i)) * 2] = std::cos(theta);
        table[(static_cast<size_t>(r) * static_cast<size_t>(half) + static_cast<size_t>(i)) * 2 + 1] = std::sin(theta);
      }
    }
    const size_t need = std::max<size_t>(1, static_cast<size_t>(StepBatch::kMaxTokens) * static_cast<size_t>(half) * 2);
    if (!rope_table_ || rope_table_->size() < need * sizeof(float)) {
      if (rope_table_) descriptors_.forget(rope_table_->handle());
      rope_table_ = std::make_unique<Buffer>(context_, need * sizeof(float), Memory::HostVisible);
    }
    if (!table.empty()) rope_table_->upload(table.data(), table.size() * sizeof(float));
    rope_key_ = key;
  }

  void ensure_partials(uint64_t floats) {
    if (partials_floats_ >= floats) return;
    if (partials_.handle() != VK_NULL_HANDLE) {
      // Only reached before any step has used the buffer with these shapes.
      descriptors_.forget(partials_.handle());
      allocated_ -= partials_.size();
      partials_ = Buffer();
    }
    partials_ = allocate(floats * sizeof(float), "attention scratch");
    partials_floats_ = floats;
  }

  void capture_queries(int32_t layer, const Activation& q) {
    if (capture_rows_.empty()) return;
    if (captures_.size() <= static_cast<size_t>(layer)) captures_.resize(static_cast<size_t>(layer) + 1);
    Capture& c = captures_[static_cast<size_t>(layer)];
    const VkDeviceSize row_bytes = static_cast<VkDeviceSize>(q.cols) * sizeof(float);
    std::vector<VkBufferCopy> regions;
    for (int32_t r : capture_rows_)
      if (r >= 0 && r < batch_->size())
        regions.push_back(VkBufferCopy{static_cast<VkDeviceSize>(r) * row_bytes, regions.size() * row_bytes, row_bytes});
    c.rows = static_cast<uint32_t>(regions.size());
    c.cols = static_cast<uint32_t>(q.cols);
    if (regions.empty()) return;
    if (c.buffer.size() < regions.size() * row_bytes)
      c.buffer = Buffer(context_, capture_rows_.size() * row_bytes, Memory::HostVisible);
    step().copy(act(q), c.buffer, regions);
  }

  void permute_kv(const std::vector<std::pair<int32_t, int32_t>>& pairs, bool swap, const char* what) {
    if (pairs.empty()) return;
    seq_.reset();  // a step that failed while recording is abandoned
    std::vector<int32_t> flat;
    flat.reserve(pairs.size() * 2);
    for (const auto& [a, b] : pairs) {
      if (a < 0 || b < 0 || a >= kv_ctx_ || b >= kv_ctx_) throw std::out_of_range(std::string(what) + ": slot outside the cache");
      flat.push_back(a);
      flat.push_back(b);
    }
    const size_t bytes = flat.size() * sizeof(int32_t);
    if (!pairs_ || pairs_->size() < bytes) {
      if (pairs_) descriptors_.forget(pairs_->handle());
      pairs_ = std::make_unique<Buffer>(context_, std::max<size_t>(bytes, 4096), Memory::HostVisible);
    }
    pairs_->upload(flat.data(), bytes);
    CommandSequence seq(context_, descriptors_);
    const uint32_t words = static_cast<uint32_t>(kv_type_ == KvCacheType::F16 ? kv_dim_ / 2 : kv_dim_);
    for (size_t l = 0; l < keys_.size(); ++l) {
      kernels_.kv_permute(seq, keys_[l], *pairs_, static_cast<uint32_t>(pairs.size()), words, swap);
      kernels_.kv_permute(seq, values_[l], *pairs_, static_cast<uint32_t>(pairs.size()), words, swap);
    }
    seq.submit_and_wait();
  }

  Context context_;
  Kernels kernels_;
  WeightKernels weight_kernels_;
  DescriptorCache descriptors_;
  Transfer transfer_;
  uint64_t heap_bytes_ = 0;
  uint64_t allocated_ = 0;
  uint64_t max_range_ = 0;

  std::vector<DeviceWeight> weights_;
  std::vector<DeviceActivation> activations_;
  int64_t max_step_rows_ = 0;
  static size_t kv_value_bytes(KvCacheType t) { return t == KvCacheType::F16 ? sizeof(uint16_t) : sizeof(float); }

  std::vector<Buffer> keys_, values_;
  KvCacheType kv_type_ = KvCacheType::F32;
  int32_t kv_ctx_ = 0;
  int32_t kv_dim_ = 0;

  Buffer step_info_;
  Buffer tokens_;
  Buffer partials_;
  uint64_t partials_floats_ = 0;
  std::unique_ptr<Buffer> rope_table_;
  std::optional<std::tuple<int32_t, float, float, std::vector<float>>> rope_key_;
  std::unique_ptr<Buffer> pairs_;
  std::unique_ptr<Buffer> argmax_ids_;
  int64_t argmax_count_ = 0;
  std::unique_ptr<Buffer> top_k_result_;
  int64_t top_k_rows_ = 0;
  int32_t top_k_k_ = 0;
  uint32_t mask_words_ = 0;
  uint32_t mask_words_max_ = 0;
  bool use_order_ = false;

  const StepBatch* batch_ = nullptr;
  KvView kv_view_;
  std::unordered_map<int32_t, uint32_t> gathered_rows_;
  std::vector<int32_t> capture_rows_;
  std::vector<Capture> captures_;
  std::unique_ptr<CommandSequence> seq_;
};

}  // namespace

int resolve_device(const std::string& device) {
  const std::vector<VulkanDeviceInfo> devices = list_vulkan_devices();
  if (devices.empty()) throw std::runtime_error("no Vulkan devices found (see `fafo devices`)");
  std::string listing;
  for (const VulkanDeviceInfo& d : devices) listing += "\n  " + std::to_string(d.index) + ": " + d.name;
  const bool numeric = !device.empty() && std::all_of(device.begin(), device.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (numeric) {
    const long index = std::strtol(device.c_str(), nullptr, 10);
    if (index >= 0 && index < static_cast<long>(devices.size())) return static_cast<int>(index);
    throw std::runtime_error("Vulkan device " + device + " does not exist; the devices are:" + listing);
  }
  for (const VulkanDeviceInfo& d : devices)
    if (lower(d.name).find(lower(device)) != std::string::npos) return static_cast<int>(d.index);
  throw std::runtime_error("no Vulkan device's name contains '" + device + "'; the devices are:" + listing);
}

std::unique_ptr<Backend> make_backend(const VulkanBackendOptions& options) {
  return std::make_unique<VulkanBackend>(options);
}

}  // namespace vulkan

// Declared in runtime/src/backend/backend_factory.cpp.
std::unique_ptr<Backend> make_vulkan_backend(const std::string& device) {
  vulkan::VulkanBackendOptions options;
  options.device = device;
  return vulkan::make_backend(options);
}

}  // namespace fafo
