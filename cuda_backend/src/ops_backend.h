// The CUDA backend's Backend and KvCache, written once over a Device: CudaDevice
// (cuda_device.cuh: device memory, kernels as grids on a stream) or HostDevice
// (host_device.h: the same kernels run on the CPU, for tests where there is no GPU).
// Every op launches one kernel (or copies): the matrix products, RMSNorm and attention
// from the kernel set chosen at creation (CudaKernels::Fast: warp_ops.h with int_ops.h's
// integer products for weights in every block format but Q2_K and the IQ2/IQ3 codebooks; Warp: warp_ops.h alone; Plain:
// ops.h; Warp and Plain give the same bits for products and norms, Fast's integer
// products are within rounded_matmul_tolerance, attention within the tolerance), the
// other ops from ops.h; a step's launches run in order on the device and finish_step()
// waits for them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "argmax_op.h"
#include "attention_ops.h"
#include "block_decode.h"
#include "fafo/backend.h"
#include "fafo/cuda_backend.h"
#include "fafo/kv_cache.h"
#include "fafo/tensor_type.h"
#include "fafo/top_k.h"
#include "half_mma_ops.h"
#include "int_mma_block_op.h"
#include "int_ops.h"
#include "launch_times.h"
#include "ops_kv_cache.h"
#include "ops.h"
#include "rope_tables.h"
#include "step_graphs.h"
#include "top_k_op.h"
#include "warp_ops.h"

namespace fafo::cuda {

template <class Device>
class OpsBackend final : public Backend,
                         public BackendFusions,
                         public BackendProfiler,
                         public BackendMemory,
                         public StepAccess {
 public:
  // `name`: as registered; `describe`: the device, for description(), to which the
  // kernel set is added.
  // `fuse` (warp kernels only): the attention projections as one product with RoPE and
  // the stores after it (rope_store), the gate and up projections as one with the
  // SwiGLU, and each RMSNorm inside the product after it; the same bits either way.
  // `graphs`: steps whose shape ran before are captured and replayed as graphs
  // (step_graphs.h; FAFO_CUDA_GRAPHS).
  OpsBackend(std::unique_ptr<Device> device, std::string name, std::string describe, CudaKernels kernels,
             bool fuse = true, bool graphs = false)
      : device_(std::move(device)),
        name_(std::move(name)),
        describe_(std::move(describe) + "; " + kernels_description(kernels, fuse) + (graphs ? ", CUDA graphs" : "") +
                  (kernels == CudaKernels::Fast && cuda_wide_tokens_from_env() != 64
                       ? ", wide steps' integer products in blocks of " + std::to_string(cuda_wide_tokens_from_env()) +
                             " tokens (FAFO_CUDA_WIDE_TOKENS)"
                       : "")),
        kernels_(kernels),
        fuse_(kernels != CudaKernels::Plain && fuse),
        graphs_(graphs),
        wide_token_warps_(cuda_wide_tokens_from_env() / IntMmaBlockOp<Format::Q8_0>::kWarpTokens) {}
  ~OpsBackend() override {
    if (device_->capturing()) device_->abort_capture();
    weights_.clear();
    activations_.clear();
  }

  std::string name() const override { return name_; }
  std::string description() const override { return describe_; }
  // The Vulkan backend's summation orders; silu and the attention softmax use the
  // device's expf, so results differ from the reference in the last bits. The integer
  // products (Fast) round the activations to 8 bits per block of 32 (int_ops.h): on the
  // op-conformance table's inputs (weights up to 2, activations uniform in [-1, 1], 96
  // to 512 columns) the largest error measured is 0.163 of max(1, |reference|), as the
  // cpu backend's 0.173 (it rounds the same way, per 256 values).
  // The F16 products on the tensor cores (Fast) round the activations to halves: largest
  // error on the table's inputs 0.0053 of max(1, |reference|), as the cpu backend's (it rounds them too).
  // The BF16 ones round them to bfloat16 (8 significant bits, 3 fewer than a half): largest
  // error on the table's inputs 0.058 of max(1, |reference|).
  BackendNumerics numerics() const override {
    const bool fast = kernels_ == CudaKernels::Fast;
    return BackendNumerics{false, 1e-4, fast ? kIntProductTolerance : 0.0, fast ? kHalfProductTolerance : 0.0,
                           fast ? kBf16ProductTolerance : 0.0};
  }
  static constexpr double kIntProductTolerance = 0.25, kHalfProductTolerance = 0.01, kBf16ProductTolerance = 0.1;

  // --- memory ---
  Weight upload_weight(TensorType type, int64_t rows, int64_t cols, const void* data) override {
    StoredWeight w;
    w.rows = rows;
    w.cols = cols;
    if (rows == 1) {
      // Vectors (norm gains, biases) are kept as F32, which the element-wise kernels read.
      std::vector<float> dense(static_cast<size_t>(cols));
      dequantize_row(type, data, dense.data(), cols);
      w.type = TensorType::F32;
      w.row_bytes = static_cast<uint64_t>(cols) * sizeof(float);
      w.memory = DeviceMemory<Device>(*device_, dense.size() * sizeof(float));
      device_->upload(w.memory.get(), dense.data(), dense.size() * sizeof(float));
    } else {
      if (!has_decoder(static_cast<uint32_t>(type)))
        throw std::runtime_error("the CUDA backend has no kernel for weights of type " + std::string(tensor_type_name(type)));
      w.type = type;
      w.row_bytes = tensor_row_bytes(type, cols);
      const size_t bytes = static_cast<size_t>(rows) * w.row_bytes;
      w.memory = DeviceMemory<Device>(*device_, bytes);
      device_->upload(w.memory.get(), data, bytes);
    }
    weights_.push_back(std::move(w));
    return Weight{static_cast<int32_t>(weights_.size() - 1), type, rows, cols};
  }

  Activation alloc_activation(int64_t max_rows, int64_t cols) override {
    if (max_rows < 1 || cols < 1) throw std::invalid_argument("alloc_activation: empty shape");
    activations_.push_back(StoredActivation{DeviceMemory<Device>(*device_, static_cast<size_t>(max_rows * cols) * sizeof(float)),
                                            max_rows, cols});
    max_step_rows_ = std::max(max_step_rows_, max_rows);
    return Activation{static_cast<int32_t>(activations_.size() - 1), max_rows, cols};
  }

  std::unique_ptr<KvCache> create_kv_cache(const KvCacheShape& shape) override {
    if (shape.latent())
      throw std::invalid_argument("the " + name() + " backend cannot run multi-head latent attention (MLA) models yet");
    auto kv = std::make_unique<OpsKvCache<Device>>(shape, *device_, *this);
    const KvCache* made = kv.get();
    kv->set_owner(this, [this, made] {
      for (OpsKvCache<Device>*& kv_of_part : kvs_)
        if (kv_of_part == made) kv_of_part = nullptr;  // a step over it fails
    });
    return kv;
  }

  // --- a step ---
  // Any number of sequences per step: attention runs once per part, over its cache.
  BackendCapabilities capabilities() const override {
    return {.max_step_sequences = StepBatch::kMaxTokens, .window_rings = true};
  }
  BackendFusions* fusions() override { return this; }
  BackendProfiler* profiler() override { return this; }
  BackendMemory* memory() override { return this; }

  // BackendMemory: every DeviceMemory counted in the device's budget (memory_budget.h).
  void set_memory_limit(uint64_t bytes) override { device_->budget().set_limit(bytes); }
  uint64_t memory_in_use() const override { return device_->budget().in_use(); }
  uint64_t memory_free() const override { return device_->free_memory(); }

  void start_step(const StepBatch& batch, std::span<KvCache* const> caches) override {
    run_open_capture();  // of a step that threw before finish_step: what it issued runs, as without graphs
    std::vector<OpsKvCache<Device>*> kvs;
    for (KvCache* cache : caches) kvs.push_back(&own_kv_cache<OpsKvCache<Device>>(*this, *cache));
    check_step_fits(batch, caches, max_step_rows_);
    for (size_t k = 0; k < kvs.size(); ++k) kvs[k]->set_step_part(static_cast<int32_t>(k));
    kvs_ = std::move(kvs);
    batch_ = &batch;
    gathered_rows_.clear();
    if (profiling_) (void)device_->take_times();  // the launches of a step not finished
    tokens_ = token_staging_.put(*device_, batch.tokens());
    // Each row's mask (bits counted from its part's first row) and prefix view, and each
    // part's logical order, for attention.
    const uint32_t T = static_cast<uint32_t>(batch.size());
    uint32_t widest = 1;
    for (int32_t k = 0; k < batch.n_segments(); ++k) widest = std::max(widest, static_cast<uint32_t>(batch.segment(k).size));
    mask_words_ = (widest + 63) / 64;
    std::vector<uint64_t> mask(size_t{T} * mask_words_, 0);
    std::vector<uint8_t> compressed(T, 0);
    for (uint32_t i = 0; i < T; ++i) {
      compressed[i] = batch.prefix(static_cast<int32_t>(i)) == PrefixView::Compressed;
      const uint32_t first = static_cast<uint32_t>(batch.segment(batch.segment_of(static_cast<int32_t>(i))).first);
      for (uint32_t j = first; j <= i; ++j)
        if (batch.sees(static_cast<int32_t>(i), static_cast<int32_t>(j)))
          mask[size_t{i} * mask_words_ + (j - first) / 64] |= uint64_t{1} << ((j - first) % 64);
    }
    mask_ = mask_staging_.put(*device_, mask);
    compressed_ = compressed_staging_.put(*device_, compressed);
    std::vector<int32_t> orders;
    order_at_.assign(kvs_.size(), -1);
    for (size_t k = 0; k < kvs_.size(); ++k)
      if (const std::vector<int32_t>* order = kvs_[k]->full_order()) {
        order_at_[k] = static_cast<int64_t>(orders.size());
        orders.insert(orders.end(), order->begin(), order->begin() + batch.segment(static_cast<int32_t>(k)).n_past);
      }
    order_ = orders.empty() ? nullptr : order_staging_.put(*device_, orders);
    // Each row's position and each part's region entries (their logical indices), for
    // sliding-window layers.
    positions_ = position_staging_.put(*device_, batch.positions());
    std::vector<int32_t> region_entries;
    region_at_.assign(kvs_.size(), 0);
    for (size_t k = 0; k < kvs_.size(); ++k) {
      region_at_[k] = static_cast<int64_t>(region_entries.size());
      const std::vector<int32_t> entries = kvs_[k]->layout().region_entries();
      region_entries.insert(region_entries.end(), entries.begin(), entries.end());
    }
    region_positions_ = region_staging_.put(*device_, region_entries);
    ++steps_;
    if (graphs_ && !profiling_) {
      std::vector<int32_t> shape{batch.size()};
      for (int32_t k = 0; k < batch.n_segments(); ++k) shape.push_back(batch.segment(k).size);
      if (step_graphs_.capture(shape)) device_->begin_capture();  // the step's inputs are uploaded: its launches next
    }
  }

  void embed(const Weight& table, Activation& out) override {
    const StoredWeight& w = weight(table);
    check_tokens_in_vocabulary(batch(), w.rows);
    const uint32_t cols = static_cast<uint32_t>(w.cols), chunks = (cols + 15) / 16;
    with_format(static_cast<uint32_t>(w.type), [&]<Format F>() {
      launch(EmbedOp<F>{w.memory.template as<uint8_t>(), tokens_, data_of(out), cols, 0, static_cast<uint32_t>(w.rows), chunks,
                        w.row_bytes},
             uint64_t{static_cast<uint32_t>(batch().size())} * chunks, "embed");
    });
  }

  void rms_norm(const Activation& x, const Weight& gain, float eps, Activation& out) override {
    const uint32_t rows = rows_of(x);
    const float* g = weight(gain).memory.template as<float>();
    if (kernels_ != CudaKernels::Plain) {
      // Several warps a row only out of place: a warp writes its columns while the row's
      // other warps may still read x.
      const uint32_t n = static_cast<uint32_t>(x.cols);
      const uint32_t parts = data_of(x) == data_of(out) ? 1 : RmsNormWarpOp::parts_for(n);
      launch_warps(RmsNormWarpOp{data_of(x), g, data_of(out), n, eps, parts}, uint64_t{rows} * parts, "rms_norm");
    }
    else
      launch(RmsNormOp{data_of(x), g, data_of(out), static_cast<uint32_t>(x.cols), eps}, rows, "rms_norm");
    set_rows(out, rows);
  }

  // Rows of one head each (a row's heads are consecutive): rms_norm's kernels.
  void head_norm(const Activation& x, int32_t n_heads, const Weight& gain, float eps, Activation& out) override {
    const uint32_t rows = rows_of(x) * static_cast<uint32_t>(n_heads), width = static_cast<uint32_t>(x.cols / n_heads);
    const float* g = weight(gain).memory.template as<float>();
    if (kernels_ != CudaKernels::Plain)
      launch_warps(RmsNormWarpOp{data_of(x), g, data_of(out), width, eps}, rows, "head_norm");
    else
      launch(RmsNormOp{data_of(x), g, data_of(out), width, eps}, rows, "head_norm");
    set_rows(out, rows_of(x));
  }

  // With the warp kernels and `fuse`: the attention projections as one weight, the
  // feed-forward gate and up projections as one weight, the RMSNorm before a product
  // fused into it (FusedProductWarpOp: the bits of the ops apart).
  bool fuses_gate_up(TensorType type, int64_t rows, int64_t cols) const override {
    return fuse_ && has_decoder(static_cast<uint32_t>(type)) && rows > 0 && cols > 0;
  }
  bool fuses_qkv(TensorType type, int64_t q_rows, int64_t kv_rows, int64_t cols) const override {
    return fuse_ && has_decoder(static_cast<uint32_t>(type)) && q_rows > 0 && kv_rows > 0 && cols > 0;
  }
  // RoPE of the queries and keys in qkv (in place), then each part's keys and values
  // into its cache from qkv's columns: the kernels of rope, rope and store, launched on
  // qkv's columns instead of three activations.
  void rope_store(int32_t layer, Activation& qkv, const AttentionShape& s, const RopeParams& p) override {
    const uint32_t q_cols = static_cast<uint32_t>(s.n_head) * static_cast<uint32_t>(s.head_dim);
    const uint32_t kv_dim = static_cast<uint32_t>(s.n_head_kv) * static_cast<uint32_t>(s.head_dim);
    if (qkv.cols != int64_t{q_cols} + 2 * int64_t{kv_dim})
      throw std::invalid_argument("rope_store: qkv rows of " + std::to_string(qkv.cols) + " columns do not hold " +
                                  std::to_string(s.n_head) + " query and 2 x " + std::to_string(s.n_head_kv) +
                                  " key/value heads of " + std::to_string(s.head_dim));
    const uint32_t T = static_cast<uint32_t>(batch().size());
    if (rows_of(qkv) != T) throw std::invalid_argument("rope_store: qkv holds gathered rows, not the step's");
    const uint32_t n_pairs = static_cast<uint32_t>(p.n_dims / 2), stride = static_cast<uint32_t>(qkv.cols);
    const float* table = rope_table(p);
    float* rows = data_of(qkv);
    launch(RopeOp{rows, table, static_cast<uint32_t>(s.n_head), static_cast<uint32_t>(s.head_dim), n_pairs, stride, p.neox},
           uint64_t{T} * static_cast<uint32_t>(s.n_head) * n_pairs, "rope");
    launch(RopeOp{rows + q_cols, table, static_cast<uint32_t>(s.n_head_kv), static_cast<uint32_t>(s.head_dim), n_pairs,
                  stride, p.neox},
           uint64_t{T} * static_cast<uint32_t>(s.n_head_kv) * n_pairs, "rope");
    for (size_t part = 0; part < kvs_.size(); ++part) {
      OpsKvCache<Device>* kv = kvs_[part];
      if (!kv) throw std::logic_error("rope_store: a KV cache of the step was destroyed");
      if (layer < 0 || layer >= kv->shape().n_layer) throw std::out_of_range("rope_store: layer outside the KV cache");
      if (kv->shape().latent()) throw std::invalid_argument("rope_store: the KV cache is latent (MLA models store latents)");
      if (kv->shape().kv_dim != static_cast<int32_t>(kv_dim))
        throw std::invalid_argument("rope_store: the KV cache's entries are not " + std::to_string(kv_dim) + " wide");
      kv->store_rows(layer, rows, stride, q_cols, rows, stride, q_cols + kv_dim);
      if (!kv->captured_rows().empty()) kv->capture_columns(layer, rows, q_cols, stride);
    }
  }
  bool matmul_swiglu(const Weight& gate, const Weight& up, const Activation& x, Activation& out, Activation&) override {
    if (up || !fuse_) return false;
    fused_product(gate, x, nullptr, 0.0f, true, out);
    return true;
  }
  bool matmul_norm(const Weight& w, const Activation& x, const Weight& gain, float eps, Activation&,
                   Activation& out) override {
    if (!fuse_ || weight(w).cols != x.cols) return false;
    fused_product(w, x, &gain, eps, false, out);
    return true;
  }
  bool matmul_swiglu_norm(const Weight& gate, const Weight& up, const Activation& x, const Weight& gain, float eps,
                          Activation&, Activation& out, Activation&) override {
    if (up || !fuse_ || weight(gate).cols != x.cols) return false;
    fused_product(gate, x, &gain, eps, true, out);
    return true;
  }

  void matmul(const Weight& weight_id, const Activation& x, Activation& out) override {
    product(weight_id, x, out, false);
    set_rows(out, rows_of(x));
  }

  bool matmul_add(const Weight& weight_id, const Activation& x, Activation& acc, Activation&) override {
    if (x.id == acc.id) throw std::invalid_argument("matmul_add: acc must not be the product's input");
    product(weight_id, x, acc, true);
    return true;
  }

  void add_bias(const Weight& bias, Activation& x) override {
    launch(BiasOp{data_of(x), weight(bias).memory.template as<float>(), static_cast<uint32_t>(x.cols)},
           uint64_t{rows_of(x)} * static_cast<uint64_t>(x.cols), "add_bias");
  }

  void rope(Activation& x, int32_t n_heads, int32_t head_dim, const RopeParams& p) override {
    const uint32_t n_pairs = static_cast<uint32_t>(p.n_dims / 2);
    launch(RopeOp{data_of(x), rope_table(p), static_cast<uint32_t>(n_heads), static_cast<uint32_t>(head_dim), n_pairs,
                  static_cast<uint32_t>(x.cols), p.neox},
           uint64_t{static_cast<uint32_t>(batch().size())} * static_cast<uint32_t>(n_heads) * n_pairs, "rope");
  }

  // One launch per part of the step, over its rows and its cache.
  void attention(int32_t layer, const Activation& q, const AttentionShape& s, Activation& out) override {
    const uint32_t T = static_cast<uint32_t>(batch().size());
    const size_t head_floats = size_t{static_cast<uint32_t>(s.n_head)} * static_cast<uint32_t>(s.head_dim);
    float* acc = attention_scratch_.template reserve<float>(*device_, size_t{T} * head_floats);
    for (int32_t part = 0; part < batch().n_segments(); ++part) {
      const OpsKvCache<Device>* kv = kvs_[static_cast<size_t>(part)];
      if (!kv) throw std::logic_error("attention: a KV cache of the step was destroyed");
      if (layer < 0 || layer >= kv->shape().n_layer) throw std::out_of_range("attention: layer outside the KV cache");
      check_ring_window(kv->shape(), layer, s);
      check_attention_sinks(s);
      const StepSegment seg = batch().segment(part);
      const size_t first = static_cast<size_t>(seg.first);
      const int64_t order_at = order_at_[static_cast<size_t>(part)];
      AttentionOp op{data_of(q) + first * static_cast<size_t>(q.cols), data_of(out) + first * static_cast<size_t>(out.cols),
                     acc + first * head_floats, kv->keys(layer), kv->values(layer), mask_ + first * mask_words_,
                     compressed_ + first, order_at < 0 ? nullptr : order_ + order_at, static_cast<uint32_t>(seg.size),
                     static_cast<uint32_t>(seg.n_past), static_cast<uint32_t>(s.n_head), static_cast<uint32_t>(s.n_head_kv),
                     static_cast<uint32_t>(s.head_dim), static_cast<uint32_t>(kv->shape().kv_dim),
                     static_cast<uint32_t>(q.cols), static_cast<uint32_t>(out.cols), mask_words_,
                     static_cast<uint32_t>(std::max(0, kv->region_count())), s.scale, layer < kv->dense_layers(), kv->format(),
                     s.softcap, positions_ + first, region_positions_ + region_at_[static_cast<size_t>(part)], s.window,
                     static_cast<uint32_t>(kv->shape().ring(layer))};
      op.sinks = s.sinks ? weight(s.sinks).memory.template as<float>() : nullptr;
      // The warp kernels stage a head's part of each entry: whole blocks in a block format.
      if (kernels_ != CudaKernels::Plain && s.head_dim <= static_cast<int32_t>(AttentionBlockOp<1>::kDimsPerLane * kLanes) &&
          (!kv_blocks(kv->format()) || s.head_dim % 32 == 0))
        split_attention(op);
      else
        launch(op, uint64_t{static_cast<uint32_t>(seg.size)} * static_cast<uint32_t>(s.n_head), "attention");
    }
    set_rows(out, T);
  }

  static_assert(SwigluOaiOp::kAlpha == kSwigluOaiAlpha && SwigluOaiOp::kLimit == kSwigluOaiLimit);
  void gated(GatedActivation act, const Activation& gate, const Activation& up, Activation& out) override {
    const uint64_t n = uint64_t{rows_of(gate)} * static_cast<uint64_t>(gate.cols);
    if (act == GatedActivation::Silu)
      launch(SwigluOp{data_of(gate), data_of(up), data_of(out)}, n, "swiglu");
    else if (act == GatedActivation::SwigluOai)
      launch(SwigluOaiOp{data_of(gate), data_of(up), data_of(out)}, n, "swiglu_oai");
    else
      launch(GegluOp{data_of(gate), data_of(up), data_of(out)}, n, "geglu");
    set_rows(out, rows_of(gate));
  }

  void map(ElementMap op, Activation& x, float value) override {
    const uint64_t n = uint64_t{rows_of(x)} * static_cast<uint64_t>(x.cols);
    if (op == ElementMap::Scale)
      launch(ScaleOp{data_of(x), value}, n, "scale");
    else
      launch(SoftcapOp{data_of(x), value}, n, "softcap");
  }

  void add(Activation& x, const Activation& y) override {
    launch(AddOp{data_of(x), data_of(y)}, uint64_t{rows_of(x)} * static_cast<uint64_t>(x.cols), "add");
  }

  void gather_rows(const Activation& src, const std::vector<int32_t>& rows, Activation& dst) override {
    if (static_cast<int64_t>(rows.size()) > dst.rows) throw std::out_of_range("gather_rows: destination too small");
    for (int32_t r : rows)
      if (r < 0 || r >= batch().size()) throw std::out_of_range("gather_rows: row outside the step");
    if (!rows.empty()) {
      const int32_t* index = gather_staging_.put(*device_, rows);
      launch(GatherOp{data_of(src), data_of(dst), index, static_cast<uint32_t>(src.cols), static_cast<uint32_t>(src.cols),
                      static_cast<uint32_t>(dst.cols)},
             uint64_t{rows.size()} * static_cast<uint64_t>(src.cols), "gather_rows");
    }
    gathered_rows_[dst.id] = static_cast<uint32_t>(rows.size());
  }

  void scatter_add(const Activation& src, const std::vector<int32_t>& rows, const std::vector<float>& weights,
                   Activation& dst) override {
    check_scatter_add(src, rows, weights, dst, batch().size());
    if (rows.empty()) return;
    // Uploads are ordered on the stream (and copied into a captured graph), so each
    // call's rows and weights stay what its launch reads.
    const int32_t* index = scatter_rows_staging_.put(*device_, rows);
    const float* w = scatter_weights_staging_.put(*device_, weights);
    launch(ScatterAddOp{data_of(src), data_of(dst), index, w, static_cast<uint32_t>(dst.cols)},
           uint64_t{rows.size()} * static_cast<uint64_t>(dst.cols), "scatter_add");
  }

  // The step's launches so far run (a capture open is ended and run), and the step
  // goes on: read_rows then reads their results.
  void sync_step() override {
    run_open_capture();
    device_->sync();
  }

  void argmax_rows(const Activation& x) override {
    argmax_n_ = rows_of(x);
    int32_t* out = argmax_staging_.template reserve<int32_t>(*device_, argmax_n_);
    const uint32_t cols = static_cast<uint32_t>(x.cols), rows = static_cast<uint32_t>(argmax_n_);
    if (kernels_ == CudaKernels::Plain) {
      launch(ArgmaxOp{data_of(x), out, cols, cols}, rows, "argmax");
      return;
    }
    // argmax_op.h: warps over parts of each row, then a warp per row over its parts.
    const uint32_t parts = ArgmaxPartOp::parts(cols);
    const size_t n = std::max<size_t>(size_t{rows} * parts, 1);
    uint32_t* scratch = argmax_parts_staging_.template reserve<uint32_t>(*device_, 2 * n);
    float* values = reinterpret_cast<float*>(scratch);
    int32_t* index = reinterpret_cast<int32_t*>(scratch + n);
    launch_warp_fn(ArgmaxPartOp{data_of(x), cols, cols, parts, values, index}, uint64_t{rows} * parts, "argmax");
    launch_warp_fn(ArgmaxCombineOp{values, index, parts, out}, rows, "argmax_combine");
  }
  std::vector<int32_t> read_argmax(int64_t n_rows) override {
    run_open_capture();
    if (n_rows < 0 || n_rows > argmax_n_) throw std::out_of_range("read_argmax: more rows than argmax_rows computed");
    std::vector<int32_t> out(static_cast<size_t>(n_rows));
    if (n_rows > 0)
      device_->download(out.data(), argmax_staging_.template reserve<int32_t>(*device_, argmax_n_), out.size() * sizeof(int32_t));
    return out;
  }

  // Top-k on the device (top_k_op.h: a warp per row, fafo/top_k.h's order exactly);
  // read_top_k reads back k ids and values per row.
  void top_k_rows(const Activation& x, int32_t k) override {
    if (k < 1 || k > kMaxTopK || k > x.cols) throw std::invalid_argument("top_k_rows: k out of range");
    const uint32_t rows = rows_of(x), kk = static_cast<uint32_t>(k);
    const uint64_t per_row = uint64_t{kk} * 4 + 1;  // ids, values, 2k scratch words; the NaN flag
    uint32_t* base = top_k_staging_.template reserve<uint32_t>(*device_, static_cast<size_t>(std::max<uint32_t>(rows, 1) * per_row));
    top_k_out_ = base;
    const TopKWarpOp op{data_of(x), static_cast<uint32_t>(x.cols), static_cast<uint32_t>(x.cols), kk,
                        reinterpret_cast<int32_t*>(base), reinterpret_cast<float*>(base + uint64_t{rows} * kk),
                        base + uint64_t{rows} * kk * 2, base + uint64_t{rows} * (kk * 2 + 1)};
    launch_warp_fn(op, rows, "top_k");
    top_k_n_ = rows;
    top_k_k_ = k;
  }
  TopK read_top_k(int64_t n_rows) override {
    run_open_capture();
    if (n_rows < 0 || n_rows > top_k_n_) throw std::out_of_range("read_top_k: more rows than top_k_rows computed");
    const uint64_t rows = static_cast<uint64_t>(top_k_n_), kk = static_cast<uint64_t>(top_k_k_);
    TopK out;
    out.k = top_k_k_;
    out.ids.resize(static_cast<size_t>(n_rows * top_k_k_));
    out.values.resize(static_cast<size_t>(n_rows * top_k_k_));
    // ids, values and NaN flags lie one after another: one read of the three.
    std::vector<uint32_t> all(static_cast<size_t>(rows * (2 * kk + 1)));
    if (n_rows > 0) device_->download(all.data(), top_k_out_, all.size() * sizeof(uint32_t));
    const size_t n = static_cast<size_t>(n_rows) * kk;
    if (n > 0) {
      std::memcpy(out.ids.data(), all.data(), n * sizeof(int32_t));
      std::memcpy(out.values.data(), all.data() + rows * kk, n * sizeof(float));
    }
    out.has_nan.assign(all.begin() + static_cast<std::ptrdiff_t>(rows * kk * 2),
                       all.begin() + static_cast<std::ptrdiff_t>(rows * kk * 2 + static_cast<uint64_t>(n_rows)));
    return out;
  }

  void finish_step() override {
    if (device_->capturing()) device_->end_capture(step_graphs_);
    device_->sync();
    if (profiling_) add_to_profile(device_->take_times());
  }

  // A capture that a failed CUDA call broke is dropped (that call reported the error).
  void run_open_capture() override {
    if (!device_->capturing()) return;
    if (device_->capture_broken()) device_->abort_capture();
    else device_->end_capture(step_graphs_);
  }
  // What the step graphs did (FAFO_CUDA_GRAPHS).
  const GraphStats& graph_stats() const { return step_graphs_.stats(); }

  // Per-kernel device time (CUDA events around each launch; the host device times its
  // loops), by kernel name; the weight bytes of the products.

  std::string start_profile() override {
    run_open_capture();
    device_->set_timing(true);
    profile_ = KernelProfile{};
    profiling_ = true;
    return "";
  }
  KernelProfile take_profile() override {
    run_open_capture();
    device_->set_timing(false);
    profiling_ = false;
    KernelProfile p = std::move(profile_);
    profile_ = KernelProfile{};
    return p;
  }

  std::vector<float> read_rows(const Activation& x, int64_t n_rows) override {
    run_open_capture();
    if (n_rows < 0 || n_rows > x.rows) throw std::out_of_range("read_rows: more rows than the activation holds");
    std::vector<float> out(static_cast<size_t>(n_rows * x.cols));
    if (!out.empty()) device_->download(out.data(), data_of(x), out.size() * sizeof(float));
    return out;
  }

  void write_rows(Activation& x, const std::vector<float>& rows) override {
    run_open_capture();
    check_rows_fit(x, rows.size());
    if (!rows.empty()) device_->upload(data_of(x), rows.data(), rows.size() * sizeof(float));
  }

  // StepAccess.
  const StepBatch& step_batch() const override { return batch(); }
  float* data_of(const Activation& a) const override {
    return activations_.at(static_cast<size_t>(a.id)).memory.template as<float>();
  }

 private:
  struct StoredWeight {
    TensorType type = TensorType::F32;
    int64_t rows = 0, cols = 0;
    uint64_t row_bytes = 0;
    DeviceMemory<Device> memory;
  };
  struct StoredActivation {
    DeviceMemory<Device> memory;
    int64_t rows = 0, cols = 0;
  };

  template <class Op>
  void launch(const Op& op, uint64_t n, const char* name) {
    if (n == 0) {
      device_->note_bytes(0);  // noted for this launch
      return;
    }
    if (n > UINT32_MAX) throw std::length_error(std::string(name) + ": " + std::to_string(n) + " threads are too many for one launch");
    device_->launch(op, n, name);
  }
  // The warp kernels' attention of one part (`op`: the plain kernel's arguments for its
  // rows; attention_ops.h): the keys split into parts of part_keys =
  // attention_part_keys(n_past), which depends on the part's n_past alone (not on T or
  // the other rows: T-invariant), so a one-token step's keys go to up to kAttentionParts
  // blocks per head group whatever the largest step; a block's warps take up to
  // kMaxBlockWarps rows, which share the keys and values it stages. The rows are taken in
  // runs whose partials fit kPartialsBudget.
  void split_attention(const AttentionOp& op) {
    if (op.T == 0) return;
    const uint64_t per_part = uint64_t{op.head_dim} + 2;
    const uint32_t part_keys = attention_part_keys(op.n_past);
    const uint64_t n_parts = (uint64_t{op.n_past} + op.T + part_keys - 1) / part_keys;
    const uint64_t per_row = uint64_t{op.n_head} * n_parts * per_part;
    constexpr uint64_t kPartialsBudget = uint64_t{64} << 20;
    const uint32_t run_rows = static_cast<uint32_t>(std::clamp<uint64_t>(kPartialsBudget / sizeof(float) / per_row, 1, op.T));
    float* partials = split_partials_.template reserve<float>(*device_, static_cast<size_t>(run_rows * per_row));
    const uint32_t group = attention_group_for(op.n_head, op.n_head_kv);
    for (uint32_t t0 = 0; t0 < op.T; t0 += run_rows) {
      const uint32_t rows = std::min(run_rows, op.T - t0), tile_rows = std::min(rows, kMaxBlockWarps);
      const auto run = [&]<uint32_t Group>() {
        const AttentionBlockOp<Group> block{op, partials, part_keys, static_cast<uint32_t>(n_parts), t0, rows, tile_rows};
        launch_block_fn(block, block.blocks(), tile_rows, AttentionBlockOp<Group>::shared_bytes(op.head_dim, op.format),
                        "attention");
      };
      switch (group) {
        case 4: run.template operator()<4>(); break;
        case 3: run.template operator()<3>(); break;
        case 2: run.template operator()<2>(); break;
        default: run.template operator()<1>(); break;
      }
      launch(AttentionCombineOp{partials, op.out, op.n_head, op.head_dim, static_cast<uint32_t>(n_parts), op.out_stride, t0,
                                op.sinks},
             uint64_t{rows} * op.n_head * op.head_dim, "attention_combine");
    }
  }
  void add_to_profile(const LaunchTimes& t) {
    if (t.launches.empty()) return;
    ++profile_.steps;
    profile_.step_seconds += t.span_seconds;
    for (const LaunchTimes::Launch& l : t.launches) {
      ++profile_.dispatches;
      auto it = std::find_if(profile_.kernels.begin(), profile_.kernels.end(),
                             [&](const KernelProfile::Kernel& k) { return k.name == l.name; });
      if (it == profile_.kernels.end()) it = profile_.kernels.insert(profile_.kernels.end(), KernelProfile::Kernel{l.name});
      ++it->calls;
      it->seconds += l.seconds;
      it->bytes += l.bytes;
    }
  }
  template <class Op>
  void launch_warp_fn(const Op& op, uint64_t n_warps, const char* name) {
    if (warps_to_launch(n_warps, name)) device_->launch_warp_fn(op, n_warps, name);
  }
  template <class Op>
  void launch_block_fn(const Op& op, uint64_t n_blocks, uint32_t warps, size_t shared_bytes, const char* name) {
    if (n_blocks > INT32_MAX)
      throw std::length_error(std::string(name) + ": " + std::to_string(n_blocks) + " blocks are too many for one launch");
    if (warps_to_launch(n_blocks * warps, name)) device_->launch_block_fn(op, n_blocks, warps, shared_bytes, name);
  }
  template <class Op>
  void launch_warps(const Op& op, uint64_t n_warps, const char* name) {
    if (warps_to_launch(n_warps, name)) device_->launch_warps(op, n_warps, name);
  }
  // Whether n_warps warps are launched (none: the bytes noted for the launch are
  // dropped); std::length_error past one launch's threads.
  bool warps_to_launch(uint64_t n_warps, const char* name) {
    if (n_warps == 0) {
      device_->note_bytes(0);
      return false;
    }
    if (n_warps > UINT32_MAX / 32)
      throw std::length_error(std::string(name) + ": " + std::to_string(n_warps) + " warps are too many for one launch");
    return true;
  }

  void product(const Weight& weight_id, const Activation& x, const Activation& out, bool accumulate) {
    const StoredWeight& w = weight(weight_id);
    const uint32_t T = rows_of(x), rows = static_cast<uint32_t>(w.rows);
    if (half_mma_product(w)) {
      half_product(w, data_of(x), static_cast<uint32_t>(x.cols), T, out, rows, false, accumulate, "matmul");
      return;
    }
    if (integer_product(w)) {
      const Q8Rows q = quantize(data_of(x), static_cast<uint32_t>(x.cols), T, static_cast<uint32_t>(w.cols), nullptr, 0.0f);
      device_->note_bytes(static_cast<double>(w.row_bytes) * static_cast<double>(w.rows));
      with_format(static_cast<uint32_t>(w.type), [&]<Format F>() {
        if constexpr (has_int_product<F>) int_product<F, false>(w, q, out, rows, T, accumulate, "matmul");
      });
      return;
    }
    device_->note_bytes(static_cast<double>(w.row_bytes) * static_cast<double>(w.rows));
    with_format(static_cast<uint32_t>(w.type), [&]<Format F>() {
      if (kernels_ != CudaKernels::Plain)
        launch_warps(MatmulWarpOp<F>{w.memory.template as<uint8_t>(), data_of(x), data_of(out), rows,
                                     static_cast<uint32_t>(w.cols), T, static_cast<uint32_t>(x.cols),
                                     static_cast<uint32_t>(out.cols), 0, w.row_bytes, accumulate},
                     MatmulWarpOp<F>::warps(rows, T), "matmul");
      else
        launch(MatmulOp<F>{w.memory.template as<uint8_t>(), data_of(x), data_of(out), rows, static_cast<uint32_t>(w.cols),
                           static_cast<uint32_t>(x.cols), static_cast<uint32_t>(out.cols), 0, w.row_bytes, accumulate},
               uint64_t{T} * rows, "matmul");
    });
  }

  // out = W x (gated: silu(W_gate x) * (W_up x) from one weight of 2 x rows rows), x
  // normalized by `gain` first when given: FusedProductWarpOp.
  void fused_product(const Weight& weight_id, const Activation& x, const Weight* gain, float eps, bool gated,
                     Activation& out) {
    const StoredWeight& w = weight(weight_id);
    if (gated && w.rows % 2 != 0) throw std::invalid_argument("matmul_swiglu: the gate and up weight has an odd row count");
    const uint32_t T = rows_of(x), rows = static_cast<uint32_t>(gated ? w.rows / 2 : w.rows);
    const float* g = gain ? weight(*gain).memory.template as<float>() : nullptr;
    if (half_mma_product(w)) {
      const float* input = data_of(x);
      uint32_t stride = static_cast<uint32_t>(x.cols);
      if (g) {  // the norm apart (RmsNormWarpOp's bits), into a scratch copy
        float* normed = normed_staging_.template reserve<float>(*device_, size_t{T} * static_cast<size_t>(w.cols));
        const uint32_t n = static_cast<uint32_t>(w.cols), parts = RmsNormWarpOp::parts_for(n);
        launch_warps(RmsNormWarpOp{input, g, normed, n, eps, parts}, uint64_t{T} * parts, "rms_norm");
        input = normed;
        stride = static_cast<uint32_t>(w.cols);
      }
      half_product(w, input, stride, T, out, rows, gated, false, gated ? "matmul_swiglu" : "matmul");
      set_rows(out, T);
      return;
    }
    if (integer_product(w)) {
      const Q8Rows q = quantize(data_of(x), static_cast<uint32_t>(x.cols), T, static_cast<uint32_t>(w.cols), g, eps);
      device_->note_bytes(static_cast<double>(w.row_bytes) * static_cast<double>(w.rows));
      with_format(static_cast<uint32_t>(w.type), [&]<Format F>() {
        if constexpr (has_int_product<F>) {
          if (gated) int_product<F, true>(w, q, out, rows, T, false, "matmul_swiglu");
          else int_product<F, false>(w, q, out, rows, T, false, "matmul");
        }
      });
      set_rows(out, T);
      return;
    }
    device_->note_bytes(static_cast<double>(w.row_bytes) * static_cast<double>(w.rows));
    const auto run = [&]<Format F, bool Gated>() {
      using Op = FusedProductWarpOp<F, Gated>;
      launch_warp_fn(Op{w.memory.template as<uint8_t>(), data_of(x), data_of(out), g, eps, rows, static_cast<uint32_t>(w.cols),
                        T, static_cast<uint32_t>(x.cols), static_cast<uint32_t>(out.cols), w.row_bytes},
                     Op::warps(rows, T), Gated ? "matmul_swiglu" : "matmul_norm");
    };
    with_format(static_cast<uint32_t>(w.type), [&]<Format F>() {
      if (gated) run.template operator()<F, true>();
      else run.template operator()<F, false>();
    });
    set_rows(out, T);
  }

  // Whether `w`'s products run on the tensor cores in 16-bit floats (Fast kernels, F16 or
  // BF16 weights, a GPU with mma.sync: half_mma_ops.h).
  bool half_mma_product(const StoredWeight& w) const {
    return kernels_ == CudaKernels::Fast && (w.type == TensorType::F16 || w.type == TensorType::BF16) &&
           device_->has_mma();
  }
  // out (+)= W x (gated: silu(W_gate x) * (W_up x), W the gate's `rows` rows then the up
  // projection's) on the tensor cores: HalfMmaWarpOp's parts, then HalfCombineOp, in
  // chunks of tokens whose partial sums fit 64 MiB, at least 8 tokens a chunk (a token's
  // sums do not depend on its chunk).
  void half_product(const StoredWeight& w, const float* x, uint32_t x_stride, uint32_t T, const Activation& out,
                    uint32_t rows, bool gated, bool accumulate, const char* name) {
    const uint32_t cols = static_cast<uint32_t>(w.cols), matrices = gated ? 2 : 1;
    const uint32_t n_parts = HalfMmaWarpOp<Format::F16>::parts(cols);
    const uint64_t per_token = uint64_t{n_parts} * rows * matrices;
    constexpr uint64_t kBudget = (uint64_t{64} << 20) / sizeof(float);
    const uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(
        std::max<uint64_t>(8, kBudget / per_token / 8 * 8), (uint64_t{T} + 7) / 8 * 8));
    float* partials = half_partials_.template reserve<float>(*device_, static_cast<size_t>(chunk * per_token));
    const uint32_t out_stride = static_cast<uint32_t>(out.cols);
    for (uint32_t t0 = 0; t0 < T; t0 += chunk) {
      const uint32_t n = std::min(chunk, T - t0);
      device_->note_bytes(static_cast<double>(w.row_bytes) * static_cast<double>(w.rows));
      const auto run = [&]<Format F>() {
        const HalfMmaWarpOp<F> op{w.memory.template as<uint8_t>(), x + uint64_t{t0} * x_stride, partials, rows, cols,
                                  n, x_stride, matrices, w.row_bytes};
        if (n > HalfMmaWarpOp<F>::kTokens) {  // the weights staged once per 64 tokens; the same bits
          const HalfMmaBlockOp<F> wide{op};
          launch_block_fn(wide, wide.blocks(), wide.warps(), HalfMmaBlockOp<F>::kSharedBytes, name);
        } else {
          launch_warp_fn(op, HalfMmaWarpOp<F>::warps(rows, cols, n), name);
        }
      };
      if (w.type == TensorType::BF16) run.template operator()<Format::BF16>();
      else run.template operator()<Format::F16>();
      launch(HalfCombineOp{partials, data_of(out) + uint64_t{t0} * out_stride, rows, n, n_parts, out_stride, gated, accumulate},
             uint64_t{n} * rows, "matmul_combine");
    }
  }
  // Whether `w`'s products are integer ones (Fast kernels, int_ops.h's formats).
  bool integer_product(const StoredWeight& w) const {
    return kernels_ == CudaKernels::Fast && has_int_product_for(static_cast<uint32_t>(w.type)) && w.cols % kQ8Block == 0;
  }
  // The integer product of `w` with the rounded rows `q`: steps of up to 8 tokens a warp
  // per row and dot4 (IntMatmulWarpOp; one-token steps its one-token tile), wider ones on the tensor cores where the device
  // has them (IntMmaBlockOp: blocks of 32 rows by 64 tokens, or parts of their lane
  // sums); the same bits either way.
  template <Format F, bool Gated>
  void int_product(const StoredWeight& w, const Q8Rows& q, const Activation& out, uint32_t rows, uint32_t T,
                   bool accumulate, const char* name) {
    const uint8_t* bytes = w.memory.template as<uint8_t>();
    const uint32_t out_stride = static_cast<uint32_t>(out.cols);
    if (T > IntMatmulWarpOp<F, Gated>::kTile && device_->has_mma()) {
      using Op = IntMmaBlockOp<F, Gated>;
      Op op{bytes, q, data_of(out), rows, T, out_stride, w.row_bytes, accumulate, wide_token_warps_};
      // Few blocks (short steps, few rows): the lane sums' tree split over up to 8 blocks a
      // tile, its parts added by IntPartsCombineOp: the same bits, more blocks in flight.
      constexpr uint64_t kEnoughBlocks = 512;
      while (op.blocks() < kEnoughBlocks && op.parts < 8) op.parts *= 2;
      if (op.parts > 1)
        op.partials = int_partials_.template reserve<float>(*device_, size_t{op.parts} * (Gated ? 2 : 1) * T * rows);
      launch_block_fn(op, op.blocks(), op.warps(), Op::kSharedBytes, name);
      if (op.parts > 1)
        launch(IntPartsCombineOp{op.partials, data_of(out), rows, T, op.parts, out_stride, Gated, accumulate},
               uint64_t{T} * rows, "matmul_combine");
    } else if (T == 1) {
      using Op = IntMatmulWarpOp<F, Gated, 1>;
      launch_warps(Op{bytes, q, data_of(out), rows, T, out_stride, w.row_bytes, accumulate}, Op::warps(rows, T), name);
    } else {
      using Op = IntMatmulWarpOp<F, Gated>;
      launch_warps(Op{bytes, q, data_of(out), rows, T, out_stride, w.row_bytes, accumulate}, Op::warps(rows, T), name);
    }
  }
  // Rows [0, T) of x (row t at x + t * x_stride, `cols` values; normalized by `gain`
  // first when given) rounded to 8 bits per block (QuantizeRowsOp), in a buffer the
  // step's products share: each product rounds its input just before it runs.
  Q8Rows quantize(const float* x, uint32_t x_stride, uint32_t T, uint32_t cols, const float* gain, float eps) {
    const uint64_t values = uint64_t{T} * cols, blocks = values / kQ8Block;
    uint8_t* base = q8_staging_.template reserve<uint8_t>(*device_, static_cast<size_t>(values + 8 * blocks));
    const Q8Rows q{reinterpret_cast<int8_t*>(base), reinterpret_cast<float*>(base + values),
                   reinterpret_cast<float*>(base + values + 4 * blocks), cols};
    launch_warp_fn(QuantizeRowsOp{x, x_stride, gain, eps, q}, QuantizeRowsOp::warps(T, cols), gain ? "quantize_norm" : "quantize");
    return q;
  }
  static std::string kernels_description(CudaKernels kernels, bool fuse) {
    switch (kernels) {
      case CudaKernels::Fast: return fuse ? "warp kernels, integer products, fused" : "warp kernels, integer products";
      case CudaKernels::Warp:
        return std::string(fuse ? "warp kernels, fused" : "warp kernels") + ", float products (FAFO_CUDA_KERNELS=warp)";
      case CudaKernels::Plain: break;
    }
    return "plain kernels (FAFO_CUDA_KERNELS=plain)";
  }

  // The step's (cos, sin) table for `p` (rope_tables.h).
  const float* rope_table(const RopeParams& p) { return rope_tables_.get(*device_, p, batch(), steps_); }

  const StepBatch& batch() const {
    if (!batch_) throw std::logic_error("a kernel was issued outside begin_step/finish_step");
    return *batch_;
  }
  const StoredWeight& weight(const Weight& w) const { return weights_.at(static_cast<size_t>(w.id)); }
  uint32_t rows_of(const Activation& a) const {
    auto it = gathered_rows_.find(a.id);
    return it != gathered_rows_.end() ? it->second : static_cast<uint32_t>(batch().size());
  }
  void set_rows(const Activation& a, uint32_t rows) {
    if (rows == static_cast<uint32_t>(batch().size())) gathered_rows_.erase(a.id);
    else gathered_rows_[a.id] = rows;
  }

  std::unique_ptr<Device> device_;
  std::string name_, describe_;
  CudaKernels kernels_ = CudaKernels::Fast;
  bool profiling_ = false;
  KernelProfile profile_;
  bool fuse_ = true;  // fused products (warp kernels)
  bool graphs_ = false;
  uint32_t wide_token_warps_ = 4;  // IntMmaBlockOp's token warps a block (FAFO_CUDA_WIDE_TOKENS / 16)
  StepGraphs<typename Device::Graph> step_graphs_;
  std::vector<StoredWeight> weights_;
  std::vector<StoredActivation> activations_;
  int64_t max_step_rows_ = 0;
  std::vector<OpsKvCache<Device>*> kvs_;  // the caches of the step begun last, one per part
  std::vector<int64_t> order_at_;         // where each part's logical order starts in order_ (-1: identity)
  std::vector<int64_t> region_at_;        // where each part's region entries start in region_positions_
  const StepBatch* batch_ = nullptr;
  std::unordered_map<int32_t, uint32_t> gathered_rows_;
  Staging<Device> token_staging_, mask_staging_, compressed_staging_, order_staging_, position_staging_, region_staging_,
      gather_staging_, scatter_rows_staging_, scatter_weights_staging_, argmax_staging_, argmax_parts_staging_,
      attention_scratch_, split_partials_, q8_staging_, top_k_staging_, half_partials_, int_partials_, normed_staging_;
  const int32_t* tokens_ = nullptr;
  const uint64_t* mask_ = nullptr;
  const uint8_t* compressed_ = nullptr;
  const int32_t* order_ = nullptr;
  const int32_t* positions_ = nullptr;         // each row's position
  const int32_t* region_positions_ = nullptr;  // each part's region entries, one after another
  uint32_t mask_words_ = 0;
  RopeTables<Device> rope_tables_;
  uint64_t steps_ = 0;
  int64_t argmax_n_ = 0;
  const uint32_t* top_k_out_ = nullptr;  // ids, values, NaN flags of the rows top_k_rows ranked
  int64_t top_k_n_ = 0;
  int32_t top_k_k_ = 0;
};

}  // namespace fafo::cuda
