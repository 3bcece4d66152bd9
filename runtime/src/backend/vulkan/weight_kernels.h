// The Vulkan kernels that read weights in their GGUF format, for every format in
// supports(): the matmul family and the embedding lookup. Shaders: shaders/matmul.comp
// (its header explains the design), shaders/embed.comp and shaders/dequant.glsl (the
// decoders, bit-exact with fafo::dequantize_row). A format's pipelines are created by
// prepare() (the backend calls it while uploading the model's weights: only the formats
// and variants a model uses on this device: on a GPU the 12 split-rows variants of a
// format, of 19 per format; on a CPU device its 3 whole-rows and 3 gated variants);
// variants asked for explicitly (tests) are created on first use.
//
// A weight buffer holds `rows` packed rows of tensor_row_bytes(type, cols) bytes each,
// back to back from offset 0, in a buffer of at least weight_bytes(type, rows, cols)
// bytes (the rows rounded up to a multiple of 4: the shaders read 32-bit words).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/vulkan/pipeline.h"
#include "fafo/tensor_type.h"

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

// How matmul spreads a weight matrix over invocations (shaders/matmul.comp). Both give
// the same bits; only the speed differs.
enum class MatmulMapping {
  Auto,       // WholeRows on CPU devices (lavapipe), SplitRows on GPUs
  SplitRows,  // each row split over 32 invocations; token tiles of 1..32 (GPUs)
  WholeRows,  // one invocation per row, any token count per pass (CPU implementations)
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
};

class WeightKernels {
 public:
  using MatmulShape = vulkan::MatmulShape;

  // Tokens per tile of the SplitRows variants, smallest first. Above the largest, the
  // largest tile is repeated (one more pass over the weights per tile).
  static constexpr std::array<uint32_t, 6> kTokenTiles = {1, 2, 4, 8, 16, 32};
  // The WholeRows variants' tokens per pass over the weights (the smallest that holds a
  // step's tokens is used; more than 32 tokens take passes of 32).
  static constexpr std::array<uint32_t, 3> kWholeRowsTiles = {1, 8, 32};

  explicit WeightKernels(const Context& context);
  ~WeightKernels();
  WeightKernels(const WeightKernels&) = delete;
  WeightKernels& operator=(const WeightKernels&) = delete;

  // out[t * out_stride + out_offset + r] = x[t * x_stride ...] . W[r] for t < T, r < rows.
  // W holds `rows` rows in `type`. The result for a token depends only on its x and W,
  // never on T or the variant: every variant sums in the same order (shaders/matmul.comp).
  // Records one dispatch, or nothing when T or rows is 0. Throws std::invalid_argument
  // for an unsupported type, a bad shape or variant, or a buffer too small for the shape.
  void matmul(CommandSequence& seq, TensorType type, const Buffer& w, const Buffer& x, const Buffer& out,
              const MatmulShape& s, const MatmulVariant& variant = {}) const;

  // The feed-forward gate: out[t * out_stride + out_offset + r] = silu(g) * u, where g is
  // x[t] . W[r] and u is x[t] . W[rows + r], each the bits matmul gives (W holds the gate
  // projection's `rows` rows, then the up projection's), and silu(g) * u the bits of
  // Kernels::swiglu. One dispatch for matmul, matmul and swiglu. Only where
  // has_gated_variant() (CPU devices: the WholeRows mapping); throws like matmul, and
  // std::invalid_argument elsewhere or with s.accumulate.
  void matmul_gated(CommandSequence& seq, TensorType type, const Buffer& w, const Buffer& x, const Buffer& out,
                    const MatmulShape& s) const;
  bool has_gated_variant() const;

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

  // Creates the pipelines that matmul and embed pick by default on this device for
  // `type` (the backend calls it as it uploads each weight, so no step creates one).
  // Other variants, asked for explicitly, are created on first use. Throws like matmul
  // for an unsupported type.
  void prepare(TensorType type) const;

  // Whether matmul and embed read `type`: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
  // Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
  static bool supports(TensorType type);
  // Bytes a buffer of `rows` rows of `cols` values in `type` must have: the packed rows,
  // rounded up to a multiple of 4. Throws std::invalid_argument like tensor_row_bytes.
  static uint64_t weight_bytes(TensorType type, uint32_t rows, uint32_t cols);

 private:
  // A format's pipelines, created when first needed (prepare() creates the ones the
  // automatic choice uses on this device); null until then.
  struct FormatPipelines {
    TensorType type;
    std::array<std::unique_ptr<ComputePipeline>, kTokenTiles.size()> split_rows;
    // The subgroup variants; never created for tiles without one (see has_subgroup_variant).
    std::array<std::unique_ptr<ComputePipeline>, kTokenTiles.size()> split_rows_subgroup;
    std::array<std::unique_ptr<ComputePipeline>, kWholeRowsTiles.size()> whole_rows;
    std::array<std::unique_ptr<ComputePipeline>, kWholeRowsTiles.size()> gated;
    std::unique_ptr<ComputePipeline> embed;
  };
  FormatPipelines& pipelines(TensorType type, const char* kernel) const;
  const ComputePipeline& split_rows(FormatPipelines& f, size_t tile_index, bool subgroup) const;
  const ComputePipeline& whole_rows(FormatPipelines& f, size_t tile_index) const;
  const ComputePipeline& gated(FormatPipelines& f, size_t tile_index) const;
  const ComputePipeline& embed_pipeline(FormatPipelines& f) const;

  const Context& context_;
  bool cpu_device_ = false;  // Auto picks WholeRows
  std::array<bool, kTokenTiles.size()> subgroup_tiles_{};  // which tiles have a subgroup variant
  PipelineOptions subgroup_options_;
  mutable std::vector<FormatPipelines> formats_;  // pipelines made on first use (not thread-safe)
};

}  // namespace fafo::vulkan
