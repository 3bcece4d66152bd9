// The Vulkan kernels that read weights in their GGUF format, for every format in
// supports(): the matmul family and the embedding lookup. Shaders: shaders/matmul.comp
// (its header explains the design), shaders/embed.comp and shaders/dequant.glsl (the
// decoders, bit-exact with fafo::dequantize_row); the compiled variants are listed in
// backend/vulkan/weight_shader_table.h. A format's pipelines are created by prepare()
// (the backend calls it before uploading a model's weights, for all of their formats:
// the variants the automatic choice uses on this device: split rows on a GPU, whole rows
// on a CPU device, each plain, gated and with a fused RMSNorm, or for the formats with
// integer products (has_int8) where the backend uses them (MatmulVariant::int8: with the
// dot product instruction on split rows where the device and the build have it); several
// at once, on up to 16 threads); variants asked for explicitly (tests) are created on
// first use.
//
// A weight buffer holds `rows` packed rows of tensor_row_bytes(type, cols) bytes each,
// back to back from offset 0, in a buffer of at least weight_bytes(type, rows, cols)
// bytes (the rows rounded up to a multiple of 4: the shaders read 32-bit words).
#pragma once

#include <array>
#include <map>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/vulkan/matmul_tuning.h"
#include "backend/vulkan/pipeline.h"
#include "backend/vulkan/weight_shader_table.h"
#include "fafo/tensor_type.h"

namespace fafo {
class ProgressTask;
}

namespace fafo::vulkan {

class Context;
class Buffer;
class CommandSequence;
class ComputePipeline;

// The shape of one WeightKernels::matmul (also WeightKernels::MatmulShape).
struct MatmulShape {
  uint32_t T;           // tokens
  uint32_t rows;        // weight rows (outputs per token)
  uint32_t cols;        // values per row, a multiple of the format's block size
  uint32_t x_stride;    // floats between tokens in x (>= cols when T > 1)
  uint32_t out_stride;  // floats between tokens in out (>= out_offset + rows when T > 1)
  uint32_t out_offset;  // first output column written
  bool accumulate = false;  // out += the product (a fused residual add) instead of out = it
};

// An RMSNorm of the product's input fused into the product: x holds the rows before the
// norm, and the product reads rms_norm(x, gain, eps), the bits Kernels::rms_norm would
// have written (shaders/rms_tree.glsl). For steps of up to WeightKernels::kMaxNormTokens
// tokens. No gain: no norm.
struct InputNorm {
  const Buffer* gain = nullptr;  // cols floats
  float eps = 0.0f;
};

// How matmul spreads a weight matrix over invocations (shaders/matmul.comp). Both give
// the same bits; only the speed differs.
enum class MatmulMapping {
  Auto,       // MatrixTiles where set_matrix_tiles allows it, else WholeRows on CPU
              // devices (lavapipe), SplitRows on GPUs
  SplitRows,  // each row split over 32 invocations; token tiles of 1..32 (GPUs)
  WholeRows,  // one invocation per row, any token count per pass (CPU implementations)
  MatrixTiles,  // integer products only: tiles of 64 rows x 32 tokens, each unit's sums
                // matrix products (shaders/matmul_tiles.comp)
};

// Where Auto runs integer products in matrix tiles: steps of more than
// WeightKernels::kMaxSplitTokens tokens (the tiles give the same bits as the other
// mappings, so a step's size never changes a result).
enum class MatrixTilesUse {
  Auto,   // with the cooperative-matrix instructions where the device has them
          // (DeviceFeatures::int8_matrix), else never
  Off,    // never
  Loops,  // the tiles' plain-loop form on any device (tests; slower than the others)
};

// How SplitRows adds up a row's 32 lane sums: both by the same tree, so both give the
// same bits (shaders/matmul.comp).
enum class MatmulReduction {
  Auto,      // Subgroup where available, else Portable
  Portable,  // through shared memory; needs no optional feature
  Subgroup,  // subgroup shuffles (Context::features().subgroup_matmul(), and a workgroup
             // width that is a multiple of the subgroup size); an error where unavailable
};

// Which matmul variant to run; the default picks by T and the device.
struct MatmulVariant {
  uint32_t tile = 0;  // SplitRows: tokens per tile, one of kTokenTiles; 0 = the smallest >= T
  MatmulMapping mapping = MatmulMapping::Auto;
  // Caps on the workgroup counts along x (row blocks) and y (token tiles); 0 = the
  // device limit. Workgroups loop over what the grid does not cover, so a small cap
  // exercises that on small shapes (tests) or limits the parallelism of one dispatch.
  uint32_t max_groups_x = 0;
  uint32_t max_groups_y = 0;
  // SplitRows only (WholeRows needs no optional feature and takes only Auto or Portable).
  MatmulReduction reduction = MatmulReduction::Auto;
  // Integer products (has_int8: every block format but Q2_K and the codebook ones): x holds the activations rounded
  // to 8 bits by Kernels::quantize_rows, x_stride in words (Kernels::q8_row_words); the
  // CUDA backend's integer products in the same order, so the same bits (shaders/
  // matmul.comp). No InputNorm (the norm goes before the rounding).
  bool int8 = false;
  // With int8 and SplitRows: the byte sums by the integer dot product instruction
  // (variants built with it, on a device with shaderIntegerDotProduct enabled) or by
  // integer arithmetic; the same integers either way. nullopt: the instruction where
  // available. true where unavailable: std::invalid_argument.
  std::optional<bool> dot = std::nullopt;
  // With MatrixTiles: the cooperative-matrix instructions (true; std::invalid_argument
  // where the device has none) or the plain-loop form (false); nullopt: the instructions
  // where available.
  std::optional<bool> matrix = std::nullopt;
  // Output rows per workgroup (SplitRows, WholeRows: one of row_candidates()); 0 = the
  // tuned choice for the product's shape where set_tuning has one, else the variant's
  // default. Every value gives the same bits.
  uint32_t rows_per_group = 0;
};

class WeightKernels {
 public:
  using MatmulShape = vulkan::MatmulShape;

  // Tokens per tile of the SplitRows variants, smallest first. Above the largest, the
  // largest tile is repeated (one more pass over the weights per tile).
  static constexpr std::array<uint32_t, 6> kTokenTiles = {1, 2, 4, 8, 16, 32};
  // The WholeRows variants' tokens per pass over the weights (the smallest that holds a
  // step's tokens is used; more than 8 tokens take passes of 8).
  static constexpr std::array<uint32_t, 2> kWholeRowsTiles = {1, 8};
  // The most tokens a product with an InputNorm takes (its variants' largest tile).
  static constexpr uint32_t kMaxNormTokens = 8;
  // The most tokens an integer product takes before Auto moves it to matrix tiles.
  static constexpr uint32_t kMaxSplitTokens = 8;
  // Tokens per MatrixTiles tile.
  static constexpr uint32_t kMatrixTileTokens = 32;

  explicit WeightKernels(const Context& context);
  ~WeightKernels();
  WeightKernels(const WeightKernels&) = delete;
  WeightKernels& operator=(const WeightKernels&) = delete;

  // out[t * out_stride + out_offset + r] = x[t * x_stride ...] . W[r] for t < T, r < rows
  // (x normalized first with `norm`). W holds `rows` rows in `type`. The result for a
  // token depends only on its x and W, never on T or the variant: every variant sums in
  // the same order (shaders/matmul.comp). Records one dispatch, or nothing when T or rows
  // is 0. Throws std::invalid_argument for an unsupported type, a bad shape or variant,
  // a buffer too small for the shape, or a norm with more than kMaxNormTokens tokens.
  void matmul(CommandSequence& seq, TensorType type, const Buffer& w, const Buffer& x, const Buffer& out,
              const MatmulShape& s, const MatmulVariant& variant = {}, const InputNorm& norm = {}) const;

  // The feed-forward gate: out[t * out_stride + out_offset + r] = silu(g) * u, where g is
  // x[t] . W[r] and u is x[t] . W[rows + r], each the bits matmul gives (W holds the gate
  // projection's `rows` rows, then the up projection's), and silu(g) * u the bits of
  // Kernels::swiglu. One dispatch for matmul, matmul and swiglu. Throws like matmul, and
  // std::invalid_argument with s.accumulate.
  void matmul_gated(CommandSequence& seq, TensorType type, const Buffer& w, const Buffer& x, const Buffer& out,
                    const MatmulShape& s, const MatmulVariant& variant = {}, const InputNorm& norm = {}) const;

  // out[t * cols + c] = table[tokens[t] - first_row][c] for every t < T whose token is in
  // [first_row, first_row + n_rows); other tokens' rows of out are not written. The
  // table holds n_rows rows in `type`; tokens are 32-bit (uint or int). Values are
  // bit-exact with dequantize_row. Throws like matmul.
  void embed(CommandSequence& seq, TensorType type, const Buffer& table, const Buffer& tokens, const Buffer& out,
             uint32_t T, uint32_t cols, uint32_t first_row, uint32_t n_rows) const;

  // Whether SplitRows with `tile` tokens per tile has its subgroup variant here.
  bool has_subgroup_variant(uint32_t tile) const;
  // What matmul runs by default on this device, for the backend description, e.g.
  // "matmul: split rows, subgroup shuffles (32 lanes)".
  std::string describe() const;

  // Creates the pipelines that matmul, matmul_gated and embed pick by default on this
  // device for each of `types`, with their fused-RMSNorm variants when `norm`, and for
  // the formats with integer products only those when `int8`, several at
  // once (on up to 16 threads), as one ProgressTask ("creating Vulkan pipelines for
  // Q4_K, Q6_K weights") where any is missing. The backend calls it with all of a
  // model's types before uploading its weights (Backend::prepare_weights), and with each
  // weight's type as it uploads it (nothing left to create there after the first), so no
  // step creates one. Other variants, asked for explicitly, are created on first use.
  // Throws like matmul for an unsupported type.
  void prepare(std::span<const TensorType> types, bool norm, bool int8 = false) const;
  void prepare(TensorType type, bool norm, bool int8 = false) const {
    prepare(std::span<const TensorType>(&type, 1), norm, int8);
  }

  // Whether matmul and embed read `type`: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
  // Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4.
  static bool supports(TensorType type);
  // Whether matmul has integer products (MatmulVariant::int8) for `type`.
  static bool has_int8(TensorType type);
  // Whether the split-rows integer products use the integer dot product instruction by
  // default here (built with it, and the device's feature enabled).
  bool uses_dot() const { return dot_; }
  // The shape a product of `type` with `s` and `variant` runs as (its variant's key), for
  // tuning; throws like matmul.
  TunedShape shape_of(TensorType type, const MatmulShape& s, const MatmulVariant& variant, bool gated,
                      bool norm) const;
  // The rows per workgroup `shape` may run with (MatmulVariant::rows_per_group): powers of
  // two within the device's workgroup and shared-memory limits, the default among them
  // (MatrixTiles: only the default).
  std::vector<uint32_t> row_candidates(const TunedShape& shape) const;
  uint32_t default_rows(const TunedShape& shape) const;
  // Creates the pipelines of every candidate of `shapes`, several at once (as prepare),
  // as one ProgressTask where any is missing.
  void prepare_candidates(const std::vector<TunedShape>& shapes) const;
  // Tuned choices (matmul_tuning.h) that products with rows_per_group = 0 follow; null:
  // the defaults. The table must outlive its use here.
  void set_tuning(const MatmulTuning* tuning) { tuning_ = tuning; }
  // With `collect`, every product's shape that the tuning has no choice for is noted,
  // with the weight buffers of up to kMaxTuningWeights of its products (the tuner
  // cycles through them, so that its timings read memory as a step does, not a cache
  // holding one matrix), for take_untuned().
  static constexpr size_t kMaxTuningWeights = 16;
  struct Untuned {
    TunedShape shape;
    std::vector<const Buffer*> weights;
  };
  void collect_untuned(bool collect) { collect_ = collect; }
  std::vector<Untuned> take_untuned() const;
  // Where Auto takes matrix tiles (default MatrixTilesUse::Auto). Call before prepare.
  void set_matrix_tiles(MatrixTilesUse use) {
    tiles_use_ = use;
    tiles_ = find_matrix_tiles();
  }
  // The form Auto's matrix tiles take here: true = the cooperative-matrix instructions,
  // false = plain loops; nullopt: Auto takes no tiles.
  std::optional<bool> matrix_tiles() const { return tiles_; }
  // Bytes a buffer of `rows` rows of `cols` values in `type` must have: the packed rows,
  // rounded up to a multiple of 4. Throws std::invalid_argument like tensor_row_bytes.
  static uint64_t weight_bytes(TensorType type, uint32_t rows, uint32_t cols);

 private:
  // A format's variants (its rows of weight_shaders()) and their pipelines, each created
  // when first needed; null until then.
  struct FormatPipelines {
    TensorType type;
    std::span<const WeightShader> variants;
    std::vector<std::unique_ptr<ComputePipeline>> made;  // parallel to variants
    // Variants with other rows per workgroup than their default: (variant, rows).
    std::map<std::pair<size_t, uint32_t>, std::unique_ptr<ComputePipeline>> resized;
  };
  struct Chosen {
    const WeightShader* shader;
    const ComputePipeline* pipeline;
    size_t index = 0;  // in the format's variants
  };
  FormatPipelines& pipelines(TensorType type, const char* kernel) const;
  // The variant of `key`, its pipeline created if needed; throws std::invalid_argument
  // naming `kernel` where this build or device has none.
  Chosen variant(FormatPipelines& f, const WeightShaderKey& key, const char* kernel) const;
  std::unique_ptr<ComputePipeline> make_pipeline(const WeightShader& v, uint32_t rows = 0) const;
  // Fills each slot with the pipeline of its variant and rows (0: the default), several
  // at once, advancing `progress` for each.
  void create_pipelines(const std::vector<std::unique_ptr<ComputePipeline>*>& slots,
                        const std::vector<std::pair<const WeightShader*, uint32_t>>& made_from,
                        ProgressTask& progress) const;
  // The workgroup size (specialization constant 1 of matmul.comp) for `rows` output rows
  // per workgroup of variant v.
  static uint32_t workgroup_size(const WeightShader& v, uint32_t rows);
  bool subgroup_fits(const WeightShader& shader) const;
  // Whether the device has the shared memory the variant declares.
  bool shared_fits(const WeightShader& shader) const;
  // The key matmul / matmul_gated run for a shape and variant; throws like matmul.
  WeightShaderKey choose(const MatmulShape& s, const MatmulVariant& v, bool gated, bool norm, const char* kernel) const;
  // choose() with the dot product and subgroup forms settled: the variant that runs.
  WeightShaderKey final_key(FormatPipelines& f, const MatmulShape& s, const MatmulVariant& v, bool gated, bool norm,
                            const char* kernel) const;
  const WeightShader* shader_of(const TunedShape& shape) const;
  // Output rows per invocation of the WholeRows variants (WHOLE_ROWS; gated: half each).
  static constexpr uint32_t kWholeRowsOut = 4;
  void product(CommandSequence& seq, TensorType type, const Buffer& w, uint64_t w_rows, const Buffer& x,
               const Buffer& out, const MatmulShape& s, const MatmulVariant& variant, const InputNorm& norm,
               bool gated, const char* kernel) const;

  // The binding list of a product or lookup of `type`: the codebook formats' shaders read
  // their codebook at binding 4 (shaders/dequant_grid.glsl); binding 3 is then the norm's
  // gain or, unused, the codebooks again.
  static bool reads_codebook(TensorType type);

  const Context& context_;
  // The codebooks of IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S as shaders/iq_grids.inc packs them,
  // one word per entry, back to back (6 KiB), uploaded once.
  std::unique_ptr<Buffer> codebooks_;
  bool cpu_device_ = false;  // Auto picks WholeRows
  bool dot_ = false;         // uses_dot()
  MatrixTilesUse tiles_use_ = MatrixTilesUse::Auto;
  std::optional<bool> tiles_;  // matrix_tiles(), settled by the constructor and set_matrix_tiles
  std::optional<bool> find_matrix_tiles() const;
  const MatmulTuning* tuning_ = nullptr;
  bool collect_ = false;
  mutable std::vector<Untuned> untuned_;  // noted by products while collect_ (not thread-safe)
  uint32_t subgroup_size_ = 0;  // where subgroup matmuls are enabled, else 0
  PipelineOptions subgroup_options_;
  mutable std::vector<FormatPipelines> formats_;  // pipelines made on first use (not thread-safe)
};

}  // namespace fafo::vulkan
