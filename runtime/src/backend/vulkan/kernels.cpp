#include "backend/vulkan/kernels.h"

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

void require_size(const Buffer& b, uint64_t floats, const char* what, const char* kernel) {
  const uint64_t bytes = floats * sizeof(float);
  if (b.size() < bytes)
    throw std::invalid_argument(std::string(kernel) + ": buffer " + what + " holds " + std::to_string(b.size()) +
                                " bytes, needs " + std::to_string(bytes));
}

}  // namespace

Kernels::Kernels(const Context& context)
    : context_(context),
      rms_norm_(std::make_unique<ComputePipeline>(context, shaders::rms_norm, 3, sizeof(RmsNormPush))),
      matmul_f32_t1_(std::make_unique<ComputePipeline>(context, shaders::matmul_f32_t1, 3, sizeof(MatmulPush))),
      matmul_f32_t4_(std::make_unique<ComputePipeline>(context, shaders::matmul_f32_t4, 3, sizeof(MatmulPush))) {}

Kernels::~Kernels() = default;

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

}  // namespace fafo::vulkan
