// The compute kernels written so far, each recorded into a CommandSequence. The
// pipelines are created once, with the Kernels object.
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
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;

  // out[r][i] = x[r][i] / sqrt(mean(x[r]^2) + eps) * gain[i]; x and out are rows x n.
  void rms_norm(CommandSequence& seq, const Buffer& x, const Buffer& gain, const Buffer& out, uint32_t rows,
                uint32_t n, float eps) const;

  // out[T x rows] = x[T x cols] * W^T with W rows x cols (F32). tile picks the shader
  // variant: 1 (mat-vec) or 4 tokens per workgroup; 0 picks by T.
  void matmul_f32(CommandSequence& seq, const Buffer& x, const Buffer& w, const Buffer& out, uint32_t T,
                  uint32_t rows, uint32_t cols, uint32_t tile = 0) const;

 private:
  const Context& context_;
  std::unique_ptr<ComputePipeline> rms_norm_;
  std::unique_ptr<ComputePipeline> matmul_f32_t1_;
  std::unique_ptr<ComputePipeline> matmul_f32_t4_;
};

}  // namespace fafo::vulkan
