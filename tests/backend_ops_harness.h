// The machinery of the op-conformance table (tests/test_backend_ops.cpp): a case runs
// one op of the backend contract on a backend at a step size T and returns what it
// produced; the harness compares that with the CPU reference (bit for bit, or within
// the backend's declared tolerance) and checks T-invariance (a row's result is the
// same bits whatever T and whatever the other rows of the step hold).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "fafo/backend.h"
#include "fafo/tensor_type.h"

namespace fafo::test {

// One result of a case: rows x cols floats, or ids (argmax, top-k ids).
struct OpOutput {
  std::string name;
  int64_t rows = 0, cols = 0;
  bool per_row = true;  // row i belongs to batch row i (T-invariance applies)
  std::vector<float> values;
  std::vector<int32_t> ids;
};
using OpOutputs = std::vector<OpOutput>;

// Deterministic input values: a function of (seed, row, col) only, so a row holds the
// same values whatever the step size. `salt` changes the rows at or after `salt_from`
// (the other rows of the T-invariance check).
inline float hashed_value(uint32_t seed, int64_t row, int64_t col, float lo = -1.0f, float hi = 1.0f) {
  uint64_t h = (uint64_t{seed} * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(row) * 0xC2B2AE3D27D4EB4Full) ^
               (static_cast<uint64_t>(col) * 0x165667B19E3779F9ull);
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 33;
  const double u = static_cast<double>(h >> 11) / static_cast<double>(uint64_t{1} << 53);
  return static_cast<float>(lo + (hi - lo) * u);
}
inline uint32_t hashed_int(uint32_t seed, int64_t a, int64_t b = 0) {
  return static_cast<uint32_t>(hashed_value(seed, a, b, 0.0f, 1.0f) * 16777216.0f);
}

// A backend under test with everything uploaded to it kept alive and reused across
// cases: weights are uploaded once per key (the CPU backend reads them in place, so
// their bytes live here), activations allocated once per (name, cols).
class OpEnv {
 public:
  static constexpr int64_t kMaxRows = 320;

  // Allocates one activation of kMaxRows rows first: a backend may size its per-step
  // buffers by the largest activation (steps of up to kMaxRows tokens).
  explicit OpEnv(std::unique_ptr<Backend> backend) : be_(std::move(backend)) { activation("rows", 1); }
  Backend& be() { return *be_; }

  // A weight made by `make` (packed rows of `type`) the first time `key` is asked for.
  Weight weight(const std::string& key, TensorType type, int64_t rows, int64_t cols,
                const std::function<std::vector<uint8_t>()>& make) {
    auto it = weights_.find(key);
    if (it != weights_.end()) return it->second;
    bytes_.push_back(make());
    return weights_[key] = be_->upload_weight(type, rows, cols, bytes_.back().data());
  }
  // An F32 table of `rows` rows whose row r holds hashed_value(seed, r, c) (salted from
  // row salt_from on): embed() with tokens 0..T-1 writes its first T rows to an activation.
  Weight table(int64_t rows, int64_t cols, uint32_t seed, uint32_t salt = 0, int64_t salt_from = 0, float lo = -1.0f,
               float hi = 1.0f) {
    std::ostringstream key;
    key << "table/" << rows << "/" << cols << "/" << seed << "/" << salt << "/" << salt_from << "/" << lo << "/" << hi;
    return weight(key.str(), TensorType::F32, rows, cols, [&] {
      std::vector<uint8_t> out(static_cast<size_t>(rows * cols) * sizeof(float));
      float* v = reinterpret_cast<float*>(out.data());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          v[r * cols + c] = hashed_value(seed + (salt != 0 && r >= salt_from ? 7919u * salt : 0u), r, c, lo, hi);
      return out;
    });
  }
  Activation activation(const std::string& name, int64_t cols) {
    const std::string key = name + "/" + std::to_string(cols);
    auto it = activations_.find(key);
    if (it != activations_.end()) return it->second;
    // Wide rows (a 128K vocabulary) may not fit kMaxRows in one device buffer.
    return activations_[key] = be_->alloc_activation(std::min(kMaxRows, be_->max_activation_rows(cols)), cols);
  }
  // A KV cache of at least `capacity` entries for the cases that do not test it; it
  // becomes kv().
  KvCache& ensure_cache(int32_t capacity) {
    if (!kv_ || kv_->capacity() < capacity || kv_->shape().n_layer != 1 || kv_->shape().kv_dim != 4 || kv_->shape().latent())
      make_cache(KvCacheShape{1, std::max(capacity, 1024), 4, KvCacheType::F32});
    kv_->reset_layout(0, 0, 0);
    return *kv_;
  }
  // A new KV cache of `shape` (the last one is destroyed first); it becomes kv().
  KvCache& make_cache(const KvCacheShape& shape) {
    kv_.reset();
    kv_ = be_->create_kv_cache(shape);
    return *kv_;
  }
  // The cache the case's steps compute with: the last ensure_cache or make_cache made.
  KvCache& kv() {
    if (!kv_) throw std::logic_error("OpEnv::kv: no cache made yet");
    return *kv_;
  }

 private:
  std::unique_ptr<Backend> be_;
  std::unique_ptr<KvCache> kv_;  // after be_: destroyed before it
  std::deque<std::vector<uint8_t>> bytes_;
  std::map<std::string, Weight> weights_;
  std::map<std::string, Activation> activations_;
};

// One row of the table: an op on a shape, run at each of `steps`.
struct OpCase {
  std::string op;    // the contract's op: "matmul", "attention", ...
  std::string name;  // the shape and variant
  std::vector<int32_t> steps;
  // Runs the case at step size T; `salt` != 0 changes the inputs of rows >= T / 2.
  std::function<OpOutputs(OpEnv&, int32_t T, uint32_t salt)> run;
  // A matrix product with block-quantized weights (BackendNumerics::rounded_matmul_tolerance).
  bool rounded_matmul = false;
  // A matrix product with F16 weights (BackendNumerics::half_matmul_tolerance).
  bool half_matmul = false;
  // A matrix product with BF16 weights (BackendNumerics::bf16_matmul_tolerance).
  bool bf16_matmul = false;
};

// The result of comparing two runs.
struct OpDiff {
  bool ok = true;
  double max_error = 0.0;  // largest |got - want| / max(1, |want|) over finite values
  std::string first;       // the first mismatch, for the failure message

  void fail(const std::string& what) {
    if (ok) first = what;
    ok = false;
  }
};

inline bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

// got vs want: bit for bit (tolerance < 0) or within tolerance; ids always exactly.
// rows_limit >= 0 compares only the first rows_limit rows of per-row outputs (and
// skips the others): the T-invariance check.
inline OpDiff compare_outputs(const OpOutputs& got, const OpOutputs& want, double tolerance, int64_t rows_limit = -1) {
  OpDiff d;
  if (got.size() != want.size()) {
    d.fail("a different number of outputs");
    return d;
  }
  for (size_t o = 0; o < got.size(); ++o) {
    const OpOutput& g = got[o];
    const OpOutput& w = want[o];
    if (rows_limit >= 0 && !g.per_row) continue;
    const int64_t rows = rows_limit >= 0 ? std::min<int64_t>(rows_limit, std::min(g.rows, w.rows)) : g.rows;
    if (rows_limit < 0 && (g.rows != w.rows || g.values.size() != w.values.size() || g.ids.size() != w.ids.size())) {
      d.fail(g.name + ": different sizes");
      continue;
    }
    const size_t n_values = static_cast<size_t>(rows * g.cols);
    if (!g.values.empty()) {
      for (size_t i = 0; i < n_values && i < g.values.size() && i < w.values.size(); ++i) {
        const float a = g.values[i], b = w.values[i];
        const bool nan_a = std::isnan(a), nan_b = std::isnan(b);
        bool bad;
        if (nan_a || nan_b) {
          bad = nan_a != nan_b;
        } else if (tolerance < 0) {
          bad = !same_bits(a, b);
          if (std::isfinite(a) && std::isfinite(b))
            d.max_error = std::max(d.max_error, std::fabs(double{a} - double{b}) / std::max(1.0, std::fabs(double{b})));
        } else if (std::isinf(a) || std::isinf(b)) {
          bad = a != b;
        } else {
          const double err = std::fabs(double{a} - double{b}) / std::max(1.0, std::fabs(double{b}));
          d.max_error = std::max(d.max_error, err);
          bad = err > tolerance;
        }
        if (bad) {
          std::ostringstream m;
          m.precision(9);
          m << g.name << " row " << i / static_cast<size_t>(std::max<int64_t>(g.cols, 1)) << " col "
            << i % static_cast<size_t>(std::max<int64_t>(g.cols, 1)) << ": got " << a << ", want " << b;
          d.fail(m.str());
        }
      }
    }
    const size_t n_ids = rows_limit >= 0 ? std::min(static_cast<size_t>(rows * g.cols), g.ids.size()) : g.ids.size();
    for (size_t i = 0; i < n_ids && i < w.ids.size(); ++i)
      if (g.ids[i] != w.ids[i]) {
        d.fail(g.name + " id " + std::to_string(i) + ": got " + std::to_string(g.ids[i]) + ", want " +
               std::to_string(w.ids[i]));
        break;
      }
  }
  return d;
}

}  // namespace fafo::test
