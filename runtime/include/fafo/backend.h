// The backend interface: memory for weights, activations and the KV cache, and the
// kernels of a Llama-family forward pass. The model's forward pass is written once
// against it (runtime/src/model/llama_forward.cpp); backends never know which
// decoding strategy runs.
//
// A step is bracketed by begin_step()/finish_step(): between them the model issues
// kernel calls that a backend may execute at once (CPU) or record into one command
// buffer submitted in finish_step() (GPU backends). Results are read back only by
// read_rows() after finish_step().
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

// Shape of one layer's attention.
struct AttentionShape {
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  float scale = 0.0f;  // usually 1/sqrt(head_dim)
};

// RoPE parameters. Positions come from the StepBatch.
struct RopeParams {
  int32_t n_dims = 0;        // rotated dimensions per head (<= head_dim)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;   // linear position scaling (1/factor)
  bool neox = false;         // rotate (i, i+n_dims/2) pairs instead of (2i, 2i+1)
  std::vector<float> freq_factors;  // optional per-pair divisor (Llama 3.1 "rope_freqs")
};

// How a step sees the committed KV entries (see fafo/kv_layout.h): FULL rows visit
// `full_order` (physical slots in logical order; empty = slots 0..n_past-1), and
// COMPRESSED rows visit only the region, physical slots [0, region_count), except in
// the first `dense_layers` layers, where they read everything like FULL rows.
struct KvView {
  const std::vector<int32_t>* full_order = nullptr;
  int32_t region_count = 0;
  int32_t dense_layers = 0;
};

// What the KV cache stores. F16 halves its memory and the bytes attention reads; every
// backend rounds keys and values to fp16 (nearest even) as they are stored, so all
// backends compute with the same cached values.
enum class KvCacheType { F32, F16 };
const char* kv_cache_type_name(KvCacheType t);
// "f32" / "f16"; throws std::invalid_argument naming the accepted words.
KvCacheType parse_kv_cache_type(const std::string& name);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // One-line description of the device (for `fafo run` and bench output).
  virtual std::string description() const = 0;

  // --- memory ---------------------------------------------------------------------
  // Makes a weight resident. `data` stays valid for the backend's lifetime (it may
  // point into a memory-mapped file, which the CPU backend uses in place).
  virtual Weight upload_weight(TensorType type, int64_t rows, int64_t cols, const void* data) = 0;
  // Allocates a zeroed activation buffer with room for `max_rows` rows.
  virtual Activation alloc_activation(int64_t max_rows, int64_t cols) = 0;
  // The most rows of `cols` floats one activation may hold (a device's buffer range:
  // Vulkan's maxStorageBufferRange); unlimited by default.
  virtual int64_t max_activation_rows(int64_t cols) const {
    (void)cols;
    return std::numeric_limits<int64_t>::max();
  }
  // Allocates the KV cache: for each of n_layer layers, n_ctx entries of kv_dim values
  // for K and V, stored as `type`. read_keys/captured values come back as floats.
  virtual void alloc_kv_cache(int32_t n_layer, int32_t n_ctx, int32_t kv_dim, KvCacheType type) = 0;
  virtual int32_t kv_capacity() const = 0;

  // --- a step -----------------------------------------------------------------------
  // Starts a step over `batch`; activations used in it get batch.size() rows.
  // `kv` says where the committed entries are (see KvView).
  virtual void begin_step(const StepBatch& batch, const KvView& kv) = 0;
  // out[i] = table row batch.tokens()[i], dequantized.
  virtual void embed(const Weight& table, Activation& out) = 0;
  // out = x / rms(x) * gain, per row.
  virtual void rms_norm(const Activation& x, const Weight& gain, float eps, Activation& out) = 0;
  // out[i] = W x[i] (+ bias): out is [T x w.rows], x is [T x w.cols].
  virtual void matmul(const Weight& w, const Activation& x, Activation& out) = 0;
  // x[i] += bias (a 1 x cols weight).
  virtual void add_bias(const Weight& bias, Activation& x) = 0;
  // Rotates each head of x (n_heads heads of head_dim) by the batch positions.
  virtual void rope(Activation& x, int32_t n_heads, int32_t head_dim, const RopeParams& p) = 0;
  // Writes this step's k and v rows into layer `layer`'s cache at slots n_past + i.
  virtual void store_kv(int32_t layer, const Activation& k, const Activation& v) = 0;
  // Writes `count` entries into one layer's cache at physical slots first.. (count x
  // kv_dim floats each); used by benchmarks and tests to set up long contexts.
  virtual void write_kv(int32_t layer, int32_t first, int32_t count, const float* keys, const float* values) = 0;
  // Exchanges the KV entries of two physical slots in every layer (region <-> rest).
  virtual void swap_kv(const std::vector<std::pair<int32_t, int32_t>>& pairs) = 0;
  // Keys of `count` physical slots starting at `first` in one layer (count x kv_dim).
  virtual std::vector<float> read_keys(int32_t layer, const std::vector<int32_t>& slots) = 0;
  // Batch rows whose queries (after RoPE) the next steps keep, per layer, for the
  // compression policy; captured_queries(layer) returns them (rows x q_dim).
  virtual void set_query_capture(const std::vector<int32_t>& rows) = 0;
  virtual std::vector<float> captured_queries(int32_t layer) = 0;
  // Copies KV entries between slots in every layer (src -> dst, applied in order).
  // Used when a step's accepted tokens were not laid out at their final slots.
  virtual void move_kv(const std::vector<std::pair<int32_t, int32_t>>& moves) = 0;
  // Attention of q over the layer's cache: committed prefix plus the visible batch tokens.
  virtual void attention(int32_t layer, const Activation& q, const AttentionShape& shape, Activation& out) = 0;
  // out = silu(gate) * up.
  virtual void swiglu(const Activation& gate, const Activation& up, Activation& out) = 0;
  // x += y.
  virtual void add(Activation& x, const Activation& y) = 0;
  // Copies the selected rows of src (indices into the batch) to the first rows of dst;
  // for the rest of the step, kernels that read dst process rows.size() rows instead
  // of the batch size.
  virtual void gather_rows(const Activation& src, const std::vector<int32_t>& rows, Activation& dst) = 0;
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
  // Reads the first n_rows rows of x back to the host (after finish_step).
  virtual std::vector<float> read_rows(const Activation& x, int64_t n_rows) = 0;
};

// The CPU reference backend. n_threads <= 0 uses every hardware thread.
std::unique_ptr<Backend> make_cpu_backend(int n_threads = 0);

// Which backend to create, as a user names it (`--backend`, `--device`, `--threads`).
struct BackendSpec {
  std::string name = "auto";  // "auto" (vulkan when a Vulkan GPU exists, else cpu), "cpu", "vulkan"
  std::string device;         // vulkan: an index in `fafo devices` order, or part of a device name; empty = best
  int threads = 0;            // cpu: threads (0 = every hardware thread)
};

// Backend names this build can create ("cpu", plus "vulkan" when compiled in).
std::vector<std::string> available_backends();
// The backend "auto" resolves to on this machine.
std::string default_backend_name();
// Creates the backend; throws std::runtime_error naming the problem (unknown backend,
// no such device, Vulkan unavailable).
std::unique_ptr<Backend> make_backend(const BackendSpec& spec);

}  // namespace fafo
