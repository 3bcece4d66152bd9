// The compute kernels on activations and the KV cache (weight-format kernels are in
// weight_kernels.h), each recorded into a CommandSequence. The pipelines are created
// once, with the Kernels object (one ProgressTask, "creating Vulkan pipelines").
#pragma once

#include <cstdint>
#include <memory>

namespace fafo::vulkan {

class Context;
class Buffer;
class CommandSequence;
class ComputePipeline;

class Kernels {
 public:
  explicit Kernels(const Context& context);
  ~Kernels();
  // The block formats of a KV cache (--cache-type q8_0 / q4_0; shaders/kv_blocks.glsl),
  // for the kernels that store and read it. Their pipelines are created at first use.
  enum class KvBlocks : uint32_t { None, Q8_0, Q4_0 };
  // 32-bit words of an entry of `width` values (a multiple of 64) in a block format.
  static uint64_t block_words(KvBlocks b, uint64_t width) { return width / 64 * (b == KvBlocks::Q8_0 ? 17 : 9); }
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;

  // out[r][i] = x[r][i] / sqrt(mean(x[r]^2) + eps) * gain[i]; x and out are rows x n.
  void rms_norm(CommandSequence& seq, const Buffer& x, const Buffer& gain, const Buffer& out, uint32_t rows,
                uint32_t n, float eps) const;

  // out[T x rows] = x[T x cols] * W^T with W rows x cols (F32). tile picks the shader
  // variant: 1 (mat-vec) or 4 tokens per workgroup; 0 picks by T.
  void matmul_f32(CommandSequence& seq, const Buffer& x, const Buffer& w, const Buffer& out, uint32_t T,
                  uint32_t rows, uint32_t cols, uint32_t tile = 0) const;

  // Rotates n_heads heads of head_dim in each of `rows` rows of x (row stride
  // `stride` floats) by the angles in `table` (cos, sin per row and pair; n_pairs
  // pairs per head).
  void rope(CommandSequence& seq, const Buffer& x, const Buffer& table, uint32_t rows, uint32_t n_heads,
            uint32_t head_dim, uint32_t n_pairs, uint32_t stride, bool neox) const;

  // The kernels that read n_past (attention, the stores) read it from the step's
  // header, step_info[0] (StepEncoder writes it), not from push constants, so that a
  // recorded step replays at any n_past. In a joined step (several sequences) each part
  // has its own step_info, and these kernels run once per part: the header's word 3 is
  // the part's first row of the step's activations (0 for a step of one sequence), and
  // the dispatch's rows are rows first_row.. of q, qkv, k, v, the RoPE table, the
  // partials and out. first_slot, n_past, part_keys and first_row in the arguments
  // below are what the header holds, for the size checks (the caller keeps the header
  // within them).
  //
  // RoPE and the KV store in one dispatch (shaders/rope_store.comp): each of `rows` rows
  // of qkv (row stride `stride` floats) holds n_head query heads at column 0, n_head_kv
  // key heads at k_offset and as many value heads at v_offset, head_dim each. Rotates
  // the queries in place and writes the rotated keys and the values to slots
  // first_slot.. of cache_k and cache_v (fp32, fp16 with kv_f16, or kv_blocks' blocks):
  // the bits of rope(queries), rope(keys) and kv_store.
  struct RopeStoreArgs {
    uint32_t rows, n_head, n_head_kv, head_dim, n_pairs, stride, k_offset, v_offset, first_slot;
    bool neox = false;
    bool kv_f16 = false;
    KvBlocks kv_blocks = KvBlocks::None;
    uint32_t first_row = 0;
    uint32_t ring = 0;  // > 0: a ring layer (KvCacheShape::ring): row r at slot (n_past + r) mod ring
  };
  void rope_store(CommandSequence& seq, const Buffer& qkv, const Buffer& table, const Buffer& cache_k,
                  const Buffer& cache_v, const Buffer& step_info, const RopeStoreArgs& a) const;

  // out = a + b, out = a + bias (broadcast over rows of `cols`), out = silu(a) * b;
  // n floats. out may be the same buffer as a.
  void add(CommandSequence& seq, const Buffer& a, const Buffer& b, const Buffer& out, uint32_t n) const;
  void add_bias(CommandSequence& seq, const Buffer& a, const Buffer& bias, const Buffer& out, uint32_t n,
                uint32_t cols) const;
  void swiglu(CommandSequence& seq, const Buffer& gate, const Buffer& up, const Buffer& out, uint32_t n) const;

  // The activations' rounding for the integer products (shaders/quantize.comp, the CUDA
  // backend's QuantizeRowsOp bit for bit): row t of x (T rows of cols floats, x_stride
  // apart; cols a multiple of 32) becomes row t of out, q8_row_words(cols) words apart:
  // cols / 4 words of q (four signed bytes), the cols / 32 blocks' scales d, then each
  // block's d times its sum of q. With a gain (cols floats), the rows are normalized
  // first, the bits rms_norm would write. Throws std::invalid_argument for a bad shape or
  // a buffer too small.
  void quantize_rows(CommandSequence& seq, const Buffer& x, const Buffer& out, uint32_t T, uint32_t cols,
                     uint32_t x_stride, const Buffer* gain = nullptr, float eps = 0.0f) const;
  static uint32_t q8_row_words(uint32_t cols) { return cols / 4 + cols / 16; }
  // out = gelu_tanh(gate) * up; x *= factor; x = cap * tanh(x / cap) (Backend::gated's
  // GeluTanh, Backend::map's Scale and Softcap); n floats.
  void geglu(CommandSequence& seq, const Buffer& gate, const Buffer& up, const Buffer& out, uint32_t n) const;
  // out = gpt-oss's clamped SwiGLU of gate and up (GatedActivation::SwigluOai); n floats.
  void swiglu_oai(CommandSequence& seq, const Buffer& gate, const Buffer& up, const Buffer& out, uint32_t n) const;
  void scale(CommandSequence& seq, const Buffer& x, uint32_t n, float factor) const;
  void softcap(CommandSequence& seq, const Buffer& x, uint32_t n, float cap) const;

  // Attention over a step (see shaders/attention.comp for the key order and the
  // step_info layout: the header [n_past, part_keys, parts in use, first row], then the prefix
  // flags at flags_offset, masks and order); the grid and the partials' layout have
  // n_parts parts per (row, head), of which the header's are computed (parts past a
  // row's keys come out empty) and combined into out[row * out_stride + head *
  // head_dim + d].
  struct AttentionArgs {
    uint32_t T, n_past, n_head, n_head_kv, head_dim, kv_dim, q_stride, out_stride;
    uint32_t region, dense, use_order, part_keys, n_parts, mask_words, flags_offset, mask_offset, order_offset;
    float scale;
    float softcap = 0.0f;  // > 0: scores soft-capped (AttentionShape::softcap)
    uint32_t window = 0;   // > 0: a sliding-window layer (AttentionShape::window)
    uint32_t positions_offset = 0, region_offset = 0;  // the rows' positions, the region's entries in step_info
    // > 0: a ring layer (KvCacheShape::ring; a window layer): keys at cache index mod ring,
    // the caches `ring` entries long.
    uint32_t ring = 0;
    bool kv_f16 = false;  // keys and values are an fp16 cache (kv_store); else fp32
    KvBlocks kv_blocks = KvBlocks::None;  // or a cache of these blocks (kv_dim a multiple of 64)
    // How an fp16 cache is read: Auto = through 16-bit storage where the device widens
    // halves exactly (half_storage_exact()), else by unpacking 32-bit words; Words and
    // Storage16 force one (Storage16 throws where it is not exact). Same bits either way.
    enum class HalfRead { Auto, Words, Storage16 } half_read = HalfRead::Auto;
    // How invocations share the work (shaders/attention.comp): Auto = set_attention_mapping's
    // choice, by default Serial on CPU devices, else Grouped for steps of several rows
    // and Workgroup for one; Workgroup = a workgroup per (part, head, row); Serial = one
    // invocation per (part, head, row); Grouped = a workgroup per (part, KV head, tile of
    // rows), reading each key and value once for the tile's rows and the group's heads
    // (head_dim <= kMaxGroupedHeadDim and at most kMaxGroupedPairs heads per KV head;
    // elsewhere Workgroup). Same bits whichever runs.
    enum class Mapping { Auto, Workgroup, Serial, Grouped } mapping = Mapping::Auto;
    uint32_t first_row = 0;
    // Also writes the output rounded to 8 bits for an integer product (shaders/
    // attention_combine.comp QUANT=1: Kernels::quantize_rows's words, row t at word
    // (first_row + t) * rounded_stride); needs head_dim a multiple of 32 and out_stride
    // = n_head * head_dim.
    const Buffer* rounded = nullptr;
    uint32_t rounded_stride = 0;
    // The heads' sinks (AttentionShape::sinks: n_head floats), or none.
    const Buffer* sinks = nullptr;
  };
  // Whether 16-bit storage is enabled and a probe at construction found that the device
  // widens all 65536 half bit patterns exactly (subnormals kept, NaN payloads kept).
  bool half_storage_exact() const { return half_storage_exact_; }
  static constexpr uint32_t kMaxHeadDim = 256;
  static constexpr uint32_t kMaxGroupedHeadDim = 128;  // shaders/attention.comp's STAGE_DIM
  static constexpr uint32_t kMaxGroupedPairs = 8;      // its MAX_PAIRS
  // What Mapping::Auto runs: Auto (the device's default, above), or one mapping for
  // every step (Grouped where it cannot run: Workgroup).
  void set_attention_mapping(AttentionArgs::Mapping mapping) { attention_mapping_ = mapping; }
  // The mapping `a` runs with (Auto resolved).
  AttentionArgs::Mapping attention_mapping(const AttentionArgs& a) const;
  void attention(CommandSequence& seq, const Buffer& q, const Buffer& keys, const Buffer& values,
                 const Buffer& step_info, const Buffer& partials, const Buffer& out, const AttentionArgs& a) const;

  // dst row args[offset + k] += float(args[offset + n + k]) * src row k, for k < n rows
  // of `cols` floats (Backend::scatter_add; the rows and weights' bits in `args`).
  void scatter_add(CommandSequence& seq, const Buffer& src, const Buffer& dst, const Buffer& args, uint32_t n,
                   uint32_t cols, uint32_t offset) const;

  // ids[r] = argmax of row r of x (rows x n): ties to the first index, -1 for a row
  // with a NaN, -2 for a row of only -inf.
  void argmax(CommandSequence& seq, const Buffer& x, const Buffer& ids, uint32_t rows, uint32_t n) const;

  // The k best values of each row of x (rows x n; 1 <= k <= min(n, kMaxTopK)) in the
  // order of fafo/top_k.h, into `result`: per row 1 + 2k words, [status (1: the row
  // holds a NaN)] [k ids] [k value bits].
  static constexpr uint32_t kMaxTopK = 1024;  // fafo::kMaxTopK; shaders/top_k.comp's MAX_K
  static constexpr uint64_t top_k_words(uint32_t rows, uint32_t k) { return uint64_t{rows} * (1u + 2u * uint64_t{k}); }
  void top_k(CommandSequence& seq, const Buffer& x, const Buffer& result, uint32_t rows, uint32_t n, uint32_t k) const;

  // Applies (first, second) slot pairs in order to one cache of `words` 32-bit words per
  // entry (its width for fp32, (width + 1) / 2 for fp16): swap exchanges the two entries,
  // otherwise first is copied over second. Bits are moved unchanged. With ring > 0 (a
  // ring layer) the pairs are cache indices, at slots index mod ring.
  void kv_permute(CommandSequence& seq, const Buffer& cache, const Buffer& pairs, uint32_t n_pairs, uint32_t words,
                  bool swap, uint32_t ring = 0) const;

  // Stores `rows` rows of K (fp32, k_width wide) and V (v_width wide) into slots
  // first_slot.. of the caches: as they are, or (f16) rounded to fp16 to nearest even as
  // fafo::fp32_to_fp16, (width + 1) / 2 words per entry (an odd width's last high half
  // zero), or (blocks) quantized as fafo::quantize_row, block_words(width) words per
  // entry (equal widths, a multiple of 64). With ring > 0 (a ring layer: caches of
  // `ring` entries) row r goes to slot (first_slot + r) mod ring.
  void kv_store(CommandSequence& seq, const Buffer& k, const Buffer& v, const Buffer& cache_k, const Buffer& cache_v,
                const Buffer& step_info, uint32_t rows, uint32_t k_width, uint32_t v_width, uint32_t first_slot,
                bool f16, uint32_t first_row = 0, KvBlocks blocks = KvBlocks::None, uint32_t ring = 0) const;

  // Multi-head latent attention's recovery (shaders/latent_expand.comp): writes the keys
  // (with `positions` and `rows`, the RoPE tables: rotated) or values (tables null,
  // n_pairs 0) up * latent of slots [0, n_past + T) of one layer's latent cache into
  // `recovered` (capacity x n_head_kv * head_dim floats, by slot). `latent` holds
  // capacity entries of `words` words (rank floats, or rank halves with kv_f16);
  // `up` is kv_dim x rank floats; positions holds cos/sin of every position below
  // capacity, rows those of the step's T rows (n_pairs pairs each). Committed entry k
  // is at slot step_info[order_offset + k] with use_order, else slot k. The grid
  // depends on capacity, not on n_past (the step's header holds it).
  struct LatentExpandArgs {
    uint32_t T, n_past, capacity, rank, words, n_head_kv, head_dim, n_pairs, use_order, order_offset;
    bool neox = false;
    bool kv_f16 = false;
    uint32_t first_row = 0;
  };
  void latent_expand(CommandSequence& seq, const Buffer& latent, const Buffer& up, const Buffer& step_info,
                     const Buffer* positions, const Buffer* rows, const Buffer& recovered,
                     const LatentExpandArgs& a) const;
  // The most workgroups one latent_expand dispatch uses (a grid-stride loop covers the rest).
  static constexpr uint32_t kMaxLatentExpandGroups = 1024;

 private:
  const ComputePipeline& attention_pipeline(const AttentionArgs& a) const;
  bool serial_attention(const AttentionArgs& a) const { return attention_mapping(a) == AttentionArgs::Mapping::Serial; }
  static bool grouped_fits(const AttentionArgs& a);
  static uint32_t grouped_tile_rows(const AttentionArgs& a);
  static uint64_t serial_groups(const AttentionArgs& a);
  static constexpr uint32_t kSerialLanes = 8;  // shaders/attention.comp's SERIAL_LANES

  const Context& context_;
  std::unique_ptr<ComputePipeline> rms_norm_;
  std::unique_ptr<ComputePipeline> matmul_f32_t1_;
  std::unique_ptr<ComputePipeline> matmul_f32_t4_;
  std::unique_ptr<ComputePipeline> rope_;
  std::unique_ptr<ComputePipeline> elementwise_;
  std::unique_ptr<ComputePipeline> quantize_, quantize_norm_;
  // Attention's variants by cache reading, [0] workgroup-wide, [1] serial, [2] grouped
  // (created at first use on CPU devices, where Auto never takes it).
  struct AttentionPipelines {
    std::unique_ptr<ComputePipeline> f32, f16_words;
    std::unique_ptr<ComputePipeline> f16_storage16;  // null unless half_storage_exact_
  };
  mutable AttentionPipelines attention_[3];
  // The block caches' kernels by format (Q8_0, Q4_0) and kind (BlockKernel), created at first use.
  enum BlockKernel { kBlockStore, kBlockRopeStore, kBlockAttention };  // then + 0 workgroup, 1 serial, 2 grouped
  mutable std::unique_ptr<ComputePipeline> block_kernels_[2][5];
  const ComputePipeline& block_kernel(KvBlocks blocks, int kind) const;
  AttentionArgs::Mapping attention_mapping_ = AttentionArgs::Mapping::Auto;
  void make_grouped_attention() const;
  bool half_storage_exact_ = false;
  std::unique_ptr<ComputePipeline> kv_store_, kv_store_f16_;
  // latent_expand's variants, [0] fp32 latent cache, [1] fp16.
  std::unique_ptr<ComputePipeline> latent_keys_[2], latent_values_[2];
  std::unique_ptr<ComputePipeline> rope_store_, rope_store_f16_;
  std::unique_ptr<ComputePipeline> attention_combine_, attention_combine_q8_;
  std::unique_ptr<ComputePipeline> kv_permute_;
  std::unique_ptr<ComputePipeline> argmax_;
  std::unique_ptr<ComputePipeline> scatter_add_;
  std::unique_ptr<ComputePipeline> top_k_;
  bool cpu_device_ = false;  // attention's Mapping::Auto picks Serial
};

}  // namespace fafo::vulkan
