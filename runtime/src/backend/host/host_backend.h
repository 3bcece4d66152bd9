// The host-memory backend under the `cpu` backend: activations in host memory, weights
// used in place from the memory-mapped file, the host KV cache, a thread pool, and every
// op of the contract. The matrix product (the part that costs nearly all of a step) and
// attention's inner loop come as HostKernels: the cpu backend's SIMD kernels. (The
// `reference` backend, the oracle, is written apart: backend/reference/.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/host/host_kv_cache.h"
#include "backend/host/scalar_kernels.h"
#include "fafo/backend.h"
#include "fafo/tensor_type.h"
#include "util/thread_pool.h"

namespace fafo::host {

using scalar::GatedActivation;

// A weight matrix as the file stores it: `rows` rows of `row_bytes` bytes each; and,
// where the kernels keep one (HostKernels::arrange), a copy of the rows in a layout of
// their own for their products.
struct HostWeight {
  TensorType type = TensorType::F32;
  int64_t rows = 0, cols = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  const uint8_t* groups = nullptr;  // the kernels' copy, or null
};

// out[t * out_stride + r] = dot(weight row r, x + t * x_stride) for t < T and every row.
// Each result must depend only on its weight row and its x row (not on T, the other
// rows or the thread count): multi-token decoding relies on it.
//
// attend_group_part: the n_heads query heads that share one KV head (their queries
// contiguous from q, keys.width floats each) over part of their keys, as
// scalar::attend_head_part computes each head (the default runs it per head): parts[h] and
// accs[h * values.width ...]; scratch holds n_heads * n_keys floats. Called from several
// threads at once.
class HostKernels {
 public:
  virtual ~HostKernels() = default;
  // out[i] = act(gate[i]) * up[i] for i < n; the result of a value may depend only on
  // its inputs (the host backend splits a step's values over threads at any point).
  virtual void gated(GatedActivation act, const float* gate, const float* up, float* out, int64_t n) const {
    for (int64_t i = 0; i < n; ++i)
      out[i] = act == GatedActivation::SwigluOai
                   ? scalar::swiglu_oai(gate[i], up[i])
                   : (act == GatedActivation::Silu ? scalar::silu(gate[i]) : scalar::gelu_tanh(gate[i])) * up[i];
  }
  virtual void matmul(const HostWeight& w, const float* x, int64_t x_stride, int64_t T, float* out, int64_t out_stride,
                      ThreadPool& pool) = 0;
  // The copy of a matrix's rows that matmul reads from HostWeight::groups, made once
  // when the weight is loaded (over the pool's threads); empty (the default) where
  // matmul reads the file's rows.
  virtual std::vector<uint8_t> arrange(const HostWeight& w, ThreadPool& pool) const {
    (void)w;
    (void)pool;
    return {};
  }
  // Several products, each with matmul's values (the default calls it for each), and
  // whether the kernels run them together (Backend::matmuls, batches_matmuls).
  struct Matmul {
    const HostWeight* w;
    const float* x;
    int64_t x_stride, T;
    float* out;
    int64_t out_stride;
  };
  virtual void matmuls(const std::vector<Matmul>& jobs, ThreadPool& pool) {
    for (const Matmul& j : jobs) matmul(*j.w, j.x, j.x_stride, j.T, j.out, j.out_stride, pool);
  }
  virtual bool batches_matmuls() const { return false; }
  virtual void attend_group_part(const float* q, int32_t n_heads, const scalar::KvRows& keys, const scalar::KvRows& values,
                                 const int32_t* slots, int32_t n_keys, scalar::ScoreMap score, float* scratch,
                                 scalar::AttentionPart* parts, float* accs) const {
    for (int32_t h = 0; h < n_heads; ++h)
      parts[h] = scalar::attend_head_part(q + static_cast<int64_t>(h) * keys.width, keys, values, slots, n_keys, score, scratch,
                                       accs + static_cast<int64_t>(h) * values.width);
  }
  // Values [first, first + n) of `count` slots' rows of a packed cache (fp16 words,
  // blocks), n floats apart in out: HostKvCache::Rows::widen's floats. Called from
  // several threads at once.
  virtual void widen_rows(const HostKvCache::Rows& rows, const int32_t* slots, int32_t count, int32_t first, int32_t n,
                          float* out) const {
    for (int32_t j = 0; j < count; ++j) rows.widen(slots[j], first, n, out + static_cast<int64_t>(j) * n);
  }
};

// A deliberately wrong attention, for the tests that show the op-conformance table
// catches one (tests/test_backend_ops.cpp): WrongRegionSlot gives every COMPRESSED row
// of a non-dense layer the first committed slot outside the region in place of the
// region's last slot.
enum class AttentionMutation : uint8_t { None, WrongRegionSlot };

struct HostBackendTraits {
  std::string name;         // as registered: "cpu"
  std::string description;  // "... backend"; the thread count is appended
  BackendNumerics numerics;
  // MLA layers: attend over the latent values and up-project each head's result, where
  // that costs less than recovering every value.
  bool absorbs_latent_values = false;
  AttentionMutation mutation = AttentionMutation::None;  // tests only
};

std::unique_ptr<Backend> make_host_backend(int n_threads, HostBackendTraits traits, std::unique_ptr<HostKernels> kernels);

}  // namespace fafo::host
