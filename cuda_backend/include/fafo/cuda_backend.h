// The CUDA backend (`--backend cuda`, NVIDIA GPUs; built where a CUDA toolkit is found:
// cmake/cuda.cmake). Registered in the backend registry as "cuda" when built; listed by
// `fafo devices` with each GPU's compute capability, memory and memory bandwidth.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "fafo/backend.h"

namespace fafo::cuda {

// The CUDA backend's code with its kernels run on the host, one index after another
// (HostDevice): what tests use where there is no GPU. Always built; slow.
std::unique_ptr<Backend> make_emulated_backend();

}  // namespace fafo::cuda
