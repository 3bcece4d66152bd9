// A GPU backend with block KV caches (--cache-type q8_0 / q4_0) on a whole model, for
// tests/test_quantized_kv.cpp (Vulkan) and tests/test_cuda_emulated.cpp (the CUDA
// backend's kernels on the host): the prompt's logits within 1e-3 of the reference's with
// the same cache type (both attend over the same blocks), and every strategy under two
// KV policies gives plain decoding's ids (the verifier reads the same cache).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fafo/backend.h"
#include "fafo/generator.h"
#include "fafo/gguf.h"
#include "fafo/sequence.h"
#include "fafo/tokenizer.h"
#include "synthetic_model.h"
#include "test_support.h"

namespace fafo::test {

// A synthetic F32 model whose heads are 64 wide and entries 128 values (two pairs of blocks).
inline std::string wide_heads_model() {
  static const std::string path = [] {
    synth::SyntheticConfig c;
    c.n_layer = 2, c.n_embd = 256, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 512, c.n_vocab = 300, c.n_ctx = 256;
    c.weight_type = "F32";  // float products everywhere: the keys and values differ by roundings only
    const std::string p = (temp_dir("quantized_kv_wide_heads") / "m.gguf").string();
    synth::write_synthetic_model(c, p);
    return p;
  }();
  return path;
}

inline void check_block_caches(const std::string& model_path, const std::function<std::unique_ptr<Backend>()>& make) {
  const std::shared_ptr<const GgufFile> file = GgufFile::open(model_path);
  const Tokenizer tokenizer(Vocab::from_gguf(*file));
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 40; ++i) prompt.push_back(1 + (i * 37) % 290);
  const auto sequence = [&](std::unique_ptr<Backend> be, KvCacheType type) {
    SequenceOptions o;
    o.n_ctx = 256;
    o.kv_type = type;
    return std::make_unique<Sequence>(file, std::move(be), o);
  };
  const auto prompt_logits = [&](Sequence& m) {
    StepBatch prefill = StepBatch::causal(prompt, 0, /*logits_for_all=*/true);
    return m.forward(prefill);
  };
  const auto ids = [&](Sequence& m, Strategy s, const std::string& policy) {
    m.truncate(0);
    GenerationOptions o;
    o.n_predict = 24;
    o.sampling.temperature = 0;
    o.decoding.strategy = s;
    o.kv.name = policy;
    o.kv.budget = 24;
    o.stop_at_end_of_generation = false;  // a random model may well pick the end first
    return generate(m, tokenizer, prompt, o).ids;
  };
  for (const KvCacheType type : {KvCacheType::Q8_0, KvCacheType::Q4_0}) {
    SCOPED_TRACE(kv_cache_type_name(type));
    const std::vector<float> want = prompt_logits(*sequence(make_reference_backend(2), type));
    const std::unique_ptr<Sequence> m = sequence(make(), type);
    ASSERT_EQ(m->kv_type(), type);
    const std::vector<float> got = prompt_logits(*m);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0, scale = 1;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, std::abs(double{got[i]} - want[i]));
      scale = std::max(scale, std::abs(double{want[i]}));
    }
    EXPECT_LE(worst, 1e-3 * scale);
    EXPECT_NE(got, prompt_logits(*sequence(make(), KvCacheType::F32)));  // the blocks are what attention reads
    const std::vector<int32_t> ar = ids(*m, Strategy::Ar, "stream");
    ASSERT_EQ(ar.size(), 24u);
    for (const std::string policy : {"stream", "snapkv"})
      for (Strategy s : {Strategy::Jacobi, Strategy::Lookahead, Strategy::Fafo})
        EXPECT_EQ(ids(*m, s, policy), ar) << strategy_name(s) << " policy " << policy;
  }
}

}  // namespace fafo::test
