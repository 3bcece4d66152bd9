// The reference backend (`--backend reference`): the host backend with plain fp32 matrix
// products, each weight row dequantized by the scalar code of src/quant and multiplied
// with ref::dot. Slow, simple and exact by definition: it is the oracle every other
// backend is compared with (tests/test_backend_ops.cpp).
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend/host/host_backend.h"
#include "backend/reference/reference_kernels.h"
#include "fafo/backend_registry.h"

namespace fafo {

namespace {

class ReferenceKernels final : public host::HostKernels {
 public:
  void matmul(const host::HostWeight& w, const float* x, int64_t x_stride, int64_t T, float* out, int64_t out_stride,
              ThreadPool& pool) override {
    scratch_.resize(static_cast<size_t>(pool.size()));
    for (auto& s : scratch_) s.resize(static_cast<size_t>(w.cols));
    // At least ~64K multiply-adds per chunk: below that, waking threads costs more than it saves.
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, w.cols * T));
    pool.parallel_for(w.rows, grain, [&](int64_t b, int64_t e, int thread) {
      float* wrow = scratch_[static_cast<size_t>(thread)].data();
      for (int64_t r = b; r < e; ++r) {
        const uint8_t* src = w.data + static_cast<size_t>(r) * w.row_bytes;
        const float* dense = reinterpret_cast<const float*>(src);
        if (w.type != TensorType::F32) {
          dequantize_row(w.type, src, wrow, w.cols);
          dense = wrow;
        }
        for (int64_t t = 0; t < T; ++t) out[t * out_stride + r] = ref::dot(dense, x + t * x_stride, w.cols);
      }
    });
  }

 private:
  std::vector<std::vector<float>> scratch_;  // one dequantized row per thread
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend(int n_threads) {
  return host::make_host_backend(n_threads, {"reference", "reference backend (fp32, the oracle)", BackendNumerics{}},
                                 std::make_unique<ReferenceKernels>());
}

// Registered in backend_registry.cpp (FAFO_BACKEND(reference)).
BackendInfo reference_backend_info() {
  BackendInfo info;
  info.name = "reference";
  info.display_name = "Reference";
  info.summary = "the fp32 reference backend (scalar loops, every op exact by definition; the oracle of the op-conformance table)";
  info.auto_rank = -1;  // never chosen by auto
  info.devices = [] { return std::vector<BackendDevice>{host_cpu_device()}; };
  info.create = [](const BackendSpec& spec) {
    check_host_device("reference", spec.device);
    return make_reference_backend(spec.threads);
  };
  return info;
}

}  // namespace fafo
