// The backend contract, part 1: compute. Memory for weights and activations, and the
// kernels of a Llama-family forward pass. The forward pass is written once against it
// (StepRunner::record_step in runtime/src/model/step_runner.cpp); backends never know which
// decoding strategy or KV compression policy runs. Part 2 is the KV cache each backend
// provides (fafo/kv_cache.h); part 3 is the registry that names and creates backends
// (fafo/backend_registry.h).
//
// What a new backend implements: the pure virtual methods of class Backend below, 25 of
// them (memory: upload_weight, alloc_activation, create_kv_cache; a step: start_step,
// finish_step; the ops: embed, rms_norm, head_norm, matmul, add_bias, rope, attention,
// gated (SwiGLU, GeGLU), map (scale, soft-cap), add, gather_rows, scatter_add, argmax_rows, top_k_rows; reading
// back: read_rows, read_argmax, read_top_k; writing: write_rows; name, description), with the conformance
// table (tests/test_backend_ops.cpp) as the judge; tests/faulty_backend.h is a whole
// backend of just these (and capabilities(), which it forwards). The rest is optional, each with a default: numerics() (exact),
// capabilities() (one sequence a step, no MLA...), prepare_weights, latent_attention
// (MLA models), sync_step (mixture-of-experts models on backends that record), and three optional parts a backend returns where it has them:
// fusions() (ops fused into one kernel, which the model takes where a backend has them
// and replaces by the plain ops where not: run_matmul_norm and its siblings below), profiler()
// (per-kernel device time) and memory() (a memory limit and what is in use).
//
// A step is bracketed by begin_step()/finish_step(): between them the model issues
// kernel calls that a backend may execute at once (CPU) or record into one command
// buffer submitted in finish_step() (GPU backends). Results are read back only by
// read_rows(), read_argmax() and read_top_k() after finish_step().
//
// Numerics: every backend is T-invariant (a row's result is bit-identical whatever the
// step's size and whatever other rows share it), which lossless multi-token decoding
// relies on. numerics() says whether results equal the reference backend bit for bit or
// within a stated tolerance; tests/test_backend_ops.cpp checks both claims.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fafo/device_error.h"
#include "fafo/kv_cache.h"
#include "fafo/step_batch.h"
#include "fafo/tensor_type.h"
#include "fafo/top_k.h"

namespace fafo {

// A weight matrix [rows x cols] (ggml: ne0 = cols, ne1 = rows) or vector (rows = 1)
// in any supported format, resident on the backend.
struct Weight {
  int32_t id = -1;
  TensorType type = TensorType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  explicit operator bool() const { return id >= 0; }
};

// A float32 activation buffer of [rows x cols], row-major, owned by the backend.
// Rows are batch tokens.
struct Activation {
  int32_t id = -1;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Throws std::out_of_range unless `floats` is whole rows of x and at most x.rows of
// them (Backend::write_rows's check).
inline void check_rows_fit(const Activation& x, size_t floats) {
  if (x.cols <= 0 || floats % static_cast<size_t>(x.cols) != 0 || floats / static_cast<size_t>(x.cols) > static_cast<size_t>(x.rows))
    throw std::out_of_range("write_rows: " + std::to_string(floats) + " floats are not whole rows of " +
                            std::to_string(x.cols) + " within the " + std::to_string(x.rows) + " rows of the activation");
}

// The checks every backend's scatter_add makes (its contract above): rows distinct and
// inside a batch of `batch_rows`, one weight per row, src and dst equally wide.
inline void check_scatter_add(const Activation& src, const std::vector<int32_t>& rows, const std::vector<float>& weights,
                              const Activation& dst, int64_t batch_rows) {
  if (weights.size() != rows.size())
    throw std::invalid_argument("scatter_add: " + std::to_string(weights.size()) + " weights for " +
                                std::to_string(rows.size()) + " rows");
  if (src.cols != dst.cols) throw std::invalid_argument("scatter_add: rows of different widths");
  if (src.id == dst.id) throw std::invalid_argument("scatter_add: the source is the destination");
  if (static_cast<int64_t>(rows.size()) > src.rows) throw std::out_of_range("scatter_add: more rows than the source holds");
  std::vector<bool> seen(static_cast<size_t>(std::max<int64_t>(batch_rows, 0)), false);
  for (int32_t r : rows) {
    if (r < 0 || r >= batch_rows || r >= dst.rows) throw std::out_of_range("scatter_add: row outside the batch");
    if (seen[static_cast<size_t>(r)]) throw std::out_of_range("scatter_add: row " + std::to_string(r) + " given twice");
    seen[static_cast<size_t>(r)] = true;
  }
}

// Shape of one layer's attention.
struct AttentionShape {
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  float scale = 0.0f;  // usually 1/sqrt(head_dim)
  float softcap = 0.0f;  // > 0: each scaled score s becomes softcap * tanh(s / softcap) (Gemma 2)
  // > 0: a sliding-window layer (Gemma 2 and 3): a row at position p sees only the keys
  // at positions p - window + 1 .. p of those its view and mask give it (a committed
  // entry's position is its logical index; a batch token's, its StepBatch position).
  int32_t window = 0;
  // Where present (gpt-oss's attn_sinks: F32, one value per query head), each row's
  // softmax over its keys has one more logit, the head's sink, which takes a share of
  // the weight and adds nothing to the output: out = sum_k e^(s_k) v_k / (e^(sink) +
  // sum_k e^(s_k)). Empty: none.
  Weight sinks{};
  // Whether a key at position `key` is inside the window of a row at `row`.
  bool in_window(int32_t row, int32_t key) const { return window <= 0 || row - key < window; }
};

// The gated feed-forward activations (Backend::gated): SwiGLU's SiLU, GeGLU's GELU, and
// gpt-oss's clamped SwiGLU (SwigluOai: out = g * sigmoid(1.702 g) * (u + 1) with g =
// min(gate, 7) and u = clamp(up, -7, 7), as llama.cpp's ggml_swiglu_oai).
enum class GatedActivation : uint8_t { Silu, GeluTanh, SwigluOai };
inline constexpr float kSwigluOaiAlpha = 1.702f, kSwigluOaiLimit = 7.0f;
// The element-wise maps with one parameter (Backend::map).
enum class ElementMap : uint8_t { Scale, Softcap };

// RoPE parameters. Positions come from the StepBatch.
struct RopeParams {
  int32_t n_dims = 0;        // rotated dimensions per head (<= head_dim)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;   // linear position scaling (1/factor)
  bool neox = false;         // rotate (i, i+n_dims/2) pairs instead of (2i, 2i+1)
  std::vector<float> freq_factors;  // optional per-pair divisor (Llama 3.1 "rope_freqs")
  // The rotated dimensions come out times attn_factor (cos and sin times it, as
  // llama.cpp's rope applies LongRoPE's attention factor); the others are left alone.
  float attn_factor = 1.0f;

  // The rotation angle of pair `pair` at `position`: the one formula every backend uses
  // (the CPU backend directly, GPU backends for their per-step cos/sin tables).
  float angle(int32_t position, int32_t pair) const {
    const float p = static_cast<float>(position) * freq_scale;
    float theta = p * std::pow(freq_base, -2.0f * static_cast<float>(pair) / static_cast<float>(n_dims));
    if (!freq_factors.empty()) theta /= freq_factors[static_cast<size_t>(pair)];
    return theta;
  }
};

// How a backend's results relate to the reference backend's.
struct BackendNumerics {
  bool exact = true;  // bit-identical to the reference for every op
  // When not exact: the largest error allowed, |got - ref| <= tolerance * max(1, |ref|).
  // Ids (embed rows, argmax, top-k order) must still match wherever the values do.
  double tolerance = 0.0;
  // Matrix products whose weights are block-quantized, where a backend rounds the
  // activations to 8 bits per block as llama.cpp does: the largest error allowed there
  // (same measure). 0: `tolerance` holds for them too.
  double rounded_matmul_tolerance = 0.0;
  // Matrix products with F16 weights, where a backend rounds the activations to fp16 as
  // llama.cpp does. 0: `tolerance` holds for them too.
  double half_matmul_tolerance = 0.0;
  // Matrix products with BF16 weights, where a backend rounds the activations to bfloat16
  // (the CUDA backend's tensor-core products). 0: `tolerance` holds for them too.
  double bf16_matmul_tolerance = 0.0;

  // The tolerance for an op; `rounded_matmul`: a matrix product with block-quantized
  // weights; `half_matmul`: one with F16 weights; `bf16_matmul`: one with BF16 weights.
  double tolerance_for(bool rounded_matmul, bool half_matmul = false, bool bf16_matmul = false) const {
    if (half_matmul && half_matmul_tolerance > 0.0) return half_matmul_tolerance;
    if (bf16_matmul && bf16_matmul_tolerance > 0.0) return bf16_matmul_tolerance;
    return rounded_matmul && rounded_matmul_tolerance > 0.0 ? rounded_matmul_tolerance : tolerance;
  }
};

// What a backend can do beyond the core ops, asked by the model and the tools.
struct BackendCapabilities {
  // How many sequences one step may compute for (1: no joined steps; Backend::begin_step).
  int32_t max_step_sequences = 1;
  // Whether the backend runs MLA models (a latent KV cache and latent_attention); the
  // model refuses an MLA file before loading anything where it does not.
  bool latent_attention = false;
  // Whether each op has run when its call returns (host backends), so activations may
  // be read with read_rows inside a step (Sequence::set_attention_input_tap).
  bool executes_immediately = false;
  // Whether its KV caches keep sliding-window layers as rings (KvCacheShape::ring:
  // store and attention address a ring layer's entries by cache index); where not, the
  // model asks for caches without rings.
  bool window_rings = false;
  // The most bytes one activation may hold (a device's buffer range: Vulkan's
  // maxStorageBufferRange); Backend::max_activation_rows divides it by a row's.
  uint64_t max_activation_bytes = std::numeric_limits<uint64_t>::max();
  // Whether Backend::matmuls runs its products together rather than one by one (the
  // cpu backend: two or more products of integer formats in one dispatch over the
  // threads); the model then gives each expert of a step of up to 16 tokens activations
  // of its own, to hand a group's products over at once.
  bool batches_matmuls = false;
};

// What the device spent on each kernel over the steps profiled (BackendProfiler),
// timed by the device's own clock.
struct KernelProfile {
  struct Kernel {
    std::string name;     // the shader (or "copy", "fill" for transfers)
    uint64_t calls = 0;   // over all the steps profiled
    double seconds = 0;   // device time over all the steps
    double bytes = 0;     // weight bytes the calls read (matrix products and embeddings; 0 where not counted)
  };
  std::vector<Kernel> kernels;  // in order of first call
  uint64_t steps = 0;           // steps profiled
  uint64_t dispatches = 0;      // compute dispatches over all the steps
  uint64_t barriers = 0;        // pipeline barriers over all the steps
  double step_seconds = 0;      // device time from each step's first command to its last, summed
};

// --- the optional parts ------------------------------------------------------------------

// Ops fused into one kernel where a backend has such kernels (Backend::fusions()). The
// model asks whether to fuse the projections when it loads (fuses_qkv, fuses_gate_up)
// and calls the run_* functions after class Backend for each product, which run the
// plain ops where a backend has no fusions or a method returns false; every fused op
// gives the values of its plain ops, as the conformance table checks.
class BackendFusions {
 public:
  virtual ~BackendFusions() = default;
  // Whether the model may give the attention block's three projections of `type` as one
  // weight (the query projection's q_rows rows, then the key and the value
  // projection's kv_rows rows each, `cols` wide) and use one activation qkv
  // [T x (q_rows + 2 kv_rows)] for their product, their biases (one vector, stacked
  // alike), rope_store and attention.
  virtual bool fuses_qkv(TensorType type, int64_t q_rows, int64_t kv_rows, int64_t cols) const = 0;
  // With fuses_qkv: the values of rope(queries), rope(keys), the step's cache's store(layer,
  // keys, values) and, when the cache asks for rows (KvCache::captured_rows),
  // capture_queries(layer, queries), where queries, keys and values are qkv's
  // n_head * head_dim, kv_dim and kv_dim columns in that order. The keys in qkv may be
  // left unrotated.
  virtual void rope_store(int32_t layer, Activation& qkv, const AttentionShape& shape, const RopeParams& p) = 0;
  // Whether matmul_swiglu takes a gate and an up projection of `type` ([rows x cols]
  // each) as one weight: the up projection's rows after the gate's, uploaded together.
  virtual bool fuses_gate_up(TensorType type, int64_t rows, int64_t cols) const = 0;
  // Each of the following computes its plain ops' values in fewer kernels and returns
  // true, or returns false having done nothing (arguments it does not fuse).
  // The feed-forward gate, out = silu(W_gate x) * (W_up x): matmul(gate, x, out),
  // matmul(up, x, scratch), gated(Silu, out, scratch, out). With fuses_gate_up, `gate` may be
  // the two projections as one weight (2 x rows rows) and `up` empty (then it must not
  // return false). `scratch` ([T x rows], not x or out) may be written.
  virtual bool matmul_swiglu(const Weight& gate, const Weight& up, const Activation& x, Activation& out,
                             Activation& scratch) = 0;
  // acc[i] += W x[i] (a residual add after a product): matmul(w, x, scratch) then
  // add(acc, scratch). acc must not be x (a backend may throw std::invalid_argument). `scratch` ([T x
  // w.rows], neither acc nor x) may be written or left alone.
  virtual bool matmul_add(const Weight& w, const Activation& x, Activation& acc, Activation& scratch) = 0;
  // A product of normalized rows, out = W rms_norm(x): rms_norm(x, gain, eps, normed)
  // then matmul(w, normed, out). `normed` ([T x x.cols], neither x nor out) may be
  // written or left alone.
  virtual bool matmul_norm(const Weight& w, const Activation& x, const Weight& gain, float eps, Activation& normed,
                           Activation& out) = 0;
  // The feed-forward gate of normalized rows: rms_norm(x, gain, eps, normed) then
  // matmul_swiglu(gate, up, normed, out, scratch); `normed` as in matmul_norm.
  virtual bool matmul_swiglu_norm(const Weight& gate, const Weight& up, const Activation& x, const Weight& gain,
                                  float eps, Activation& normed, Activation& out, Activation& scratch) = 0;
};

// Per-kernel device time (Backend::profiler(); fafo bench --profile).
class BackendProfiler {
 public:
  virtual ~BackendProfiler() = default;
  // Starts collecting a KernelProfile over the steps that follow (and clears the last
  // one); returns an empty string, or why this device cannot time its kernels (then
  // nothing is collected).
  virtual std::string start_profile() = 0;
  // What was collected; stops collecting.
  virtual KernelProfile take_profile() = 0;
};

// A backend that counts what it allocates (Backend::memory(); --memory-limit).
class BackendMemory {
 public:
  virtual ~BackendMemory() = default;
  // Limits what the backend allocates (weights, activations, the KV cache, device
  // scratch) to `bytes`, before anything is loaded (std::logic_error after): an
  // allocation past it throws DeviceError(OutOfMemory) naming the sizes.
  virtual void set_memory_limit(uint64_t bytes) = 0;
  // Bytes allocated so far, as set_memory_limit counts them.
  virtual uint64_t memory_in_use() const = 0;
  // Bytes the backend may still allocate: what is left of the limit (set_memory_limit,
  // else the device's memory), or UINT64_MAX where nothing limits it.
  virtual uint64_t memory_free() const = 0;
};

// --- the core ------------------------------------------------------------------------------

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // One-line description of the device (for `fafo run` and bench output).
  virtual std::string description() const = 0;
  // Exact (the default) or a stated tolerance; see BackendNumerics.
  virtual BackendNumerics numerics() const { return {}; }
  // What it can do beyond the core ops; see BackendCapabilities.
  virtual BackendCapabilities capabilities() const { return {}; }

  // --- optional parts: each null where the backend has none --------------------------
  virtual BackendFusions* fusions() { return nullptr; }
  virtual BackendProfiler* profiler() { return nullptr; }
  virtual BackendMemory* memory() { return nullptr; }

  // --- memory ---------------------------------------------------------------------
  // Makes a weight resident. `data` stays valid for the backend's lifetime (it may
  // point into a memory-mapped file, which the CPU backend uses in place).
  virtual Weight upload_weight(TensorType type, int64_t rows, int64_t cols, const void* data) = 0;
  // A matrix that only embed() reads (an embedding table not also the output head): the
  // backend may skip what it prepares for products (the cpu backend's rows in groups).
  // A product over it still works, the slower way. By default upload_weight.
  virtual Weight upload_table(TensorType type, int64_t rows, int64_t cols, const void* data) {
    return upload_weight(type, rows, cols, data);
  }
  // The types of the matrices (weights of more than one row) a model is about to upload,
  // named before its first upload_weight so that the backend can prepare for them all at
  // once: the Vulkan backend creates their pipelines there, as one wait with its
  // progress (fafo/progress.h). upload_weight works without it; by default it does nothing.
  virtual void prepare_weights(std::span<const TensorType> types) { (void)types; }
  // Allocates a zeroed activation buffer with room for `max_rows` rows.
  virtual Activation alloc_activation(int64_t max_rows, int64_t cols) = 0;
  // The most rows of `cols` floats one activation may hold (capabilities().max_activation_bytes).
  int64_t max_activation_rows(int64_t cols) const {
    const uint64_t bytes = capabilities().max_activation_bytes;
    if (bytes == std::numeric_limits<uint64_t>::max()) return std::numeric_limits<int64_t>::max();
    return cols > 0 ? static_cast<int64_t>(bytes / (static_cast<uint64_t>(cols) * sizeof(float))) : 0;
  }
  // Creates a KV cache: for each of shape.n_layer layers, shape.capacity entries of
  // shape.kv_dim keys and values stored as shape.type (a latent cache's per-layer
  // widths instead; backends without latent_attention throw std::invalid_argument for
  // one). The caller owns it and must destroy it before the backend; a backend holds
  // any number of caches (one per sequence on shared weights) and each step computes
  // over the one begin_step names. Throws std::runtime_error when it does not fit,
  // naming the sizes.
  virtual std::unique_ptr<KvCache> create_kv_cache(const KvCacheShape& shape) = 0;

  // --- a step -----------------------------------------------------------------------
  // Starts a step over `batch` and the KV cache `kv` (one this backend made; else
  // std::invalid_argument); activations used in it get batch.size() rows. The step's
  // keys and values go to slots batch.n_past() onward of `kv`, and its attention reads
  // `kv`.
  void begin_step(const StepBatch& batch, KvCache& kv) {
    KvCache* one = &kv;
    begin_step(batch, std::span<KvCache* const>(&one, 1));
  }
  // A step over several sequences (a joined batch, StepBatch::join): part s's keys and
  // values go to slots segment(s).n_past onward of caches[s], and its rows attend
  // caches[s] and the part's own rows. Every kernel computes each row as in a step of
  // that part alone. Throws std::invalid_argument unless there is one distinct cache per
  // part and at most capabilities().max_step_sequences parts.
  // Throws std::length_error where a cache's rings (KvCacheShape::ring) no longer hold
  // what its part reads (KvCache::check_rings).
  void begin_step(const StepBatch& batch, std::span<KvCache* const> caches) {
    check_step_caches(batch, caches);
    start_step(batch, caches);
    for (int32_t s = 0; s < batch.n_segments(); ++s) {
      const StepSegment seg = batch.segment(s);
      caches[static_cast<size_t>(s)]->note_step(seg.n_past, seg.size);
    }
  }
  // out[i] = table row batch.tokens()[i], dequantized.
  virtual void embed(const Weight& table, Activation& out) = 0;
  // out = x / rms(x) * gain, per row.
  virtual void rms_norm(const Activation& x, const Weight& gain, float eps, Activation& out) = 0;
  // RMSNorm of each head: x's rows are n_heads heads of x.cols / n_heads values, and
  // each head of each row becomes head / rms(head) * gain (gain: one head's width) in
  // out, as rms_norm on rows that narrow does (Qwen3's and Gemma 3's Q and K norms).
  virtual void head_norm(const Activation& x, int32_t n_heads, const Weight& gain, float eps, Activation& out) = 0;
  // out[i] = W x[i]: out is [T x w.rows], x is [T x w.cols].
  virtual void matmul(const Weight& w, const Activation& x, Activation& out) = 0;
  // Several products at once: matmul(*w, *x, *out) for each job, with the values of
  // those calls one by one (the default makes them). No job's out may be another's x
  // or out.
  struct MatmulJob {
    const Weight* w;
    const Activation* x;
    Activation* out;
  };
  virtual void matmuls(const std::vector<MatmulJob>& jobs) {
    for (const MatmulJob& j : jobs) matmul(*j.w, *j.x, *j.out);
  }
  // x[i] += bias (a 1 x cols weight).
  virtual void add_bias(const Weight& bias, Activation& x) = 0;
  // Rotates each head of x (n_heads heads of head_dim) by the batch positions.
  virtual void rope(Activation& x, int32_t n_heads, int32_t head_dim, const RopeParams& p) = 0;
  // Attention of q over layer `layer` of the KV cache: each row reads its view of the
  // committed entries (FULL rows: every entry, in the cache's logical order;
  // COMPRESSED rows: the cache's region, or everything in its dense layers) and then
  // the batch tokens its mask row lets it see (including itself). The queries are q's
  // first n_head * head_dim columns (with fused_qkv, q may be the wider fused qkv).
  virtual void attention(int32_t layer, const Activation& q, const AttentionShape& shape, Activation& out) = 0;
  // Multi-head latent attention (MLA models, made by fafo-care) over layer `layer` of a
  // latent KV cache (KvCacheShape::latent): the values of attention() where the entry
  // at physical slot s has the key rope(k_up * latent_key(s), position(s)) and the value
  // v_up * latent_value(s). k_up and v_up are F32 weights of kv_dim rows and
  // key_dim(layer) / value_dim(layer) columns. position(s) is the logical index of the
  // committed entry there (KvLayout::logical_of) for s < n_past, and the batch position
  // of token s - n_past for the step's own slots. Backends without MLA throw
  // std::invalid_argument (the default); capabilities().latent_attention says which.
  virtual void latent_attention(int32_t layer, const Activation& q, const AttentionShape& shape, const Weight& k_up,
                                const Weight& v_up, const RopeParams& rope, Activation& out) {
    (void)layer, (void)q, (void)shape, (void)k_up, (void)v_up, (void)rope, (void)out;
    throw std::invalid_argument("the " + name() + " backend cannot run multi-head latent attention (MLA) models");
  }
  // out = act(gate) * up, element by element: Silu, silu(gate) * up (SwiGLU); GeluTanh,
  // GELU by its tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the
  // argument of tanh clamped to [-10, 10] (where tanh is +-1 in floats): Gemma's GeGLU.
  virtual void gated(GatedActivation act, const Activation& gate, const Activation& up, Activation& out) = 0;
  // x = op(x, value), element by element: Scale, x * value (Gemma's embedding scale);
  // Softcap, value * tanh(x / value), the argument of tanh clamped as GeluTanh's (Gemma
  // 2's logit soft-capping; value > 0).
  virtual void map(ElementMap op, Activation& x, float value) = 0;
  // x += y.
  virtual void add(Activation& x, const Activation& y) = 0;
  // Copies the selected rows of src (indices into the batch) to the first rows of dst;
  // for the rest of the step, kernels that read dst process rows.size() rows instead
  // of the batch size.
  virtual void gather_rows(const Activation& src, const std::vector<int32_t>& rows, Activation& dst) = 0;
  // dst[rows[i]] += weights[i] * src[i] for each i, element by element: the product
  // rounded to float, then the sum (no fused multiply-add), so every backend gives the
  // reference's bits. rows are distinct batch rows; src holds at least rows.size() rows
  // (a gathered activation). A mixture-of-experts layer adds each expert's outputs into
  // the residual stream of the rows that chose it, weighted by the router. Throws
  // std::out_of_range for a row outside the batch or a repeated one, and
  // std::invalid_argument for weights that do not match rows or widths that differ.
  virtual void scatter_add(const Activation& src, const std::vector<int32_t>& rows, const std::vector<float>& weights,
                           Activation& dst) = 0;
  // The index of the largest value in each row of x (the batch's rows, or the
  // gathered count), ties to the first index; -1 marks a row holding a NaN and -2 a
  // row of only -inf. Computed in the step (on the device for GPU backends), so a
  // greedy step reads back one int per row instead of n_vocab floats; read it with
  // read_argmax() after finish_step.
  virtual void argmax_rows(const Activation& x) = 0;
  virtual std::vector<int32_t> read_argmax(int64_t n_rows) = 0;
  // Records the k best values of each row of x (1 <= k <= min(kMaxTopK, x.cols); the
  // order of fafo/top_k.h), for sampling steps; read_top_k() after finish_step.
  virtual void top_k_rows(const Activation& x, int32_t k) = 0;
  virtual TopK read_top_k(int64_t n_rows) = 0;
  // Runs (or submits and waits for) everything issued since begin_step.
  virtual void finish_step() = 0;
  // Inside a step: runs everything issued so far, so that read_rows reads its results,
  // and the step goes on (its batch, its caches and the gathered row counts stay): a
  // mixture-of-experts layer reads its router's logits there and chooses which products
  // to issue next. Nothing to do where ops run when called (executes_immediately, the
  // default's condition); a backend that records its steps overrides it.
  virtual void sync_step() {
    if (!capabilities().executes_immediately)
      throw std::logic_error("the " + name() + " backend cannot read results inside a step (mixture-of-experts models)");
  }
  // Reads the first n_rows rows of x back to the host (after finish_step).
  virtual std::vector<float> read_rows(const Activation& x, int64_t n_rows) = 0;
  // Outside a step (before begin_step): writes `rows` (whole rows of x.cols floats) into
  // the first rows of x, which the next step's ops then read: the hidden state that the
  // device before this one computed, where a model's layers are split over devices.
  // Throws std::out_of_range for more rows than x holds or a partial row.
  virtual void write_rows(Activation& x, const std::vector<float>& rows) = 0;

  // --- faults (fafo/device_error.h) -------------------------------------------------
  // The plan.at_step-th finish_step from now fails as plan.kind, once (FAFO_INJECT_FAULT).
  void inject_fault(const FaultPlan& plan) {
    fault_ = plan;
    steps_since_fault_plan_ = 0;
  }

 protected:
  // begin_step after its checks: caches.size() == batch.n_segments() distinct caches.
  virtual void start_step(const StepBatch& batch, std::span<KvCache* const> caches) = 0;

  // For finish_step: counts the step and returns the injected fault's kind when it is due.
  std::optional<DeviceError::Kind> injected_fault_due() {
    if (!fault_) return std::nullopt;
    if (++steps_since_fault_plan_ < fault_->at_step) return std::nullopt;
    const DeviceError::Kind kind = fault_->kind;
    fault_.reset();
    return kind;
  }

 private:
  void check_step_caches(const StepBatch& batch, std::span<KvCache* const> caches) const {
    if (static_cast<int64_t>(caches.size()) != batch.n_segments())
      throw std::invalid_argument("begin_step: " + std::to_string(caches.size()) + " KV caches for a step of " +
                                  std::to_string(batch.n_segments()) + " sequences");
    if (batch.n_segments() > capabilities().max_step_sequences)
      throw std::invalid_argument("begin_step: the " + name() + " backend computes at most " +
                                  std::to_string(capabilities().max_step_sequences) + " sequences in one step, not " +
                                  std::to_string(batch.n_segments()));
    for (size_t a = 0; a < caches.size(); ++a) {
      if (caches[a] == nullptr) throw std::invalid_argument("begin_step: no KV cache for part " + std::to_string(a));
      for (size_t b = 0; b < a; ++b)
        if (caches[a] == caches[b]) throw std::invalid_argument("begin_step: two parts of a step share one KV cache");
    }
    for (int32_t s = 0; s < batch.n_segments(); ++s) {
      const StepSegment seg = batch.segment(s);
      int32_t min_position = seg.n_past;
      for (int32_t i = seg.first; i < seg.first + seg.size; ++i)
        min_position = std::min(min_position, batch.positions()[static_cast<size_t>(i)]);
      caches[static_cast<size_t>(s)]->check_rings(seg.n_past, seg.size, min_position);
    }
  }

  std::optional<FaultPlan> fault_;
  int64_t steps_since_fault_plan_ = 0;
};

// --- fused ops, or their plain ops (BackendFusions) -----------------------------------------
// What the model calls: the backend's fused kernel where it has one, else the plain ops.

inline bool fuses_qkv(Backend& b, TensorType type, int64_t q_rows, int64_t kv_rows, int64_t cols) {
  const BackendFusions* f = b.fusions();
  return f != nullptr && f->fuses_qkv(type, q_rows, kv_rows, cols);
}
inline bool fuses_gate_up(Backend& b, TensorType type, int64_t rows, int64_t cols) {
  const BackendFusions* f = b.fusions();
  return f != nullptr && f->fuses_gate_up(type, rows, cols);
}
inline void run_matmul_swiglu(Backend& b, const Weight& gate, const Weight& up, const Activation& x, Activation& out,
                              Activation& scratch) {
  if (BackendFusions* f = b.fusions(); f != nullptr && f->matmul_swiglu(gate, up, x, out, scratch)) return;
  if (!up) throw std::invalid_argument("matmul_swiglu: backend " + b.name() + " takes the gate and up weights apart");
  b.matmul(gate, x, out);
  b.matmul(up, x, scratch);
  b.gated(GatedActivation::Silu, out, scratch, out);
}
inline void run_matmul_add(Backend& b, const Weight& w, const Activation& x, Activation& acc, Activation& scratch) {
  if (BackendFusions* f = b.fusions(); f != nullptr && f->matmul_add(w, x, acc, scratch)) return;
  b.matmul(w, x, scratch);
  b.add(acc, scratch);
}
inline void run_matmul_norm(Backend& b, const Weight& w, const Activation& x, const Weight& gain, float eps,
                            Activation& normed, Activation& out) {
  if (BackendFusions* f = b.fusions(); f != nullptr && f->matmul_norm(w, x, gain, eps, normed, out)) return;
  b.rms_norm(x, gain, eps, normed);
  b.matmul(w, normed, out);
}
inline void run_matmul_swiglu_norm(Backend& b, const Weight& gate, const Weight& up, const Activation& x,
                                   const Weight& gain, float eps, Activation& normed, Activation& out,
                                   Activation& scratch) {
  if (BackendFusions* f = b.fusions(); f != nullptr && f->matmul_swiglu_norm(gate, up, x, gain, eps, normed, out, scratch))
    return;
  b.rms_norm(x, gain, eps, normed);
  run_matmul_swiglu(b, gate, up, normed, out, scratch);
}

// Bytes the backend has allocated (BackendMemory::memory_in_use); 0 where it does not count.
inline uint64_t memory_in_use(Backend& b) {
  const BackendMemory* m = b.memory();
  return m != nullptr ? m->memory_in_use() : 0;
}
// BackendMemory::memory_free, or UINT64_MAX for a backend that does not count its memory.
inline uint64_t memory_free(Backend& b) {
  const BackendMemory* m = b.memory();
  return m != nullptr ? m->memory_free() : std::numeric_limits<uint64_t>::max();
}

// What a backend's begin_step computes with: `kv` as the backend's own cache type.
// Throws std::invalid_argument when another backend made it.
template <class Cache>
Cache& own_kv_cache(const Backend& backend, KvCache& kv) {
  if (kv.owner() != &backend)
    throw std::invalid_argument("begin_step: the KV cache was made by another backend than " + backend.name());
  return static_cast<Cache&>(kv);
}

// The checks a device backend's begin_step and embed make: std::length_error when a
// part of the step needs KV slots past its cache's capacity or the step has more rows
// than its activations hold (`max_rows`); std::out_of_range for a token outside a
// table of `vocab` rows.
inline void check_step_fits(const StepBatch& batch, std::span<KvCache* const> caches, int64_t max_rows) {
  for (int32_t s = 0; s < batch.n_segments(); ++s) {
    const StepSegment seg = batch.segment(s);
    const int32_t capacity = caches[static_cast<size_t>(s)]->capacity();
    if (seg.n_past + seg.size > capacity)
      throw std::length_error("step needs KV slots up to " + std::to_string(seg.n_past + seg.size) +
                              " but the cache holds " + std::to_string(capacity));
  }
  if (batch.size() > max_rows)
    throw std::length_error("a step of " + std::to_string(batch.size()) + " tokens exceeds the " +
                            std::to_string(max_rows) + " rows the activations hold");
}
inline void check_tokens_in_vocabulary(const StepBatch& batch, int64_t vocab) {
  for (int32_t tok : batch.tokens())
    if (tok < 0 || tok >= vocab)
      throw std::out_of_range("token id " + std::to_string(tok) + " is outside the vocabulary (" + std::to_string(vocab) +
                              " tokens)");
}

// The check attention makes of a ring layer (KvCacheShape::ring): its keys sit at their
// ring slots for the window the ring was made for only, so std::invalid_argument where
// the shape's window differs (a layer outside the cache is the caller's to refuse).
inline void check_ring_window(const KvCacheShape& cache, int32_t layer, const AttentionShape& s) {
  if (cache.ring(layer) > 0 && s.window != cache.windows[static_cast<size_t>(layer)])
    throw std::invalid_argument("attention: layer " + std::to_string(layer) + "'s KV cache is a ring for a window of " +
                                std::to_string(cache.windows[static_cast<size_t>(layer)]) + ", not " +
                                std::to_string(s.window));
}

// The check attention makes of a shape's sinks: std::invalid_argument unless they are
// one value per query head.
inline void check_attention_sinks(const AttentionShape& s) {
  if (s.sinks && (s.sinks.rows != 1 || s.sinks.cols != s.n_head))
    throw std::invalid_argument("attention: " + std::to_string(s.sinks.rows) + " x " + std::to_string(s.sinks.cols) +
                                " sinks for " + std::to_string(s.n_head) + " heads (one per head)");
}

// The checks a latent_attention makes of its arguments: std::out_of_range for a layer
// outside the cache; std::invalid_argument unless the cache is latent and k_up / v_up
// are F32 weights of kv_dim rows and the layer's key / value width in columns (naming
// what differs).
inline void check_latent_attention(const KvCacheShape& shape, int32_t layer, const Weight& k_up, const Weight& v_up) {
  if (layer < 0 || layer >= shape.n_layer) throw std::out_of_range("latent_attention: layer outside the KV cache");
  if (!shape.latent()) throw std::invalid_argument("latent_attention: the KV cache is not latent");
  const auto check = [&](const Weight& w, const char* what, int32_t width) {
    if (w.type != TensorType::F32 || w.rows != shape.kv_dim || w.cols != width)
      throw std::invalid_argument(std::string("latent_attention: layer ") + std::to_string(layer) + "'s " + what +
                                  " up-projection is " + std::string(tensor_type_name(w.type)) + " [" +
                                  std::to_string(w.rows) + " x " + std::to_string(w.cols) + "], not F32 [" +
                                  std::to_string(shape.kv_dim) + " x " + std::to_string(width) + "]");
  };
  check(k_up, "key", shape.key_dim(layer));
  check(v_up, "value", shape.value_dim(layer));
}

// Which backend to create, as a user names it (`--backend`, `--device`, `--threads`);
// make_backend() and the rest of the registry are in fafo/backend_registry.h.
struct BackendSpec {
  std::string name = "auto";  // "auto" or a registered backend's name ("cpu", "vulkan")
  std::string device;         // an index in `fafo devices` order, or part of a device name; empty = the best
  int threads = 0;            // host threads (0 = every hardware thread)
  uint64_t memory_limit = 0;  // bytes the backend may allocate (--memory-limit); 0 = the device's own
  bool latent_attention = false;  // for an MLA model: "auto" skips backends that cannot run one
  // cpu: matrices of the formats it multiplies in groups of 8 rows get that copy at load
  // (faster prompts); false (--no-repack): the file's rows as they are, no copy.
  bool repack = true;
};

// Backend names this build can create, in registration order (fafo/backend_registry.h).
std::vector<std::string> available_backends();
// The backend "auto" resolves to on this machine: the GPU backend of highest rank that
// finds a real GPU (one that runs MLA models where latent_attention), else cpu.
std::string default_backend_name(bool latent_attention = false);
// Creates the backend the spec names ("auto" or "" = default_backend_name()); throws
// std::runtime_error naming the problem (unknown backend, one not in this build, no
// such device). Applies spec.memory_limit and, in tests, FAFO_INJECT_FAULT.
std::unique_ptr<Backend> make_backend(const BackendSpec& spec);

// The fast CPU backend (`cpu`: SIMD matrix products with token tiles, within a stated
// tolerance of the reference). n_threads <= 0 uses every hardware thread; repack as
// BackendSpec::repack.
std::unique_ptr<Backend> make_cpu_backend(int n_threads = 0, bool repack = true);
// The fp32 reference backend (`reference`), the oracle of tests/test_backend_ops.cpp.
std::unique_ptr<Backend> make_reference_backend(int n_threads = 0);

}  // namespace fafo
