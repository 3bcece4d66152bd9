// The CUDA backend on a GPU: OpsBackend over CudaDevice, its devices as the registry
// lists them, and its registration ("cuda").
#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda_device.cuh"
#include "fafo/backend_registry.h"
#include "fafo/cuda_backend.h"
#include "ops_backend.h"

namespace fafo {
namespace cuda {
namespace {

struct GpuInfo {
  int index = 0;
  cudaDeviceProp props{};
  double bandwidth_gbs = 0;  // peak memory bandwidth from the memory clock and bus width
  bool has_kernels = false;  // the build holds code this GPU runs (CMAKE_CUDA_ARCHITECTURES)
  size_t free_bytes = 0;     // cudaMemGetInfo's free memory (0: not known)
};

// The GPUs the CUDA runtime finds, or the reason there are none.
std::vector<GpuInfo> list_gpus(std::string& why_none) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    why_none = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error
    return {};
  }
  if (count == 0) why_none = "no CUDA device";
  int current = 0;
  const bool restore = cudaGetDevice(&current) == cudaSuccess;
  std::vector<GpuInfo> out;
  for (int i = 0; i < count; ++i) {
    GpuInfo g;
    g.index = i;
    if (cudaGetDeviceProperties(&g.props, i) != cudaSuccess) continue;
    int clock_khz = 0;
    if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, i) == cudaSuccess)
      g.bandwidth_gbs = 2.0 * clock_khz * 1e3 * (g.props.memoryBusWidth / 8.0) / 1e9;  // double data rate
    // A kernel's attributes exist for a GPU only where the build has SASS or PTX it runs.
    cudaFuncAttributes attributes{};
    g.has_kernels = cudaSetDevice(i) == cudaSuccess && cudaFuncGetAttributes(&attributes, probe_int8_mma) == cudaSuccess;
    cudaGetLastError();  // clear what a failed probe left
    size_t total = 0;
    if (cudaSetDevice(i) != cudaSuccess || cudaMemGetInfo(&g.free_bytes, &total) != cudaSuccess) g.free_bytes = 0;
    cudaGetLastError();
    out.push_back(g);
  }
  if (restore) cudaSetDevice(current);
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// `--device`: an index, or a case-insensitive part of a GPU's name.
int resolve_device(const std::string& device) {
  std::string why;
  const std::vector<GpuInfo> gpus = list_gpus(why);
  if (gpus.empty()) throw std::runtime_error("no CUDA GPU or driver was found (" + why + ")");
  if (device.empty()) return gpus.front().index;
  if (std::all_of(device.begin(), device.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    const int index = std::stoi(device);
    for (const GpuInfo& g : gpus)
      if (g.index == index) return index;
    throw std::runtime_error("no CUDA device " + device + " (there are " + std::to_string(gpus.size()) + ")");
  }
  for (const GpuInfo& g : gpus)
    if (lower(g.props.name).find(lower(device)) != std::string::npos) return g.index;
  throw std::runtime_error("no CUDA device named like '" + device + "'");
}

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const std::string& device) {
  const int index = resolve_device(device);
  {
    std::string why;
    for (const GpuInfo& g : list_gpus(why))
      if (g.index == index && !g.has_kernels)
        throw std::runtime_error("the CUDA backend has no kernels for " + std::string(g.props.name) + " (compute capability " +
                                 std::to_string(g.props.major) + "." + std::to_string(g.props.minor) +
                                 "): rebuild with it in CMAKE_CUDA_ARCHITECTURES, or use --backend vulkan");
  }
  cudaDeviceProp props{};
  check(cudaGetDeviceProperties(&props, index), "cudaGetDeviceProperties");
  const std::string describe = "CUDA device " + std::to_string(index) + ": " + props.name + " (compute capability " +
                               std::to_string(props.major) + "." + std::to_string(props.minor) + ", " +
                               std::to_string(props.totalGlobalMem >> 30) + " GiB)";
  return std::make_unique<OpsBackend<CudaDevice>>(std::make_unique<CudaDevice>(index), "cuda", describe,
                                                  cuda_kernels_from_env(), true, cuda_graphs_from_env());
}

}  // namespace cuda

BackendInfo cuda_backend_info() {
  BackendInfo info;
  info.name = "cuda";
  info.display_name = "CUDA";
  info.summary =
      "NVIDIA GPUs through CUDA (warp kernels, integer products for block-quantized weights but Q2_K, IQ2 and IQ3; "
      "FAFO_CUDA_KERNELS=warp or plain: float products with the Vulkan backend's bits; auto's first choice where it "
      "finds a GPU: 2.6x the Vulkan backend's tokens/s at 8B Q4_K_M on an H200)";
  info.auto_rank = 2;  // above Vulkan's: measured faster at every step size (docs/gpu/2026-11-28-H200.md)
  info.runs_latent_attention = false;
  info.devices = [] {
    std::vector<BackendDevice> out;
    std::string why;
    for (const cuda::GpuInfo& g : cuda::list_gpus(why)) {
      BackendDevice d;
      d.index = g.index;
      d.name = g.props.name;
      d.kind = "discrete GPU";
      d.gpu = g.has_kernels;  // what `auto` looks for: a GPU this build's kernels run on
      d.details = {{"compute capability", std::to_string(g.props.major) + "." + std::to_string(g.props.minor)},
                   {"memory", std::to_string(g.props.totalGlobalMem >> 20) + " MiB" +
                                  (g.free_bytes > 0 ? ", " + std::to_string(g.free_bytes >> 20) + " MiB free" : "")},
                   {"memory bandwidth", std::to_string(static_cast<int>(g.bandwidth_gbs)) + " GB/s (peak)"},
                   {"multiprocessors", std::to_string(g.props.multiProcessorCount)}};
      if (!g.has_kernels)
        d.details.push_back({"kernels", "none for compute capability " + std::to_string(g.props.major) + "." +
                                            std::to_string(g.props.minor) +
                                            " in this build (CMAKE_CUDA_ARCHITECTURES); auto skips it"});
      out.push_back(std::move(d));
    }
    return out;
  };
  info.create = [](const BackendSpec& spec) { return cuda::make_cuda_backend(spec.device); };
  return info;
}

}  // namespace fafo
