// The CUDA device: device memory from cudaMalloc, and the kernels of ops.h launched as
// grids of 256-thread blocks, one thread per index, and the warp kernels of
// warp_ops.h as 8 warps per block, on one stream. Every error becomes a
// std::runtime_error naming the call and CUDA's message. A step can be captured into a
// CUDA graph instead (begin_capture, end_capture: step_graphs.h).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "launch_times.h"
#include "memory_budget.h"
#include "step_graphs.h"
#include "block.h"
#include "warp.h"

namespace fafo::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

template <class Op>
__global__ void run_op(Op op, uint32_t n) {
  const uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // no wrap near 2^32
  if (i < n) op(static_cast<uint32_t>(i));
}

// dot_order.h's tree32 over the 32 lanes' values of `v` by shuffles: lane l adds lane
// l + 16's value, then l + 8's, + 4, + 2, + 1 (lanes past the tree add what they get and
// are ignored); lane 0's sum, given to every lane.
__device__ __forceinline__ float warp_tree(float v) {
#pragma unroll
  for (uint32_t offset = 16; offset >= 1; offset /= 2) v = __fadd_rn(v, __shfl_down_sync(0xffffffffu, v, offset));
  return __shfl_sync(0xffffffffu, v, 0);
}

template <class Op>
__global__ void run_warp_op(Op op, uint32_t n_warps) {
  const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const uint32_t lane = threadIdx.x % 32;
  if (warp >= n_warps) return;  // the whole warp: blocks are whole warps
  float v[Op::kValues];
  op.lane_values(static_cast<uint32_t>(warp), lane, v);
#pragma unroll
  for (uint32_t k = 0; k < Op::kValues; ++k) v[k] = warp_tree(v[k]);
  op.finish(static_cast<uint32_t>(warp), lane, v);
}

// 1 where the code loaded for this GPU has mma.sync's 8-bit products (built for sm_80 or
// later: DeviceWarp::mma_s8 traps otherwise).
__global__ inline void probe_int8_mma(int* out) {
#if __CUDA_ARCH__ >= 800
  *out = 1;
#else
  *out = 0;
#endif
}

template <class Op>
__global__ void run_warp_fn(Op op, uint32_t n_warps) {
  const uint64_t warp = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (warp >= n_warps) return;  // the whole warp: blocks are whole warps
  DeviceWarp w{threadIdx.x % 32};
  op.run(w, static_cast<uint32_t>(warp));
}

template <class Op>
__global__ void __launch_bounds__(kMaxBlockWarps * 32) run_block_fn(Op op, uint32_t n_blocks) {
  extern __shared__ __align__(16) uint8_t block_shared[];
  DeviceBlock block{threadIdx.x, block_shared};
  if (blockIdx.x < n_blocks) op.run(block, blockIdx.x);
}

// An executable CUDA graph, destroyed with its owner.
class GraphExec {
 public:
  explicit GraphExec(cudaGraphExec_t e) : exec_(e) {}
  GraphExec(GraphExec&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    std::swap(exec_, o.exec_);
    return *this;
  }
  ~GraphExec() {
    if (exec_) cudaGraphExecDestroy(exec_);
  }
  cudaGraphExec_t get() const { return exec_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

class CudaDevice {
 public:
  using Graph = GraphExec;
  explicit CudaDevice(int index) : index_(index) {
    check(cudaSetDevice(index), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    // A first kernel: whether the loaded code has mma.sync, and a clear error where the
    // build has no code for this GPU at all.
    int* flag = nullptr;
    int found = 0;
    cudaError_t e = cudaMalloc(&flag, sizeof(int));
    if (e == cudaSuccess) {
      probe_int8_mma<<<1, 1, 0, stream_>>>(flag);
      e = cudaGetLastError();
      if (e == cudaSuccess) e = cudaMemcpyAsync(&found, flag, sizeof(int), cudaMemcpyDeviceToHost, stream_);
      if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
      cudaFree(flag);
    }
    if (e != cudaSuccess) {
      cudaStreamDestroy(stream_);
      stream_ = nullptr;
      throw std::runtime_error(std::string("CUDA: a first kernel failed on device ") + std::to_string(index) + ": " +
                               cudaGetErrorString(e) +
                               " (a build without code for this GPU's compute capability fails so: "
                               "cmake -DCMAKE_CUDA_ARCHITECTURES=...)");
    }
    int8_mma_ = found == 1;
  }
  // mma.sync's 8-bit integer products (warp.h: DeviceWarp::mma_s8) in the code loaded for
  // this GPU: compute capability 8.0 on, and the build's architectures (cmake/cuda.cmake)
  // include one of them.
  bool has_mma() const { return int8_mma_; }
  // What is allocated, against --memory-limit, and what may still be: the rest of the
  // limit, at most what cudaMemGetInfo says is free on the GPU.
  MemoryBudget& budget() { return budget_; }
  const MemoryBudget& budget() const { return budget_; }
  uint64_t free_memory() const {
    cudaSetDevice(index_);
    size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {  // not known: the limit alone
      (void)cudaGetLastError();
      return budget_.available(std::numeric_limits<uint64_t>::max());
    }
    return budget_.available(free_bytes);
  }
  ~CudaDevice() {
    for (auto& [start, stop] : events_) {
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
    }
    if (capturing_) abort_capture();
    for (const auto& [p, bytes] : freed_) cudaFree(p);
    if (stream_) cudaStreamDestroy(stream_);
    for (void* chunk : pinned_) cudaFreeHost(chunk);
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
    node("memset");
    return p;
  }
  // Frees `p` (alloc's `bytes`) and gives its bytes back to the budget: at once, or
  // after the graph being captured has run (it may use the memory).
  void release(void* p, size_t bytes) noexcept {
    if (capturing_) {
      freed_.emplace_back(p, bytes);
      return;
    }
    cudaSetDevice(index_);
    cudaFree(p);
    budget_.give(bytes);
  }
  // While capturing, and for small uploads (a step's row lists and weights: at most
  // kStagedUploadBytes), the data is copied into pinned host memory and the copy is not
  // waited for: the stream orders it before the launches that read the destination,
  // and the pinned memory is reused only after the stream has drained (sync) or, while
  // capturing, after the step has run; the copy becomes a node of a captured graph. A
  // mixture of experts' layer uploads three such lists per expert: waiting for each
  // had stalled the stream three times per expert. Larger uploads (weights at load) go
  // straight from `src` and are waited for (the host data may go away on return).
  static constexpr size_t kStagedUploadBytes = size_t{64} << 10;
  void upload(void* dst, const void* src, size_t bytes) {
    select();
    if (capturing_ || bytes <= kStagedUploadBytes) {
      void* staged = pinned(bytes);
      std::memcpy(staged, src, bytes);
      check(cudaMemcpyAsync(dst, staged, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpy to the device");
      node("copy");
      if (!capturing_) staged_pending_ = true;
      return;
    }
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpy to the device");
    sync();
  }
  void download(void* dst, const void* src, size_t bytes) {
    not_capturing("a download");
    select();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpy from the device");
    sync();
  }
  void copy(void* dst, const void* src, size_t bytes) {
    select();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "cudaMemcpy on the device");
    node("copy");
  }

  // From here to end_capture the stream's work is captured into a graph, not run.
  void begin_capture() {
    if (capturing_) throw std::logic_error("begin_capture: already capturing");
    if (staged_pending_) sync();  // staged copies not yet run still read the pinned memory
    select();
    check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
    capturing_ = true;
    topology_.clear();
    pinned_used_ = 0;
    pinned_at_ = 0;
  }
  // Ends the capture and launches it: as the graph `graphs` keeps for its topology,
  // updated to this step's arguments (cudaGraphExecUpdate), or as a new graph kept there
  // (also when the update fails).
  void end_capture(StepGraphs<Graph>& graphs) {
    if (!capturing_) throw std::logic_error("end_capture: not capturing");
    capturing_ = false;
    struct FreeAfter {  // memory freed during the capture: after the graph ran, on every path
      CudaDevice& d;
      ~FreeAfter() {
        if (d.freed_.empty()) return;
        cudaStreamSynchronize(d.stream_);
        for (const auto& [p, bytes] : d.freed_) {
          cudaFree(p);
          d.budget_.give(bytes);
        }
        d.freed_.clear();
      }
    } free_after{*this};
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    struct Destroy {
      cudaGraph_t g;
      ~Destroy() {
        if (g) cudaGraphDestroy(g);
      }
    } destroy{graph};
    check(ended, "cudaStreamEndCapture");
    Graph* exec = graphs.find(topology_);
    bool replacing = false;
    if (exec) {
      cudaGraphExecUpdateResultInfo info{};
      if (cudaGraphExecUpdate(exec->get(), graph, &info) != cudaSuccess) {
        (void)cudaGetLastError();
        replacing = true;
        exec = nullptr;
      }
    }
    if (!exec) {
      cudaGraphExec_t made = nullptr;
      check(cudaGraphInstantiate(&made, graph, 0), "cudaGraphInstantiate");
      exec = &graphs.keep(topology_, GraphExec(made), replacing);
    }
    check(cudaGraphLaunch(exec->get(), stream_), "cudaGraphLaunch");
    staged_pending_ = true;  // its copies read the pinned memory until the stream drains
  }
  // Whether a failed call broke the capture (cudaStreamEndCapture would only report it).
  bool capture_broken() {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    return cudaStreamIsCapturing(stream_, &status) != cudaSuccess || status == cudaStreamCaptureStatusInvalidated;
  }
  // Drops a capture whose step failed before its end (nothing of it runs).
  void abort_capture() {
    if (!capturing_) return;
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    for (const auto& [p, bytes] : freed_) {
      cudaFree(p);
      budget_.give(bytes);
    }
    freed_.clear();
  }
  bool capturing() const { return capturing_; }
  template <class Op>
  void launch(const Op& op, uint64_t n, const char* name) {
    start(run_op<Op>, op, n, 256, name);
  }
  template <class Op>
  void launch_warps(const Op& op, uint64_t n_warps, const char* name) {
    start(run_warp_op<Op>, op, n_warps, 8, name, 32);
  }
  template <class Op>
  void launch_warp_fn(const Op& op, uint64_t n_warps, const char* name) {
    start(run_warp_fn<Op>, op, n_warps, 4, name, 32);
  }
  // A block function over n_blocks blocks of `warps` warps with `shared_bytes` of
  // dynamic shared memory each (block.h).
  template <class Op>
  void launch_block_fn(const Op& op, uint64_t n_blocks, uint32_t warps, size_t shared_bytes, const char* name) {
    select();
    if (shared_bytes > 48 * 1024)
      check(cudaFuncSetAttribute(run_block_fn<Op>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_bytes)),
            name);
    const size_t timer = start_timer();
    run_block_fn<Op><<<static_cast<uint32_t>(n_blocks), warps * 32, shared_bytes, stream_>>>(op, static_cast<uint32_t>(n_blocks));
    check(cudaGetLastError(), name);
    node(name);
    stop_timer(timer, name);
  }
  void sync() {
    not_capturing("a wait for the device");
    select();
    check(cudaStreamSynchronize(stream_), "a step");
    // Every staged copy has run: the pinned memory is free again.
    pinned_used_ = 0;
    pinned_at_ = 0;
    staged_pending_ = false;
  }

  // Profiling: while on, each launch is bracketed by two events (reused across steps);
  // take_times() waits for the stream and reads them.
  void set_timing(bool on) {
    timing_ = on;
    pending_.clear();
    bytes_ = 0;
  }
  void note_bytes(double bytes) { bytes_ = bytes; }
  LaunchTimes take_times() {
    LaunchTimes t;
    if (pending_.empty()) return t;
    sync();
    for (const auto& [index, name, bytes] : pending_) {
      float ms = 0;
      check(cudaEventElapsedTime(&ms, events_[index].first, events_[index].second), "cudaEventElapsedTime");
      t.launches.push_back({name, ms / 1e3, bytes});
    }
    float span = 0;
    check(cudaEventElapsedTime(&span, events_[std::get<0>(pending_.front())].first, events_[std::get<0>(pending_.back())].second),
          "cudaEventElapsedTime");
    t.span_seconds = span / 1e3;
    pending_.clear();
    return t;
  }

 private:
  // Launches `kernel(op, n)` over n items (indices or warps) of `threads_per_item`
  // threads, `per_block` items a block, timed when profiling.
  template <class Op>
  void start(void (*kernel)(Op, uint32_t), const Op& op, uint64_t n, uint32_t per_block, const char* name,
             uint32_t threads_per_item = 1) {
    select();
    const uint32_t blocks = static_cast<uint32_t>((n + per_block - 1) / per_block);
    const size_t timer = start_timer();
    kernel<<<blocks, per_block * threads_per_item, 0, stream_>>>(op, static_cast<uint32_t>(n));
    check(cudaGetLastError(), name);
    node(name);
    stop_timer(timer, name);
  }
  // The events of the next timed launch (SIZE_MAX when not timing).
  size_t start_timer() {
    if (!timing_) {
      bytes_ = 0;  // noted for this launch
      return SIZE_MAX;
    }
    const size_t index = pending_.size();
    if (index == events_.size()) {
      cudaEvent_t start = nullptr, stop = nullptr;
      check(cudaEventCreate(&start), "cudaEventCreate");
      check(cudaEventCreate(&stop), "cudaEventCreate");
      events_.emplace_back(start, stop);
    }
    check(cudaEventRecord(events_[index].first, stream_), "cudaEventRecord");
    return index;
  }
  void stop_timer(size_t index, const char* name) {
    if (index == SIZE_MAX) return;
    check(cudaEventRecord(events_[index].second, stream_), "cudaEventRecord");
    pending_.emplace_back(index, name, bytes_);
    bytes_ = 0;
  }
  bool timing_ = false;
  double bytes_ = 0;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events_;
  std::vector<std::tuple<size_t, const char*, double>> pending_;  // (events, kernel, bytes) of this step's launches

  void select() { check(cudaSetDevice(index_), "cudaSetDevice"); }
  void node(const char* kind) {
    if (!capturing_) return;
    topology_ += kind;
    topology_ += ';';
  }
  void not_capturing(const char* what) const {
    if (capturing_) throw std::logic_error(std::string(what) + " inside a captured step (its launches have not run)");
  }
  // `bytes` of pinned host memory for a staged upload, valid until the next sync or the
  // next capture begins (chunks of at least 1 MiB, kept).
  void* pinned(size_t bytes) {
    bytes = (bytes + 255) / 256 * 256;
    while (pinned_at_ < pinned_.size()) {
      if (pinned_used_ + bytes <= pinned_bytes_[pinned_at_]) {
        void* p = static_cast<uint8_t*>(pinned_[pinned_at_]) + pinned_used_;
        pinned_used_ += bytes;
        return p;
      }
      ++pinned_at_;
      pinned_used_ = 0;
    }
    // Outside a capture, staged copies still in flight hold the chunks: rather than grow
    // the arena without end (many small uploads between two syncs), wait for them and
    // start over in the first chunk.
    if (!capturing_ && staged_pending_) {
      sync();
      if (!pinned_.empty() && bytes <= pinned_bytes_[0]) {
        pinned_used_ = bytes;
        return pinned_[0];
      }
    }
    void* chunk = nullptr;
    const size_t size = std::max<size_t>(bytes, size_t{1} << 20);
    check(cudaMallocHost(&chunk, size), "cudaMallocHost");
    pinned_.push_back(chunk);
    pinned_bytes_.push_back(size);
    pinned_at_ = pinned_.size() - 1;
    pinned_used_ = bytes;
    return chunk;
  }
  MemoryBudget budget_{"cuda"};
  bool capturing_ = false;
  std::string topology_;
  std::vector<std::pair<void*, size_t>> freed_;  // freed while capturing, with their bytes
  std::vector<void*> pinned_;
  std::vector<size_t> pinned_bytes_;
  bool staged_pending_ = false;  // staged uploads outside a capture since the last sync
  size_t pinned_at_ = 0, pinned_used_ = 0;
  int index_ = 0;
  bool int8_mma_ = false;
  cudaStream_t stream_ = nullptr;
};

}  // namespace fafo::cuda
