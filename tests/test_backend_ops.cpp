// The op-conformance table (ctest label backend-ops), in the spirit of ggml's
// test-backend-ops: one table of cases covering every op of the backend contract
// (fafo/backend.h, fafo/kv_cache.h) — embed and matmul for all 13 weight formats,
// rms_norm, add_bias, rope in every variant the models use, KV store / write / swap /
// move / read keys / query capture, attention over StepBatches (in-step masks, FULL and
// COMPRESSED prefixes, a permuted logical order, dense layers, contexts long enough to
// be split into parts, f32, f16, q8_0 and q4_0 caches), multi-head latent attention over latent
// caches (odd per-layer widths, keys rotated at each entry's position; on the backends
// that run MLA models), swiglu, add, gather, argmax and top-k — over
// odd shapes and step sizes T in {1, 2, 3, 8, 9, 31, 64, 257}. It runs on every backend
// of the registry and every device each finds, against the CPU reference:
//   - conformance: each result equals the reference bit for bit when the backend
//     declares exact numerics, else within its declared tolerance (the largest error
//     is printed per case);
//   - T-invariance, whatever the numerics: a row's result is bit-identical at every T
//     and when the other rows of the step hold other values.
// The table checks itself: backends with a deliberate bug (tests/faulty_backend.h)
// must fail it.
//
// `test_backend_ops --perf` prints per-op time and GB/s per backend instead.
// The cases are in test_backend_ops_table.cpp (backend_ops_table.h: their building blocks,
// checking a case, the targets).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/simd_matmul.h"
#include "backend_ops_table.h"
#include "faulty_backend.h"
#include "backend/cpu/cpu_backend.h"
#include "fafo/backend_registry.h"

using namespace fafo;
using namespace fafo::test;

namespace {

class BackendOps : public ::testing::TestWithParam<Target> {
 protected:
  static void SetUpTestSuite() { reference_ = std::make_unique<OpEnv>(make_reference_backend(2)); }
  static void TearDownTestSuite() {
    reference_.reset();
    targets_.clear();
  }
  OpEnv& target() {
    auto& env = targets_[GetParam().label()];
    if (!env) env = std::make_unique<OpEnv>(make_target(GetParam()));
    return *env;
  }
  // Runs every case of `op` and fails with the first mismatch of each case.
  void run_op(const std::string& op) {
    // vulkan_int8 differs from vulkan (vulkan_tiles from vulkan_int8) only in the products
    // of block-quantized weights, and in rounding an attention output for such a product
    // after it, which a model's weights enable (vulkan_backend.cpp; run by
    // VulkanBackend.IntegerProductsKeepEveryStrategyEqualToAr): the rows of an op with no
    // such product (no case with rounded_matmul: not the products, gather, scatter_add)
    // would repeat the other target's.
    const std::string& backend = GetParam().backend;
    if (backend == "vulkan_int8" || backend == "vulkan_tiles") {
      const auto& table = op_table();
      if (std::none_of(table.begin(), table.end(), [&](const OpCase& c) { return c.op == op && c.rounded_matmul; }))
        GTEST_SKIP() << backend << " differs from " << (backend == "vulkan_int8" ? "vulkan" : "vulkan_int8")
                     << " only in the products of block-quantized weights, which no case of " << op << " has";
    }
    OpEnv& env = target();
    const BackendNumerics numerics = env.be().numerics();
    int n_cases = 0;
    for (const OpCase& c : op_table()) {
      if (c.op != op) continue;
      ++n_cases;
      const double tolerance =
          numerics.exact ? -1.0 : numerics.tolerance_for(c.rounded_matmul, c.half_matmul, c.bf16_matmul);
      const CaseReport r = check_case(c, env, *reference_, tolerance);
      std::printf("  %-10s %-16s %-52s %zu step sizes  %s  max error %.3g%s\n", GetParam().label().c_str(), c.op.c_str(),
                  c.name.c_str(), c.steps.size(), numerics.exact ? "exact" : "tolerance", r.conformance.max_error,
                  r.conformance.ok && r.invariance.ok ? "" : "  FAILED");
      EXPECT_TRUE(r.conformance.ok) << c.op << " " << c.name << " differs from the CPU reference: " << r.conformance.first;
      EXPECT_TRUE(r.invariance.ok) << c.op << " " << c.name << " is not T-invariant: " << r.invariance.first;
    }
    EXPECT_GT(n_cases, 0) << "no case for op " << op;
  }

  static inline std::unique_ptr<OpEnv> reference_;
  static inline std::map<std::string, std::unique_ptr<OpEnv>> targets_;
};

TEST_P(BackendOps, Embed) { run_op("embed"); }
TEST_P(BackendOps, Matmul) { run_op("matmul"); }
TEST_P(BackendOps, RmsNorm) { run_op("rms_norm"); }
TEST_P(BackendOps, HeadNorm) { run_op("head_norm"); }
TEST_P(BackendOps, AddBias) { run_op("add_bias"); }
TEST_P(BackendOps, Rope) { run_op("rope"); }
TEST_P(BackendOps, KvStore) { run_op("kv_store"); }
TEST_P(BackendOps, KvSwapMove) { run_op("kv_swap_move"); }
TEST_P(BackendOps, CaptureQueries) { run_op("capture_queries"); }
TEST_P(BackendOps, Attention) { run_op("attention"); }


// On the backends that run MLA models; the reference, cpu and vulkan backends must.
TEST_P(BackendOps, LatentAttention) {
  const std::string& backend = GetParam().backend;
  if (!target().be().capabilities().latent_attention) {
    ASSERT_TRUE(backend != "reference" && backend != "cpu" && backend != "vulkan") << backend << " must run MLA models";
    GTEST_SKIP() << "the " << backend << " backend does not run multi-head latent attention (MLA) models";
  }
  run_op("latent_attention");
}
TEST_P(BackendOps, Swiglu) { run_op("swiglu"); }
TEST_P(BackendOps, Geglu) { run_op("geglu"); }
TEST_P(BackendOps, SwigluOai) { run_op("swiglu_oai"); }
TEST_P(BackendOps, Scale) { run_op("scale"); }
TEST_P(BackendOps, Softcap) { run_op("softcap"); }
TEST_P(BackendOps, Add) { run_op("add"); }
TEST_P(BackendOps, Gather) { run_op("gather"); }
TEST_P(BackendOps, ScatterAdd) { run_op("scatter_add"); }
TEST_P(BackendOps, MatmulAdd) { run_op("matmul_add"); }
TEST_P(BackendOps, MatmulSwiglu) { run_op("matmul_swiglu"); }

// A fused op's outputs against the unfused ops': bit for bit, naming the first difference.
::testing::AssertionResult same_bits_everywhere(const std::vector<float>& fused, const std::vector<float>& plain) {
  if (fused.size() != plain.size())
    return ::testing::AssertionFailure() << fused.size() << " values fused vs " << plain.size() << " unfused";
  for (size_t i = 0; i < fused.size(); ++i)
    if (!same_bits(fused[i], plain[i]))
      return ::testing::AssertionFailure() << "value " << i << ": " << fused[i] << " fused vs " << plain[i];
  return ::testing::AssertionSuccess();
}

// Where a backend fuses the feed-forward gate, the fused kernel gives the bits of the two
// products and the SwiGLU, for a format of each kind and for one- and multi-token steps.
TEST_P(BackendOps, FusedGateIsTheTwoProductsThenTheSwiglu) {
  OpEnv& env = target();
  Backend& be = env.be();
  const int64_t cols = 256, rows = 37;
  int checked = 0;
  for (const TensorType type : {TensorType::F16, TensorType::Q8_0, TensorType::Q4_K}) {
    if (!fuses_gate_up(be, type, rows, cols)) continue;
    // Plain variables: clang 14 cannot capture structured bindings in the lambda below.
    const auto fused_pair = gate_and_up(env, type, rows, cols, true);
    const auto plain_pair = gate_and_up(env, type, rows, cols, false);
    const auto& both = fused_pair.first;
    const auto& none = fused_pair.second;
    const auto& gate = plain_pair.first;
    const auto& up = plain_pair.second;
    for (const int32_t T : {1, 5, 12}) {
      env.ensure_cache(T + 1);
      auto run = [&](bool fused) {
        StepBatch b = causal_batch(T, 0);
        be.begin_step(b, env.kv());
        Activation x = input(env, "x", cols, 1, T, 0);
        Activation out = env.activation("out", rows);
        Activation scratch = env.activation("scratch", rows);
        if (fused) {
          run_matmul_swiglu(be, both, none, x, out, scratch);
        } else {
          be.matmul(gate, x, out);
          be.matmul(up, x, scratch);
          be.gated(GatedActivation::Silu, out, scratch, out);
        }
        be.finish_step();
        return be.read_rows(out, T);
      };
      ASSERT_TRUE(same_bits_everywhere(run(true), run(false))) << tensor_type_name(type) << " T=" << T;
      ++checked;
    }
  }
  std::printf("  %s: %d fused gate steps checked\n", GetParam().label().c_str(), checked);
  if (GetParam().backend == "vulkan" && be.description().find("CPU") != std::string::npos) {
    EXPECT_GT(checked, 0) << "a CPU Vulkan device (whole-rows matmul) fuses the gate";
  }
}

// matmul_norm and matmul_swiglu_norm (an RMSNorm fused into the product where the
// backend can) give the bits of rms_norm then the product(s), on every backend, for a
// format of each kind (plain floats with a partial last chunk, 32-value blocks,
// superblocks) and steps of one, several and more than one tile of tokens.
TEST_P(BackendOps, NormedProductsAreTheNormThenTheProduct) {
  OpEnv& env = target();
  Backend& be = env.be();
  for (const TensorType type : {TensorType::F16, TensorType::Q8_0, TensorType::Q4_K}) {
    const int64_t cols = type == TensorType::F16 ? 200 : 256, rows = 37;
    const Weight w = quantized_weight(env, type, rows, cols, 41);
    const Weight gain = vector_weight(env, cols, 42, 0.5f, 1.5f);
    const auto fused_pair = gate_and_up(env, type, rows, cols, fuses_gate_up(be, type, rows, cols));
    const auto plain_pair = gate_and_up(env, type, rows, cols, false);
    for (const int32_t T : {1, 5, 12}) {
      env.ensure_cache(T + 1);
      for (const bool gated : {false, true}) {
        auto run = [&](bool fused) {
          StepBatch b = causal_batch(T, 0);
          be.begin_step(b, env.kv());
          Activation x = input(env, "x", cols, 1, T, 0, -2.0f, 2.0f);
          Activation normed = env.activation("normed", cols);
          Activation out = env.activation("out", rows);
          Activation scratch = env.activation("scratch", rows);
          if (fused && gated) {
            run_matmul_swiglu_norm(be, fused_pair.first, fused_pair.second, x, gain, 1e-5f, normed, out, scratch);
          } else if (fused) {
            run_matmul_norm(be, w, x, gain, 1e-5f, normed, out);
          } else {
            be.rms_norm(x, gain, 1e-5f, normed);
            if (gated) {
              be.matmul(plain_pair.first, normed, out);
              be.matmul(plain_pair.second, normed, scratch);
              be.gated(GatedActivation::Silu, out, scratch, out);
            } else {
              be.matmul(w, normed, out);
            }
          }
          be.finish_step();
          return be.read_rows(out, T);
        };
        ASSERT_TRUE(same_bits_everywhere(run(true), run(false)))
            << tensor_type_name(type) << " T=" << T << (gated ? " gated" : "");
      }
    }
  }
}

// A fused matmul_add gives the bits of the product followed by the add, on every
// backend, for a format of each kind (plain floats, 32-value blocks, superblocks).
TEST_P(BackendOps, MatmulAddIsTheProductThenTheAdd) {
  OpEnv& env = target();
  Backend& be = env.be();
  for (const TensorType type : {TensorType::F16, TensorType::Q8_0, TensorType::Q4_K}) {
    const int64_t cols = 256, rows = 37;
    const Weight w = quantized_weight(env, type, rows, cols, 21);
    for (const int32_t T : {1, 5}) {
      env.ensure_cache(T + 1);
      auto run = [&](bool fused) {
        StepBatch b = causal_batch(T, 0);
        be.begin_step(b, env.kv());
        Activation x = input(env, "x", cols, 1, T, 0);
        Activation acc = input(env, "acc", rows, 2, T, 0);
        Activation scratch = env.activation("out", rows);
        if (fused) {
          run_matmul_add(be, w, x, acc, scratch);
        } else {
          be.matmul(w, x, scratch);
          be.add(acc, scratch);
        }
        be.finish_step();
        return be.read_rows(acc, T);
      };
      ASSERT_TRUE(same_bits_everywhere(run(true), run(false))) << tensor_type_name(type) << " T=" << T;
    }
  }
}
// matmuls (a step's experts' products at once) gives each product's bits alone, on every
// backend: products of integer formats only (the cpu backend's one dispatch) and with a
// float format among them, several with one weight, rows that are no multiple of a
// panel, one- and multi-token steps.
TEST_P(BackendOps, MatmulsGiveEachProductsBits) {
  OpEnv& env = target();
  Backend& be = env.be();
  const int64_t cols = 256;
  struct Product {
    TensorType type;
    int64_t rows;
  };
  const std::vector<std::vector<Product>> sets = {
      {{TensorType::Q4_K, 37}, {TensorType::Q8_0, 300}, {TensorType::IQ4_NL, 5}, {TensorType::Q4_K, 37}},
      {{TensorType::Q6_K, 64}, {TensorType::F16, 33}, {TensorType::Q4_0, 129}}};
  for (size_t s = 0; s < sets.size(); ++s) {
    std::vector<Weight> weights;
    for (size_t i = 0; i < sets[s].size(); ++i)  // the two Q4_K products share their weight
      weights.push_back(i == 3 ? weights[0] : quantized_weight(env, sets[s][i].type, sets[s][i].rows, cols, 60 + static_cast<uint32_t>(i)));
    for (const int32_t T : {1, 5, 12}) {
      env.ensure_cache(T + 1);
      auto run = [&](bool together) {
        StepBatch b = causal_batch(T, 0);
        be.begin_step(b, env.kv());
        std::vector<Activation> xs, outs;
        for (size_t i = 0; i < weights.size(); ++i) {
          xs.push_back(input(env, "matmuls_x" + std::to_string(i), cols, 70 + static_cast<uint32_t>(i), T, 0));
          outs.push_back(env.activation("matmuls_out" + std::to_string(i), sets[s][i].rows));
        }
        if (together) {
          std::vector<Backend::MatmulJob> jobs;
          for (size_t i = 0; i < weights.size(); ++i) jobs.push_back({&weights[i], &xs[i], &outs[i]});
          be.matmuls(jobs);
        } else {
          for (size_t i = 0; i < weights.size(); ++i) be.matmul(weights[i], xs[i], outs[i]);
        }
        be.finish_step();
        std::vector<float> all;
        for (const Activation& o : outs) {
          const std::vector<float> r = be.read_rows(o, T);
          all.insert(all.end(), r.begin(), r.end());
        }
        return all;
      };
      ASSERT_TRUE(same_bits_everywhere(run(true), run(false))) << "set " << s << " T=" << T;
    }
  }
}

// write_rows, the residual stream arriving from the device before in a layer split: the
// rows written before a step are what its ops read, bit for bit (x + y computed from
// them), and a partial row or more rows than the activation holds are refused.
TEST_P(BackendOps, WrittenRowsAreWhatTheNextStepReads) {
  OpEnv& env = target();
  Backend& be = env.be();
  const int64_t cols = 96;
  Activation x = env.activation("written_x", cols);
  Activation y = env.activation("written_y", cols);
  for (const int32_t T : {1, 7, 33}) {
    env.ensure_cache(T + 1);
    std::vector<float> a(static_cast<size_t>(T * cols)), b(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(T)) * 3.0f;
      b[i] = std::cos(0.11f * static_cast<float>(i)) * 0.5f;
    }
    be.write_rows(x, a);
    be.write_rows(y, b);
    StepBatch batch = causal_batch(T, 0);
    be.begin_step(batch, env.kv());
    be.add(x, y);
    be.finish_step();
    const std::vector<float> sum = be.read_rows(x, T);
    ASSERT_EQ(sum.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_TRUE(same_bits(sum[i], a[i] + b[i])) << "T=" << T << " value " << i;
    EXPECT_EQ(be.read_rows(y, T), b) << "T=" << T;
  }
  EXPECT_THROW(be.write_rows(x, std::vector<float>(static_cast<size_t>(cols) + 1)), std::out_of_range);
  EXPECT_THROW(be.write_rows(x, std::vector<float>(static_cast<size_t>((x.rows + 1) * cols))), std::out_of_range);
}

TEST_P(BackendOps, Argmax) { run_op("argmax"); }
TEST_P(BackendOps, TopK) { run_op("top_k"); }

INSTANTIATE_TEST_SUITE_P(EveryBackendAndDevice, BackendOps, ::testing::ValuesIn(all_targets()),
                         [](const ::testing::TestParamInfo<Target>& p) { return p.param.label(); });

// --- CUDA against Vulkan, bit for bit ------------------------------------------------------
// The CUDA kernels and the Vulkan shaders share their arithmetic: the block decoders and
// the summation orders of cuda_backend/src/dot_order.h, with the multiply-add fused on
// NVIDIA (CUDA's __fmaf_rn and the NVIDIA driver's GLSL fma()). So on one NVIDIA GPU the
// two backends must give the same bits for every op whose arithmetic is only products and
// sums. Ops that call exp, sin/cos, sqrt or a division may differ in the last bits (the
// drivers' versions of those are not CUDA's): the pair check reports their largest
// difference and does not fail on them. Nor does it on products with block-quantized
// weights where one backend rounds their activations to 8 bits and the other does not
// (where both do, the CUDA backend's and Vulkan's integer products, they share their
// arithmetic and must match), or with F16 weights where one rounds them to halves (the
// CUDA backend's tensor-core products: the GPU run compares the pair with
// FAFO_CUDA_KERNELS=warp too, where CUDA multiplies in floats).

// The ops whose results must be bit-identical across the pair ("gather" is not: its case
// normalizes the gathered rows, and the backends' RMSNorms sum the squares in different
// orders).
bool same_bits_expected(const std::string& op) {
  static const std::set<std::string> ops = {"embed",    "matmul",       "matmul_add",      "add",    "add_bias", "kv_store",
                                            "kv_swap_move", "capture_queries", "argmax", "top_k", "scale"};
  return ops.count(op) != 0;
}

// What comparing two backends case by case found.
struct PairReport {
  int cases = 0, identical = 0;
  std::vector<std::string> must_match_but_differ;  // op, case and the first difference
  std::map<std::string, std::pair<int, double>> differing_per_op;  // op -> (cases, largest difference)
};

// Every case both backends run (MLA only where both run it), compared bit for bit at each step size.
PairReport compare_pair(OpEnv& a, OpEnv& b, const std::string& label) {
  PairReport report;
  const bool mla = a.be().capabilities().latent_attention && b.be().capabilities().latent_attention;
  const bool rounds = (a.be().numerics().rounded_matmul_tolerance > 0) != (b.be().numerics().rounded_matmul_tolerance > 0);
  const bool halves = a.be().numerics().half_matmul_tolerance > 0 || b.be().numerics().half_matmul_tolerance > 0;
  const bool bf16s = a.be().numerics().bf16_matmul_tolerance > 0 || b.be().numerics().bf16_matmul_tolerance > 0;
  for (const OpCase& c : op_table()) {
    if (c.op == "latent_attention" && !mla) continue;
    ++report.cases;
    const CaseReport r = check_case(c, a, b, -1.0);
    if (r.conformance.ok) {
      ++report.identical;
      continue;
    }
    auto& [n, largest] = report.differing_per_op[c.op];
    ++n;
    largest = std::max(largest, r.conformance.max_error);
    if (same_bits_expected(c.op) && !(rounds && c.rounded_matmul) && !(halves && c.half_matmul) &&
        !(bf16s && c.bf16_matmul))
      report.must_match_but_differ.push_back(c.op + " " + c.name + ": " + r.conformance.first);
  }
  std::printf("  pair %s: %d of %d cases bit-identical", label.c_str(), report.identical, report.cases);
  for (const auto& [op, d] : report.differing_per_op)
    std::printf("; %s differs in %d (largest %.3g%s)", op.c_str(), d.first, d.second,
                same_bits_expected(op) ? ", must be identical" : "");
  std::printf("\n");
  return report;
}

// Every CUDA GPU against every Vulkan GPU of the machine (lavapipe is left out: it rounds
// the product before the add, as Vulkan allows, where NVIDIA fuses them).
TEST(BackendPairs, CudaAndVulkanOnTheSameGpuGiveTheSameBits) {
  std::vector<Target> cuda, vulkan;
  for (const Target& t : all_targets()) {
    if (t.backend == "cuda") cuda.push_back(t);
    if (t.backend == "vulkan" && t.device_name.find("llvmpipe") == std::string::npos) vulkan.push_back(t);
  }
  if (cuda.empty() || vulkan.empty()) GTEST_SKIP() << "needs a CUDA GPU and a Vulkan GPU (this machine has "
                                                   << cuda.size() << " and " << vulkan.size() << ")";
  for (const Target& c : cuda)
    for (const Target& v : vulkan) {
      OpEnv a(make_target(c)), b(make_target(v));
      const PairReport r = compare_pair(a, b, c.label() + " (" + c.device_name + ") vs " + v.label() + " (" + v.device_name + ")");
      EXPECT_GT(r.cases, 80);  // 91 on the H200 (no MLA on cuda), 101 where both run MLA; 17 more with block caches
      for (const std::string& d : r.must_match_but_differ) ADD_FAILURE() << c.label() << " vs " << v.label() << ": " << d;
    }
}

// The pair check can fail: a backend is identical to another instance of itself
// everywhere, and a backend with one wrong row in its matrix products fails it.
TEST(BackendPairs, ThePairCheckSeesAWrongRow) {
  OpEnv a(make_reference_backend(1)), b(make_reference_backend(1));
  const PairReport same = compare_pair(a, b, "reference vs reference");
  EXPECT_EQ(same.identical, same.cases);
  EXPECT_TRUE(same.must_match_but_differ.empty());
  OpEnv faulty(std::make_unique<FaultyBackend>(Fault::MatmulRowOffByOne)), reference(make_reference_backend(1));
  const PairReport off = compare_pair(faulty, reference, "off-by-one matmul vs reference");
  ASSERT_EQ(off.differing_per_op.count("matmul"), 1u);
  EXPECT_GT(off.differing_per_op.at("matmul").first, 0);
  EXPECT_FALSE(off.must_match_but_differ.empty());
}

TEST(BackendOpsTable, CoversEveryOpOfTheContractAndEveryWeightFormat) {
  std::map<std::string, int> per_op;
  for (const OpCase& c : op_table()) ++per_op[c.op];
  for (const char* op : {"embed", "matmul", "rms_norm", "head_norm", "add_bias", "rope", "kv_store", "kv_swap_move",
                         "capture_queries", "attention", "latent_attention", "swiglu", "swiglu_oai", "geglu", "scale", "softcap", "add",
                         "matmul_add", "matmul_swiglu", "gather", "scatter_add", "argmax", "top_k"})
    EXPECT_GT(per_op[op], 0) << op;
  // Every weight format fafo reads (all of its types but the activation formats Q8_1 and
  // Q8_K): one embed case and two matmul shapes each.
  int formats = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    const TensorTypeInfo* info = tensor_type_info(id);
    formats += info != nullptr && info->type != TensorType::Q8_1 && info->type != TensorType::Q8_K;
  }
  EXPECT_EQ(formats, 20);
  EXPECT_EQ(per_op["embed"], formats);
  EXPECT_EQ(per_op["matmul"], 2 * formats);
  std::printf("  %zu cases\n", op_table().size());
}

TEST(BackendOpsTable, EveryBackendOfTheBuildIsATarget) {
  const std::vector<Target> targets = all_targets();
  for (const std::string& name : available_backends())
    EXPECT_TRUE(std::any_of(targets.begin(), targets.end(), [&](const Target& t) { return t.backend == name; }) ||
                name != "cpu")
        << name;
  for (const Target& t : targets) std::printf("  target %s: %s\n", t.label().c_str(), t.device_name.c_str());
}

// The cpu backend splits matrix products over its threads by rows: one thread or two
// must give the same bits for every case of every op (T-invariance across thread counts).
TEST(BackendOpsTable, CpuResultsDoNotDependOnTheThreadCount) {
  OpEnv one(make_cpu_backend(1)), two(make_cpu_backend(2));
  int cases = 0;
  for (const OpCase& c : op_table()) {
    if (c.op != "matmul" && c.op != "attention" && c.op != "latent_attention" && c.op != "gather") continue;
    ++cases;
    const CaseReport r = check_case(c, one, two, -1.0);
    EXPECT_TRUE(r.conformance.ok) << c.op << " " << c.name << ": " << r.conformance.first;
  }
  EXPECT_GT(cases, 26);
}

// The cpu backend runs on every instruction set Highway compiled that this CPU has
// (down to the portable scalar emulation a CPU without SIMD gets): each must pass the
// matrix-product cases within the declared tolerance, T-invariant.
TEST(BackendOpsTable, CpuMatmulOnEveryInstructionSet) {
  OpEnv reference(make_reference_backend(2));
  cpu::use_simd_target("");
  const std::vector<std::string> targets = cpu::simd_targets();
#ifndef HWY_COMPILE_ONLY_STATIC  // the sanitizer build compiles one target only (its machine's)
  EXPECT_GE(targets.size(), 2u) << "expected a SIMD target and the scalar fallback";
#endif
  for (const std::string& target : targets) {
    cpu::use_simd_target(target);
    OpEnv env(make_cpu_backend(2));
    double worst = 0.0;
    for (const OpCase& c : op_table()) {
      if (c.op != "matmul") continue;
      const double tolerance = env.be().numerics().tolerance_for(c.rounded_matmul, c.half_matmul, c.bf16_matmul);
      const CaseReport r = check_case(c, env, reference, tolerance);
      worst = std::max(worst, r.conformance.max_error);
      EXPECT_TRUE(r.conformance.ok) << target << " " << c.name << ": " << r.conformance.first;
      EXPECT_TRUE(r.invariance.ok) << target << " " << c.name << ": " << r.invariance.first;
    }
    std::printf("  cpu on %-8s matmul cases within %.3g of the reference (largest relative error)\n", target.c_str(), worst);
  }
  cpu::use_simd_target("");
  EXPECT_THROW(cpu::use_simd_target("no-such-isa"), std::invalid_argument);
}

// F16 products take the activations rounded to fp16: on every instruction set the bits
// of fp32_to_fp16 (nearest even, ties included; infinity past the largest half; NaN stays
// NaN), in the vector part of a row and in its tail.
TEST(BackendOpsTable, CpuRoundsActivationsToHalfAlikeOnEveryInstructionSet) {
  std::vector<float> x = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, -1.0f - 0x1p-11f, 65504.0f, 65519.0f, 65520.0f,
                          1e6f, -1e6f, INFINITY, -INFINITY, NAN, 1e-6f, 3e-8f, -6e-8f, 0.0f, -0.0f, 2049.0f, 2051.0f};
  for (int i = 0; x.size() < 53; ++i) x.push_back(hashed_value(7, i, 0, -300.0f, 300.0f));
  std::vector<uint16_t> half(x.size());
  std::vector<float> rounded(x.size());
  for (const std::string& target : cpu::simd_targets()) {
    cpu::use_simd_target(target);
    cpu::round_to_half(x.data(), static_cast<int64_t>(x.size()), half.data(), rounded.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t want = fp32_to_fp16(x[i]);
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(fp16_to_fp32(half[i])) && std::isnan(rounded[i])) << target << " value " << i;
        continue;
      }
      EXPECT_EQ(half[i], want) << target << " value " << i << " = " << x[i];
      EXPECT_TRUE(same_bits(rounded[i], fp16_to_fp32(want))) << target << " value " << i << " = " << x[i];
    }
  }
  cpu::use_simd_target("");
}

// The table must fail a wrong kernel: a backend whose matmul reads the next weight row.
TEST(BackendOpsTable, AnOffByOneRowMatmulFailsConformance) {
  OpEnv faulty(std::make_unique<FaultyBackend>(Fault::MatmulRowOffByOne));
  OpEnv reference(make_reference_backend(1));
  int caught = 0, cases = 0;
  for (const OpCase& c : op_table()) {
    if (c.op != "matmul") continue;
    ++cases;
    const CaseReport r = check_case(c, faulty, reference, -1.0);
    if (!r.conformance.ok) ++caught;
    EXPECT_TRUE(r.invariance.ok) << c.name << ": the fault does not depend on T";
  }
  EXPECT_EQ(caught, cases) << "every matmul case must catch the off-by-one row";
}

// The oracle shares no attention code with the cpu backend (backend/reference/), so a
// mistake in cpu's choice of slots shows: one wrong slot in the region of COMPRESSED rows
// must fail conformance in every case with COMPRESSED rows, a region smaller than the
// prefix and a layer that is not dense, and only there (T-invariance cannot see it).
TEST(BackendOpsTable, AWrongRegionSlotInCpuAttentionFailsConformance) {
  OpEnv mutated(cpu::make_cpu_backend(2, host::AttentionMutation::WrongRegionSlot));
  OpEnv reference(make_reference_backend());
  const double tolerance = mutated.be().numerics().tolerance_for(false, false);
  const std::set<std::string> must_catch = {
      "FAFO-like: COMPRESSED rows, region 68 of 300", "FAFO-like: COMPRESSED rows, region 68 of 300, f16 cache",
      "permuted logical order, dense first layer", "permuted logical order, dense first layer, f16 cache",
      "COMPRESSED rows, region 40 of 300, permuted, dense first layer",
      "COMPRESSED rows, region 40 of 300, permuted, dense first layer, f16 cache",
      "soft-capped at 1, permuted, COMPRESSED rows, f16 cache",
      "sliding window of 64, permuted, COMPRESSED rows, dense first layer",
      "sliding window of 64, permuted, COMPRESSED rows, dense first layer, f16 cache",
      "sliding window of 64, permuted, COMPRESSED rows, dense first layer, q4_0 cache",
      "sliding window of 64, permuted, COMPRESSED rows, dense first layer, layer 0 a ring",
      "sliding window of 64, permuted, COMPRESSED rows, dense first layer, q4_0 cache, layer 0 a ring",
      "sliding window of 32, COMPRESSED rows, region 68 of 300, permuted",
      "sliding window of 32, COMPRESSED rows, region 68 of 300, permuted, layer 0 a ring",
      "FAFO-like: COMPRESSED rows, region 68 of 300, q8_0 cache", "FAFO-like: COMPRESSED rows, region 68 of 300, q4_0 cache",
      "permuted logical order, dense first layer, q8_0 cache", "permuted logical order, dense first layer, q4_0 cache",
      "sinks, sliding window of 64, permuted, COMPRESSED rows, q8_0 cache",
      "sinks, sliding window of 64, permuted, COMPRESSED rows, q8_0 cache, layer 0 a ring"};
  std::set<std::string> caught;
  for (const OpCase& c : op_table()) {
    if (c.op != "attention" && c.op != "latent_attention") continue;
    const CaseReport r = check_case(c, mutated, reference, tolerance);
    if (!r.conformance.ok) caught.insert(c.name);
    EXPECT_TRUE(r.invariance.ok) << c.name << ": the mutation does not depend on T";
  }
  EXPECT_EQ(caught, must_catch);
}

// ... and a kernel whose result depends on the step size, even where it happens to be
// right at small T: T-invariance fails on the backend alone.
TEST(BackendOpsTable, AKernelThatDependsOnTFailsTInvariance) {
  OpEnv faulty(std::make_unique<FaultyBackend>(Fault::RmsNormDependsOnT));
  OpEnv reference(make_reference_backend(1));
  for (const OpCase& c : op_table()) {
    if (c.op != "rms_norm") continue;
    const CaseReport r = check_case(c, faulty, reference, -1.0);
    EXPECT_FALSE(r.invariance.ok) << c.name;
    EXPECT_FALSE(r.conformance.ok) << c.name;
    EXPECT_NE(r.conformance.first.find("T=9"), std::string::npos) << r.conformance.first;  // T <= 8 still agree
  }
}

// --- --perf: per-op time and GB/s per backend ----------------------------------------------

struct PerfOp {
  std::string op, shape;
  int32_t T;
  double bytes;  // bytes one step of the op reads and writes
  std::function<void(OpEnv&)> setup;
  std::function<void(OpEnv&)> step;  // one step: begin_step .. finish_step
};

std::vector<PerfOp> perf_ops() {
  std::vector<PerfOp> ops;
  const int64_t n = 2048;
  for (const TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0,
                                TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    for (const int32_t T : {1, 8, 64}) {
      const double weight_bytes = static_cast<double>(tensor_row_bytes(type, n)) * n;
      auto batch = std::make_shared<StepBatch>(causal_batch(T, 0));
      ops.push_back({"matmul", lower(tensor_type_name(type)) + " " + std::to_string(n) + "x" + std::to_string(n), T,
                     weight_bytes + 2.0 * T * n * sizeof(float),
                     [=](OpEnv& env) { env.ensure_cache(T + 1); quantized_weight(env, type, n, n, 1); },
                     [=](OpEnv& env) {
                       Backend& be = env.be();
                       const Weight w = quantized_weight(env, type, n, n, 1);
                       Activation x = env.activation("x", n), out = env.activation("out", n);
                       be.begin_step(*batch, env.kv());
                       be.matmul(w, x, out);
                       be.finish_step();
                     }});
    }
  }
  for (const int32_t T : {1, 64}) {
    auto batch = std::make_shared<StepBatch>(causal_batch(T, 0));
    ops.push_back({"rms_norm", "n=4096", T, 2.0 * T * 4096 * sizeof(float), [=](OpEnv& env) { env.ensure_cache(T + 1); },
                   [=](OpEnv& env) {
                     Backend& be = env.be();
                     const Weight g = vector_weight(env, 4096, 3, 0.5f, 1.5f);
                     Activation x = env.activation("x", 4096), out = env.activation("out", 4096);
                     be.begin_step(*batch, env.kv());
                     be.rms_norm(x, g, 1e-5f, out);
                     be.finish_step();
                   }});
    ops.push_back({"swiglu", "n=11008", T, 3.0 * T * 11008 * sizeof(float), [=](OpEnv& env) { env.ensure_cache(T + 1); },
                   [=](OpEnv& env) {
                     Backend& be = env.be();
                     Activation g = env.activation("x", 11008), u = env.activation("y", 11008);
                     be.begin_step(*batch, env.kv());
                     be.gated(GatedActivation::Silu, g, u, g);
                     be.finish_step();
                   }});
  }
  for (const int32_t T : {1, 8}) {
    const int32_t n_past = 2048, kv_dim = 8 * 64, q_dim = 32 * 64;
    auto batch = std::make_shared<StepBatch>(causal_batch(T, n_past));
    ops.push_back({"attention", "ctx 2048, 32/8 heads x 64, f32 cache", T,
                   2.0 * (n_past + T) * kv_dim * sizeof(float) + 2.0 * T * q_dim * sizeof(float),
                   [=](OpEnv& env) {
                     KvCache& kv = env.make_cache(KvCacheShape{1, n_past + 64, kv_dim, KvCacheType::F32});
                     std::vector<float> k(static_cast<size_t>(n_past) * kv_dim);
                     for (size_t i = 0; i < k.size(); ++i) k[i] = hashed_value(1, static_cast<int64_t>(i), 0);
                     kv.write(0, 0, n_past, k.data(), k.data());
                     kv.reset_layout(0, 0, n_past);
                   },
                   [=](OpEnv& env) {
                     Backend& be = env.be();
                     Activation q = env.activation("q", q_dim), out = env.activation("out", q_dim);
                     be.begin_step(*batch, env.kv());
                     be.attention(0, q, AttentionShape{32, 8, 64, 0.125f}, out);
                     be.finish_step();
                   }});
  }
  {
    auto batch = std::make_shared<StepBatch>(causal_batch(1, 0));
    ops.push_back({"argmax", "n=128256", 1, 128256.0 * sizeof(float), [](OpEnv& env) { env.ensure_cache(2); },
                   [=](OpEnv& env) {
                     Backend& be = env.be();
                     Activation x = env.activation("logits", 128256);
                     be.begin_step(*batch, env.kv());
                     be.argmax_rows(x);
                     be.finish_step();
                     be.read_argmax(1);
                   }});
  }
  return ops;
}

int run_perf() {
  std::printf("| backend | op | shape | T | us per step | GB/s |\n|---|---|---|---:|---:|---:|\n");
  std::vector<Target> targets = all_targets();
  for (const Target& t : targets) {
    std::unique_ptr<OpEnv> env;
    try {
      env = std::make_unique<OpEnv>(make_target(t));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", t.label().c_str(), e.what());
      continue;
    }
    for (const PerfOp& op : perf_ops()) {
      try {
        op.setup(*env);
        op.step(*env);  // warm-up (pipelines, descriptor sets)
        std::vector<double> us;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (us.size() < 5 || (us.size() < 200 && std::chrono::steady_clock::now() < deadline)) {
          const auto t0 = std::chrono::steady_clock::now();
          op.step(*env);
          us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(us.begin(), us.end());
        const double median = us[us.size() / 2];
        std::printf("| %s (%s) | %s | %s | %d | %.1f | %.2f |\n", t.label().c_str(), t.device_name.c_str(), op.op.c_str(),
                    op.shape.c_str(), op.T, median, op.bytes / (median * 1e3));
        std::fflush(stdout);
      } catch (const std::exception& e) {
        std::printf("| %s | %s | %s | %d | error: %s | |\n", t.label().c_str(), op.op.c_str(), op.shape.c_str(), op.T, e.what());
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--perf") return run_perf();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}