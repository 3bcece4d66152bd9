// The CUDA device: device memory from cudaMalloc, and the kernels of ops.h launched as
// grids of 256-thread blocks, one thread per index, on one stream. Every error becomes a
// std::runtime_error naming the call and CUDA's message.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace fafo::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

template <class Op>
__global__ void run_op(Op op, uint32_t n) {
  const uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // no wrap near 2^32
  if (i < n) op(static_cast<uint32_t>(i));
}

class CudaDevice {
 public:
  explicit CudaDevice(int index) : index_(index) {
    check(cudaSetDevice(index), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~CudaDevice() {
    if (stream_) cudaStreamDestroy(stream_);
  }
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  // The current device is per host thread and the backend may be used from another
  // thread than the one that made it (the studio's worker): every call selects it.
  void* alloc(size_t bytes) {
    select();
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
    if (e != cudaSuccess) {
      size_t free_bytes = 0, total = 0;
      cudaMemGetInfo(&free_bytes, &total);
      throw std::runtime_error("CUDA: out of device memory allocating " + std::to_string(bytes >> 20) + " MiB (" +
                               std::to_string(free_bytes >> 20) + " MiB free of " + std::to_string(total >> 20) + ")");
    }
    check(cudaMemsetAsync(p, 0, bytes == 0 ? 1 : bytes, stream_), "cudaMemset");
    return p;
  }
  void release(void* p) noexcept {
    cudaSetDevice(index_);
    cudaFree(p);
  }
  void upload(void* dst, const void* src, size_t bytes) {
    select();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpy to the device");
    sync();  // the host data may go away when this returns
  }
  void download(void* dst, const void* src, size_t bytes) {
    select();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy from the device");
    sync();
  }
  void copy(void* dst, const void* src, size_t bytes) {
    select();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpy on the device");
  }
  template <class Op>
  void launch(const Op& op, uint64_t n, const char* name) {
    select();
    constexpr uint32_t kThreads = 256;
    const uint32_t blocks = static_cast<uint32_t>((n + kThreads - 1) / kThreads);
    run_op<<<blocks, kThreads, 0, stream_>>>(op, static_cast<uint32_t>(n));
    check(cudaGetLastError(), name);
  }
  void sync() {
    select();
    check(cudaStreamSynchronize(stream_), "a step");
  }

 private:
  void select() { check(cudaSetDevice(index_), "cudaSetDevice"); }
  int index_ = 0;
  cudaStream_t stream_ = nullptr;
};

}  // namespace fafo::cuda
