// The CUDA backend as a whole on the host device (fafo::cuda::make_emulated_backend, on
// every machine): models of each family give the cpu backend's logits and every
// strategy plain decoding's ids with both kernel sets, the fused products and CUDA
// graphs give the bits of the launches apart, profiles count each kernel, and joined
// steps give each part the bits of its step alone. The kernels one by one:
// test_cuda_host.cpp.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "../cuda_backend/src/argmax_op.h"
#include "../cuda_backend/src/attention_ops.h"
#include "../cuda_backend/src/block_decode.h"
#include "../cuda_backend/src/dot_order.h"
#include "../cuda_backend/src/host_device.h"
#include "../cuda_backend/src/half_mma_ops.h"
#include "../cuda_backend/src/int_mma_block_op.h"
#include "../cuda_backend/src/int_ops.h"
#include "../cuda_backend/src/ops_backend.h"
#include "../cuda_backend/src/step_graphs.h"
#include "../cuda_backend/src/top_k_op.h"
#include "../cuda_backend/src/ops.h"
#include "../cuda_backend/src/warp_ops.h"
#include "fafo/backend_registry.h"
#include "fafo/cuda_backend.h"
#include "fafo/device_error.h"
#include "fafo/generator.h"
#include "fafo/tensor_type.h"
#include "fafo/top_k.h"
#include "random_weights.h"
#include "model_fixtures.h"
#include "joined_steps_check.h"
#include "quantized_kv_check.h"
#include "test_support.h"
#include "window_rings_check.h"

namespace {

using fafo::TensorType;

// A small synthetic model (GQA 4/2, 256 wide) of `weight_type` (Q4_K_M: Q4_K and Q6_K
// weights), written into the temporary directory `name`.
std::shared_ptr<const fafo::GgufFile> small_test_model(const std::string& name,
                                                        const std::string& weight_type = "Q4_K_M") {
  fafo::synth::SyntheticConfig c;
  c.n_layer = 2, c.n_embd = 256, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 512, c.n_vocab = 300, c.n_ctx = 256;
  c.weight_type = weight_type;
  const std::string path = (fafo::test::temp_dir(name) / "m.gguf").string();
  fafo::synth::write_synthetic_model(c, path);
  return fafo::GgufFile::open(path);
}

// The backend with any kernel set (FAFO_CUDA_KERNELS) gives the same logits for a
// prefill step and a decode step at a context long enough for the warp kernels'
// attention to split the keys into parts: within the backend's tolerance (their
// attention sums the softmax in another order), the same greedy token; a bad value is
// a clear error.
TEST(CudaEmulated, BothKernelSetsGiveTheSameLogits) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(model_path.string());
  const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
  std::string text;
  for (int i = 0; i < 12; ++i) text += "Lily and Tom went to the park. They played with a ball and a kite. ";
  const std::vector<int32_t> prompt = tokenizer.encode(text, true);
  ASSERT_GT(prompt.size(), 200u);
  auto logits = [&](fafo::cuda::CudaKernels kernels) {
    fafo::SequenceOptions mo;
    mo.n_ctx = 512;
    fafo::Sequence model(file, fafo::cuda::make_emulated_backend(kernels), mo);
    fafo::StepBatch prefill = fafo::StepBatch::causal(prompt, 0, true);
    std::vector<float> out = model.forward(prefill);
    model.commit(prefill.size());
    fafo::StepBatch next = fafo::StepBatch::causal({302}, model.n_past());
    const std::vector<float> last = model.forward(next);
    out.insert(out.end(), last.begin(), last.end());
    EXPECT_NE(model.backend().description().find(kernels != fafo::cuda::CudaKernels::Plain ? "warp kernels" : "plain kernels"),
              std::string::npos);
    return out;
  };
  const std::vector<float> fast = logits(fafo::cuda::CudaKernels::Fast), plain = logits(fafo::cuda::CudaKernels::Plain);
  ASSERT_EQ(fast.size(), plain.size());
  // F32 weights: no integer products, so the warp kernels' float products give the bits.
  const std::vector<float> warp = logits(fafo::cuda::CudaKernels::Warp);
  ASSERT_EQ(warp.size(), fast.size());
  EXPECT_EQ(std::memcmp(warp.data(), fast.data(), fast.size() * sizeof(float)), 0);
  const size_t n_vocab = 512;
  ASSERT_EQ(fast.size() % n_vocab, 0u);
  double worst = 0;
  for (size_t i = 0; i < fast.size(); ++i)
    worst = std::max(worst, std::fabs(double{fast[i]} - plain[i]) / std::max(1.0, std::fabs(double{plain[i]})));
  EXPECT_LE(worst, 1e-4);
  for (size_t row = 0; row < fast.size() / n_vocab; ++row) {
    const auto best = [&](const std::vector<float>& v) {
      return std::max_element(v.begin() + row * n_vocab, v.begin() + (row + 1) * n_vocab) - v.begin();
    };
    EXPECT_EQ(best(fast), best(plain)) << "row " << row;
  }
  ::setenv("FAFO_CUDA_KERNELS", "turbo", 1);
  EXPECT_THROW(fafo::cuda::make_emulated_backend(), std::invalid_argument);
  ::setenv("FAFO_CUDA_KERNELS", "plain", 1);
  EXPECT_NE(fafo::cuda::make_emulated_backend()->description().find("plain kernels"), std::string::npos);
  ::setenv("FAFO_CUDA_KERNELS", "warp", 1);
  EXPECT_NE(fafo::cuda::make_emulated_backend()->description().find("float products"), std::string::npos);
  ::setenv("FAFO_CUDA_KERNELS", "fast", 1);
  EXPECT_NE(fafo::cuda::make_emulated_backend()->description().find("integer products"), std::string::npos);
  ::unsetenv("FAFO_CUDA_KERNELS");
  // The wide steps' blocks: 16, 32 or 64 tokens (the default, not named).
  EXPECT_EQ(fafo::cuda::make_emulated_backend()->description().find("FAFO_CUDA_WIDE_TOKENS"), std::string::npos);
  ::setenv("FAFO_CUDA_WIDE_TOKENS", "32", 1);
  EXPECT_NE(fafo::cuda::make_emulated_backend()->description().find("blocks of 32 tokens"), std::string::npos);
  ::setenv("FAFO_CUDA_WIDE_TOKENS", "48", 1);
  EXPECT_THROW(fafo::cuda::make_emulated_backend(), std::invalid_argument);
  ::unsetenv("FAFO_CUDA_WIDE_TOKENS");
}

TEST(CudaEmulated, EveryStrategyAndCacheGivesTheCpuBackendsGreedyIds) {
  // The CUDA backend's whole step logic (StepBatch masks, FULL and COMPRESSED rows, the
  // logical order, KV swaps and moves, gathered rows, argmax), its kernels run on the
  // host: the greedy ids of plain decoding equal the cpu backend's, and every strategy's
  // equal plain decoding's, with fp32, fp16, q8_0 and q4_0 caches (heads of 8: a block
  // spans heads, so the blocks are read by the plain attention kernel).
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(model_path.string());
  const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
  const std::vector<int32_t> prompt = tokenizer.encode("Once upon a time, there was a little girl named Lily.", true);
  auto run = [&](std::unique_ptr<fafo::Backend> be, fafo::KvCacheType kv, fafo::Strategy s, const std::string& policy) {
    fafo::SequenceOptions mo;
    mo.n_ctx = 256;
    mo.kv_type = kv;
    fafo::Sequence model(file, std::move(be), mo);
    fafo::GenerationOptions o;
    o.n_predict = 40;
    o.sampling.temperature = 0;
    o.decoding.strategy = s;
    o.kv.name = policy;
    o.kv.budget = 24;
    return fafo::generate(model, tokenizer, prompt, o).ids;
  };
  for (const fafo::KvCacheType kv :
       {fafo::KvCacheType::F32, fafo::KvCacheType::F16, fafo::KvCacheType::Q8_0, fafo::KvCacheType::Q4_0}) {
    SCOPED_TRACE(fafo::kv_cache_type_name(kv));
    const auto ar = run(fafo::make_cpu_backend(2), kv, fafo::Strategy::Ar, "stream");
    ASSERT_EQ(ar.size(), 40u);
    EXPECT_EQ(run(fafo::cuda::make_emulated_backend(), kv, fafo::Strategy::Ar, "stream"), ar);
    EXPECT_EQ(run(fafo::cuda::make_emulated_backend(), kv, fafo::Strategy::Lookahead, "stream"), ar);
    for (const std::string policy : {"stream", "snapkv"})
      EXPECT_EQ(run(fafo::cuda::make_emulated_backend(), kv, fafo::Strategy::Fafo, policy), ar) << policy;
  }
}

// Block caches on a model with heads of 64 (each head's entries whole blocks, staged by
// the warp kernels' attention): within the tolerance of the reference's logits with the
// same cache, and every strategy plain decoding's ids (tests/quantized_kv_check.h).
TEST(CudaEmulated, BlockCachesGiveTheReferencesLogitsAndEveryStrategyPlainDecodingsIds) {
  fafo::test::check_block_caches(fafo::test::wide_heads_model(), [] { return fafo::cuda::make_emulated_backend(); });
}

// Window-sized caches on sliding-window layers (KvCacheShape::ring): with either kernel
// set, every step's rows get the whole-context cache's bits (prompt and one-token steps,
// f32 and q8_0, a rewind within a step; COMPRESSED rows and --kv-drop over a policy's
// region; rows moved into place), and every strategy gives plain decoding's ids.
TEST(CudaEmulated, WindowRingsGiveTheWholeContextCachesBits) {
  for (fafo::cuda::CudaKernels kernels : {fafo::cuda::CudaKernels::Plain, fafo::cuda::CudaKernels::Fast}) {
    const std::string name = kernels == fafo::cuda::CudaKernels::Plain ? "cuda-emulated plain" : "cuda-emulated fast";
    const fafo::test::BackendMaker make = [kernels] { return fafo::cuda::make_emulated_backend(kernels); };
    fafo::test::check_ring_steps(make, name, {fafo::KvCacheType::F32, fafo::KvCacheType::Q8_0});
    fafo::test::check_ring_region(make, name);
  }
  fafo::test::check_ring_strategies([] { return fafo::cuda::make_emulated_backend(); }, "cuda-emulated");
}

// The model families beyond llama (qwen3: per-head Q and K norms before NEOX RoPE,
// heads wider than n_embd / n_head; phi3: one attn_qkv and one gate-and-up tensor,
// LongRoPE; phi4-mini: part of each head rotated, with the attention factor; gemma2:
// soft-capped scores and logits, GeGLU, post-norms, a window of 24 on layer 0; gemma3:
// Q/K norms, a window of 16 and its own RoPE on layer 0; qwen3moe: a mixture of 8
// experts, 2 per token, read inside the step; gpt-oss: biases, sinks, a window of 16,
// YaRN, experts with biases and the clamped SwiGLU): the CUDA backend's logits are
// the cpu backend's within the tolerance at every position of a prompt, and every
// strategy's greedy ids equal plain decoding's over 40 positions (past both windows).
// (Both against llama.cpp: tests/test_model_families.cpp.)
TEST(CudaEmulated, ModelFamiliesGiveTheCpuBackendsLogitsAndEveryStrategyPlainDecodingsIds) {
  for (const std::string preset : {"qwen3-tiny", "phi3-tiny", "phi4-mini-tiny", "gemma2-tiny", "gemma3-tiny", "qwen3moe-tiny",
                                   "gpt-oss-tiny"}) {
    SCOPED_TRACE(preset);
    std::optional<fafo::synth::SyntheticConfig> c = fafo::synth::preset(preset);
    ASSERT_TRUE(c);
    c->weight_type = "F32";
    const std::string path = (fafo::test::temp_dir("cuda-" + preset) / "m.gguf").string();
    fafo::synth::write_synthetic_model(*c, path);
    const std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(path);
    const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
    const std::vector<int32_t> prompt = {1, 45, 99, 7, 250, 31, 8, 45, 99, 7, 250, 31, 8, 45, 300, 12};
    fafo::SequenceOptions mo;
    mo.n_ctx = preset.rfind("phi", 0) == 0 ? 512 : 128;  // phi3, phi4-mini: LongRoPE's long factors
    fafo::Sequence cpu(file, fafo::make_cpu_backend(2), mo);
    fafo::Sequence cuda(file, fafo::cuda::make_emulated_backend(), mo);
    fafo::StepBatch batch = fafo::StepBatch::causal(prompt, 0, true);
    const std::vector<float> want = cpu.forward(batch);
    const std::vector<float> got = cuda.forward(batch);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-4 * std::max(1.0f, std::fabs(want[i]))) << "logit " << i;
    auto run = [&](fafo::Strategy s, const std::string& policy) {
      cuda.truncate(0);
      fafo::GenerationOptions o;
      o.n_predict = 24;
      o.sampling.temperature = 0;
      o.decoding.strategy = s;
      o.kv.name = policy;
      o.kv.budget = 16;
      o.stop_at_end_of_generation = false;  // a random model may well pick the end first
      return fafo::generate(cuda, tokenizer, prompt, o).ids;
    };
    const auto ar = run(fafo::Strategy::Ar, "stream");
    ASSERT_EQ(ar.size(), 24u);
    EXPECT_EQ(run(fafo::Strategy::Lookahead, "stream"), ar);
    for (const std::string policy : {"stream", "snapkv"}) EXPECT_EQ(run(fafo::Strategy::Fafo, policy), ar) << policy;
  }
}

// The same with the integer and tensor-core products (a Q4_K_M model: Q4_K and Q6_K
// weights; a Q8_0, an F16 and a BF16 model): every strategy's greedy ids equal plain
// decoding's on the CUDA backend, and the products are the fast ones (the profile names
// the rounding launches, or the tensor-core products' combine). The 14-token prefill and
// the strategies' wider steps take the wide steps' block kernels.
TEST(CudaEmulated, EveryStrategyGivesPlainDecodingsIdsWithTheFastProducts) {
  for (const std::string type : {"Q4_K_M", "Q8_0", "F16", "BF16"}) {
    SCOPED_TRACE(type);
    const std::shared_ptr<const fafo::GgufFile> file = small_test_model("cuda-fast-" + type, type);
    const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
    const std::vector<int32_t> prompt = {1, 45, 99, 7, 250, 31, 8, 45, 99, 7, 250, 31, 8, 45};
    auto run = [&](fafo::Strategy s, const std::string& policy, fafo::KernelProfile* profile = nullptr) {
      fafo::SequenceOptions mo;
      mo.n_ctx = 128;
      fafo::Sequence model(file, fafo::cuda::make_emulated_backend(fafo::cuda::CudaKernels::Fast), mo);
      if (profile) model.backend().profiler()->start_profile();
      fafo::GenerationOptions o;
      o.n_predict = 32;
      o.sampling.temperature = 0;
      o.decoding.strategy = s;
      o.kv.name = policy;
      o.kv.budget = 12;
      std::vector<int32_t> ids = fafo::generate(model, tokenizer, prompt, o).ids;
      if (profile) *profile = model.backend().profiler()->take_profile();
      return ids;
    };
    fafo::KernelProfile profile;
    const auto ar = run(fafo::Strategy::Ar, "stream", &profile);
    ASSERT_EQ(ar.size(), 32u);
    std::map<std::string, uint64_t> calls;
    for (const auto& k : profile.kernels) calls[k.name] = k.calls;
    if (type == "Q4_K_M" || type == "Q8_0") {
      EXPECT_GT(calls["quantize_norm"], 0u);  // the norm before qkv and gate-up, fused into the rounding
      EXPECT_GT(calls["quantize"], 0u);       // before the attention output and down projections
    } else {
      EXPECT_GT(calls["matmul_combine"], 0u);  // the tensor-core products' parts added
      EXPECT_EQ(calls["quantize"], 0u);
    }
    EXPECT_EQ(run(fafo::Strategy::Lookahead, "stream"), ar);
    EXPECT_EQ(run(fafo::Strategy::Fafo, "snapkv"), ar);
    if (type != "Q4_K_M") continue;  // the other strategies' steps are those shapes again
    EXPECT_EQ(run(fafo::Strategy::Jacobi, "stream"), ar);
    EXPECT_EQ(run(fafo::Strategy::Fafo, "stream"), ar);
  }
}

// The step graphs' bookkeeping (step_graphs.h): a shape is captured from its second
// step on (the shapes seen are bounded); a kept graph is found by its topology and
// becomes the most recently used; beyond the capacity the least recently used is
// dropped; a graph whose update failed is replaced.
TEST(CudaGraphs, RepeatedShapesAreCapturedAndTheLeastRecentlyUsedGraphGoes) {
  fafo::cuda::StepGraphs<int> g(2, 3);
  EXPECT_FALSE(g.capture({1, 1}));
  EXPECT_TRUE(g.capture({1, 1}));
  EXPECT_FALSE(g.capture({8, 8}));
  EXPECT_FALSE(g.capture({8, 4, 4}));  // the same size, other parts: another shape
  EXPECT_TRUE(g.capture({1, 1}));
  EXPECT_FALSE(g.capture({2, 2}));     // 4 shapes seen, 3 kept: {8, 8} is forgotten
  EXPECT_FALSE(g.capture({8, 8}));
  EXPECT_EQ(g.stats().captured, 2u);
  EXPECT_EQ(g.stats().direct, 5u);

  EXPECT_EQ(g.find("matmul;rope;"), nullptr);
  g.keep("matmul;rope;", 1);
  g.keep("matmul;", 2);
  ASSERT_NE(g.find("matmul;rope;"), nullptr);  // now the most recently used
  EXPECT_EQ(*g.find("matmul;rope;"), 1);
  g.keep("rope;", 3);                          // drops "matmul;", the least recently used
  EXPECT_EQ(g.size(), 2u);
  EXPECT_EQ(g.find("matmul;"), nullptr);
  ASSERT_NE(g.find("rope;"), nullptr);
  const uint64_t updated = g.stats().updated;
  g.keep("rope;", 4, true);                    // its update failed: replaced
  EXPECT_EQ(*g.find("rope;"), 4);
  EXPECT_EQ(g.size(), 2u);
  EXPECT_EQ(g.stats().replaced, 1u);
  EXPECT_EQ(g.stats().updated, updated);  // the failed update is not counted, the last find is
  EXPECT_EQ(g.stats().instantiated, 4u);
  EXPECT_EQ(g.stats().evicted, 1u);
}

// With FAFO_CUDA_GRAPHS the backend captures each step whose shape ran before and runs
// it as a graph (the host device records the launches and in-step uploads and runs them
// at the step's end, as a GPU would): the logits and every strategy's ids are the bits
// of launching each kernel at once; decode steps reuse one graph, updated; after a step
// that throws inside, a download first runs what its capture recorded; a download
// inside a captured step is an error, not a stale read.
TEST(CudaEmulated, GraphsGiveTheBitsOfLaunchesOneByOne) {
  const std::shared_ptr<const fafo::GgufFile> file = small_test_model("cuda-graphs");
  const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
  using Backend = fafo::cuda::OpsBackend<fafo::cuda::HostDevice>;
  struct Run {
    std::vector<std::vector<float>> logits;
    std::vector<std::vector<int32_t>> ids;
    fafo::cuda::GraphStats stats;
  };
  auto run = [&](bool graphs) {
    auto backend = std::make_unique<Backend>(std::make_unique<fafo::cuda::HostDevice>(), "cuda-emulated", "test",
                                             fafo::cuda::CudaKernels::Fast, true, graphs);
    const Backend* be = backend.get();
    EXPECT_EQ(be->description().find("CUDA graphs") != std::string::npos, graphs);
    fafo::SequenceOptions mo;
    mo.n_ctx = 128;
    fafo::Sequence model(file, std::move(backend), mo);
    Run r;
    fafo::StepBatch prefill = fafo::StepBatch::causal({1, 45, 99, 7, 250, 31, 8}, 0);
    r.logits.push_back(model.forward(prefill));
    model.commit(prefill.size());
    for (int32_t t : {12, 200, 17, 9}) {
      fafo::StepBatch one = fafo::StepBatch::causal({t}, model.n_past());
      r.logits.push_back(model.forward(one));
      model.commit(1);
    }
    // A step that fails inside (a token outside the vocabulary: embed throws) while it
    // is captured: the calls after it are not captured into its graph.
    fafo::StepBatch bad = fafo::StepBatch::causal({100000}, model.n_past());
    EXPECT_ANY_THROW(model.forward(bad));
    fafo::Activation a = model.backend().alloc_activation(1, 4);
    EXPECT_NO_THROW(model.backend().read_rows(a, 1));  // runs the failed step's capture first
    fafo::StepBatch after = fafo::StepBatch::causal({5}, model.n_past());
    r.logits.push_back(model.forward(after));
    model.commit(1);
    const std::vector<int32_t> prompt = {1, 45, 99, 7, 250, 31, 8, 45, 99, 7, 250, 31};
    for (const fafo::Strategy s : {fafo::Strategy::Ar, fafo::Strategy::Lookahead, fafo::Strategy::Fafo}) {
      model.truncate(0);
      fafo::GenerationOptions o;
      o.n_predict = 20;
      o.sampling.temperature = 0;
      o.decoding.strategy = s;
      o.kv.name = s == fafo::Strategy::Fafo ? "snapkv" : "stream";
      o.kv.budget = 10;
      r.ids.push_back(fafo::generate(model, tokenizer, prompt, o).ids);
    }
    r.stats = be->graph_stats();
    return r;
  };
  const Run direct = run(false), graphs = run(true);
  ASSERT_EQ(direct.logits.size(), graphs.logits.size());
  for (size_t i = 0; i < direct.logits.size(); ++i) {
    ASSERT_EQ(direct.logits[i].size(), graphs.logits[i].size());
    EXPECT_EQ(std::memcmp(direct.logits[i].data(), graphs.logits[i].data(), direct.logits[i].size() * sizeof(float)), 0)
        << "step " << i;
  }
  EXPECT_EQ(direct.ids, graphs.ids);
  EXPECT_EQ(direct.stats.captured, 0u);
  EXPECT_GT(graphs.stats.captured, 20u);
  EXPECT_GT(graphs.stats.updated, 15u);  // decode steps replay one graph, updated
  EXPECT_LT(graphs.stats.instantiated, graphs.stats.captured / 2);

  fafo::cuda::HostDevice device;
  std::vector<float> a(4, 1.0f), b(4, 0.0f);
  device.begin_capture();
  EXPECT_THROW(device.download(b.data(), a.data(), sizeof(float) * 4), std::logic_error);
  EXPECT_THROW(device.sync(), std::logic_error);
  device.upload(b.data(), a.data(), sizeof(float) * 4);
  EXPECT_EQ(b[0], 0.0f);  // recorded, not run
  fafo::cuda::StepGraphs<fafo::cuda::HostDevice::Graph> kept;
  device.end_capture(kept);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(kept.size(), 1u);
}

// The warp kernels' fused products (the attention projections as one product with RoPE
// and the stores after it, the gate and up projections with the SwiGLU, each RMSNorm
// inside the product after it) give the logits of the ops apart, bit for bit: a
// prefill, single tokens and a multi-token step with a tree mask, fp32 and fp16 caches,
// GQA, and Qwen2's biases and NEOX rotation; and a policy's captured queries and FAFO's
// ids.
TEST(CudaEmulated, FusedProductsGiveTheBitsOfTheOpsApart) {
  for (const std::string arch : {"llama", "qwen2"}) {
    for (const fafo::KvCacheType kv : {fafo::KvCacheType::F32, fafo::KvCacheType::F16}) {
      SCOPED_TRACE(arch + (kv == fafo::KvCacheType::F16 ? " f16 cache" : " f32 cache"));
      fafo::synth::SyntheticConfig c;
      c.arch = arch;
      c.n_layer = 2, c.n_embd = 128, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 256, c.n_vocab = 300, c.n_ctx = 256;
      c.weight_type = arch == "llama" ? "Q8_0" : "F16";
      const std::string path = (fafo::test::temp_dir("cuda-fused-" + arch) / "m.gguf").string();
      fafo::synth::write_synthetic_model(c, path);
      const std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(path);
      const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
      auto open = [&](bool fuse) {
        fafo::SequenceOptions o;
        o.n_ctx = 128;
        o.kv_type = kv;
        return std::make_unique<fafo::Sequence>(file, fafo::cuda::make_emulated_backend(fafo::cuda::CudaKernels::Fast, fuse), o);
      };
      auto steps = [&](fafo::Sequence& model) {
        EXPECT_EQ(fafo::fuses_qkv(model.backend(), fafo::TensorType::Q8_0, 128, 64, 128),
                  model.backend().description().find("fused") != std::string::npos);
        std::vector<std::vector<float>> logits;
        fafo::StepBatch prefill = fafo::StepBatch::causal({1, 45, 99, 7, 250, 31, 8}, 0);
        logits.push_back(model.forward(prefill));
        model.commit(prefill.size());
        for (int32_t t : {12, 200}) {
          fafo::StepBatch one = fafo::StepBatch::causal({t}, model.n_past());
          logits.push_back(model.forward(one));
          model.commit(1);
        }
        fafo::StepBatch tree;
        const int32_t n = model.n_past();
        tree.add(5, n, {}, true);
        tree.add(6, n + 1, {0}, true, fafo::PrefixView::Compressed);
        tree.add(7, n + 1, {0}, true);
        tree.add(8, n + 2, {0, 2}, true);
        tree.set_n_past(n);
        logits.push_back(model.forward(tree));
        return logits;
      };
      const auto fused = open(true), apart = open(false);
      const auto got = steps(*fused), want = steps(*apart);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(got[i].size(), want[i].size());
        EXPECT_EQ(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)), 0) << "step " << i;
      }
      const std::vector<int32_t> prompt = {1, 45, 99, 7, 250, 31, 8, 45, 99, 7, 250, 31};
      auto run = [&](fafo::Sequence& m) {
        m.truncate(0);
        fafo::GenerationOptions o;
        o.n_predict = 16;
        o.sampling.temperature = 0;
        o.decoding.strategy = fafo::Strategy::Fafo;
        o.kv.name = "snapkv";
        o.kv.budget = 8;
        std::vector<int32_t> ids = fafo::generate(m, tokenizer, prompt, o).ids;
        return std::make_pair(ids, m.kv_cache().captured_queries(1));
      };
      const auto [ids_fused, queries_fused] = run(*fused);
      const auto [ids_apart, queries_apart] = run(*apart);
      EXPECT_EQ(ids_fused, ids_apart);
      EXPECT_FALSE(queries_apart.empty());
      ASSERT_EQ(queries_fused.size(), queries_apart.size());
      EXPECT_EQ(std::memcmp(queries_fused.data(), queries_apart.data(), queries_fused.size() * sizeof(float)), 0);
    }
  }
}

// BackendProfiler::start_profile on the CUDA backend (here its host device, timing its loops; a
// GPU brackets each launch with events): per kernel the calls, seconds and the weight
// bytes of the products, over the steps run until take_profile.
TEST(CudaEmulated, AProfileCountsEachKernelsCallsTimeAndWeightBytes) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(model_path.string());
  fafo::SequenceOptions mo;
  mo.n_ctx = 64;
  fafo::Sequence model(file, fafo::cuda::make_emulated_backend(fafo::cuda::CudaKernels::Fast), mo);
  fafo::StepBatch prefill = fafo::StepBatch::causal({1, 403, 261, 379}, 0);
  model.forward(prefill);  // not profiled
  model.commit(prefill.size());
  ASSERT_EQ(model.backend().profiler()->start_profile(), "");
  for (int32_t t : {285, 271}) {
    fafo::StepBatch one = fafo::StepBatch::causal({t}, model.n_past());
    model.forward(one);
    model.commit(1);
  }
  const fafo::KernelProfile p = model.backend().profiler()->take_profile();
  EXPECT_EQ(p.steps, 2u);
  uint64_t calls = 0;
  double bytes = 0;
  std::map<std::string, uint64_t> by_name;
  for (const fafo::KernelProfile::Kernel& k : p.kernels) {
    calls += k.calls;
    bytes += k.bytes;
    by_name[k.name] = k.calls;
    EXPECT_GE(k.seconds, 0.0) << k.name;
  }
  EXPECT_EQ(calls, p.dispatches);
  const int64_t layers = model.config().n_layer;
  EXPECT_EQ(by_name["attention"], static_cast<uint64_t>(2 * layers));
  EXPECT_EQ(by_name["matmul_swiglu"], static_cast<uint64_t>(2 * layers));  // gate and up fused, norm inside
  EXPECT_EQ(by_name.count("rms_norm"), 0u);
  // Every weight matrix is read once a step (the embedding's lookup is not counted; a
  // file without output.weight multiplies by the embedding table instead).
  double matrices = 0, table = 0;
  bool tied = true;
  for (const fafo::GgufTensor& t : file->tensors()) {
    if (t.shape.size() != 2) continue;
    if (t.name == "token_embd.weight") table = static_cast<double>(t.n_bytes);
    else matrices += static_cast<double>(t.n_bytes);
    if (t.name == "output.weight") tied = false;
  }
  if (tied) matrices += table;
  EXPECT_DOUBLE_EQ(bytes, 2 * matrices);
  EXPECT_GT(p.step_seconds, 0.0);
  EXPECT_TRUE(model.backend().profiler()->take_profile().kernels.empty());  // stopped
}

TEST(CudaEmulated, JoinedStepsGiveEachPartTheBitsOfItsStepAlone) {
  // Several sequences' steps as one step (one attention launch per part): each part's
  // results and stored keys and values equal its step alone (tests/joined_steps_check.h).
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(model_path.string());
  const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
  auto runner = std::make_shared<fafo::StepRunner>(file, fafo::cuda::make_emulated_backend());
  fafo::test::check_joined_steps(runner, tokenizer);
}

// Every strategy gives plain decoding's tokens on the CUDA backend's kernels split with
// the devices `before` and `after` (layer counts; 0: the rest), and joined steps give each
// part its step alone. The residual stream crosses with read_rows and write_rows.
void expect_split_keeps_ar(std::vector<std::pair<std::string, int32_t>> before, int32_t cuda_layers,
                           std::vector<std::pair<std::string, int32_t>> after, const std::string& what) {
  const std::filesystem::path model_path = fafo::test::shared_path("models/stories260K.gguf");
  const std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(model_path.string());
  const fafo::Tokenizer tokenizer(fafo::Vocab::from_gguf(*file));
  std::vector<fafo::DevicePart> devices;
  for (const auto& [name, layers] : before)
    devices.push_back(fafo::DevicePart{fafo::make_backend(fafo::BackendSpec{name, "", 2}), layers});
  devices.push_back(fafo::DevicePart{fafo::cuda::make_emulated_backend(), cuda_layers});
  for (const auto& [name, layers] : after)
    devices.push_back(fafo::DevicePart{fafo::make_backend(fafo::BackendSpec{name, "", 2}), layers});
  auto runner = std::make_shared<fafo::StepRunner>(std::make_unique<fafo::ModelWeights>(file, std::move(devices)));
  fafo::SequenceOptions options;
  options.n_ctx = 256;
  fafo::Sequence seq(runner, options);
  const std::vector<int32_t> prompt = tokenizer.encode("Once upon a time, there was a little dog", true);
  auto run = [&](fafo::Strategy s) {
    fafo::GenerationOptions o;
    o.n_predict = 48;
    o.sampling.temperature = 0;
    o.decoding.strategy = s;
    seq.truncate(0);
    return fafo::generate(seq, tokenizer, prompt, o).ids;
  };
  const std::vector<int32_t> ar = run(fafo::Strategy::Ar);
  EXPECT_EQ(ar.size(), 48u) << what;
  for (fafo::Strategy s : {fafo::Strategy::Jacobi, fafo::Strategy::Lookahead, fafo::Strategy::Fafo})
    EXPECT_EQ(run(s), ar) << what << " " << fafo::strategy_name(s);
  fafo::test::check_joined_steps(runner, tokenizer);
}

TEST(CudaEmulated, ALayerSplitWithTheCpuKeepsEveryStrategyEqualToAr) {
  // The first two layers on the cpu backend, the rest on the CUDA backend's kernels
  // (tests/test_layer_split.cpp has the other backends' pairs).
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  expect_split_keeps_ar({{"cpu", 2}}, 0, {}, "cpu 2 + cuda-emulated 3");
}

TEST(CudaEmulated, ALayerSplitWithTheReferenceAndLavapipeKeepsEveryStrategyEqualToAr) {
  // The pairs the cpu backend is not part of: the reference and lavapipe on either side.
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  expect_split_keeps_ar({}, 3, {{"reference", 0}}, "cuda-emulated 3 + reference 2");
  try {
    fafo::make_backend(fafo::BackendSpec{"vulkan", "", 2});
  } catch (const std::exception& e) {
    GTEST_SKIP() << "no Vulkan device: " << e.what();
  }
  expect_split_keeps_ar({{"vulkan", 1}}, 2, {{"reference", 0}}, "vulkan 1 + cuda-emulated 2 + reference 2");
  expect_split_keeps_ar({{"reference", 2}}, 1, {{"vulkan", 0}}, "reference 2 + cuda-emulated 1 + vulkan 2");
}

TEST(CudaEmulated, CountsItsMemoryAgainstALimit) {
  // The backend's BackendMemory: every allocation counted, the limit enforced with the
  // sizes, what is freed given back; what auto's placement reads (memory_free).
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(model_path.string());
  uint64_t loaded = 0;
  {
    std::unique_ptr<fafo::Backend> b = fafo::cuda::make_emulated_backend();
    ASSERT_NE(b->memory(), nullptr);
    EXPECT_EQ(fafo::memory_free(*b), std::numeric_limits<uint64_t>::max());  // the host says nothing
    fafo::ModelWeights w(file, std::move(b));
    loaded = fafo::memory_in_use(w.backend());
    EXPECT_GT(loaded, 0u);
  }
  std::unique_ptr<fafo::Backend> small = fafo::cuda::make_emulated_backend();
  small->memory()->set_memory_limit(loaded / 2);
  try {
    fafo::ModelWeights w(file, std::move(small));
    ADD_FAILURE() << "the weights loaded in half their memory";
  } catch (const fafo::DeviceError& e) {
    EXPECT_EQ(e.kind(), fafo::DeviceError::Kind::OutOfMemory);
    EXPECT_NE(std::string(e.what()).find("--memory-limit"), std::string::npos) << e.what();
  }
  std::unique_ptr<fafo::Backend> roomy = fafo::cuda::make_emulated_backend();
  roomy->memory()->set_memory_limit(loaded * 64);
  fafo::Backend& kept = *roomy;
  {
    auto runner = std::make_shared<fafo::StepRunner>(std::make_unique<fafo::ModelWeights>(file, std::move(roomy)));
    const uint64_t in_use = fafo::memory_in_use(kept);
    EXPECT_GE(in_use, loaded);  // the weights and the step's activations
    EXPECT_EQ(fafo::memory_free(kept), loaded * 64 - in_use);
    EXPECT_THROW(kept.memory()->set_memory_limit(1), std::logic_error);
  }
}

}  // namespace
