#include "backend/vulkan/weight_kernels.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "backend/vulkan/buffer.h"
#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/pipeline.h"
#include "backend/vulkan/transfer.h"
#include "fafo/progress.h"
#include "quant/iq_grids.h"

namespace fafo::vulkan {

namespace {

// Push constants, laid out as shaders/matmul.comp and shaders/embed.comp declare them.
struct WeightMatmulPush {
  uint32_t T;
  uint32_t rows;
  uint32_t cols;
  uint32_t x_stride;
  uint32_t out_stride;
  uint32_t out_offset;
  uint32_t row_bytes;
  uint32_t accumulate;
  float eps;
};
struct EmbedPush {
  uint32_t T;
  uint32_t cols;
  uint32_t first_row;
  uint32_t n_rows;
  uint32_t row_bytes;
};

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
                   const MatmulShape& s, bool int8, const char* kernel) {
  if (!int8 && s.T > 1 && s.x_stride < s.cols)
    throw std::invalid_argument(std::string(kernel) + ": x_stride " + std::to_string(s.x_stride) + " < cols " +
                                std::to_string(s.cols));
  if (s.T > 1 && s.out_stride < uint64_t{s.out_offset} + s.rows)
    throw std::invalid_argument(std::string(kernel) + ": out_stride " + std::to_string(s.out_stride) +
                                " < out_offset + rows = " + std::to_string(uint64_t{s.out_offset} + s.rows) +
                                " (tokens' outputs would overlap)");
  if (w_rows > UINT32_MAX) throw std::invalid_argument(std::string(kernel) + ": too many weight rows");
  require_bytes(w, WeightKernels::weight_bytes(type, static_cast<uint32_t>(w_rows), s.cols),
                "w (rows rounded up to 4 bytes)", kernel);
  const uint64_t x_row = int8 ? uint64_t{s.cols} / 4 + s.cols / 16 : s.cols;  // words or floats
  if (int8 && s.T > 1 && s.x_stride < x_row)
    throw std::invalid_argument(std::string(kernel) + ": x_stride " + std::to_string(s.x_stride) + " < " +
                                std::to_string(x_row) + " words of a rounded row");
  require_bytes(x, (uint64_t{s.T - 1} * s.x_stride + x_row) * 4, int8 ? "x (rounded rows)" : "x", kernel);
  require_bytes(out, (uint64_t{s.T - 1} * s.out_stride + s.out_offset + s.rows) * sizeof(float), "out", kernel);
}

}  // namespace

WeightKernels::WeightKernels(const Context& context)
    : context_(context), cpu_device_(context.properties().deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU) {
  // Subgroup variants where the context enabled subgroup matmuls: a variant fits where its
  // workgroup (32 lanes x rows) is a whole number of subgroups, as full subgroups need.
  const DeviceFeatures& features = context.features();
  if (features.subgroup_matmul()) {
    subgroup_size_ = features.subgroup_size;
    subgroup_options_.spec_constants = {std::min<uint32_t>(features.subgroup_size, 32)};  // SG_LANES
    subgroup_options_.require_full_subgroups = true;
  }
  const std::span<const WeightShader> all = weight_shaders();
  dot_ = features.integer_dot_product && std::ranges::any_of(all, [](const WeightShader& v) { return v.key.dot; });
  for (size_t first = 0; first < all.size();) {
    size_t end = first;
    while (end < all.size() && all[end].type == all[first].type) ++end;
    FormatPipelines& f = formats_.emplace_back();
    f.type = all[first].type;
    f.variants = all.subspan(first, end - first);
    f.made.resize(f.variants.size());
    first = end;
  }
  tiles_ = find_matrix_tiles();
  std::vector<uint32_t> words;
  for (const std::span<const uint16_t> packed :
       {std::span<const uint16_t>(quant::grid_detail::kIq2xxsPacked), std::span<const uint16_t>(quant::grid_detail::kIq2xsPacked),
        std::span<const uint16_t>(quant::grid_detail::kIq3xxsPacked), std::span<const uint16_t>(quant::grid_detail::kIq3sPacked)})
    words.insert(words.end(), packed.begin(), packed.end());
  codebooks_ = std::make_unique<Buffer>(context_, words.size() * sizeof(uint32_t), Memory::Device);
  Transfer(context_).upload(*codebooks_, words.data(), words.size() * sizeof(uint32_t));
}

WeightKernels::~WeightKernels() = default;

bool WeightKernels::reads_codebook(TensorType type) {
  return type == TensorType::IQ2_XXS || type == TensorType::IQ2_XS || type == TensorType::IQ3_XXS ||
         type == TensorType::IQ3_S;
}

bool WeightKernels::subgroup_fits(const WeightShader& shader) const {
  return subgroup_size_ != 0 && (32 * shader.rows_per_group) % subgroup_size_ == 0;
}

bool WeightKernels::shared_fits(const WeightShader& shader) const {
  return shader.shared_bytes <= context_.properties().limits.maxComputeSharedMemorySize;
}

std::optional<bool> WeightKernels::find_matrix_tiles() const {
  // Every format's tiles must fit the device's shared memory (Q4_K's are the largest).
  for (const WeightShader& v : weight_shaders())
    if (v.key.kind == WeightShaderKey::Kind::MatrixTiles && !shared_fits(v)) return std::nullopt;
  switch (tiles_use_) {
    case MatrixTilesUse::Off:
      return std::nullopt;
    case MatrixTilesUse::Loops:
      return false;
    case MatrixTilesUse::Auto:
      break;
  }
  return context_.features().int8_matrix ? std::optional<bool>(true) : std::nullopt;
}

void WeightKernels::prepare(std::span<const TensorType> types, bool norm, bool int8) const {
  constexpr const char* kernel = "WeightKernels::prepare";
  struct Wanted {
    FormatPipelines* format;
    size_t variant;
  };
  std::vector<Wanted> wanted;
  std::string names;  // the formats that have pipelines to create
  const std::optional<bool> tiles = matrix_tiles();
  for (size_t t = 0; t < types.size(); ++t) {
    const std::span<const TensorType> earlier = types.first(t);
    if (std::ranges::find(earlier, types[t]) != earlier.end()) continue;  // named twice
    FormatPipelines& f = pipelines(types[t], kernel);
    const size_t before = wanted.size();
    for (size_t i = 0; i < f.variants.size(); ++i) {
      const WeightShader& v = f.variants[i];
      const WeightShaderKey& k = v.key;
      if (f.made[i] || (k.norm && !norm) || (k.int8 && !int8)) continue;
      if (int8 && !k.int8 && k.kind != WeightShaderKey::Kind::Embed && has_int8(f.type)) continue;  // not used then
      if (k.int8 && k.kind == WeightShaderKey::Kind::SplitRows && k.dot != dot_) continue;
      const bool automatic = k.kind == WeightShaderKey::Kind::Embed ||
                             (k.kind == WeightShaderKey::Kind::MatrixTiles ? tiles && *tiles == k.matrix
                              : cpu_device_ ? k.kind == WeightShaderKey::Kind::WholeRows
                                            : k.kind == WeightShaderKey::Kind::SplitRows && k.subgroup == subgroup_fits(v));
      if (automatic) wanted.push_back({&f, i});
    }
    if (wanted.size() > before) names += (names.empty() ? "" : ", ") + type_name(f.type);
  }
  if (wanted.empty()) return;
  ProgressTask progress("creating Vulkan pipelines for " + names + " weights", wanted.size());
  std::vector<std::unique_ptr<ComputePipeline>*> slots;
  std::vector<std::pair<const WeightShader*, uint32_t>> made_from;
  for (const Wanted& w : wanted) {
    slots.push_back(&w.format->made[w.variant]);
    made_from.push_back({&w.format->variants[w.variant], 0});
  }
  create_pipelines(slots, made_from, progress);
}

void WeightKernels::create_pipelines(const std::vector<std::unique_ptr<ComputePipeline>*>& slots,
                                     const std::vector<std::pair<const WeightShader*, uint32_t>>& made_from,
                                     ProgressTask& progress) const {
  // A driver compiles a pipeline on the thread that creates it, and NVIDIA's take about
  // 0.3 s each at first (94.7 s for the 13 formats' pipelines, one after another, on an
  // H100, 2026-11-27): the pipelines are created on several threads at once.
  const size_t n_threads = std::min<size_t>({slots.size(), std::max(1u, std::thread::hardware_concurrency()), 16});
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(slots.size());
  auto work = [&] {
    for (size_t j = next++; j < slots.size(); j = next++) {
      try {
        *slots[j] = make_pipeline(*made_from[j].first, made_from[j].second);
        progress.advance();
      } catch (...) {
        errors[j] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < n_threads; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);  // the first in the list's order, whichever thread met it
}

void WeightKernels::prepare_candidates(const std::vector<TunedShape>& shapes) const {
  std::vector<std::unique_ptr<ComputePipeline>*> slots;
  std::vector<std::pair<const WeightShader*, uint32_t>> made_from;
  for (const TunedShape& shape : shapes) {
    FormatPipelines& f = pipelines(shape.type, "WeightKernels::prepare_candidates");
    for (size_t i = 0; i < f.variants.size(); ++i) {
      if (!(f.variants[i].key == shape.key)) continue;
      for (const uint32_t rows : row_candidates(shape)) {
        std::unique_ptr<ComputePipeline>* slot =
            rows == f.variants[i].rows_per_group ? &f.made[i] : &f.resized[{i, rows}];
        if (*slot || std::ranges::find(slots, slot) != slots.end()) continue;
        slots.push_back(slot);
        made_from.push_back({&f.variants[i], rows});
      }
    }
  }
  if (slots.empty()) return;
  ProgressTask progress("creating Vulkan pipelines to tune", slots.size());
  create_pipelines(slots, made_from, progress);
}

std::unique_ptr<ComputePipeline> WeightKernels::make_pipeline(const WeightShader& v, uint32_t rows) const {
  const bool embed = v.key.kind == WeightShaderKey::Kind::Embed;
  const uint32_t bindings = reads_codebook(v.type) ? 5 : v.key.norm ? 4 : 3;
  const uint32_t push = embed ? sizeof(EmbedPush) : sizeof(WeightMatmulPush);
  PipelineOptions options = v.key.subgroup ? subgroup_options_ : PipelineOptions{};
  if (rows != 0 && rows != v.rows_per_group) {
    // matmul.comp: constant 0 is SG_LANES (subgroup variants; others have no constant 0),
    // constant 1 the workgroup size.
    if (options.spec_constants.empty()) options.spec_constants.push_back(0);
    options.spec_constants.resize(1);
    options.spec_constants.push_back(workgroup_size(v, rows));
  }
  return std::make_unique<ComputePipeline>(context_, *v.shader, bindings, push, options);
}

WeightKernels::Chosen WeightKernels::variant(FormatPipelines& f, const WeightShaderKey& key, const char* kernel) const {
  for (size_t i = 0; i < f.variants.size(); ++i) {
    const WeightShader& v = f.variants[i];
    if (!(v.key == key)) continue;
    std::unique_ptr<ComputePipeline>& slot = f.made[i];
    if (!slot) slot = make_pipeline(v);
    return Chosen{&v, slot.get(), i};
  }
  throw std::invalid_argument(std::string(kernel) + ": no such variant of the " + type_name(f.type) + " kernels");
}

bool WeightKernels::supports(TensorType type) {
  return std::ranges::any_of(weight_shaders(), [&](const WeightShader& v) { return v.type == type; });
}

bool WeightKernels::has_int8(TensorType type) {
  // Asked for every product of a step: the table's formats read once.
  static const std::vector<TensorType> types = [] {
    std::vector<TensorType> out;
    for (const WeightShader& v : weight_shaders())
      if (v.key.int8 && std::ranges::find(out, v.type) == out.end()) out.push_back(v.type);
    return out;
  }();
  return std::ranges::find(types, type) != types.end();
}

bool WeightKernels::has_subgroup_variant(uint32_t tile) const {
  if (subgroup_size_ == 0 || formats_.empty()) return false;
  const WeightShaderKey key{WeightShaderKey::Kind::SplitRows, tile, true, false, false};
  return std::ranges::any_of(formats_.front().variants,
                             [&](const WeightShader& v) { return v.key == key && subgroup_fits(v); });
}

std::string WeightKernels::describe() const {
  const std::optional<bool> tiles = matrix_tiles();
  const std::string wide =
      !tiles ? ""
             : std::string("; integer products of steps over 8 tokens in matrix tiles (") +
                   (*tiles ? "cooperative matrix" : "plain loops") + ")";
  if (cpu_device_) return "matmul: whole rows (CPU device)" + wide;
  if (subgroup_size_ == 0) return "matmul: split rows, portable" + wide;
  return "matmul: split rows, subgroup shuffles (" + std::to_string(std::min<uint32_t>(subgroup_size_, 32)) +
         " lanes)" + wide;
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

WeightShaderKey WeightKernels::choose(const MatmulShape& s, const MatmulVariant& v, bool gated, bool norm,
                                      const char* kernel) const {
  WeightShaderKey key;
  key.gated = gated;
  key.norm = norm;
  key.int8 = v.int8;
  if (v.int8 && norm)
    throw std::invalid_argument(std::string(kernel) + ": integer products take rounded activations, no fused RMSNorm");
  MatmulMapping mapping = v.mapping;
  const std::optional<bool> tiles = matrix_tiles();
  const bool auto_tiles = mapping == MatmulMapping::Auto && v.int8 && s.T > kMaxSplitTokens && v.tile == 0 && tiles;
  if (auto_tiles) mapping = MatmulMapping::MatrixTiles;
  if (mapping == MatmulMapping::Auto) mapping = cpu_device_ ? MatmulMapping::WholeRows : MatmulMapping::SplitRows;
  if (mapping == MatmulMapping::MatrixTiles) {
    if (!v.int8)
      throw std::invalid_argument(std::string(kernel) + ": the MatrixTiles mapping is for integer products (int8)");
    if (v.tile != 0 && v.tile != kMatrixTileTokens)
      throw std::invalid_argument(std::string(kernel) + ": the MatrixTiles mapping has tiles of " +
                                  std::to_string(kMatrixTileTokens) + " tokens, not " + std::to_string(v.tile));
    if (v.reduction == MatmulReduction::Subgroup)
      throw std::invalid_argument(std::string(kernel) + ": the MatrixTiles mapping has no subgroup variant");
    const bool instructions = v.matrix.value_or(auto_tiles ? *tiles : context_.features().int8_matrix);
    if (instructions && !context_.features().int8_matrix)
      throw std::invalid_argument(std::string(kernel) + ": no 8-bit cooperative-matrix instructions on " +
                                  context_.device_name() +
                                  (context_.detected_features().int8_matrix
                                       ? " (turned off by FAFO_VULKAN_FEATURES)"
                                       : " (DeviceFeatures::int8_matrix: VK_NV_cooperative_matrix with a 16x8x32 "
                                         "signed 8-bit shape)"));
    key.kind = WeightShaderKey::Kind::MatrixTiles;
    key.tile = kMatrixTileTokens;
    key.matrix = instructions;
    return key;
  }
  if (v.matrix)
    throw std::invalid_argument(std::string(kernel) + ": MatmulVariant::matrix is for the MatrixTiles mapping");
  if (norm && s.T > kMaxNormTokens)
    throw std::invalid_argument(std::string(kernel) + ": a fused RMSNorm takes at most " +
                                std::to_string(kMaxNormTokens) + " tokens, not " + std::to_string(s.T));
  auto smallest_holding = [&](std::span<const uint32_t> sizes) {
    const auto holds = std::ranges::find_if(sizes, [&](uint32_t t) { return t >= s.T; });
    return holds != sizes.end() ? *holds : sizes.back();
  };
  if (mapping == MatmulMapping::WholeRows) {
    if (v.tile != 0)
      throw std::invalid_argument(std::string(kernel) + ": tile " + std::to_string(v.tile) +
                                  " given for the WholeRows mapping, which has no tiles (pass 0)");
    if (v.reduction == MatmulReduction::Subgroup)
      throw std::invalid_argument(std::string(kernel) + ": the WholeRows mapping has no subgroup variant");
    key.kind = WeightShaderKey::Kind::WholeRows;
    key.tile = smallest_holding(kWholeRowsTiles);
    return key;
  }
  key.kind = WeightShaderKey::Kind::SplitRows;
  if (v.tile == 0) {
    key.tile = smallest_holding(kTokenTiles);
  } else {
    if (std::ranges::find(kTokenTiles, v.tile) == kTokenTiles.end())
      throw std::invalid_argument(std::string(kernel) + ": tile " + std::to_string(v.tile) +
                                  " is not 0 or one of 1, 2, 4, 8, 16, 32");
    if (norm && v.tile > kMaxNormTokens)
      throw std::invalid_argument(std::string(kernel) + ": a fused RMSNorm has no tile of " + std::to_string(v.tile) +
                                  " tokens");
    key.tile = v.tile;
  }
  return key;
}

void WeightKernels::product(CommandSequence& seq, TensorType type, const Buffer& w, uint64_t w_rows, const Buffer& x,
                            const Buffer& out, const MatmulShape& s, const MatmulVariant& v, const InputNorm& norm,
                            bool gated, const char* kernel) const {
  FormatPipelines& f = pipelines(type, kernel);
  require_cols(type, s.cols, kernel);
  if (v.int8 && !has_int8(type))
    throw std::invalid_argument(std::string(kernel) + ": no integer products for " + type_name(type) +
                                " weights (every block format but Q2_K and the IQ2/IQ3 codebooks has them)");
  if (gated && s.accumulate) throw std::invalid_argument(std::string(kernel) + ": the gated product does not accumulate");
  const WeightShaderKey key = final_key(f, s, v, gated, norm.gain != nullptr, kernel);
  if (s.T == 0 || s.rows == 0) return;
  const uint32_t row_bytes = row_bytes_u32(type, s.cols, kernel);
  check_product(type, w, w_rows, x, out, s, v.int8, kernel);
  if (norm.gain) require_bytes(*norm.gain, uint64_t{s.cols} * sizeof(float), "gain", kernel);
  Chosen chosen = variant(f, key, kernel);
  if (!shared_fits(*chosen.shader))
    throw std::invalid_argument(std::string(kernel) + ": the " + type_name(type) + " matrix tiles need " +
                                std::to_string(chosen.shader->shared_bytes) + " bytes of shared memory; " +
                                context_.device_name() + " has " +
                                std::to_string(context_.properties().limits.maxComputeSharedMemorySize));
  // Rows per workgroup: the one asked for, else the tuned one, else the variant's.
  uint32_t rows = v.rows_per_group;
  if (rows == 0 && (tuning_ || collect_)) {
    const TunedShape shape{type, s.rows, s.cols, key};
    const std::optional<uint32_t> tuned = tuning_ ? tuning_->rows_for(shape) : std::nullopt;
    if (tuned) {
      // A kept choice that is not a candidate here (a damaged file) is ignored.
      rows = *tuned;
      if (rows != chosen.shader->rows_per_group) {
        const std::vector<uint32_t> candidates = row_candidates(shape);
        if (std::ranges::find(candidates, rows) == candidates.end()) rows = 0;
      }
    } else if (collect_ && key.kind != WeightShaderKey::Kind::MatrixTiles) {
      auto u = std::ranges::find_if(untuned_, [&](const Untuned& n) { return n.shape == shape; });
      if (u == untuned_.end()) u = untuned_.insert(untuned_.end(), Untuned{shape, {}});
      if (u->weights.size() < kMaxTuningWeights && std::ranges::find(u->weights, &w) == u->weights.end())
        u->weights.push_back(&w);
    }
  }
  if (rows != 0 && rows != chosen.shader->rows_per_group) {
    const TunedShape shape{type, s.rows, s.cols, key};
    const std::vector<uint32_t> candidates = row_candidates(shape);
    if (std::ranges::find(candidates, rows) == candidates.end())
      throw std::invalid_argument(std::string(kernel) + ": " + std::to_string(rows) +
                                  " rows per workgroup is not a candidate of " + shape.text() + " here");
    std::unique_ptr<ComputePipeline>& slot = f.resized[{chosen.index, rows}];
    if (!slot) slot = make_pipeline(*chosen.shader, rows);
    chosen.pipeline = slot.get();
  } else {
    rows = chosen.shader->rows_per_group;
  }
  const uint32_t* max_groups = context_.properties().limits.maxComputeWorkGroupCount;
  auto cap = [](uint32_t limit, uint32_t asked) { return asked == 0 ? limit : std::min(limit, asked); };
  const uint32_t groups_x = std::min(ceil_div(s.rows, rows), cap(max_groups[0], v.max_groups_x));
  const uint32_t groups_y = std::min(ceil_div(s.T, key.tile), cap(max_groups[1], v.max_groups_y));
  const WeightMatmulPush push{s.T,          s.rows,    s.cols, s.x_stride, s.out_stride, s.out_offset,
                        row_bytes,    s.accumulate ? 1u : 0u, norm.eps};
  if (reads_codebook(type))
    seq.dispatch(*chosen.pipeline, {&x, &w, &out, norm.gain ? norm.gain : codebooks_.get(), codebooks_.get()}, push,
                 groups_x, groups_y);
  else if (norm.gain)
    seq.dispatch(*chosen.pipeline, {&x, &w, &out, norm.gain}, push, groups_x, groups_y);
  else
    seq.dispatch(*chosen.pipeline, {&x, &w, &out}, push, groups_x, groups_y);
}

WeightShaderKey WeightKernels::final_key(FormatPipelines& f, const MatmulShape& s, const MatmulVariant& v, bool gated,
                                         bool norm, const char* kernel) const {
  WeightShaderKey key = choose(s, v, gated, norm, kernel);
  if (v.dot.value_or(false) && !v.int8) throw std::invalid_argument(std::string(kernel) + ": the dot product instruction is for int8 products");
  if (key.int8 && key.kind == WeightShaderKey::Kind::SplitRows) {
    if (v.dot.value_or(dot_) && !dot_)
      throw std::invalid_argument(std::string(kernel) + ": no integer dot product instruction here (" +
                                  (context_.features().integer_dot_product ? "this build has no variants with it"
                                                                           : "the device's feature is absent or turned off") +
                                  ")");
    key.dot = v.dot.value_or(dot_);
  } else if (v.dot.value_or(false)) {
    throw std::invalid_argument(std::string(kernel) + ": the dot product instruction is for the SplitRows mapping");
  }
  if (key.kind == WeightShaderKey::Kind::SplitRows) {
    WeightShaderKey sg = key;
    sg.subgroup = true;
    Chosen with_subgroup = Chosen{nullptr, nullptr};
    for (const WeightShader& candidate : f.variants)
      if (candidate.key == sg && subgroup_fits(candidate)) with_subgroup.shader = &candidate;
    if (v.reduction == MatmulReduction::Subgroup && !with_subgroup.shader)
      throw std::invalid_argument(std::string(kernel) + ": no subgroup variant of SplitRows tile " +
                                  std::to_string(key.tile) + " on " + context_.device_name() +
                                  (context_.features().subgroup_matmul()
                                       ? " (its workgroup is not a whole number of subgroups)"
                                       : " (subgroup shuffle with full subgroups not enabled; see FAFO_VULKAN_FEATURES)"));
    if (with_subgroup.shader && v.reduction != MatmulReduction::Portable) key = sg;
  }
  return key;
}

TunedShape WeightKernels::shape_of(TensorType type, const MatmulShape& s, const MatmulVariant& v, bool gated,
                                   bool norm) const {
  constexpr const char* kernel = "WeightKernels::shape_of";
  FormatPipelines& f = pipelines(type, kernel);
  return TunedShape{type, s.rows, s.cols, final_key(f, s, v, gated, norm, kernel)};
}

const WeightShader* WeightKernels::shader_of(const TunedShape& shape) const {
  for (const FormatPipelines& f : formats_)
    if (f.type == shape.type)
      for (const WeightShader& v : f.variants)
        if (v.key == shape.key) return &v;
  return nullptr;
}

uint32_t WeightKernels::default_rows(const TunedShape& shape) const {
  const WeightShader* v = shader_of(shape);
  if (!v) throw std::invalid_argument("WeightKernels::default_rows: no variant for " + shape.text());
  return v->rows_per_group;
}

uint32_t WeightKernels::workgroup_size(const WeightShader& v, uint32_t rows) {
  if (v.key.kind == WeightShaderKey::Kind::WholeRows) return rows / (v.key.gated ? kWholeRowsOut / 2 : kWholeRowsOut);
  return 32 * rows;
}

std::vector<uint32_t> WeightKernels::row_candidates(const TunedShape& shape) const {
  const WeightShader* v = shader_of(shape);
  if (!v) throw std::invalid_argument("WeightKernels::row_candidates: no variant for " + shape.text());
  const VkPhysicalDeviceLimits& limits = context_.properties().limits;
  std::vector<uint32_t> out;
  if (shape.key.kind == WeightShaderKey::Kind::SplitRows) {
    const uint32_t sums = shape.key.gated ? 2 : 1;
    const uint32_t lanes = shape.key.subgroup ? std::min<uint32_t>(subgroup_size_, 32) : 0;
    for (uint32_t rows = 1; rows <= 16; rows *= 2) {
      const uint32_t wg = workgroup_size(*v, rows);
      if (wg > limits.maxComputeWorkGroupInvocations || wg > limits.maxComputeWorkGroupSize[0]) continue;
      if (shape.key.subgroup && (subgroup_size_ == 0 || wg % subgroup_size_ != 0)) continue;
      // matmul.comp's shared floats: the lane sums (none with 32-lane subgroups), the norm's.
      const uint64_t floats = (shape.key.subgroup && lanes >= 32 ? 1 : uint64_t{rows} * shape.key.tile * sums * 33) +
                              (shape.key.norm ? uint64_t{shape.key.tile} * 32 : 0);
      if (floats * 4 > limits.maxComputeSharedMemorySize) continue;
      out.push_back(rows);
    }
  } else if (shape.key.kind == WeightShaderKey::Kind::WholeRows) {
    const uint32_t per_invocation = shape.key.gated ? kWholeRowsOut / 2 : kWholeRowsOut;
    for (uint32_t invocations = 2; invocations <= 32; invocations *= 2)
      if (invocations <= limits.maxComputeWorkGroupInvocations && invocations <= limits.maxComputeWorkGroupSize[0])
        out.push_back(invocations * per_invocation);
  }
  if (std::ranges::find(out, v->rows_per_group) == out.end()) {
    out.push_back(v->rows_per_group);
    std::ranges::sort(out);
  }
  return out;
}

std::vector<WeightKernels::Untuned> WeightKernels::take_untuned() const {
  std::vector<Untuned> out;
  out.swap(untuned_);
  return out;
}

void WeightKernels::matmul(CommandSequence& seq, TensorType type, const Buffer& w, const Buffer& x, const Buffer& out,
                           const MatmulShape& s, const MatmulVariant& variant, const InputNorm& norm) const {
  product(seq, type, w, s.rows, x, out, s, variant, norm, false, "WeightKernels::matmul");
}

void WeightKernels::matmul_gated(CommandSequence& seq, TensorType type, const Buffer& w, const Buffer& x,
                                 const Buffer& out, const MatmulShape& s, const MatmulVariant& variant,
                                 const InputNorm& norm) const {
  // W holds the gate's rows, then the up projection's.
  product(seq, type, w, uint64_t{2} * s.rows, x, out, s, variant, norm, true, "WeightKernels::matmul_gated");
}

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
  const Chosen chosen = variant(f, WeightShaderKey{}, kernel);
  const EmbedPush push{T, cols, first_row, n_rows, row_bytes};
  if (reads_codebook(type))
    seq.dispatch(*chosen.pipeline, {&tokens, &table, &out, codebooks_.get(), codebooks_.get()}, push, groups);
  else
    seq.dispatch(*chosen.pipeline, {&tokens, &table, &out}, push, groups);
}

}  // namespace fafo::vulkan
