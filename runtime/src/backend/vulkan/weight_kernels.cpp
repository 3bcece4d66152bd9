#include "backend/vulkan/weight_kernels.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "backend/vulkan/buffer.h"
#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/embedded_shaders.h"
#include "backend/vulkan/pipeline.h"

namespace fafo::vulkan {

namespace {

// Push constants, laid out as shaders/matmul.comp and shaders/embed.comp declare them.
struct MatmulPush {
  uint32_t T;
  uint32_t rows;
  uint32_t cols;
  uint32_t x_stride;
  uint32_t out_stride;
  uint32_t out_offset;
  uint32_t row_bytes;
  uint32_t accumulate;
};
struct EmbedPush {
  uint32_t T;
  uint32_t cols;
  uint32_t first_row;
  uint32_t n_rows;
  uint32_t row_bytes;
};

// The matmul variants as runtime/CMakeLists.txt compiles them: rows per workgroup
// (ROW_GROUPS) of each SplitRows tile, and the WholeRows tokens per pass and rows per
// workgroup. These only size the grid (the shaders stride over row blocks and token
// tiles), so a mismatch would cost speed, never correctness.
constexpr std::array<uint32_t, WeightKernels::kTokenTiles.size()> kSplitRowsPerWorkgroup = {4, 4, 4, 4, 2, 2};
constexpr uint32_t kWholeRowsPerWorkgroup = 32;

struct FormatShaders {
  TensorType type;
  std::array<const EmbeddedShader*, WeightKernels::kTokenTiles.size()> split_rows;
  std::array<const EmbeddedShader*, WeightKernels::kTokenTiles.size()> split_rows_subgroup;
  // Whole rows, per pass over the weights: kWholeRowsTiles[i] tokens; and gated.
  std::array<const EmbeddedShader*, WeightKernels::kWholeRowsTiles.size()> whole_rows;
  std::array<const EmbeddedShader*, WeightKernels::kWholeRowsTiles.size()> gated;
  const EmbeddedShader* embed;
};

}  // namespace

// The subgroup variants of the split-rows matmul (runtime/CMakeLists.txt: SUBGROUP=1)
// and the whole-rows variants of 1 and 8 tokens per pass, used only here, so declared here rather than in embedded_shaders.h.
#define FAFO_DECLARE_SUBGROUP_SHADERS(format, TYPE)                                                      \
  extern const EmbeddedShader weight_matmul_##format##_rows_t1, weight_matmul_##format##_rows_t8,          \
      weight_matmul_##format##_gated_t1, weight_matmul_##format##_gated_t8, weight_matmul_##format##_gated, \
      weight_matmul_##format##_t1_sg, weight_matmul_##format##_t2_sg,           \
      weight_matmul_##format##_t4_sg, weight_matmul_##format##_t8_sg, weight_matmul_##format##_t16_sg, \
      weight_matmul_##format##_t32_sg;
namespace shaders {
FAFO_VULKAN_WEIGHT_FORMATS(FAFO_DECLARE_SUBGROUP_SHADERS)
}  // namespace shaders
#undef FAFO_DECLARE_SUBGROUP_SHADERS

namespace {

#define FAFO_WEIGHT_FORMAT_SHADERS(format, TYPE)                                                        \
  FormatShaders{TensorType::TYPE,                                                                       \
                {&shaders::weight_matmul_##format##_t1, &shaders::weight_matmul_##format##_t2,          \
                 &shaders::weight_matmul_##format##_t4, &shaders::weight_matmul_##format##_t8,          \
                 &shaders::weight_matmul_##format##_t16, &shaders::weight_matmul_##format##_t32},       \
                {&shaders::weight_matmul_##format##_t1_sg, &shaders::weight_matmul_##format##_t2_sg,    \
                 &shaders::weight_matmul_##format##_t4_sg, &shaders::weight_matmul_##format##_t8_sg,    \
                 &shaders::weight_matmul_##format##_t16_sg, &shaders::weight_matmul_##format##_t32_sg}, \
                {&shaders::weight_matmul_##format##_rows_t1, &shaders::weight_matmul_##format##_rows_t8,       \
                 &shaders::weight_matmul_##format##_rows},                                              \
                {&shaders::weight_matmul_##format##_gated_t1, &shaders::weight_matmul_##format##_gated_t8,     \
                 &shaders::weight_matmul_##format##_gated},                                             \
                &shaders::weight_embed_##format},
const FormatShaders kFormatShaders[] = {FAFO_VULKAN_WEIGHT_FORMATS(FAFO_WEIGHT_FORMAT_SHADERS)};
#undef FAFO_WEIGHT_FORMAT_SHADERS

const FormatShaders* find_shaders(TensorType type) {
  for (const FormatShaders& f : kFormatShaders)
    if (f.type == type) return &f;
  return nullptr;
}

std::string type_name(TensorType type) {
  const TensorTypeInfo* info = tensor_type_info(static_cast<uint32_t>(type));
  return info ? std::string(info->name) : "ggml type id " + std::to_string(static_cast<uint32_t>(type));
}

void require_bytes(const Buffer& b, uint64_t bytes, const char* what, const char* kernel) {
  if (b.size() < bytes)
    throw std::invalid_argument(std::string(kernel) + ": buffer " + what + " holds " + std::to_string(b.size()) +
                                " bytes, needs " + std::to_string(bytes));
}

// cols must be a positive whole number of blocks.
void require_cols(TensorType type, uint32_t cols, const char* kernel) {
  const uint32_t block = tensor_type_info(type).block_size;
  if (cols == 0 || cols % block != 0)
    throw std::invalid_argument(std::string(kernel) + ": cols = " + std::to_string(cols) +
                                " is not a positive multiple of the " + type_name(type) + " block size " +
                                std::to_string(block));
}

uint32_t row_bytes_u32(TensorType type, uint32_t cols, const char* kernel) {
  const uint64_t bytes = tensor_row_bytes(type, cols);
  if (bytes > UINT32_MAX)
    throw std::invalid_argument(std::string(kernel) + ": a row of " + std::to_string(cols) + " " + type_name(type) +
                                " values is over 4 GiB");
  return static_cast<uint32_t>(bytes);
}

uint32_t ceil_div(uint64_t a, uint64_t b) {
  return static_cast<uint32_t>(std::min<uint64_t>((a + b - 1) / b, UINT32_MAX));
}

// The strides of a product's shape, and its buffers against it (`w_rows` rows in w).
void check_product(TensorType type, const Buffer& w, uint64_t w_rows, const Buffer& x, const Buffer& out,
                   const MatmulShape& s, const char* kernel) {
  if (s.T > 1 && s.x_stride < s.cols)
    throw std::invalid_argument(std::string(kernel) + ": x_stride " + std::to_string(s.x_stride) + " < cols " +
                                std::to_string(s.cols));
  if (s.T > 1 && s.out_stride < uint64_t{s.out_offset} + s.rows)
    throw std::invalid_argument(std::string(kernel) + ": out_stride " + std::to_string(s.out_stride) +
                                " < out_offset + rows = " + std::to_string(uint64_t{s.out_offset} + s.rows) +
                                " (tokens' outputs would overlap)");
  if (w_rows > UINT32_MAX) throw std::invalid_argument(std::string(kernel) + ": too many weight rows");
  require_bytes(w, WeightKernels::weight_bytes(type, static_cast<uint32_t>(w_rows), s.cols),
                "w (rows rounded up to 4 bytes)", kernel);
  require_bytes(x, (uint64_t{s.T - 1} * s.x_stride + s.cols) * sizeof(float), "x", kernel);
  require_bytes(out, (uint64_t{s.T - 1} * s.out_stride + s.out_offset + s.rows) * sizeof(float), "out", kernel);
}

// The whole-rows tile for T tokens: the smallest that holds them, else the largest.
size_t whole_rows_tile(uint32_t T) {
  const auto holds = std::ranges::find_if(WeightKernels::kWholeRowsTiles, [&](uint32_t t) { return t >= T; });
  return holds != WeightKernels::kWholeRowsTiles.end()
             ? static_cast<size_t>(holds - WeightKernels::kWholeRowsTiles.begin())
             : WeightKernels::kWholeRowsTiles.size() - 1;
}

}  // namespace

WeightKernels::WeightKernels(const Context& context)
    : context_(context), cpu_device_(context.properties().deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) {
  // The subgroup variant of a tile, where the context enabled subgroups and the tile's
  // workgroup (32 lanes x rows) is a whole number of subgroups, as full subgroups need.
  const DeviceFeatures& features = context.features();
  if (features.subgroup_matmul()) {
    subgroup_options_.spec_constants = {std::min<uint32_t>(features.subgroup_size, 32)};  // SG_LANES
    subgroup_options_.require_full_subgroups = true;
    for (size_t i = 0; i < kTokenTiles.size(); ++i)
      subgroup_tiles_[i] = (32 * kSplitRowsPerWorkgroup[i]) % features.subgroup_size == 0;
  }
  formats_.reserve(std::size(kFormatShaders));
  for (const FormatShaders& sources : kFormatShaders) formats_.emplace_back().type = sources.type;
}

void WeightKernels::prepare(TensorType type) const {
  FormatPipelines& f = pipelines(type, "WeightKernels::prepare");
  embed_pipeline(f);
  if (cpu_device_) {
    for (size_t i = 0; i < kWholeRowsTiles.size(); ++i) {
      whole_rows(f, i);
      gated(f, i);
    }
    return;
  }
  for (size_t i = 0; i < kTokenTiles.size(); ++i) split_rows(f, i, subgroup_tiles_[i]);
}

const ComputePipeline& WeightKernels::split_rows(FormatPipelines& f, size_t tile_index, bool subgroup) const {
  const FormatShaders& sources = *find_shaders(f.type);
  std::unique_ptr<ComputePipeline>& slot = subgroup ? f.split_rows_subgroup[tile_index] : f.split_rows[tile_index];
  if (!slot) {
    slot = subgroup ? std::make_unique<ComputePipeline>(context_, *sources.split_rows_subgroup[tile_index], 3,
                                                        sizeof(MatmulPush), subgroup_options_)
                    : std::make_unique<ComputePipeline>(context_, *sources.split_rows[tile_index], 3, sizeof(MatmulPush));
  }
  return *slot;
}

const ComputePipeline& WeightKernels::whole_rows(FormatPipelines& f, size_t tile_index) const {
  std::unique_ptr<ComputePipeline>& slot = f.whole_rows[tile_index];
  if (!slot)
    slot = std::make_unique<ComputePipeline>(context_, *find_shaders(f.type)->whole_rows[tile_index], 3,
                                             sizeof(MatmulPush));
  return *slot;
}

const ComputePipeline& WeightKernels::gated(FormatPipelines& f, size_t tile_index) const {
  std::unique_ptr<ComputePipeline>& slot = f.gated[tile_index];
  if (!slot)
    slot = std::make_unique<ComputePipeline>(context_, *find_shaders(f.type)->gated[tile_index], 3, sizeof(MatmulPush));
  return *slot;
}

const ComputePipeline& WeightKernels::embed_pipeline(FormatPipelines& f) const {
  if (!f.embed) f.embed = std::make_unique<ComputePipeline>(context_, *find_shaders(f.type)->embed, 3, sizeof(EmbedPush));
  return *f.embed;
}

WeightKernels::~WeightKernels() = default;

bool WeightKernels::supports(TensorType type) { return find_shaders(type) != nullptr; }

bool WeightKernels::has_subgroup_variant(uint32_t tile) const {
  const auto found = std::ranges::find(kTokenTiles, tile);
  return found != kTokenTiles.end() && subgroup_tiles_[static_cast<size_t>(found - kTokenTiles.begin())];
}

std::string WeightKernels::describe() const {
  if (cpu_device_) return "matmul: whole rows (CPU device)";
  if (std::ranges::find(subgroup_tiles_, true) == subgroup_tiles_.end()) return "matmul: split rows, portable";
  return "matmul: split rows, subgroup shuffles (" +
         std::to_string(std::min<uint32_t>(context_.features().subgroup_size, 32)) + " lanes)";
}

uint64_t WeightKernels::weight_bytes(TensorType type, uint32_t rows, uint32_t cols) {
  const uint64_t bytes = uint64_t{rows} * tensor_row_bytes(type, cols);
  return (bytes + 3) / 4 * 4;
}

WeightKernels::FormatPipelines& WeightKernels::pipelines(TensorType type, const char* kernel) const {
  for (FormatPipelines& f : formats_)
    if (f.type == type) return f;
  throw std::invalid_argument(std::string(kernel) + ": weight type " + type_name(type) +
                              " is not supported by the Vulkan kernels");
}

void WeightKernels::matmul(CommandSequence& seq, TensorType type, const Buffer& w, const Buffer& x, const Buffer& out,
                           const MatmulShape& s, const MatmulVariant& variant) const {
  constexpr const char* kernel = "WeightKernels::matmul";
  FormatPipelines& f = pipelines(type, kernel);
  require_cols(type, s.cols, kernel);
  MatmulMapping mapping = variant.mapping;
  if (mapping == MatmulMapping::Auto) mapping = cpu_device_ ? MatmulMapping::WholeRows : MatmulMapping::SplitRows;
  size_t tile_index = kTokenTiles.size() - 1;
  if (mapping == MatmulMapping::WholeRows) {
    if (variant.tile != 0)
      throw std::invalid_argument(std::string(kernel) + ": tile " + std::to_string(variant.tile) +
                                  " given for the WholeRows mapping, which has no tiles (pass 0)");
  } else if (variant.tile == 0) {
    const auto fits = std::ranges::find_if(kTokenTiles, [&](uint32_t t) { return t >= s.T; });
    if (fits != kTokenTiles.end()) tile_index = static_cast<size_t>(fits - kTokenTiles.begin());
  } else {
    const auto found = std::ranges::find(kTokenTiles, variant.tile);
    if (found == kTokenTiles.end())
      throw std::invalid_argument(std::string(kernel) + ": tile " + std::to_string(variant.tile) +
                                  " is not 0 or one of 1, 2, 4, 8, 16, 32");
    tile_index = static_cast<size_t>(found - kTokenTiles.begin());
  }
  bool subgroup = false;
  if (mapping == MatmulMapping::WholeRows) {
    if (variant.reduction == MatmulReduction::Subgroup)
      throw std::invalid_argument(std::string(kernel) + ": the WholeRows mapping has no subgroup variant");
  } else if (variant.reduction == MatmulReduction::Subgroup) {
    if (!subgroup_tiles_[tile_index])
      throw std::invalid_argument(std::string(kernel) + ": no subgroup variant of SplitRows tile " +
                                  std::to_string(kTokenTiles[tile_index]) + " on " + context_.device_name() +
                                  (context_.features().subgroup_matmul()
                                       ? " (its workgroup is not a whole number of subgroups)"
                                       : " (subgroup shuffle with full subgroups not enabled; see FAFO_VULKAN_FEATURES)"));
    subgroup = true;
  } else {
    subgroup = variant.reduction == MatmulReduction::Auto && subgroup_tiles_[tile_index];
  }
  if (s.T == 0 || s.rows == 0) return;
  const uint32_t row_bytes = row_bytes_u32(type, s.cols, kernel);
  check_product(type, w, s.rows, x, out, s, kernel);

  const bool whole = mapping == MatmulMapping::WholeRows;
  const uint32_t rows_per_group = whole ? kWholeRowsPerWorkgroup : kSplitRowsPerWorkgroup[tile_index];
  const size_t whole_index = whole_rows_tile(s.T);
  const uint32_t tokens_per_tile = whole ? kWholeRowsTiles[whole_index] : kTokenTiles[tile_index];
  const uint32_t* max_groups = context_.properties().limits.maxComputeWorkGroupCount;
  auto cap = [](uint32_t limit, uint32_t asked) { return asked == 0 ? limit : std::min(limit, asked); };
  const uint32_t groups_x = std::min(ceil_div(s.rows, rows_per_group), cap(max_groups[0], variant.max_groups_x));
  const uint32_t groups_y = std::min(ceil_div(s.T, tokens_per_tile), cap(max_groups[1], variant.max_groups_y));
  const MatmulPush push{s.T, s.rows, s.cols, s.x_stride, s.out_stride, s.out_offset, row_bytes, s.accumulate ? 1u : 0u};
  const ComputePipeline& pipeline = whole ? whole_rows(f, whole_index) : split_rows(f, tile_index, subgroup);
  seq.dispatch(pipeline, {&x, &w, &out}, push, groups_x, groups_y);
}

void WeightKernels::matmul_gated(CommandSequence& seq, TensorType type, const Buffer& w, const Buffer& x,
                                 const Buffer& out, const MatmulShape& s) const {
  constexpr const char* kernel = "WeightKernels::matmul_gated";
  FormatPipelines& f = pipelines(type, kernel);
  require_cols(type, s.cols, kernel);
  if (!cpu_device_) throw std::invalid_argument(std::string(kernel) + ": only CPU devices have the gated variant");
  if (s.accumulate) throw std::invalid_argument(std::string(kernel) + ": the gated product does not accumulate");
  if (s.T == 0 || s.rows == 0) return;
  const uint32_t row_bytes = row_bytes_u32(type, s.cols, kernel);
  check_product(type, w, uint64_t{2} * s.rows, x, out, s, kernel);  // the gate's rows, then the up projection's
  const size_t tile_index = whole_rows_tile(s.T);
  const uint32_t* max_groups = context_.properties().limits.maxComputeWorkGroupCount;
  // A gated invocation computes half the rows of a plain one (their gate and up halves).
  const uint32_t groups_x = std::min(ceil_div(s.rows, kWholeRowsPerWorkgroup / 2), max_groups[0]);
  const uint32_t groups_y = std::min(ceil_div(s.T, kWholeRowsTiles[tile_index]), max_groups[1]);
  const MatmulPush push{s.T, s.rows, s.cols, s.x_stride, s.out_stride, s.out_offset, row_bytes, 0u};
  seq.dispatch(gated(f, tile_index), {&x, &w, &out}, push, groups_x, groups_y);
}

bool WeightKernels::has_gated_variant() const { return cpu_device_; }

void WeightKernels::embed(CommandSequence& seq, TensorType type, const Buffer& table, const Buffer& tokens,
                          const Buffer& out, uint32_t T, uint32_t cols, uint32_t first_row, uint32_t n_rows) const {
  constexpr const char* kernel = "WeightKernels::embed";
  FormatPipelines& f = pipelines(type, kernel);
  require_cols(type, cols, kernel);
  if (T == 0 || n_rows == 0) return;
  const uint32_t row_bytes = row_bytes_u32(type, cols, kernel);
  require_bytes(table, weight_bytes(type, n_rows, cols), "table (rows rounded up to 4 bytes)", kernel);
  require_bytes(tokens, uint64_t{T} * sizeof(uint32_t), "tokens", kernel);
  require_bytes(out, uint64_t{T} * cols * sizeof(float), "out", kernel);
  constexpr uint32_t kWorkgroupSize = 64;  // WG_SIZE in shaders/embed.comp
  const uint64_t items = uint64_t{T} * ((cols + 15) / 16);
  if (items > UINT32_MAX) throw std::invalid_argument(std::string(kernel) + ": T x cols is too large for one dispatch");
  const uint32_t groups =
      std::min(ceil_div(items, kWorkgroupSize), context_.properties().limits.maxComputeWorkGroupCount[0]);
  seq.dispatch(embed_pipeline(f), {&tokens, &table, &out}, EmbedPush{T, cols, first_row, n_rows, row_bytes}, groups);
}

}  // namespace fafo::vulkan
