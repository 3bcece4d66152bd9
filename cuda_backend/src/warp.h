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
// every lane gets the same result on both, NaN included. sum_int() adds integers
// (exact: the order does not matter; it must not overflow). mma_s8() is the tensor
// cores' 16 x 8 x 16 integer product (mma.sync.m16n8k16.s32.s8.s8.s32, sm_80 on):
// c += A B, A 16 x 16 and B 16 x 8 signed bytes, c 16 x 8 int32, exact, in the
// instruction's fragments: lane 4g + i holds a0 = A row g, columns 4i..4i + 3 (four
// bytes, the first lowest), a1 = A row g + 8, the same columns, b = B column g, rows
// 4i..4i + 3, and c[0], c[1] = (row g, columns 2i, 2i + 1), c[2], c[3] = (row g + 8, ...).
// mma_half<F>() is the 16 x 8 x 16 product of 16-bit floats into floats, F = Format::F16
// (mma.sync.m16n8k16.f32.f16.f16.f32) or Format::BF16 (.f32.bf16.bf16.f32): lane 4g + i
// holds a[0] = A row g, columns 2i, 2i + 1 (two values, the first in the low 16 bits),
// a[1] = row g + 8, the same columns, a[2], a[3] = rows g, g + 8, columns 2i + 8, 2i + 9;
// b[0] = B column g, rows 2i, 2i + 1, b[1] = rows 2i + 8, 2i + 9; c as mma_s8's. The host adds each element's 16 exact products to c in double and
// rounds once, which a GPU's tensor cores may not match in the last bit.
// ballot(f) is the mask of the lanes whose f is true (bit l: lane l), on every lane;
// sync() makes the lanes' writes to memory visible to each other (__syncwarp). Code between these calls runs per lane and must only touch its own lane's
// values (vec[lane] inside each()), as the GPU's lanes cannot see each other's.
#pragma once

#include <cmath>
#include <cstdint>

#include "block_decode.h"
#include "dot_order.h"

namespace fafo::cuda {

// The larger of a and b (b when a is not larger; NaN compares false), alike everywhere.
FAFO_HD float max_f(float a, float b) { return a > b ? a : b; }

FAFO_HD uint32_t popcount32(uint32_t v) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint32_t>(__popc(v));
#else
  uint32_t n = 0;
  for (; v != 0; v &= v - 1) ++n;
  return n;
#endif
}

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
  int32_t sum_int(const Vec<int32_t>& x) const {
    int32_t s = 0;
    for (uint32_t lane = 0; lane < kLanes; ++lane) s += x[lane];
    return s;
  }
  uint32_t ballot(const Vec<bool>& f) const {
    uint32_t mask = 0;
    for (uint32_t lane = 0; lane < kLanes; ++lane) mask |= f[lane] ? 1u << lane : 0u;
    return mask;
  }
  void sync() const {}
  template <Format F>
  void mma_half(const Vec<uint32_t> a[4], const Vec<uint32_t> b[2], Vec<float> c[4]) const {
    static_assert(F == Format::F16 || F == Format::BF16);
    float A[16][16], B[16][8];
    const auto h = [](uint32_t v, uint32_t half) {
      const uint32_t bits = (v >> (16 * half)) & 0xffffu;
      return F == Format::F16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
    };
    for (uint32_t lane = 0; lane < kLanes; ++lane) {
      const uint32_t g = lane / 4, i = lane % 4;
      for (uint32_t e = 0; e < 2; ++e) {
        A[g][2 * i + e] = h(a[0][lane], e);
        A[g + 8][2 * i + e] = h(a[1][lane], e);
        A[g][2 * i + 8 + e] = h(a[2][lane], e);
        A[g + 8][2 * i + 8 + e] = h(a[3][lane], e);
        B[2 * i + e][g] = h(b[0][lane], e);
        B[2 * i + 8 + e][g] = h(b[1][lane], e);
      }
    }
    for (uint32_t lane = 0; lane < kLanes; ++lane) {
      const uint32_t g = lane / 4, i = lane % 4;
      for (uint32_t e = 0; e < 4; ++e) {
        const uint32_t row = g + 8 * (e / 2), col = 2 * i + e % 2;
        double sum = c[e][lane];
        for (uint32_t k = 0; k < 16; ++k) sum += static_cast<double>(A[row][k]) * B[k][col];
        c[e][lane] = static_cast<float>(sum);
      }
    }
  }
  void mma_s8(const Vec<uint32_t>& a0, const Vec<uint32_t>& a1, const Vec<uint32_t>& b, Vec<int32_t> c[4]) const {
    int8_t A[16][16], B[16][8];
    for (uint32_t lane = 0; lane < kLanes; ++lane) {
      const uint32_t g = lane / 4, i = lane % 4;
      for (uint32_t k = 0; k < 4; ++k) {
        A[g][4 * i + k] = static_cast<int8_t>(a0[lane] >> (8 * k));
        A[g + 8][4 * i + k] = static_cast<int8_t>(a1[lane] >> (8 * k));
        B[4 * i + k][g] = static_cast<int8_t>(b[lane] >> (8 * k));
      }
    }
    for (uint32_t lane = 0; lane < kLanes; ++lane) {
      const uint32_t g = lane / 4, i = lane % 4;
      for (uint32_t e = 0; e < 4; ++e) {
        const uint32_t row = g + 8 * (e / 2), col = 2 * i + e % 2;
        int32_t sum = 0;
        for (uint32_t k = 0; k < 16; ++k) sum += A[row][k] * B[k][col];
        c[e][lane] += sum;
      }
    }
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
  __device__ __forceinline__ int32_t sum_int(const Vec<int32_t>& x) const {
    int32_t s = x.v;
#pragma unroll
    for (uint32_t offset = 16; offset >= 1; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
    return s;
  }
  __device__ __forceinline__ uint32_t ballot(const Vec<bool>& f) const { return __ballot_sync(0xffffffffu, f.v); }
  __device__ __forceinline__ void sync() const { __syncwarp(); }
  template <Format F>
  __device__ __forceinline__ void mma_half(const Vec<uint32_t> a[4], const Vec<uint32_t> b[2], Vec<float> c[4]) const {
    static_assert(F == Format::F16 || F == Format::BF16);
#if __CUDA_ARCH__ >= 800
    if constexpr (F == Format::F16)
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};"
          : "+f"(c[0].v), "+f"(c[1].v), "+f"(c[2].v), "+f"(c[3].v)
          : "r"(a[0].v), "r"(a[1].v), "r"(a[2].v), "r"(a[3].v), "r"(b[0].v), "r"(b[1].v));
    else
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
          "{%0, %1, %2, %3};"
          : "+f"(c[0].v), "+f"(c[1].v), "+f"(c[2].v), "+f"(c[3].v)
          : "r"(a[0].v), "r"(a[1].v), "r"(a[2].v), "r"(a[3].v), "r"(b[0].v), "r"(b[1].v));
#else
    __trap();  // the backend launches these only where the loaded code has them
#endif
  }
  __device__ __forceinline__ void mma_s8(const Vec<uint32_t>& a0, const Vec<uint32_t>& a1, const Vec<uint32_t>& b,
                                         Vec<int32_t> c[4]) const {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+r"(c[0].v), "+r"(c[1].v), "+r"(c[2].v), "+r"(c[3].v)
        : "r"(a0.v), "r"(a1.v), "r"(b.v));
#else
    __trap();  // the backend launches these only on sm_80 and later
#endif
  }
  template <class T>
  __device__ __forceinline__ T at(const Vec<T>& x, uint32_t lane) const {
    return __shfl_sync(0xffffffffu, x.v, lane);
  }
};
#endif

}  // namespace fafo::cuda
