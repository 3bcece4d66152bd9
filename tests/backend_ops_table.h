// The op-conformance table's building blocks and what runs it, shared by the files of
// test_backend_ops: a case's inputs and weights, the table itself (its cases:
// test_backend_ops_table.cpp), checking a case against another backend, and the targets.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend_ops_harness.h"
#include "random_weights.h"
#include "fafo/backend.h"
#include "fafo/backend_registry.h"
#include "fafo/cuda_backend.h"
#if FAFO_HAVE_VULKAN
#include "backend/vulkan/vulkan_backend.h"
#endif

namespace fafo::test {

inline std::string lower(std::string_view v) {
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// --- building blocks of a case --------------------------------------------------------

// A causal batch of T tokens 0..T-1 at positions n_past.. (tokens index the input tables).
inline StepBatch causal_batch(int32_t T, int32_t n_past) {
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  std::iota(tokens.begin(), tokens.end(), 0);
  StepBatch b = StepBatch::causal(tokens, n_past, true);
  b.set_n_past(n_past);
  return b;
}

// Packed rows of `type` quantized from hashed values (rows of different scales).
inline std::vector<uint8_t> quantized_rows(TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  const size_t row_bytes = tensor_row_bytes(type, cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows) * row_bytes);
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float scale = hashed_value(seed, r, -1, 0.05f, 3.0f);
    for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] = hashed_value(seed, r, c) * scale;
    quantize_for_test(type, row.data(), out.data() + static_cast<size_t>(r) * row_bytes, cols);
  }
  return out;
}

inline Weight quantized_weight(OpEnv& env, TensorType type, int64_t rows, int64_t cols, uint32_t seed) {
  return env.weight("w/" + std::string(tensor_type_name(type)) + "/" + std::to_string(rows) + "x" + std::to_string(cols) +
                        "/" + std::to_string(seed),
                    type, rows, cols, [&] { return quantized_rows(type, rows, cols, seed); });
}

// A 1 x n F32 vector (norm gain, bias) of hashed values in [lo, hi].
inline Weight vector_weight(OpEnv& env, int64_t n, uint32_t seed, float lo, float hi) {
  return env.table(1, n, seed, 0, 0, lo, hi);
}

inline OpOutput rows_of(Backend& be, const std::string& name, const Activation& a, int64_t rows, bool per_row = true) {
  OpOutput o;
  o.name = name;
  o.rows = rows;
  o.cols = a.cols;
  o.per_row = per_row;
  o.values = be.read_rows(a, rows);
  return o;
}

// Fills activation `name` (cols wide) with rows 0..T-1 of a hashed table, in the current step.
inline Activation input(OpEnv& env, const std::string& name, int64_t cols, uint32_t seed, int32_t T, uint32_t salt,
                 float lo = -1.0f, float hi = 1.0f) {
  Activation a = env.activation(name, cols);
  Weight t = env.table(OpEnv::kMaxRows, cols, seed, salt, T / 2, lo, hi);
  env.be().embed(t, a);
  return a;
}

// The gate and up projections of a feed-forward block, as the backend takes them: one
// weight (up's rows after gate's) where it fuses them, else two.
inline std::pair<Weight, Weight> gate_and_up(OpEnv& env, TensorType type, int64_t rows, int64_t cols, bool fused) {
  if (!fused) return {quantized_weight(env, type, rows, cols, 31), quantized_weight(env, type, rows, cols, 32)};
  const Weight both = env.weight("gate_up/" + std::string(tensor_type_name(type)) + "/" + std::to_string(rows) + "x" +
                                     std::to_string(cols),
                                 type, 2 * rows, cols, [&] {
                                   std::vector<uint8_t> out = quantized_rows(type, rows, cols, 31);
                                   const std::vector<uint8_t> up = quantized_rows(type, rows, cols, 32);
                                   out.insert(out.end(), up.begin(), up.end());
                                   return out;
                                 });
  return {both, Weight{}};
}

// The table: every case of every op (test_backend_ops_table.cpp), built once.
const std::vector<OpCase>& op_table();

// --- running the table -------------------------------------------------------------------

// What the table found for one case on one backend.
struct CaseReport {
  OpDiff conformance;   // vs the reference
  OpDiff invariance;    // vs itself at other T and with other rows
  int comparisons = 0;
};

inline CaseReport check_case(const OpCase& c, OpEnv& target, OpEnv& reference, double tolerance) {
  CaseReport report;
  const int32_t t_max = *std::max_element(c.steps.begin(), c.steps.end());
  const OpOutputs at_max = c.run(target, t_max, 0);
  for (const int32_t T : c.steps) {
    const OpOutputs got = T == t_max ? at_max : c.run(target, T, 0);
    const OpOutputs want = c.run(reference, T, 0);
    OpDiff d = compare_outputs(got, want, tolerance);
    report.conformance.max_error = std::max(report.conformance.max_error, d.max_error);
    if (!d.ok) report.conformance.fail("T=" + std::to_string(T) + ": " + d.first);
    ++report.comparisons;
    // T-invariance: the first T rows equal the same rows of the largest step, bit for bit.
    if (T != t_max) {
      OpDiff inv = compare_outputs(got, at_max, -1.0, T);
      if (!inv.ok) report.invariance.fail("T=" + std::to_string(T) + " vs T=" + std::to_string(t_max) + ": " + inv.first);
    }
  }
  // Other rows holding other values leave the first half of the step unchanged.
  if (t_max > 1) {
    const OpOutputs salted = c.run(target, t_max, 1);
    OpDiff inv = compare_outputs(salted, at_max, -1.0, t_max / 2);
    if (!inv.ok) report.invariance.fail("T=" + std::to_string(t_max) + " with other rows changed: " + inv.first);
  }
  return report;
}

// A backend and device of this build, as the table runs it.
struct Target {
  std::string backend;
  int device = 0;
  std::string device_name;
  std::string label() const { return backend + "_" + std::to_string(device); }
};

// Every backend and device of the registry, each Vulkan device also with its integer
// products on ("vulkan_int8": the default on GPUs, off on CPU devices such as lavapipe)
// and with them in the matrix tiles' plain-loop form for steps over 8 tokens
// ("vulkan_tiles": GPUs with cooperative matrices run the instructions in vulkan_int8);
// both only for the ops with products of block-quantized weights (BackendOps::run_op), and the CUDA backend's code with its kernels run on the host
// ("cuda_emulated": the CUDA backend's step logic, where no GPU exists).
// Listed once per process: gtest evaluates a suite's generator once per TEST_P, and each
// listing of the Vulkan devices creates an instance, which loads every installed driver
// (28 instances in each test_backend_ops process, most of its start-up).
inline const std::vector<Target>& all_targets() {
  static const std::vector<Target> targets = [] {
    std::vector<Target> out;
    for (const BackendInfo& b : backend_registry())
      for (const BackendDevice& d : b.devices()) {
        out.push_back({b.name, d.index, d.name});
        if (b.name == "vulkan") {
          out.push_back({"vulkan_int8", d.index, d.name});
          out.push_back({"vulkan_tiles", d.index, d.name});
        }
      }
    out.push_back({"cuda_emulated", 0, "host"});
    return out;
  }();
  return targets;
}

inline std::unique_ptr<Backend> make_target(const Target& t) {
  if (t.backend == "cuda_emulated") return cuda::make_emulated_backend();
#if FAFO_HAVE_VULKAN
  if (t.backend == "vulkan_int8" || t.backend == "vulkan_tiles") {
    vulkan::VulkanBackendOptions options;
    options.device = std::to_string(t.device);
    options.int8_products = true;
    if (t.backend == "vulkan_tiles") options.matrix_tiles = vulkan::MatrixTilesUse::Loops;
    return vulkan::make_backend(options);
  }
#endif
  return make_backend(BackendSpec{t.backend, std::to_string(t.device), 2});
}

}  // namespace fafo::test
