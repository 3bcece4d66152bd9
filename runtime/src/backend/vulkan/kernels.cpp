#include "backend/vulkan/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>
#include <stdexcept>
#include <string>

#include "backend/vulkan/buffer.h"
#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/embedded_shaders.h"
#include "backend/vulkan/pipeline.h"
#include "fafo/progress.h"
#include "fafo/tensor_type.h"

namespace fafo::vulkan {

namespace {

// Push constants, laid out as the shaders declare them.
struct RmsNormPush {
  uint32_t n;
  uint32_t rows;
  float eps;
};
struct MatmulPush {
  uint32_t T;
  uint32_t rows;
  uint32_t cols;
};

struct RopePush {
  uint32_t rows, n_heads, head_dim, n_pairs, stride, neox;
};
struct RopeStorePush {
  uint32_t rows, n_head, n_head_kv, head_dim, n_pairs, stride, k_offset, v_offset, neox, ring;
};
struct ElementwisePush {
  uint32_t n, cols, op;
  float value;  // SCALE's factor, SOFTCAP's cap
};
struct CombinePush {
  uint32_t T, n_head, head_dim, n_parts, out_stride, q8_stride, has_sinks;
};
struct AttentionPush {
  uint32_t T, n_head, n_head_kv, head_dim, kv_dim, q_stride, region, dense, use_order, n_parts, mask_words,
      flags_offset, mask_offset, order_offset;
  float scale, softcap;
  uint32_t window, positions_offset, region_offset;
  uint32_t tile_rows;  // the grouped variant's rows per workgroup
  uint32_t ring;       // > 0: a ring layer's slots
};
struct KvPermutePush {
  uint32_t n_pairs, words, mode, ring;
};
struct KvStorePush {
  uint32_t rows, k_width, v_width, ring;
};
struct LatentExpandPush {
  uint32_t T, rank, words, n_head_kv, head_dim, n_pairs, neox, use_order, order_offset;
};
struct TopKPush {
  uint32_t rows, n, k;
};
struct ScatterAddPush {
  uint32_t n, cols, offset;
};
struct ArgmaxPush {
  uint32_t rows, n;
};
struct QuantizePush {
  uint32_t T, cols, x_stride, out_stride;
  float eps;
};
enum ElementwiseOp : uint32_t { kAdd = 0, kBias = 1, kSwiglu = 2, kGeglu = 3, kScale = 4, kSoftcap = 5, kSwigluOai = 6 };

// Workgroups for a grid-stride loop over n items, wg_size per workgroup.
uint32_t groups_for(uint64_t n, uint32_t wg_size, const Context& context) {
  const uint64_t groups = (n + wg_size - 1) / wg_size;
  return static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(groups, context.properties().limits.maxComputeWorkGroupCount[0])));
}

void require_size(const Buffer& b, uint64_t floats, const char* what, const char* kernel) {
  const uint64_t bytes = floats * sizeof(float);
  if (b.size() < bytes)
    throw std::invalid_argument(std::string(kernel) + ": buffer " + what + " holds " + std::to_string(b.size()) +
                                " bytes, needs " + std::to_string(bytes));
}

}  // namespace

namespace {

// Widens every half bit pattern through 16-bit storage on the device and compares with
// the exact conversion: the same bits for every pattern a cache can hold (a device that
// flushes fp16 subnormals or changes quiet NaN payloads fails).
bool probe_half_storage(const Context& context, ProgressTask& progress) {
  constexpr uint32_t n = 65536;
  std::vector<uint16_t> halves(n);
  for (uint32_t i = 0; i < n; ++i) halves[i] = static_cast<uint16_t>(i);
  Buffer src(context, n * sizeof(uint16_t)), dst(context, n * sizeof(float));
  src.upload(halves.data(), n * sizeof(uint16_t));
  const ComputePipeline probe(context, shaders::probe_half_storage, 2, sizeof(uint32_t));
  progress.advance();
  CommandSequence seq(context);
  seq.dispatch(probe, {&src, &dst}, n, groups_for(n, 64, context));
  seq.submit_and_wait();
  std::vector<float> widened(n);
  dst.download(widened.data(), n * sizeof(float));
  for (uint32_t i = 0; i < n; ++i) {
    const float want = fp16_to_fp32(static_cast<uint16_t>(i));
    // A signaling NaN may come back quieted (lavapipe does): fafo never stores one in
    // a cache (every conversion to fp16 quiets NaNs), so it only has to stay a NaN.
    const bool signaling_nan = (i & 0x7c00u) == 0x7c00u && (i & 0x03ffu) != 0 && (i & 0x0200u) == 0;
    if (signaling_nan ? !std::isnan(widened[i]) : std::memcmp(&want, &widened[i], sizeof(float)) != 0) return false;
  }
  return true;
}

}  // namespace

Kernels::Kernels(const Context& context)
    : context_(context), cpu_device_(context.properties().deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) {
  // 20 kernels and 4 attention variants (6 on GPUs: the grouped ones too); with 16-bit
  // storage also the probe's and, where it passes, 2 more attention variants (3 on GPUs;
  // a test checks that the count reaches the total).
  const bool storage16 = context.features().storage_16bit;
  const uint32_t attention_variants = cpu_device_ ? 2 : 3;
  ProgressTask progress("creating Vulkan pipelines",
                        21 + 2 * attention_variants + (storage16 ? 1 + attention_variants : 0));
  auto make = [&](const EmbeddedShader& shader, uint32_t n_buffers, uint32_t push_constant_bytes) {
    auto pipeline = std::make_unique<ComputePipeline>(context, shader, n_buffers, push_constant_bytes);
    progress.advance();
    return pipeline;
  };
  rms_norm_ = make(shaders::rms_norm, 3, sizeof(RmsNormPush));
  matmul_f32_t1_ = make(shaders::matmul_f32_t1, 3, sizeof(MatmulPush));
  matmul_f32_t4_ = make(shaders::matmul_f32_t4, 3, sizeof(MatmulPush));
  rope_ = make(shaders::rope, 2, sizeof(RopePush));
  elementwise_ = make(shaders::elementwise, 3, sizeof(ElementwisePush));
  quantize_ = make(shaders::quantize, 2, sizeof(QuantizePush));
  quantize_norm_ = make(shaders::quantize_norm, 3, sizeof(QuantizePush));
  kv_store_ = make(shaders::kv_store, 5, sizeof(KvStorePush));
  kv_store_f16_ = make(shaders::kv_store_f16, 5, sizeof(KvStorePush));
  latent_keys_[0] = make(shaders::latent_expand_keys, 6, sizeof(LatentExpandPush));
  latent_keys_[1] = make(shaders::latent_expand_keys_kv_f16, 6, sizeof(LatentExpandPush));
  latent_values_[0] = make(shaders::latent_expand_values, 4, sizeof(LatentExpandPush));
  latent_values_[1] = make(shaders::latent_expand_values_kv_f16, 4, sizeof(LatentExpandPush));
  rope_store_ = make(shaders::rope_store, 5, sizeof(RopeStorePush));
  rope_store_f16_ = make(shaders::rope_store_kv_f16, 5, sizeof(RopeStorePush));
  attention_combine_ = make(shaders::attention_combine, 4, sizeof(CombinePush));
  attention_combine_q8_ = make(shaders::attention_combine_q8, 5, sizeof(CombinePush));
  kv_permute_ = make(shaders::kv_permute, 2, sizeof(KvPermutePush));
  argmax_ = make(shaders::argmax, 2, sizeof(ArgmaxPush));
  scatter_add_ = make(shaders::scatter_add, 3, sizeof(ScatterAddPush));
  top_k_ = make(shaders::top_k, 2, sizeof(TopKPush));
  half_storage_exact_ = storage16 && probe_half_storage(context, progress);
  if (storage16 && !half_storage_exact_) progress.set_total(21 + 2 * attention_variants + 1);
  auto attention = [&](const EmbeddedShader& shader) { return make(shader, 5, sizeof(AttentionPush)); };
  attention_[0].f32 = attention(shaders::attention);
  attention_[0].f16_words = attention(shaders::attention_kv_f16);
  attention_[1].f32 = attention(shaders::attention_serial);
  attention_[1].f16_words = attention(shaders::attention_serial_kv_f16);
  if (half_storage_exact_) {
    attention_[0].f16_storage16 = attention(shaders::attention_kv_f16_storage16);
    attention_[1].f16_storage16 = attention(shaders::attention_serial_kv_f16_storage16);
  }
  if (!cpu_device_) {
    attention_[2].f32 = attention(shaders::attention_grouped);
    attention_[2].f16_words = attention(shaders::attention_grouped_kv_f16);
    if (half_storage_exact_) attention_[2].f16_storage16 = attention(shaders::attention_grouped_kv_f16_storage16);
  }
}

void Kernels::make_grouped_attention() const {
  if (attention_[2].f32) return;
  auto attention = [&](const EmbeddedShader& shader) {
    return std::make_unique<ComputePipeline>(context_, shader, 5, sizeof(AttentionPush));
  };
  attention_[2].f32 = attention(shaders::attention_grouped);
  attention_[2].f16_words = attention(shaders::attention_grouped_kv_f16);
  if (half_storage_exact_) attention_[2].f16_storage16 = attention(shaders::attention_grouped_kv_f16_storage16);
}

Kernels::~Kernels() = default;

const ComputePipeline& Kernels::block_kernel(KvBlocks blocks, int kind) const {
  if (blocks == KvBlocks::None) throw std::logic_error("block_kernel: not a block format");
  const bool q8 = blocks == KvBlocks::Q8_0;
  std::unique_ptr<ComputePipeline>& slot = block_kernels_[q8 ? 0 : 1][kind];
  if (slot) return *slot;
  const EmbeddedShader* shader = nullptr;
  uint32_t buffers = 5, push = sizeof(AttentionPush);
  switch (kind) {
    case kBlockStore: shader = q8 ? &shaders::kv_store_q8_0 : &shaders::kv_store_q4_0, push = sizeof(KvStorePush); break;
    case kBlockRopeStore:
      shader = q8 ? &shaders::rope_store_kv_q8_0 : &shaders::rope_store_kv_q4_0, push = sizeof(RopeStorePush);
      break;
    case kBlockAttention: shader = q8 ? &shaders::attention_kv_q8_0 : &shaders::attention_kv_q4_0; break;
    case kBlockAttention + 1: shader = q8 ? &shaders::attention_serial_kv_q8_0 : &shaders::attention_serial_kv_q4_0; break;
    default: shader = q8 ? &shaders::attention_grouped_kv_q8_0 : &shaders::attention_grouped_kv_q4_0; break;
  }
  slot = std::make_unique<ComputePipeline>(context_, *shader, buffers, push);
  return *slot;
}


const ComputePipeline& Kernels::attention_pipeline(const AttentionArgs& a) const {
  const AttentionArgs::Mapping mapping = attention_mapping(a);
  const int index = mapping == AttentionArgs::Mapping::Serial ? 1 : mapping == AttentionArgs::Mapping::Grouped ? 2 : 0;
  if (a.kv_blocks != KvBlocks::None) return block_kernel(a.kv_blocks, kBlockAttention + index);
  if (mapping == AttentionArgs::Mapping::Grouped) make_grouped_attention();
  const AttentionPipelines& v = attention_[index];
  if (!a.kv_f16) return *v.f32;
  switch (a.half_read) {
    case AttentionArgs::HalfRead::Words: return *v.f16_words;
    case AttentionArgs::HalfRead::Storage16:
      if (!v.f16_storage16)
        throw std::invalid_argument("attention: 16-bit storage reads of the fp16 cache are not available on " +
                                    context_.device_name() + " (not enabled, or halves not widened exactly)");
      return *v.f16_storage16;
    case AttentionArgs::HalfRead::Auto: break;
  }
  return v.f16_storage16 ? *v.f16_storage16 : *v.f16_words;
}

bool Kernels::grouped_fits(const AttentionArgs& a) {
  return a.head_dim <= kMaxGroupedHeadDim && a.n_head / a.n_head_kv <= kMaxGroupedPairs;
}

uint32_t Kernels::grouped_tile_rows(const AttentionArgs& a) { return kMaxGroupedPairs / (a.n_head / a.n_head_kv); }

Kernels::AttentionArgs::Mapping Kernels::attention_mapping(const AttentionArgs& a) const {
  using Mapping = AttentionArgs::Mapping;
  const uint32_t max_x = context_.properties().limits.maxComputeWorkGroupCount[0];
  Mapping m = a.mapping != Mapping::Auto ? a.mapping : attention_mapping_;
  if (m == Mapping::Auto) m = cpu_device_ ? Mapping::Serial : a.T > 1 ? Mapping::Grouped : Mapping::Workgroup;
  if (m == Mapping::Grouped && !grouped_fits(a)) m = cpu_device_ ? Mapping::Serial : Mapping::Workgroup;
  // A step too large for one row of serial workgroups takes another variant (same bits).
  if (m == Mapping::Serial && a.mapping != Mapping::Serial && serial_groups(a) > max_x) m = Mapping::Workgroup;
  return m;
}

uint64_t Kernels::serial_groups(const AttentionArgs& a) {
  return (uint64_t{a.n_parts} * a.n_head * a.T + kSerialLanes - 1) / kSerialLanes;
}

void Kernels::rms_norm(CommandSequence& seq, const Buffer& x, const Buffer& gain, const Buffer& out, uint32_t rows,
                       uint32_t n, float eps) const {
  if (rows == 0 || n == 0) return;
  require_size(x, uint64_t{rows} * n, "x", "rms_norm");
  require_size(gain, n, "gain", "rms_norm");
  require_size(out, uint64_t{rows} * n, "out", "rms_norm");
  // The shader strides over rows, so the grid never needs to pass the device limit.
  const uint32_t groups = std::min(rows, context_.properties().limits.maxComputeWorkGroupCount[0]);
  seq.dispatch(*rms_norm_, {&x, &gain, &out}, RmsNormPush{n, rows, eps}, groups);
}

void Kernels::matmul_f32(CommandSequence& seq, const Buffer& x, const Buffer& w, const Buffer& out, uint32_t T,
                         uint32_t rows, uint32_t cols, uint32_t tile) const {
  if (T == 0 || rows == 0 || cols == 0) return;
  if (tile == 0) tile = T == 1 ? 1 : 4;
  if (tile != 1 && tile != 4) throw std::invalid_argument("matmul_f32: tile must be 0, 1 or 4");
  require_size(x, uint64_t{T} * cols, "x", "matmul_f32");
  require_size(w, uint64_t{rows} * cols, "w", "matmul_f32");
  require_size(out, uint64_t{T} * rows, "out", "matmul_f32");
  const uint32_t* max_groups = context_.properties().limits.maxComputeWorkGroupCount;
  const uint32_t tiles = (T + tile - 1) / tile;
  const ComputePipeline& pipeline = tile == 1 ? *matmul_f32_t1_ : *matmul_f32_t4_;
  seq.dispatch(pipeline, {&x, &w, &out}, MatmulPush{T, rows, cols}, std::min(rows, max_groups[0]),
               std::min(tiles, max_groups[1]));
}

void Kernels::rope(CommandSequence& seq, const Buffer& x, const Buffer& table, uint32_t rows, uint32_t n_heads,
                   uint32_t head_dim, uint32_t n_pairs, uint32_t stride, bool neox) const {
  if (rows == 0 || n_heads == 0 || n_pairs == 0) return;
  if (2 * n_pairs > head_dim || uint64_t{n_heads} * head_dim > stride)
    throw std::invalid_argument("rope: " + std::to_string(n_pairs) + " pairs of " + std::to_string(n_heads) +
                                " heads of " + std::to_string(head_dim) + " do not fit rows of " +
                                std::to_string(stride));
  require_size(x, uint64_t{rows} * stride, "x", "rope");
  require_size(table, uint64_t{rows} * n_pairs * 2, "table", "rope");
  seq.dispatch(*rope_, {&x, &table}, RopePush{rows, n_heads, head_dim, n_pairs, stride, neox ? 1u : 0u},
               groups_for(uint64_t{rows} * n_heads * n_pairs, 64, context_));
}

void Kernels::rope_store(CommandSequence& seq, const Buffer& qkv, const Buffer& table, const Buffer& cache_k,
                         const Buffer& cache_v, const Buffer& step_info, const RopeStoreArgs& a) const {
  constexpr const char* kernel = "rope_store";
  if (a.rows == 0) return;
  const uint64_t q_cols = uint64_t{a.n_head} * a.head_dim, kv_dim = uint64_t{a.n_head_kv} * a.head_dim;
  if (a.head_dim == 0 || a.n_head == 0 || a.n_head_kv == 0 || 2 * uint64_t{a.n_pairs} > a.head_dim)
    throw std::invalid_argument(std::string(kernel) + ": " + std::to_string(a.n_pairs) + " pairs do not fit heads of " +
                                std::to_string(a.head_dim));
  if (a.k_offset < q_cols || a.v_offset < a.k_offset + kv_dim || a.v_offset + kv_dim > a.stride)
    throw std::invalid_argument(std::string(kernel) + ": queries [0, " + std::to_string(q_cols) + "), keys from " +
                                std::to_string(a.k_offset) + " and values from " + std::to_string(a.v_offset) +
                                " overlap or do not fit rows of " + std::to_string(a.stride));
  if (a.kv_f16 && kv_dim % 2 != 0) throw std::invalid_argument(std::string(kernel) + ": an fp16 cache needs an even kv_dim");
  const bool blocks = a.kv_blocks != KvBlocks::None;
  if (blocks && kv_dim % 64 != 0)
    throw std::invalid_argument(std::string(kernel) + ": a block cache needs kv_dim a multiple of 64");
  require_size(qkv, (uint64_t{a.first_row} + a.rows) * a.stride, "qkv", kernel);
  require_size(table, (uint64_t{a.first_row} + a.rows) * a.n_pairs * 2, "table", kernel);
  const uint64_t entry_words = blocks ? block_words(a.kv_blocks, kv_dim) : a.kv_f16 ? kv_dim / 2 : kv_dim;
  if (a.ring > 0 && a.rows > a.ring) throw std::invalid_argument(std::string(kernel) + ": more rows than the ring holds");
  const uint64_t cache_words = (a.ring > 0 ? uint64_t{a.ring} : uint64_t{a.first_slot} + a.rows) * entry_words;
  require_size(cache_k, cache_words, "cache_k", kernel);
  require_size(cache_v, cache_words, "cache_v", kernel);
  const uint64_t units = blocks ? kv_dim / 64 : a.kv_f16 ? kv_dim / 2 : kv_dim;
  const uint64_t items = uint64_t{a.rows} * (uint64_t{a.n_head} * a.n_pairs + 2 * units);
  if (items > UINT32_MAX) throw std::invalid_argument(std::string(kernel) + ": too many rows for one dispatch");
  require_size(step_info, 4, "step_info", kernel);
  const RopeStorePush push{a.rows, a.n_head,   a.n_head_kv, a.head_dim,       a.n_pairs,
                           a.stride, a.k_offset, a.v_offset, a.neox ? 1u : 0u, a.ring};
  const ComputePipeline& pipeline = blocks       ? block_kernel(a.kv_blocks, kBlockRopeStore)
                                    : a.kv_f16 ? *rope_store_f16_
                                               : *rope_store_;
  seq.dispatch(pipeline, {&qkv, &table, &cache_k, &cache_v, &step_info}, push, groups_for(items, 64, context_));
}

void Kernels::add(CommandSequence& seq, const Buffer& a, const Buffer& b, const Buffer& out, uint32_t n) const {
  if (n == 0) return;
  require_size(a, n, "a", "add");
  require_size(b, n, "b", "add");
  require_size(out, n, "out", "add");
  seq.dispatch(*elementwise_, {&a, &b, &out}, ElementwisePush{n, n, kAdd, 0.0f}, groups_for(n, 256, context_));
}

void Kernels::add_bias(CommandSequence& seq, const Buffer& a, const Buffer& bias, const Buffer& out, uint32_t n,
                       uint32_t cols) const {
  if (n == 0) return;
  if (cols == 0 || n % cols != 0) throw std::invalid_argument("add_bias: n must be a multiple of cols");
  require_size(a, n, "a", "add_bias");
  require_size(bias, cols, "bias", "add_bias");
  require_size(out, n, "out", "add_bias");
  seq.dispatch(*elementwise_, {&a, &bias, &out}, ElementwisePush{n, cols, kBias, 0.0f}, groups_for(n, 256, context_));
}

void Kernels::swiglu(CommandSequence& seq, const Buffer& gate, const Buffer& up, const Buffer& out, uint32_t n) const {
  if (n == 0) return;
  require_size(gate, n, "gate", "swiglu");
  require_size(up, n, "up", "swiglu");
  require_size(out, n, "out", "swiglu");
  seq.dispatch(*elementwise_, {&gate, &up, &out}, ElementwisePush{n, n, kSwiglu, 0.0f}, groups_for(n, 256, context_));
}

void Kernels::quantize_rows(CommandSequence& seq, const Buffer& x, const Buffer& out, uint32_t T, uint32_t cols,
                            uint32_t x_stride, const Buffer* gain, float eps) const {
  constexpr const char* kernel = "quantize_rows";
  if (cols == 0 || cols % 32 != 0)
    throw std::invalid_argument(std::string(kernel) + ": cols = " + std::to_string(cols) + " is not a positive multiple of 32");
  if (T > 1 && x_stride < cols)
    throw std::invalid_argument(std::string(kernel) + ": x_stride " + std::to_string(x_stride) + " < cols " +
                                std::to_string(cols));
  if (T == 0) return;
  const uint32_t words = q8_row_words(cols);
  require_size(x, uint64_t{T - 1} * x_stride + cols, "x", kernel);
  require_size(out, uint64_t{T} * words, "out", kernel);  // words and floats are both 4 bytes
  const QuantizePush push{T, cols, x_stride, words, eps};
  if (gain) {
    require_size(*gain, cols, "gain", kernel);
    const uint64_t groups = uint64_t{T} * ((cols / 32 + 31) / 32);  // a workgroup per 32 blocks of a row
    seq.dispatch(*quantize_norm_, {&x, &out, gain}, push, groups_for(groups, 1, context_));
    return;
  }
  const uint64_t blocks = uint64_t{T} * (cols / 32);
  seq.dispatch(*quantize_, {&x, &out}, push, groups_for(blocks, 32, context_));
}

void Kernels::swiglu_oai(CommandSequence& seq, const Buffer& gate, const Buffer& up, const Buffer& out,
                         uint32_t n) const {
  if (n == 0) return;
  require_size(gate, n, "gate", "swiglu_oai");
  require_size(up, n, "up", "swiglu_oai");
  require_size(out, n, "out", "swiglu_oai");
  seq.dispatch(*elementwise_, {&gate, &up, &out}, ElementwisePush{n, n, kSwigluOai, 0.0f}, groups_for(n, 256, context_));
}

void Kernels::geglu(CommandSequence& seq, const Buffer& gate, const Buffer& up, const Buffer& out, uint32_t n) const {
  if (n == 0) return;
  require_size(gate, n, "gate", "geglu");
  require_size(up, n, "up", "geglu");
  require_size(out, n, "out", "geglu");
  seq.dispatch(*elementwise_, {&gate, &up, &out}, ElementwisePush{n, n, kGeglu, 0.0f}, groups_for(n, 256, context_));
}

void Kernels::scale(CommandSequence& seq, const Buffer& x, uint32_t n, float factor) const {
  if (n == 0) return;
  require_size(x, n, "x", "scale");
  seq.dispatch(*elementwise_, {&x, &x, &x}, ElementwisePush{n, n, kScale, factor}, groups_for(n, 256, context_));
}

void Kernels::softcap(CommandSequence& seq, const Buffer& x, uint32_t n, float cap) const {
  if (n == 0) return;
  require_size(x, n, "x", "softcap");
  seq.dispatch(*elementwise_, {&x, &x, &x}, ElementwisePush{n, n, kSoftcap, cap}, groups_for(n, 256, context_));
}

void Kernels::scatter_add(CommandSequence& seq, const Buffer& src, const Buffer& dst, const Buffer& args, uint32_t n,
                          uint32_t cols, uint32_t offset) const {
  if (n == 0) return;
  const uint32_t total = n * cols;
  require_size(src, total, "src", "scatter_add");
  require_size(args, offset + 2 * n, "args", "scatter_add");
  seq.dispatch(*scatter_add_, {&src, &dst, &args}, ScatterAddPush{n, cols, offset}, groups_for(total, 256, context_));
}

void Kernels::attention(CommandSequence& seq, const Buffer& q, const Buffer& keys, const Buffer& values,
                        const Buffer& step_info, const Buffer& partials, const Buffer& out,
                        const AttentionArgs& a) const {
  if (a.T == 0) return;
  if (a.n_head == 0 || a.n_head_kv == 0 || a.n_head % a.n_head_kv != 0)
    throw std::invalid_argument("attention: " + std::to_string(a.n_head) + " heads cannot share " +
                                std::to_string(a.n_head_kv) + " KV heads");
  if (a.head_dim == 0 || a.head_dim > kMaxHeadDim)
    throw std::invalid_argument("attention: head size " + std::to_string(a.head_dim) + " is not in 1.." +
                                std::to_string(kMaxHeadDim));
  if (a.part_keys == 0 || a.n_parts == 0 || uint64_t{a.part_keys} * a.n_parts < uint64_t{a.n_past} + a.T)
    throw std::invalid_argument("attention: the parts do not cover the keys");
  require_size(q, (uint64_t{a.first_row} + a.T) * a.q_stride, "q", "attention");
  if (a.kv_f16 && a.kv_dim % 2 != 0) throw std::invalid_argument("attention: an fp16 cache needs an even kv_dim");
  if (a.kv_blocks != KvBlocks::None && a.kv_dim % 64 != 0)
    throw std::invalid_argument("attention: a block cache needs kv_dim a multiple of 64");
  const uint64_t entries = a.ring > 0 ? uint64_t{a.ring} : uint64_t{a.n_past} + a.T;
  if (a.ring > 0 && (a.window == 0 || a.T > a.ring))
    throw std::invalid_argument("attention: a ring is a window layer's, and holds the step's rows");
  const uint64_t cache_words = a.kv_blocks != KvBlocks::None ? entries * block_words(a.kv_blocks, a.kv_dim)
                               : a.kv_f16                    ? entries * a.kv_dim / 2
                                                             : entries * a.kv_dim;
  require_size(keys, cache_words, "keys", "attention");
  require_size(values, cache_words, "values", "attention");
  require_size(partials, (uint64_t{a.first_row} + a.T) * a.n_head * a.n_parts * (a.head_dim + 2), "partials",
               "attention");
  require_size(out, (uint64_t{a.first_row} + a.T) * a.out_stride, "out", "attention");
  if (a.rounded) {
    if (a.head_dim % 32 != 0 || a.out_stride != a.n_head * a.head_dim)
      throw std::invalid_argument("attention: a rounded output needs head_dim a multiple of 32 and out_stride = "
                                  "n_head * head_dim");
    if (a.rounded_stride < q8_row_words(a.n_head * a.head_dim))
      throw std::invalid_argument("attention: rounded_stride is less than a rounded row's words");
    require_size(*a.rounded, (uint64_t{a.first_row} + a.T) * a.rounded_stride, "rounded", "attention");
  }
  if (a.sinks) require_size(*a.sinks, a.n_head, "sinks", "attention");
  const uint32_t* max_groups = context_.properties().limits.maxComputeWorkGroupCount;
  const AttentionArgs::Mapping mapping = attention_mapping(a);
  const bool grouped = mapping == AttentionArgs::Mapping::Grouped;
  const uint32_t tile_rows = grouped ? grouped_tile_rows(a) : 1;
  if (mapping == AttentionArgs::Mapping::Serial
          ? serial_groups(a) > max_groups[0]
          : a.n_parts > max_groups[0] || (grouped ? a.n_head_kv : a.n_head) > max_groups[1] ||
                (a.T + tile_rows - 1) / tile_rows > max_groups[2])
    throw std::invalid_argument("attention: grid over the device limit");
  if (a.flags_offset < 4) throw std::invalid_argument("attention: step_info's header takes 4 words before the flags");
  require_size(step_info, uint64_t{a.flags_offset} + a.T, "step_info", "attention");
  const AttentionPush push{a.T,         a.n_head,       a.n_head_kv,   a.head_dim,     a.kv_dim,
                           a.q_stride,  a.region,       a.dense,       a.use_order,    a.n_parts,
                           a.mask_words, a.flags_offset, a.mask_offset, a.order_offset, a.scale,
                           a.softcap,   a.window,       a.positions_offset, a.region_offset, tile_rows,
                           a.ring};
  if (mapping == AttentionArgs::Mapping::Serial)
    seq.dispatch(attention_pipeline(a), {&q, &keys, &values, &step_info, &partials}, push,
                 static_cast<uint32_t>(serial_groups(a)));
  else if (grouped)
    seq.dispatch(attention_pipeline(a), {&q, &keys, &values, &step_info, &partials}, push, a.n_parts, a.n_head_kv,
                 (a.T + tile_rows - 1) / tile_rows);
  else
    seq.dispatch(attention_pipeline(a), {&q, &keys, &values, &step_info, &partials}, push, a.n_parts, a.n_head, a.T);
  const CombinePush combine{a.T,          a.n_head,         a.head_dim, a.n_parts, a.out_stride, a.rounded_stride,
                            a.sinks ? 1u : 0u};
  const Buffer* sinks = a.sinks ? a.sinks : &partials;  // (bound unread without sinks)
  if (a.rounded)
    seq.dispatch(*attention_combine_q8_, {&partials, &out, &step_info, sinks, a.rounded}, combine, a.n_head, a.T);
  else
    seq.dispatch(*attention_combine_, {&partials, &out, &step_info, sinks}, combine, a.n_head, a.T);
}

void Kernels::kv_permute(CommandSequence& seq, const Buffer& cache, const Buffer& pairs, uint32_t n_pairs,
                         uint32_t words, bool swap, uint32_t ring) const {
  if (n_pairs == 0 || words == 0) return;
  require_size(pairs, uint64_t{n_pairs} * 2, "pairs", "kv_permute");
  seq.dispatch(*kv_permute_, {&cache, &pairs}, KvPermutePush{n_pairs, words, swap ? 0u : 1u, ring},
               groups_for(words, 64, context_));
}

void Kernels::kv_store(CommandSequence& seq, const Buffer& k, const Buffer& v, const Buffer& cache_k,
                       const Buffer& cache_v, const Buffer& step_info, uint32_t rows, uint32_t k_width,
                       uint32_t v_width, uint32_t first_slot, bool f16, uint32_t first_row, KvBlocks blocks,
                       uint32_t ring) const {
  if (rows == 0) return;
  if (k_width == 0 || v_width == 0) throw std::invalid_argument("kv_store: the widths must be positive");
  const bool in_blocks = blocks != KvBlocks::None;
  if (in_blocks && (k_width != v_width || k_width % 64 != 0))
    throw std::invalid_argument("kv_store: a block cache needs equal widths, a multiple of 64");
  const uint64_t k_words = in_blocks ? block_words(blocks, k_width) : f16 ? (uint64_t{k_width} + 1) / 2 : k_width;
  const uint64_t v_words = in_blocks ? block_words(blocks, v_width) : f16 ? (uint64_t{v_width} + 1) / 2 : v_width;
  require_size(k, (uint64_t{first_row} + rows) * k_width, "k", "kv_store");
  require_size(v, (uint64_t{first_row} + rows) * v_width, "v", "kv_store");
  if (ring > 0 && rows > ring) throw std::invalid_argument("kv_store: more rows than the ring holds");
  const uint64_t entries = ring > 0 ? uint64_t{ring} : uint64_t{first_slot} + rows;
  require_size(cache_k, entries * k_words, "cache_k", "kv_store");
  require_size(cache_v, entries * v_words, "cache_v", "kv_store");
  require_size(step_info, 4, "step_info", "kv_store");
  // One invocation per value, word, or pair of blocks.
  const uint64_t items = in_blocks ? uint64_t{rows} * (k_width / 64) : uint64_t{rows} * std::max(k_words, v_words);
  const ComputePipeline& pipeline = in_blocks ? block_kernel(blocks, kBlockStore) : f16 ? *kv_store_f16_ : *kv_store_;
  seq.dispatch(pipeline, {&k, &v, &cache_k, &cache_v, &step_info}, KvStorePush{rows, k_width, v_width, ring},
               groups_for(items, 64, context_));
}

void Kernels::latent_expand(CommandSequence& seq, const Buffer& latent, const Buffer& up, const Buffer& step_info,
                            const Buffer* positions, const Buffer* rows, const Buffer& recovered,
                            const LatentExpandArgs& a) const {
  constexpr const char* kernel = "latent_expand";
  const bool keys = positions != nullptr;
  if (keys != (rows != nullptr)) throw std::invalid_argument(std::string(kernel) + ": both RoPE tables or neither");
  if (!keys && a.n_pairs != 0) throw std::invalid_argument(std::string(kernel) + ": values are not rotated");
  if (a.rank == 0 || a.n_head_kv == 0 || a.head_dim == 0 || 2 * uint64_t{a.n_pairs} > a.head_dim)
    throw std::invalid_argument(std::string(kernel) + ": rank " + std::to_string(a.rank) + ", " +
                                std::to_string(a.n_head_kv) + " heads of " + std::to_string(a.head_dim) + " and " +
                                std::to_string(a.n_pairs) + " rotated pairs do not make a recovery");
  if (a.words < (a.kv_f16 ? (uint64_t{a.rank} + 1) / 2 : a.rank))
    throw std::invalid_argument(std::string(kernel) + ": " + std::to_string(a.words) + " words cannot hold " +
                                std::to_string(a.rank) + " latent values");
  if (uint64_t{a.n_past} + a.T > a.capacity) throw std::invalid_argument(std::string(kernel) + ": slots past the cache");
  const uint64_t kv_dim = uint64_t{a.n_head_kv} * a.head_dim;
  const uint64_t per_entry = uint64_t{a.n_head_kv} * (a.head_dim - a.n_pairs);
  if (uint64_t{a.capacity} * per_entry > UINT32_MAX || uint64_t{a.capacity} * kv_dim > UINT32_MAX)
    throw std::invalid_argument(std::string(kernel) + ": too many entries for one dispatch");
  require_size(latent, uint64_t{a.capacity} * a.words, "latent", kernel);
  require_size(up, kv_dim * a.rank, "up", kernel);
  require_size(recovered, uint64_t{a.capacity} * kv_dim, "recovered", kernel);
  require_size(step_info, a.use_order != 0 ? std::max<uint64_t>(4, uint64_t{a.order_offset} + a.n_past) : 4, "step_info",
               kernel);
  const LatentExpandPush push{a.T, a.rank, a.words, a.n_head_kv, a.head_dim, a.n_pairs, a.neox ? 1u : 0u,
                              a.use_order, a.order_offset};
  const uint32_t groups =
      std::min(groups_for(uint64_t{a.capacity} * per_entry, 64, context_), kMaxLatentExpandGroups);
  const int variant = a.kv_f16 ? 1 : 0;
  if (keys) {
    require_size(*positions, uint64_t{a.capacity} * a.n_pairs * 2, "positions", kernel);
    require_size(*rows, (uint64_t{a.first_row} + a.T) * a.n_pairs * 2, "rows", kernel);
    seq.dispatch(*latent_keys_[variant], {&latent, &up, &step_info, &recovered, positions, rows}, push, groups);
  } else {
    seq.dispatch(*latent_values_[variant], {&latent, &up, &step_info, &recovered}, push, groups);
  }
}

void Kernels::argmax(CommandSequence& seq, const Buffer& x, const Buffer& ids, uint32_t rows, uint32_t n) const {
  if (rows == 0) return;
  require_size(x, uint64_t{rows} * n, "x", "argmax");
  require_size(ids, rows, "ids", "argmax");
  seq.dispatch(*argmax_, {&x, &ids}, ArgmaxPush{rows, n},
               std::min(rows, context_.properties().limits.maxComputeWorkGroupCount[0]));
}

void Kernels::top_k(CommandSequence& seq, const Buffer& x, const Buffer& result, uint32_t rows, uint32_t n,
                    uint32_t k) const {
  if (rows == 0) return;
  if (k < 1 || k > kMaxTopK || k > n)
    throw std::invalid_argument("top_k: k = " + std::to_string(k) + " must be in [1, min(n = " + std::to_string(n) +
                                ", " + std::to_string(kMaxTopK) + ")]");
  require_size(x, uint64_t{rows} * n, "x", "top_k");
  require_size(result, top_k_words(rows, k), "result", "top_k");
  seq.dispatch(*top_k_, {&x, &result}, TopKPush{rows, n, k},
               std::min(rows, context_.properties().limits.maxComputeWorkGroupCount[0]));
}

}  // namespace fafo::vulkan
