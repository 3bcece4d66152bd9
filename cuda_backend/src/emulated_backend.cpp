// The CUDA backend over the host device (host_device.h): every kernel of ops.h run on
// the CPU. Compiled with -ffp-contract=off, as block_decode.h requires on the host.
#include <memory>
#include <string>

#include "fafo/cuda_backend.h"
#include "host_device.h"
#include "ops_backend.h"

namespace fafo::cuda {

std::unique_ptr<Backend> make_emulated_backend(std::optional<CudaKernels> kernels, bool fuse, std::optional<bool> graphs) {
  auto device = std::make_unique<HostDevice>();
  const std::string describe = "CUDA backend, " + device->description();
  return std::make_unique<OpsBackend<HostDevice>>(std::move(device), "cuda-emulated", describe,
                                                  kernels ? *kernels : cuda_kernels_from_env(), fuse,
                                                  graphs ? *graphs : cuda_graphs_from_env());
}

}  // namespace fafo::cuda
