// The host device: runs the CUDA backend's kernels (ops.h) on the CPU, one index after
// another, with device memory in host memory. It makes the backend's whole step logic
// run and be tested where there is no GPU (CI); it is not meant to be fast.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

namespace fafo::cuda {

class HostDevice {
 public:
  std::string description() const { return "CUDA kernels emulated on the host"; }
  void* alloc(size_t bytes) {
    void* p = std::calloc(bytes == 0 ? 1 : bytes, 1);
    if (!p) throw std::runtime_error("out of host memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release(void* p) noexcept { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) { std::memmove(dst, src, bytes); }
  template <class Op>
  void launch(const Op& op, uint64_t n, const char* /*name*/) {
    for (uint64_t i = 0; i < n; ++i) op(static_cast<uint32_t>(i));
  }
  void sync() {}
};

}  // namespace fafo::cuda
