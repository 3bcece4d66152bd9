// A warp of 32 lanes as cooperative kernels see it, in two implementations with the same
// arithmetic, so that one kernel source (a `template <class W> run(W& warp, index)`
// function, warp_ops.h) runs on a GPU and, lane by lane, on the host:
//   - DeviceWarp (GPU): each thread is one lane; Vec<T> is the lane's own value; each(f)
//     calls f(lane); max, sum and at() exchange values by shuffles;
//   - HostWarp (host device, CI): Vec<T> holds all 32 lanes' values; each(f) calls f for
//     lane 0, 1, ..., 31 in turn; max, sum and at() read the 32 values.
// sum() adds by dot_order.h's tree (lane l + 16, + 8, + 4, + 2, + 1) on both and max()
// takes the larger by the same tree (max_f is not symmetric for NaN, so the order is
// fixed too), both then lane 0's result for every lane; at(v, j) is lane j's value:
// every lane gets the same result on both, NaN included. Code between these calls runs per lane and must only touch its own lane's
// values (vec[lane] inside each()), as the GPU's lanes cannot see each other's.
#pragma once

#include <cmath>
#include <cstdint>

#include "block_decode.h"
#include "dot_order.h"

namespace fafo::cuda {

// The larger of a and b (b when a is not larger; NaN compares false), alike everywhere.
FAFO_HD float max_f(float a, float b) { return a > b ? a : b; }

struct HostWarp {
  template <class T>
  struct Vec {
    T v[kLanes];
    T& operator[](uint32_t lane) { return v[lane]; }
    const T& operator[](uint32_t lane) const { return v[lane]; }
  };
  template <class F>
  void each(F&& f) {
    for (uint32_t lane = 0; lane < kLanes; ++lane) f(lane);
  }
  float max(const Vec<float>& x) const {
    float s[kLanes];
    for (uint32_t lane = 0; lane < kLanes; ++lane) s[lane] = x[lane];
    for (uint32_t half = kLanes / 2; half >= 1; half /= 2)
      for (uint32_t lane = 0; lane < half; ++lane) s[lane] = max_f(s[lane], s[lane + half]);
    return s[0];
  }
  float sum(const Vec<float>& x) const {
    float s[kLanes];
    for (uint32_t lane = 0; lane < kLanes; ++lane) s[lane] = x[lane];
    return tree32(s);
  }
  template <class T>
  T at(const Vec<T>& x, uint32_t lane) const {
    return x[lane];
  }
};

#if defined(__CUDACC__)
struct DeviceWarp {
  uint32_t lane_ = 0;
  template <class T>
  struct Vec {
    T v;
    __device__ __forceinline__ T& operator[](uint32_t) { return v; }
    __device__ __forceinline__ const T& operator[](uint32_t) const { return v; }
  };
  template <class F>
  __device__ __forceinline__ void each(F&& f) {
    f(lane_);
  }
  __device__ __forceinline__ float max(const Vec<float>& x) const {
    float m = x.v;
#pragma unroll
    for (uint32_t offset = 16; offset >= 1; offset /= 2) m = max_f(m, __shfl_down_sync(0xffffffffu, m, offset));
    return __shfl_sync(0xffffffffu, m, 0);
  }
  __device__ __forceinline__ float sum(const Vec<float>& x) const {
    float s = x.v;
#pragma unroll
    for (uint32_t offset = 16; offset >= 1; offset /= 2) s = __fadd_rn(s, __shfl_down_sync(0xffffffffu, s, offset));
    return __shfl_sync(0xffffffffu, s, 0);
  }
  template <class T>
  __device__ __forceinline__ T at(const Vec<T>& x, uint32_t lane) const {
    return __shfl_sync(0xffffffffu, x.v, lane);
  }
};
#endif

}  // namespace fafo::cuda
