// A block of up to kMaxBlockWarps warps sharing memory, as block kernels see it, in two
// implementations with the same arithmetic, so that one kernel source (a
// `template <class B> run(B& block, index)` function) runs on a GPU and, thread by
// thread, on the host (as warp.h does for one warp):
//   - DeviceBlock (GPU): each thread is one of the block's threads; Vec<T> is the
//     thread's own value; each(f) calls f(thread); sync() is __syncthreads();
//   - HostBlock (host device, CI): Vec<T> holds every thread's value; each(f) calls f
//     for thread 0, 1, ... in turn; sync() does nothing, as each phase has already run
//     for every thread before the next begins.
// Thread t is lane t % 32 of warp t / 32; threads() is the block's count. shared() is
// the block's dynamic shared memory.
// mma_s8(a0, a1, b, c) and mma_half<F>(a, b, c) are warp.h's products for every warp
// of the block, each warp over its own lanes' fragments (mma.sync: every thread of the
// block must reach them). Code between these calls runs per thread and must only touch its own
// thread's values (vec[thread] inside each()) and shared memory that no other thread
// writes before the next sync().
#pragma once

#include <cstdint>
#include <vector>

#include "warp.h"

namespace fafo::cuda {

constexpr uint32_t kMaxBlockWarps = 8;

// Stores N words (N a multiple of 4) at dst, aligned to 16 in shared memory: 16-byte
// stores on the GPU (a staged row's words in one transaction each four), one by one on
// the host.
template <uint32_t N>
FAFO_HD void store_words(uint32_t* dst, const uint32_t* src) {
  static_assert(N % 4 == 0);
#if defined(__CUDA_ARCH__)
  FAFO_UNROLL
  for (uint32_t k = 0; k < N; k += 4) *reinterpret_cast<uint4*>(dst + k) = make_uint4(src[k], src[k + 1], src[k + 2], src[k + 3]);
#else
  for (uint32_t k = 0; k < N; ++k) dst[k] = src[k];
#endif
}

struct HostBlock {
  uint32_t warps = 1;
  uint8_t* memory = nullptr;

  template <class T>
  struct Vec {
    T v[kMaxBlockWarps * kLanes];
    T& operator[](uint32_t thread) { return v[thread]; }
    const T& operator[](uint32_t thread) const { return v[thread]; }
  };
  uint32_t threads() const { return warps * kLanes; }
  template <class F>
  void each(F&& f) {
    for (uint32_t t = 0; t < threads(); ++t) f(t);
  }
  void sync() const {}
  uint8_t* shared() const { return memory; }
  template <class F>
  void each_warp(F&& f) const {
    for (uint32_t w = 0; w < warps; ++w) {
      HostWarp warp;
      f(warp, w);
    }
  }
  template <class F>
  void collective(F&& f) const {
    for (uint32_t t = 0; t < threads(); ++t) f(t);
  }
  void mma_s8(const Vec<uint32_t>& a0, const Vec<uint32_t>& a1, const Vec<uint32_t>& b, Vec<int32_t> c[4]) const {
    HostWarp warp;
    for (uint32_t w = 0; w < warps; ++w) {
      HostWarp::Vec<uint32_t> wa0, wa1, wb;
      HostWarp::Vec<int32_t> wc[4];
      for (uint32_t lane = 0; lane < kLanes; ++lane) {
        const uint32_t t = w * kLanes + lane;
        wa0[lane] = a0[t];
        wa1[lane] = a1[t];
        wb[lane] = b[t];
        for (uint32_t e = 0; e < 4; ++e) wc[e][lane] = c[e][t];
      }
      warp.mma_s8(wa0, wa1, wb, wc);
      for (uint32_t lane = 0; lane < kLanes; ++lane)
        for (uint32_t e = 0; e < 4; ++e) c[e][w * kLanes + lane] = wc[e][lane];
    }
  }
  template <Format F>
  void mma_half(const Vec<uint32_t> a[4], const Vec<uint32_t> b[2], Vec<float> c[4]) const {
    HostWarp warp;
    for (uint32_t w = 0; w < warps; ++w) {
      HostWarp::Vec<uint32_t> wa[4], wb[2];
      HostWarp::Vec<float> wc[4];
      for (uint32_t lane = 0; lane < kLanes; ++lane) {
        const uint32_t t = w * kLanes + lane;
        for (uint32_t e = 0; e < 4; ++e) {
          wa[e][lane] = a[e][t];
          wc[e][lane] = c[e][t];
        }
        wb[0][lane] = b[0][t];
        wb[1][lane] = b[1][t];
      }
      warp.template mma_half<F>(wa, wb, wc);
      for (uint32_t lane = 0; lane < kLanes; ++lane)
        for (uint32_t e = 0; e < 4; ++e) c[e][w * kLanes + lane] = wc[e][lane];
    }
  }
};

#if defined(__CUDACC__)
struct DeviceBlock {
  uint32_t thread_ = 0;
  uint8_t* memory_ = nullptr;

  template <class T>
  using Vec = DeviceWarp::Vec<T>;  // the thread's own value
  __device__ __forceinline__ uint32_t threads() const { return blockDim.x; }
  template <class F>
  __device__ __forceinline__ void each(F&& f) {
    f(thread_);
  }
  __device__ __forceinline__ void sync() const { __syncthreads(); }
  __device__ __forceinline__ uint8_t* shared() const { return memory_; }
  template <class F>
  __device__ __forceinline__ void each_warp(F&& f) const {
    DeviceWarp warp{thread_ % kLanes};
    f(warp, thread_ / kLanes);
  }
  template <class F>
  __device__ __forceinline__ void collective(F&& f) const {
    __syncthreads();
    f(thread_);
    __syncthreads();
  }
  __device__ __forceinline__ void mma_s8(const Vec<uint32_t>& a0, const Vec<uint32_t>& a1, const Vec<uint32_t>& b,
                                         Vec<int32_t> c[4]) const {
    __syncwarp();  // the warp's lanes together again after a phase's branches
    DeviceWarp warp{thread_ % kLanes};
    DeviceWarp::Vec<int32_t> wc[4] = {{c[0].v}, {c[1].v}, {c[2].v}, {c[3].v}};
    warp.mma_s8(DeviceWarp::Vec<uint32_t>{a0.v}, DeviceWarp::Vec<uint32_t>{a1.v}, DeviceWarp::Vec<uint32_t>{b.v}, wc);
    FAFO_UNROLL
    for (uint32_t e = 0; e < 4; ++e) c[e].v = wc[e].v;
  }
  template <Format F>
  __device__ __forceinline__ void mma_half(const Vec<uint32_t> a[4], const Vec<uint32_t> b[2], Vec<float> c[4]) const {
    __syncwarp();
    DeviceWarp warp{thread_ % kLanes};
    const DeviceWarp::Vec<uint32_t> wa[4] = {{a[0].v}, {a[1].v}, {a[2].v}, {a[3].v}}, wb[2] = {{b[0].v}, {b[1].v}};
    DeviceWarp::Vec<float> wc[4] = {{c[0].v}, {c[1].v}, {c[2].v}, {c[3].v}};
    warp.template mma_half<F>(wa, wb, wc);
    FAFO_UNROLL
    for (uint32_t e = 0; e < 4; ++e) c[e].v = wc[e].v;
  }
};
#endif

}  // namespace fafo::cuda
