#include "backend/vulkan/vulkan_backend.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "backend/vulkan/allocator.h"
#include "backend/vulkan/buffer.h"
#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/descriptor_cache.h"
#include "backend/vulkan/driver_files.h"
#include "backend/vulkan/kernel_profiler.h"
#include "backend/vulkan/kernels.h"
#include "backend/vulkan/backend_settings.h"
#include "backend/vulkan/product_tuning.h"
#include "backend/vulkan/rope_tables.h"
#include "backend/vulkan/step_encoder.h"
#include "backend/vulkan/transfer.h"
#include "backend/vulkan/vulkan_kv_cache.h"
#include "backend/vulkan/vulkan_error.h"
#include "backend/vulkan/weight_kernels.h"
#include "fafo/backend_registry.h"
#include "fafo/cache_dir.h"
#include "fafo/progress.h"
#include "fafo/vulkan_devices.h"
#include "fafo/vulkan_tuning.h"
#include "fafo/tensor_type.h"
#include "fafo/top_k.h"

namespace fafo {
namespace vulkan {

static_assert(Kernels::kMaxTopK == static_cast<uint32_t>(kMaxTopK), "shaders/top_k.comp's MAX_K follows fafo::kMaxTopK");

namespace {

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

class VulkanBackend final : public Backend,
                            public BackendFusions,
                            public BackendProfiler,
                            public BackendMemory,
                            public StepTarget {
 public:
  explicit VulkanBackend(const VulkanBackendOptions& options)
      : context_(make_context_options(options)),
        kernels_(context_),
        weight_kernels_(context_),
        descriptors_(context_),
        transfer_(context_),
        allocator_(context_, options.max_buffer_bytes),
        rope_positions_(allocator_, descriptors_, transfer_),
        max_range_(allocator_.max_range()),
        cpu_device_(context_.properties().deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU),
        settings_(resolve_settings(options, cpu_device_)),
        fuse_qkv_(settings_.fuse_qkv),
        fuse_norm_(settings_.fuse_norm),
        fuse_norm_off_(settings_.fuse_norm_off),
        int8_(settings_.int8),
        encoder_(context_, descriptors_) {
    encoder_.set_replay(settings_.replay);
    kernels_.set_attention_mapping(settings_.attention);
    weight_kernels_.set_matrix_tiles(settings_.tiles);
    if (settings_.tune) tuning_ = std::make_unique<ProductTuning>(context_, weight_kernels_, settings_);
  }

  // The tuning (VulkanBackendOptions::tune): fafo/vulkan_tuning.h.
  std::vector<std::string> tune_now() {
    if (!tuning_) return {};
    after_step_tuning();
    return tuning_->lines();
  }
  std::string tuning_file() const { return tuning_ ? tuning_->file() : std::string(); }


  ReplayCounts replay_counts() const { return ReplayCounts{encoder_.steps(), encoder_.replayed()}; }

  ~VulkanBackend() override { encoder_.abandon(); }

  std::string name() const override { return "vulkan"; }
  BackendCapabilities capabilities() const override {
    return {.max_step_sequences = StepEncoder::kMaxParts,
            .latent_attention = true,
            .window_rings = true,
            .max_activation_bytes = max_range_};
  }
  BackendFusions* fusions() override { return this; }
  BackendProfiler* profiler() override { return this; }
  BackendMemory* memory() override { return this; }
  // The weight kernels' summation trees, rms_norm, silu and the attention softmax are
  // not the CPU reference's operation order, so results differ in the last bits
  // (tests/test_backend_ops.cpp prints the largest difference per case); every kernel
  // is T-invariant.
  // With integer products (int8_), those of weights in every block format but Q2_K and
  // the codebook ones round the activations to 8 bits: the CUDA backend's tolerance for them.
  BackendNumerics numerics() const override { return BackendNumerics{false, 1e-4, int8_ ? kInt8Tolerance : 0.0}; }
  static constexpr double kInt8Tolerance = 0.25;
  std::string description() const override {
    const char* types[] = {"other", "integrated GPU", "discrete GPU", "virtual GPU", "CPU"};
    const int t = static_cast<int>(context_.properties().deviceType);
    // Then what matmul runs and the optional features in use, detected but unused, or
    // turned off by FAFO_VULKAN_FEATURES (backend/vulkan/devices.h).
    return "Vulkan device " + std::to_string(context_.device_index()) + ": " + context_.device_name() + " (" +
           (t >= 0 && t <= 4 ? types[t] : "other") + ", " + gib(allocator_.heap_bytes()) + "); " + weight_kernels_.describe() +
           (int8_ ? std::string(", integer products (block formats but Q2_K, IQ2, IQ3)") +
                        (weight_kernels_.uses_dot() && !cpu_device_ ? " (dot product instruction)" : "")
                  : std::string()) +
           (tuning_ ? "; rows per workgroup tuned per product shape for this device" : "") +
           "; f16 KV cache reads: " + (kernels_.half_storage_exact() ? "16-bit storage" : "32-bit words") + "; " +
           describe_features(context_.features(), context_.detected_features());
  }

  // --- memory -----------------------------------------------------------------------
  // All the formats' pipelines in one batch, before the first weight arrives (formats the
  // kernels do not read are left to upload_weight, which refuses them by name).
  void prepare_weights(std::span<const TensorType> types) override {
    check_usable();
    std::vector<TensorType> supported;
    for (TensorType type : types)
      if (WeightKernels::supports(type)) supported.push_back(type);
    weight_kernels_.prepare(supported, fuse_norm_, int8_);
  }

  Weight upload_weight(TensorType type, int64_t rows, int64_t cols, const void* data) override {
    check_usable();
    DeviceWeight w;
    w.rows = rows;
    w.cols = cols;
    if (rows == 1) {
      // Vectors (norm gains, biases) are kept as F32: the element-wise kernels read floats.
      std::vector<float> dense(static_cast<size_t>(cols));
      dequantize_row(type, data, dense.data(), cols);
      w.type = TensorType::F32;
      WeightPart part{allocator_.device(dense.size() * sizeof(float), "a weight vector"), 0, 1};
      transfer_.upload(part.buffer, dense.data(), dense.size() * sizeof(float));
      w.parts.push_back(std::move(part));
    } else {
      if (!WeightKernels::supports(type))
        throw std::runtime_error("the Vulkan backend has no kernel for weights of type " +
                                 std::string(tensor_type_name(type)));
      w.type = type;
      weight_kernels_.prepare(type, fuse_norm_, int8_);  // made by prepare_weights, else now rather than in a step
      if (uses_int8(type)) max_int8_cols_ = std::max(max_int8_cols_, cols);
      const size_t row_bytes = tensor_row_bytes(type, cols);
      weight_bytes_ += static_cast<double>(row_bytes) * static_cast<double>(rows);
      // Split by rows so that no buffer exceeds maxStorageBufferRange.
      const int64_t rows_per_part = std::max<int64_t>(1, static_cast<int64_t>((max_range_ - 4) / row_bytes));
      if (row_bytes > max_range_)
        throw std::runtime_error("a weight row of " + std::to_string(row_bytes) + " bytes exceeds the device's " +
                                 "maxStorageBufferRange of " + std::to_string(max_range_) + " bytes");
      const auto* bytes = static_cast<const uint8_t*>(data);
      for (int64_t first = 0; first < rows; first += rows_per_part) {
        const int64_t n = std::min(rows_per_part, rows - first);
        WeightPart part{allocator_.device(WeightKernels::weight_bytes(type, static_cast<uint32_t>(n), static_cast<uint32_t>(cols)),
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


  Activation alloc_activation(int64_t max_rows, int64_t cols) override {
    const uint64_t bytes = static_cast<uint64_t>(max_rows) * static_cast<uint64_t>(cols) * sizeof(float);
    if (bytes > max_range_)
      throw std::runtime_error("an activation of " + std::to_string(max_rows) + " x " + std::to_string(cols) +
                               " floats exceeds the device's maxStorageBufferRange of " + std::to_string(max_range_) +
                               " bytes");
    activations_.push_back(DeviceActivation{allocator_.device(bytes, "activations"), max_rows, cols});
    max_step_rows_ = std::max(max_step_rows_, max_rows);
    return Activation{static_cast<int32_t>(activations_.size() - 1), max_rows, cols};
  }

  std::unique_ptr<KvCache> create_kv_cache(const KvCacheShape& shape) override {
    auto kv = std::make_unique<VulkanKvCache>(
        shape, KvCacheServices{context_, kernels_, transfer_, descriptors_, allocator_, *this});
    encoder_.reserve(shape.capacity);  // grows the step inputs for the longest cache's order
    max_capacity_ = std::max(max_capacity_, shape.capacity);
    const KvCache* made = kv.get();
    kv->set_owner(this, [this, made] {
      if (std::find(kvs_.begin(), kvs_.end(), made) == kvs_.end()) return;
      encoder_.abandon();  // a step recorded over it is not submitted
      kvs_.clear();
    });
    return kv;
  }

  // --- a step -----------------------------------------------------------------------
  // A step joins up to StepEncoder::kMaxParts sequences. The products, norms and
  // element-wise ops run once over every row; the ops on a sequence's cache (the KV
  // store, rope_store, attention, latent_expand, query capture) run once per part, each
  // with the part's own step_info (its n_past, first row, flags, masks and order) and
  // cache buffers. Replay keys are the recorded commands (ReplayCache): a joined step
  // replays an earlier one with the same parts (caches, sizes, views) in the same
  // order, such as every step where the same slots each decode one token; the cache
  // keeps the 8 most recently used, so mixed batches never grow it.

  void start_step(const StepBatch& batch, std::span<KvCache* const> caches) override {
    check_usable();
    kvs_.clear();
    std::vector<VulkanKvCache*> kvs;
    std::vector<const KvLayout*> layouts;
    for (KvCache* cache : caches) {
      kvs.push_back(&own_kv_cache<VulkanKvCache>(*this, *cache));
      layouts.push_back(&kvs.back()->layout());
    }
    check_step_fits(batch, caches, max_step_rows_);
    encoder_.begin(batch, layouts);
    last_rounding_.reset();  // a new step's commands
    scatter_words_ = 0;
    for (size_t s = 0; s < kvs.size(); ++s) kvs[s]->set_step_part(static_cast<int32_t>(s));
    kvs_ = std::move(kvs);
  }

  void embed(const Weight& table, Activation& out) override {
    const DeviceWeight& w = weight(table);
    check_tokens_in_vocabulary(batch(), w.rows);
    for (const WeightPart& part : w.parts)
      weight_kernels_.embed(step(), w.type, part.buffer, encoder_.tokens(), act(out), static_cast<uint32_t>(batch().size()),
                            static_cast<uint32_t>(w.cols), part.first_row, part.n_rows);
  }

  void rms_norm(const Activation& x, const Weight& gain, float eps, Activation& out) override {
    kernels_.rms_norm(step(), act(x), vector(gain), act(out), rows_of(x), static_cast<uint32_t>(x.cols), eps);
    set_rows(out, rows_of(x));
  }

  // Rows of one head each (a row's heads are consecutive): rms_norm's kernel.
  void head_norm(const Activation& x, int32_t n_heads, const Weight& gain, float eps, Activation& out) override {
    kernels_.rms_norm(step(), act(x), vector(gain), act(out), rows_of(x) * static_cast<uint32_t>(n_heads),
                      static_cast<uint32_t>(x.cols / n_heads), eps);
    set_rows(out, rows_of(x));
  }

  void matmul(const Weight& weight_id, const Activation& x, Activation& out) override {
    product(weight_id, x, out, false);
    set_rows(out, rows_of(x));
  }

  // The gate and up projections are one weight and one dispatch computes both products
  // and the SwiGLU.
  bool fuses_gate_up(TensorType type, int64_t rows, int64_t cols) const override {
    return WeightKernels::supports(type) && rows > 0 &&
           static_cast<uint64_t>(2 * rows) * tensor_row_bytes(type, cols) <= max_range_ - 4;
  }

  bool matmul_swiglu(const Weight& gate, const Weight& up, const Activation& x, Activation& out,
                     Activation&) override {
    if (up) return false;
    gated_product(gate, x, out, InputNorm{});
    return true;
  }

  // An RMSNorm and the product that reads it are one dispatch (the NORM variants of
  // shaders/matmul.comp) in steps of up to WeightKernels::kMaxNormTokens rows; larger
  // steps run the two kernels, which give the same bits. Integer products normalize in
  // the rounding of their input instead (quantize_norm, any step size).
  bool matmul_norm(const Weight& w, const Activation& x, const Weight& gain, float eps, Activation&,
                   Activation& out) override {
    if (!fuses_norm(x, gain, w)) return false;
    product(w, x, out, false, InputNorm{&vector(gain), eps});
    set_rows(out, rows_of(x));
    return true;
  }

  bool matmul_swiglu_norm(const Weight& gate, const Weight& up, const Activation& x, const Weight& gain, float eps,
                          Activation&, Activation& out, Activation&) override {
    if (up || !fuses_norm(x, gain, gate)) return false;
    gated_product(gate, x, out, InputNorm{&vector(gain), eps});
    return true;
  }

  // The residual add runs in the product's epilogue: one dispatch instead of two.
  bool matmul_add(const Weight& weight_id, const Activation& x, Activation& acc, Activation&) override {
    if (x.id == acc.id) throw std::invalid_argument("matmul_add: acc must not be the product's input");
    if (rows_of(x) != rows_of(acc)) throw std::invalid_argument("matmul_add: x and acc hold different row counts");
    product(weight_id, x, acc, true);
    return true;
  }

  void add_bias(const Weight& bias, Activation& x) override {
    const uint32_t n = rows_of(x) * static_cast<uint32_t>(x.cols);
    kernels_.add_bias(step(), act(x), vector(bias), act(x), n, static_cast<uint32_t>(x.cols));
  }

  void rope(Activation& x, int32_t n_heads, int32_t head_dim, const RopeParams& p) override {
    const uint32_t n_pairs = static_cast<uint32_t>(p.n_dims / 2);
    const Buffer& table = encoder_.rope_table(p);
    kernels_.rope(step(), act(x), table, static_cast<uint32_t>(batch().size()), static_cast<uint32_t>(n_heads),
                  static_cast<uint32_t>(head_dim), n_pairs, static_cast<uint32_t>(x.cols), p.neox);
  }

  // The three attention projections are one weight and one product; RoPE and the KV
  // store one dispatch (shaders/rope_store.comp) instead of two rotations and two
  // stores.
  bool fuses_qkv(TensorType type, int64_t q_rows, int64_t kv_rows, int64_t cols) const override {
    return fuse_qkv_ && WeightKernels::supports(type) && q_rows > 0 && kv_rows > 0 &&
           tensor_row_bytes(type, cols) <= max_range_ - 4;
  }

  void rope_store(int32_t layer, Activation& qkv, const AttentionShape& s, const RopeParams& p) override {
    const int32_t n_parts = step_parts("rope_store");
    if (rows_of(qkv) != static_cast<uint32_t>(batch().size()))
      throw std::invalid_argument("rope_store: qkv holds gathered rows, not the step's");
    const int64_t q_cols = int64_t{s.n_head} * s.head_dim;
    for (int32_t part = 0; part < n_parts; ++part) {
      VulkanKvCache& kv = kv_of(part, "rope_store");
      if (kv.shape().latent()) throw std::invalid_argument("rope_store: the KV cache is latent (MLA models store latents)");
      const int64_t kv_dim = kv.shape().kv_dim;
      if (int64_t{s.n_head_kv} * s.head_dim != kv_dim || qkv.cols != q_cols + 2 * kv_dim)
        throw std::invalid_argument("rope_store: qkv rows of " + std::to_string(qkv.cols) + " columns do not hold " +
                                    std::to_string(s.n_head) + " query and 2 x " + std::to_string(s.n_head_kv) +
                                    " key/value heads of " + std::to_string(s.head_dim));
      const StepSegment seg = batch().segment(part);
      const Buffer& table = encoder_.rope_table(p);
      Kernels::RopeStoreArgs a{};
      a.rows = static_cast<uint32_t>(seg.size);
      a.n_head = static_cast<uint32_t>(s.n_head);
      a.n_head_kv = static_cast<uint32_t>(s.n_head_kv);
      a.head_dim = static_cast<uint32_t>(s.head_dim);
      a.n_pairs = static_cast<uint32_t>(p.n_dims / 2);
      a.stride = static_cast<uint32_t>(qkv.cols);
      a.k_offset = static_cast<uint32_t>(q_cols);
      a.v_offset = static_cast<uint32_t>(q_cols + kv_dim);
      a.first_slot = static_cast<uint32_t>(seg.n_past);
      a.first_row = static_cast<uint32_t>(seg.first);
      a.neox = p.neox;
      a.kv_f16 = kv.f16();
      a.kv_blocks = kv.blocks();
      a.ring = static_cast<uint32_t>(kv.shape().ring(layer));
      kernels_.rope_store(step(), act(qkv), table, kv.keys(layer), kv.values(layer), encoder_.step_info(part), a);
      if (!kv.captured_rows().empty())
        kv.capture_queries(layer, act(qkv), static_cast<uint32_t>(q_cols), static_cast<uint32_t>(qkv.cols));
    }
  }

  // With integer products the output is also rounded for the projection after it, in
  // the dispatch that writes it (Kernels::AttentionArgs::rounded), where the heads are
  // whole blocks of 32: that product then finds its input rounded (rounded()).
  void attention(int32_t layer, const Activation& q, const AttentionShape& s, Activation& out) override {
    const uint32_t cols = static_cast<uint32_t>(out.cols);
    // (Only where some weight with integer products is as wide: q8_ then never grows within a step.)
    const bool round = int8_ && s.head_dim % 32 == 0 && int64_t{s.n_head} * s.head_dim == out.cols &&
                       out.cols <= max_int8_cols_;
    const Buffer* q8 = round ? &q8_for(static_cast<uint64_t>(std::max<int64_t>({max_step_rows_, out.rows, 1})), cols)
                             : nullptr;
    for (int32_t part = 0, n = step_parts("attention"); part < n; ++part) {
      VulkanKvCache& kv = kv_of(part, "attention");
      if (kv.shape().latent()) throw std::invalid_argument("attention: the KV cache is latent (use latent_attention)");
      if (layer < 0 || layer >= kv.shape().n_layer) throw std::out_of_range("attention: layer outside the KV cache");
      check_ring_window(kv.shape(), layer, s);
      check_attention_sinks(s);
      attend(part, layer, q, s, kv.keys(layer), kv.values(layer), kv.f16(), kv.blocks(), out, q8);
    }
    if (q8) last_rounding_ = Rounding{&act(out), nullptr, 0.0f, rows_of(out), cols, step().command_count()};
  }

  // Multi-head latent attention: shaders/latent_expand.comp recovers the keys (rotated
  // by each entry's position) and values of slots [0, n_past + T) of the layer into the
  // cache's fp32 recovery buffers, then attention reads them as an fp32 cache. The
  // positions: a committed entry's is its logical index, whose cos/sin the shader
  // finds in rope_positions_ (every position of the cache, made once) through the
  // logical order in the step's header; a step token's is its batch position, in the
  // step's RoPE table. Both tables and n_past are read from buffers the host writes,
  // so a replayed step uses the current ones.

  void latent_attention(int32_t layer, const Activation& q, const AttentionShape& s, const Weight& k_up,
                        const Weight& v_up, const RopeParams& rope, Activation& out) override {
    for (int32_t part = 0, n = step_parts("latent_attention"); part < n; ++part)
      latent_attention_of(part, layer, q, s, k_up, v_up, rope, out);
  }

  // latent_attention for the rows of part `part` of the step, over its cache's recovery
  // buffers.
  void latent_attention_of(int32_t part, int32_t layer, const Activation& q, const AttentionShape& s, const Weight& k_up,
                           const Weight& v_up, const RopeParams& rope, Activation& out) {
    VulkanKvCache& kv = kv_of(part, "latent_attention");
    const KvCacheShape& shape = kv.shape();
    const StepSegment seg = batch().segment(part);
    check_latent_attention(shape, layer, k_up, v_up);
    if (s.sinks) throw std::invalid_argument("latent_attention: attention sinks in a latent layer");
    const DeviceWeight& ku = weight(k_up);
    const DeviceWeight& vu = weight(v_up);
    const int32_t kv_dim = shape.kv_dim, rk = shape.key_dim(layer), rv = shape.value_dim(layer);
    if (ku.parts.size() != 1 || vu.parts.size() != 1)
      throw std::invalid_argument("latent_attention: an up-projection of " + std::to_string(kv_dim) + " x " +
                                  std::to_string(ku.parts.size() != 1 ? rk : rv) +
                                  " floats does not fit one buffer of the device's maxStorageBufferRange (" +
                                  std::to_string(max_range_) + " bytes)");
    if (int64_t{s.n_head_kv} * s.head_dim != kv_dim) throw std::invalid_argument("latent_attention: n_head_kv * head_dim != kv_dim");
    if (rope.n_dims < 0 || rope.n_dims / 2 * 2 > s.head_dim)
      throw std::invalid_argument("latent_attention: RoPE rotates " + std::to_string(rope.n_dims) +
                                  " dimensions of heads of " + std::to_string(s.head_dim));
    Kernels::LatentExpandArgs a{};
    a.T = static_cast<uint32_t>(seg.size);
    a.n_past = static_cast<uint32_t>(seg.n_past);
    a.first_row = static_cast<uint32_t>(seg.first);
    a.capacity = static_cast<uint32_t>(shape.capacity);
    a.n_head_kv = static_cast<uint32_t>(s.n_head_kv);
    a.head_dim = static_cast<uint32_t>(s.head_dim);
    a.use_order = encoder_.use_order(part) ? 1u : 0u;
    a.order_offset = encoder_.order_offset(part);
    a.neox = rope.neox;
    a.kv_f16 = kv.f16();
    // Keys, rotated.
    a.rank = static_cast<uint32_t>(rk);
    a.words = kv.key_words(layer);
    a.n_pairs = static_cast<uint32_t>(rope.n_dims / 2);
    const Buffer& positions = rope_positions_.get(rope, max_capacity_);  // one table for every cache
    const Buffer& rows = encoder_.rope_table(rope);
    kernels_.latent_expand(step(), kv.keys(layer), ku.parts.front().buffer, encoder_.step_info(part), &positions, &rows,
                           kv.recovered_keys(), a);
    // Values.
    a.rank = static_cast<uint32_t>(rv);
    a.words = kv.value_words(layer);
    a.n_pairs = 0;
    kernels_.latent_expand(step(), kv.values(layer), vu.parts.front().buffer, encoder_.step_info(part), nullptr, nullptr,
                           kv.recovered_values(), a);
    attend(part, layer, q, s, kv.recovered_keys(), kv.recovered_values(), false, Kernels::KvBlocks::None, out);
  }

  // Attention of part `part`'s rows of q over `keys` and `values` (by slot, kv_dim per
  // entry; fp16 words with kv_f16, blocks in a block format), with the layout, region and
  // dense layers of the part's cache, into the same rows of out.
  void attend(int32_t part, int32_t layer, const Activation& q, const AttentionShape& s, const Buffer& keys,
              const Buffer& values, bool kv_f16, Kernels::KvBlocks blocks, Activation& out,
              const Buffer* rounded = nullptr) {
    const VulkanKvCache& kv = kv_of(part, "attention");
    const StepSegment seg = batch().segment(part);
    const uint32_t T = static_cast<uint32_t>(seg.size);
    const uint32_t n_past = static_cast<uint32_t>(seg.n_past);
    // Each row's keys are split into parts so that a long context keeps the device busy
    // even for one token. The split depends on n_past only, never on T or the other
    // rows or sequences, so a row gets the same arithmetic in every step (T-invariance): up to
    // max_parts parts of part_keys keys, sized for the largest step; parts past a row's
    // last key are empty and skipped by the combine. The grid always has max_parts parts
    // and the split (part_keys, parts in use) goes in the step's header, so a recorded
    // step replays at any n_past; the parts past those in use return at once.
    const uint64_t per_row_part = static_cast<uint64_t>(s.n_head) * (static_cast<uint64_t>(s.head_dim) + 2);
    const uint64_t rows_cap = static_cast<uint64_t>(std::max<int64_t>(max_step_rows_, 1));
    // The partials buffer gets at most 64 MiB (half the smallest maxStorageBufferRange
    // Vulkan allows), so the split is the same on every device whose range is the
    // spec's minimum or more.
    constexpr uint64_t kMaxParts = 16, kMinKeysPerPart = 128, kPartialsBudget = uint64_t{64} << 20;
    const uint64_t max_parts = std::clamp<uint64_t>(
        std::min<uint64_t>(kPartialsBudget, max_range_) / sizeof(float) / (rows_cap * per_row_part), 1, kMaxParts);
    ensure_partials(rows_cap * per_row_part * max_parts);
    const uint64_t span = uint64_t{n_past} + rows_cap;
    const uint64_t part_keys = std::max(kMinKeysPerPart, (span + max_parts - 1) / max_parts);
    const uint64_t n_parts = (uint64_t{n_past} + T + part_keys - 1) / part_keys;
    encoder_.set_split(part, static_cast<uint32_t>(part_keys), static_cast<uint32_t>(n_parts));
    Kernels::AttentionArgs a{};
    a.T = T;
    a.n_past = n_past;
    a.n_head = static_cast<uint32_t>(s.n_head);
    a.n_head_kv = static_cast<uint32_t>(s.n_head_kv);
    a.head_dim = static_cast<uint32_t>(s.head_dim);
    a.kv_dim = static_cast<uint32_t>(kv.shape().kv_dim);
    a.q_stride = static_cast<uint32_t>(q.cols);
    a.out_stride = static_cast<uint32_t>(out.cols);
    a.region = static_cast<uint32_t>(std::max(0, kv.region_count()));
    a.dense = layer < kv.dense_layers() ? 1u : 0u;
    a.use_order = encoder_.use_order(part) ? 1u : 0u;
    a.part_keys = static_cast<uint32_t>(part_keys);
    a.n_parts = static_cast<uint32_t>(max_parts);
    a.mask_words = encoder_.mask_words(part);
    a.flags_offset = encoder_.flags_offset();
    a.mask_offset = encoder_.mask_offset(part);
    a.order_offset = encoder_.order_offset(part);
    a.scale = s.scale;
    a.softcap = s.softcap;
    a.sinks = s.sinks ? &vector(s.sinks) : nullptr;
    a.window = static_cast<uint32_t>(std::max(0, s.window));
    a.positions_offset = encoder_.positions_offset(part);
    a.region_offset = encoder_.region_offset(part);
    a.ring = static_cast<uint32_t>(kv.shape().ring(layer));
    a.kv_f16 = kv_f16;
    a.kv_blocks = blocks;
    a.first_row = static_cast<uint32_t>(seg.first);
    a.rounded = rounded;
    a.rounded_stride = Kernels::q8_row_words(static_cast<uint32_t>(out.cols));
    kernels_.attention(step(), act(q), keys, values, encoder_.step_info(part), partials_, act(out), a);
    set_rows(out, static_cast<uint32_t>(batch().size()));
  }

  void gated(GatedActivation fn, const Activation& gate, const Activation& up, Activation& out) override {
    const uint32_t n = rows_of(gate) * static_cast<uint32_t>(gate.cols);
    if (fn == GatedActivation::Silu)
      kernels_.swiglu(step(), act(gate), act(up), act(out), n);
    else if (fn == GatedActivation::SwigluOai)
      kernels_.swiglu_oai(step(), act(gate), act(up), act(out), n);
    else
      kernels_.geglu(step(), act(gate), act(up), act(out), n);
    set_rows(out, rows_of(gate));
  }

  void map(ElementMap op, Activation& x, float value) override {
    const uint32_t n = rows_of(x) * static_cast<uint32_t>(x.cols);
    if (op == ElementMap::Scale)
      kernels_.scale(step(), act(x), n, value);
    else
      kernels_.softcap(step(), act(x), n, value);
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
      if (rows[k] < 0 || rows[k] >= batch().size()) throw std::out_of_range("gather_rows: row outside the batch");
      regions.push_back(VkBufferCopy{static_cast<VkDeviceSize>(rows[k]) * row_bytes, k * row_bytes, row_bytes});
    }
    step().copy(act(src), act(dst), regions);
    encoder_.gathered(dst, static_cast<uint32_t>(rows.size()));
  }

  // Each call's rows and weights go to the next words of one buffer (written by the
  // host now, read when the step runs); when it is full, what was recorded runs first.
  void scatter_add(const Activation& src, const std::vector<int32_t>& rows, const std::vector<float>& weights,
                   Activation& dst) override {
    check_scatter_add(src, rows, weights, dst, batch().size());
    if (rows.empty()) return;
    const uint64_t words = 2 * uint64_t{rows.size()};
    if ((scatter_words_ + words) * sizeof(uint32_t) > scatter_args_.get().size()) {
      if (scatter_words_ > 0) sync_step();  // the recorded calls read the words written before
      scatter_args_.ensure(context_, descriptors_,
                           std::max<uint64_t>(words, 16 * static_cast<uint64_t>(max_step_rows_)) * sizeof(uint32_t));
    }
    std::vector<uint32_t> args(rows.begin(), rows.end());
    args.resize(static_cast<size_t>(words));
    std::memcpy(args.data() + rows.size(), weights.data(), weights.size() * sizeof(float));
    Buffer& buffer = scatter_args_.get();
    buffer.upload(args.data(), args.size() * sizeof(uint32_t), scatter_words_ * sizeof(uint32_t));
    kernels_.scatter_add(step(), act(src), act(dst), buffer, static_cast<uint32_t>(rows.size()),
                         static_cast<uint32_t>(dst.cols), static_cast<uint32_t>(scatter_words_));
    scatter_words_ += words;
  }

  // Submits what the step recorded so far and waits; later ops record into a new command
  // buffer of the same step.
  void sync_step() override {
    check_usable();
    try {
      encoder_.flush(step_timeout());
    } catch (const DeviceError& e) {
      if (e.kind() == DeviceError::Kind::Lost) lost_ = true;
      throw;
    }
    scatter_words_ = 0;
    last_rounding_.reset();  // the new command buffer counts its commands from 0
  }

  void argmax_rows(const Activation& x) override {
    const uint32_t rows = rows_of(x);
    const Buffer& ids = argmax_ids_.ensure(context_, descriptors_, std::max<uint64_t>(max_step_rows_, rows) * sizeof(int32_t));
    kernels_.argmax(step(), act(x), ids, rows, static_cast<uint32_t>(x.cols));
    argmax_count_ = rows;
  }
  std::vector<int32_t> read_argmax(int64_t n_rows) override {
    if (n_rows < 0 || n_rows > argmax_count_) throw std::out_of_range("read_argmax: more rows than argmax_rows computed");
    std::vector<int32_t> ids(static_cast<size_t>(n_rows));
    if (n_rows > 0) argmax_ids_.get().download(ids.data(), ids.size() * sizeof(int32_t));
    return ids;
  }

  void top_k_rows(const Activation& x, int32_t k) override {
    const uint32_t rows = rows_of(x);
    if (k < 1 || k > kMaxTopK || k > x.cols) throw std::invalid_argument("top_k_rows: k out of range");
    const uint64_t bytes = Kernels::top_k_words(std::max<uint32_t>(static_cast<uint32_t>(max_step_rows_), 1),
                                                static_cast<uint32_t>(k)) * sizeof(uint32_t);
    const Buffer& result = top_k_result_.ensure(context_, descriptors_, bytes);
    kernels_.top_k(step(), act(x), result, rows, static_cast<uint32_t>(x.cols), static_cast<uint32_t>(k));
    top_k_rows_ = rows;
    top_k_k_ = k;
  }
  TopK read_top_k(int64_t n_rows) override {
    if (n_rows < 0 || n_rows > top_k_rows_) throw std::out_of_range("read_top_k: more rows than top_k_rows computed");
    const size_t stride = 1 + 2 * static_cast<size_t>(top_k_k_);
    std::vector<uint32_t> words(static_cast<size_t>(n_rows) * stride);
    if (!words.empty()) top_k_result_.get().download(words.data(), words.size() * sizeof(uint32_t));
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

  // A lost device (VK_ERROR_DEVICE_LOST from the submission or its fence, or one
  // FAFO_INJECT_FAULT raises here) makes every later step and upload fail at once.
  void finish_step() override {
    check_usable();
    const std::optional<DeviceError::Kind> fault = injected_fault_due();
    try {
      encoder_.finish(step_timeout());
      if (fault)  // raised through the path a real failure of the step takes
        check(*fault == DeviceError::Kind::Lost ? VK_ERROR_DEVICE_LOST : VK_ERROR_OUT_OF_DEVICE_MEMORY,
              "vkWaitForFences (injected by FAFO_INJECT_FAULT)");
    } catch (const DeviceError& e) {
      if (e.kind() == DeviceError::Kind::Lost) lost_ = true;
      throw;
    }
    // The shapes this step ran for the first time, measured now: the step that first
    // uses a shape takes the time (a warm-up, for any caller that times steps).
    if (tuning_) after_step_tuning();
  }

  void set_memory_limit(uint64_t bytes) override {
    if (allocator_.allocated() > 0) throw std::logic_error("set_memory_limit after memory was allocated");
    allocator_.set_limit(bytes);
  }
  uint64_t memory_in_use() const override { return allocator_.allocated(); }
  uint64_t memory_free() const override { return allocator_.free_bytes_now(); }

  std::string start_profile() override {
    if (!profiler_) profiler_ = std::make_unique<KernelProfiler>(context_);
    if (!profiler_->unsupported().empty()) return profiler_->unsupported();
    profiler_->take();
    encoder_.set_profiler(profiler_.get());
    return "";
  }
  KernelProfile take_profile() override {
    encoder_.set_profiler(nullptr);
    return profiler_ ? profiler_->take() : KernelProfile{};
  }

  std::vector<float> read_rows(const Activation& x, int64_t n_rows) override {
    if (n_rows < 0 || n_rows > x.rows) throw std::out_of_range("read_rows: more rows than the buffer holds");
    std::vector<float> out(static_cast<size_t>(n_rows * x.cols));
    if (!out.empty()) transfer_.download(act(x), out.data(), out.size() * sizeof(float));
    return out;
  }

  void write_rows(Activation& x, const std::vector<float>& rows) override {
    check_usable();
    check_rows_fit(x, rows.size());
    if (!rows.empty()) transfer_.upload(activations_.at(static_cast<size_t>(x.id)).buffer, rows.data(), rows.size() * sizeof(float));
  }

 private:
  void product(const Weight& weight_id, const Activation& x, const Activation& out, bool accumulate,
               const InputNorm& norm = {}) {
    const DeviceWeight& w = weight(weight_id);
    const uint32_t T = rows_of(x);
    MatmulVariant variant;
    variant.int8 = uses_int8(w.type);
    const Buffer& input = variant.int8 ? rounded(x, norm) : act(x);  // the norm in the rounding
    const uint32_t x_stride = variant.int8 ? Kernels::q8_row_words(static_cast<uint32_t>(x.cols)) : static_cast<uint32_t>(x.cols);
    for (const WeightPart& part : w.parts) {
      weight_kernels_.matmul(step(), w.type, part.buffer, input, act(out),
                             WeightKernels::MatmulShape{T, part.n_rows, static_cast<uint32_t>(w.cols), x_stride,
                                                        static_cast<uint32_t>(out.cols), part.first_row, accumulate},
                             variant, variant.int8 ? InputNorm{} : norm);
      step().note_weight_bytes(static_cast<double>(tensor_row_bytes(w.type, w.cols)) * static_cast<double>(part.n_rows));
    }
    if (variant.int8) last_rounding_->after = step().command_count();
  }
  // out = silu(gate) * up from one weight of the gate's rows, then the up projection's.
  void gated_product(const Weight& gate_up, const Activation& x, Activation& out, const InputNorm& norm) {
    const DeviceWeight& w = weight(gate_up);
    if (w.parts.size() != 1 || w.rows % 2 != 0)
      throw std::invalid_argument("matmul_swiglu: the gate and up weight is not one buffer of 2 x rows rows");
    const uint32_t T = rows_of(x);
    const uint32_t rows = static_cast<uint32_t>(w.rows / 2);
    MatmulVariant variant;
    variant.int8 = uses_int8(w.type);
    const Buffer& input = variant.int8 ? rounded(x, norm) : act(x);  // the norm in the rounding
    const uint32_t x_stride = variant.int8 ? Kernels::q8_row_words(static_cast<uint32_t>(x.cols)) : static_cast<uint32_t>(x.cols);
    weight_kernels_.matmul_gated(step(), w.type, w.parts.front().buffer, input, act(out),
                                 WeightKernels::MatmulShape{T, rows, static_cast<uint32_t>(w.cols), x_stride,
                                                            static_cast<uint32_t>(out.cols), 0},
                                 variant, variant.int8 ? InputNorm{} : norm);
    step().note_weight_bytes(static_cast<double>(tensor_row_bytes(w.type, w.cols)) * static_cast<double>(w.rows));
    if (variant.int8) last_rounding_->after = step().command_count();
    set_rows(out, T);
  }
  // Whether a product of x's rows normalized with `gain` runs as one dispatch.
  // Integer products normalize in the rounding of their input (quantize_norm), for any
  // step size and on every device, unless fusing norms was turned off.
  bool fuses_norm(const Activation& x, const Weight& gain, const Weight& w) const {
    if (weight(gain).cols != x.cols || weight(gain).parts.size() != 1) return false;
    if (uses_int8(weight(w).type)) return !fuse_norm_off_;
    return fuse_norm_ && rows_of(x) <= WeightKernels::kMaxNormTokens;
  }
  bool uses_int8(TensorType type) const { return int8_ && WeightKernels::has_int8(type); }
  // x's rows (normalized first with `norm` when it has a gain) rounded to 8 bits
  // (Kernels::quantize_rows) in q8_, for an integer product: the buffer sized once for the
  // largest step and the widest such weight, so that no step frees one that an earlier
  // command of it reads. Products of one input one after another (a layer's q, k and v
  // projections where their formats differ, a GELU block's gate and up) round it once:
  // when the last command of the step is an integer product of the same rows, normalized
  // the same way, q8_ holds them already.
  const Buffer& rounded(const Activation& x, const InputNorm& norm) {
    const uint32_t T = rows_of(x), cols = static_cast<uint32_t>(x.cols);
    const Rounding now{&act(x), norm.gain, norm.eps, T, cols, 0};
    if (last_rounding_ && last_rounding_->after == step().command_count() && last_rounding_->same_input(now))
      return q8_;
    q8_for(static_cast<uint64_t>(std::max<int64_t>({max_step_rows_, x.rows, 1})), cols);
    kernels_.quantize_rows(step(), act(x), q8_, T, cols, cols, norm.gain, norm.eps);
    last_rounding_ = now;  // `after` set by the product
    return q8_;
  }
  // q8_, holding at least `rows` rounded rows of `cols` values (and of the widest weight
  // with integer products).
  const Buffer& q8_for(uint64_t rows, uint32_t cols) {
    const uint64_t words = rows * Kernels::q8_row_words(static_cast<uint32_t>(std::max<int64_t>(max_int8_cols_, cols)));
    if (q8_words_ < words) {
      allocator_.release(q8_, descriptors_);
      q8_words_ = 0;  // until the larger one exists (its allocation may fail)
      q8_ = allocator_.device(words * 4, "rounded activations");
      q8_words_ = words;
    }
    return q8_;
  }
  // StepTarget: what the KV cache records into.
  CommandSequence& recording() override { return step(); }
  const StepBatch& step_batch() const override { return encoder_.batch(); }
  const Buffer& buffer_of(const Activation& a) const override { return act(a); }
  const Buffer& step_info(int32_t part) const override { return encoder_.step_info(part); }

  static ContextOptions make_context_options(const VulkanBackendOptions& options) {
    ContextOptions c;
    c.device_index = options.device.empty() ? -1 : resolve_device(options.device);
    const char* env = std::getenv("FAFO_VULKAN_VALIDATION");
    c.validation = options.validation || (env && std::string(env) == "1");
    c.validation_log = options.validation_log;
    c.features = options.features;
    return c;
  }

  CommandSequence& step() { return encoder_.commands(); }
  // How long a step may run before it counts as hung: 120 s on a GPU; a CPU device adds
  // 2 s per token per GB of weights (lavapipe prefills 512 tokens of TinyLlama-1.1B
  // Q4_K_M, 0.67 GB, in about 3 minutes: the allowance is about 13).
  std::chrono::milliseconds step_timeout() const {
    const std::chrono::milliseconds base = std::chrono::seconds(120);
    if (!cpu_device_) return base;
    const double extra_ms = 2000.0 * weight_bytes_ / 1e9 * static_cast<double>(batch().size());
    return base + std::chrono::milliseconds(static_cast<int64_t>(std::min(extra_ms, 1e9)));
  }
  const StepBatch& batch() const { return encoder_.batch(); }
  const DeviceWeight& weight(const Weight& w) const { return weights_.at(static_cast<size_t>(w.id)); }
  const Buffer& vector(const Weight& w) const { return weight(w).parts.front().buffer; }
  const Buffer& act(const Activation& a) const { return activations_.at(static_cast<size_t>(a.id)).buffer; }
  uint32_t rows_of(const Activation& a) const { return encoder_.rows_of(a); }
  void set_rows(const Activation& out, uint32_t rows) { encoder_.set_rows(out, rows); }

  // The parts of the step begun last (std::logic_error outside a step).
  int32_t step_parts(const char* op) const {
    if (kvs_.empty()) throw std::logic_error(std::string(op) + " outside a step");
    return static_cast<int32_t>(kvs_.size());
  }
  // The cache of part `part` of the step begun last.
  VulkanKvCache& kv_of(int32_t part, const char* op) const {
    if (part < 0 || static_cast<size_t>(part) >= kvs_.size() || !kvs_[static_cast<size_t>(part)])
      throw std::logic_error(std::string(op) + " outside a step, or a KV cache of the step was destroyed");
    return *kvs_[static_cast<size_t>(part)];
  }

  void check_usable() const {
    if (lost_)
      throw DeviceError(DeviceError::Kind::Lost, "the Vulkan device " + context_.device_name() +
                                                     " was lost; open the model again");
  }

  void ensure_partials(uint64_t floats) {
    if (partials_floats_ >= floats) return;
    allocator_.release(partials_, descriptors_);  // only before a step has used it with these shapes
    partials_floats_ = 0;  // until the larger one exists (its allocation may fail)
    partials_ = allocator_.device(floats * sizeof(float), "attention scratch");
    partials_floats_ = floats;
  }

  Context context_;
  Kernels kernels_;
  WeightKernels weight_kernels_;
  DescriptorCache descriptors_;
  Transfer transfer_;
  Allocator allocator_;
  PositionRopeTable rope_positions_;  // latent_attention's cos/sin of every position of the longest cache
  uint64_t max_range_ = 0;
  bool cpu_device_ = false;
  BackendSettings settings_;  // the options and FAFO_VULKAN_* settled
  bool fuse_qkv_ = true;
  bool fuse_norm_ = true;
  bool fuse_norm_off_ = false;  // turned off (FAFO_VULKAN_FUSE_NORM=0): not for integer products either
  bool int8_ = false;  // integer products for the formats that have them (uses_int8)
  double weight_bytes_ = 0;  // of the matrices uploaded
  int64_t max_int8_cols_ = 0;  // the widest weight with integer products
  std::unique_ptr<ProductTuning> tuning_;  // null: no tuning
  void after_step_tuning() {
    try {
      tuning_->measure_new_shapes();
    } catch (const DeviceError& e) {
      if (e.kind() == DeviceError::Kind::Lost) lost_ = true;
      throw;
    }
  }
  Buffer q8_;  // rounded activations (rounded())
  uint64_t q8_words_ = 0;
  // What q8_ holds: the rows of x (with the norm) rounded in this step, and the step's
  // command count after the products that read them.
  struct Rounding {
    const Buffer* x;
    const Buffer* gain;
    float eps;
    uint32_t T, cols;
    uint32_t after;
    bool same_input(const Rounding& o) const {
      return x == o.x && gain == o.gain && (gain == nullptr || eps == o.eps) && T == o.T && cols == o.cols;
    }
  };
  std::optional<Rounding> last_rounding_;

  std::vector<DeviceWeight> weights_;
  std::vector<DeviceActivation> activations_;
  int64_t max_step_rows_ = 0;
  std::vector<VulkanKvCache*> kvs_;  // the caches of the step begun last, one per part
  int32_t max_capacity_ = 0;     // of the caches made

  Buffer partials_;
  uint64_t partials_floats_ = 0;
  bool lost_ = false;  // the device was lost: every later step and upload fails
  ScratchBuffer scatter_args_;  // scatter_add's rows and weights, this command buffer's
  uint64_t scatter_words_ = 0;  // in use in it
  ScratchBuffer argmax_ids_;
  int64_t argmax_count_ = 0;
  ScratchBuffer top_k_result_;
  int64_t top_k_rows_ = 0;
  int32_t top_k_k_ = 0;

  std::unique_ptr<KernelProfiler> profiler_;  // made by the first start_profile()
  StepEncoder encoder_;
};

}  // namespace

std::unique_ptr<Backend> make_backend(const VulkanBackendOptions& options) {
  return std::make_unique<VulkanBackend>(options);
}

ReplayCounts replay_counts(const Backend& backend) {
  const auto* vk = dynamic_cast<const VulkanBackend*>(&backend);
  return vk ? vk->replay_counts() : ReplayCounts{};
}

std::vector<std::string> tune_now(Backend& backend) {
  auto* vk = dynamic_cast<VulkanBackend*>(&backend);
  return vk ? vk->tune_now() : std::vector<std::string>{};
}

std::string tuning_file(const Backend& backend) {
  const auto* vk = dynamic_cast<const VulkanBackend*>(&backend);
  return vk ? vk->tuning_file() : std::string();
}

}  // namespace vulkan
}  // namespace fafo
