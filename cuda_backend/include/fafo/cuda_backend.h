// The CUDA backend (`--backend cuda`, NVIDIA GPUs; built where a CUDA toolkit is found:
// cmake/cuda.cmake). Registered in the backend registry as "cuda" when built; listed by
// `fafo devices` with each GPU's compute capability, memory and memory bandwidth.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fafo/backend.h"

namespace fafo::cuda {

// The kernels the backend runs its matrix products, RMSNorms and attention with:
//   - Fast (the default): the warp kernels (cuda_backend/src/warp_ops.h: a warp per
//     output row and up to 8 tokens, per RMSNorm row, per (attention part, group of
//     query heads, row)), with integer products for weights in every block format but Q2_K and the IQ2/IQ3 codebooks
//     (int_ops.h: activations rounded to 8 bits per block of 32, exact integer block
//     sums, as llama.cpp's CUDA backend does; within the rounded-product tolerance),
//     and tensor-core products for F16 weights (half_mma_ops.h: activations rounded to
//     halves; within the half-product tolerance);
//   - Warp: the same warp kernels with float products for every format (the plain
//     kernels' bits for products and norms);
//   - Plain: one thread per output, row or (row, head) (ops.h).
// Attention gives the same results with Fast and Warp, and within the backend's
// tolerance with Plain. The environment variable FAFO_CUDA_KERNELS=fast, warp or plain
// picks one for backends made without a choice; unset: Fast.
enum class CudaKernels { Plain, Warp, Fast };
// FAFO_CUDA_KERNELS's choice (std::invalid_argument for another value).
inline CudaKernels cuda_kernels_from_env() {
  const char* v = std::getenv("FAFO_CUDA_KERNELS");
  if (v == nullptr || *v == '\0' || std::string(v) == "fast") return CudaKernels::Fast;
  if (std::string(v) == "warp") return CudaKernels::Warp;
  if (std::string(v) == "plain") return CudaKernels::Plain;
  throw std::invalid_argument("FAFO_CUDA_KERNELS is '" + std::string(v) + "': it must be fast, warp or plain");
}

// FAFO_CUDA_GRAPHS=1: a step whose shape ran before is captured into a CUDA graph and
// launched as one (cuda_backend/src/step_graphs.h); unset or 0: every kernel launched
// on its own (the default until a GPU run has checked the graphs). Another value is an
// std::invalid_argument.
inline bool cuda_graphs_from_env() {
  const char* v = std::getenv("FAFO_CUDA_GRAPHS");
  if (v == nullptr || *v == '\0' || std::string(v) == "0") return false;
  if (std::string(v) == "1") return true;
  throw std::invalid_argument("FAFO_CUDA_GRAPHS is '" + std::string(v) + "': it must be 0 or 1");
}

// FAFO_CUDA_WIDE_TOKENS=16, 32 or 64: the tokens a block of the tensor-core integer
// products of wide steps takes (cuda_backend/src/int_mma_block_op.h: each weight is read
// once per that many tokens; fewer tokens, smaller blocks, more of them per SM); unset:
// 64. The same bits whichever; the GPU run measures each. Another value is an
// std::invalid_argument.
inline uint32_t cuda_wide_tokens_from_env() {
  const char* v = std::getenv("FAFO_CUDA_WIDE_TOKENS");
  if (v == nullptr || *v == '\0') return 64;
  const std::string s(v);
  if (s == "16" || s == "32" || s == "64") return static_cast<uint32_t>(std::stoul(s));
  throw std::invalid_argument("FAFO_CUDA_WIDE_TOKENS is '" + s + "': it must be 16, 32 or 64");
}

// The CUDA backend's code with its kernels run on the host (HostDevice: one index after
// another, a warp's lanes phase by phase): what tests use where there is no GPU. Always
// built; slow. `kernels`: else cuda_kernels_from_env(). `fuse` (warp kernels): the fused
// products (the attention projections as one with RoPE and the stores after it, the
// gate and up projections as one with the SwiGLU, RMSNorm inside products), which give
// the same bits as the ops apart.
// `graphs`: else cuda_graphs_from_env() (the host device records a captured step and
// runs it at its end, as a graph).
std::unique_ptr<Backend> make_emulated_backend(std::optional<CudaKernels> kernels = std::nullopt, bool fuse = true,
                                               std::optional<bool> graphs = std::nullopt);

}  // namespace fafo::cuda
