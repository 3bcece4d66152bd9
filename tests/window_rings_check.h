// Window-sized KV caches (KvCacheShape::ring: a sliding-window layer keeps a ring of its
// window + a step's tokens) on a whole model, for tests/test_window_rings.cpp (reference,
// cpu, Vulkan) and tests/test_cuda_emulated.cpp (the CUDA backend's kernels on the
// host): a sequence with rings and one holding the whole context, on one runner, give
// every step's rows the same bits: prompt and one-token steps past several turns of the
// rings, COMPRESSED rows and --kv-drop reading a KV policy's region, rows moved into
// place, a rewind within a step; and every strategy gives plain decoding's ids.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "fafo/backend.h"
#include "fafo/generator.h"
#include "fafo/gguf.h"
#include "fafo/kv_policy.h"
#include "fafo/sequence.h"
#include "fafo/tokenizer.h"
#include "synthetic_model.h"
#include "test_support.h"

namespace fafo::test {

using BackendMaker = std::function<std::unique_ptr<Backend>()>;

// A Gemma 3 (window 16 on layers 0 and 1 of 3) or Gemma 2 (window 24 on layers 0 and 2
// of 4, soft-capped) file with F32 weights, written once per process.
inline std::string window_model(const std::string& preset) {
  const std::filesystem::path path = temp_dir("window-rings-" + preset) / "m.gguf";
  if (!std::filesystem::exists(path)) {
    std::optional<synth::SyntheticConfig> c = synth::preset(preset);
    if (!c) throw std::runtime_error("no preset " + preset);
    c->n_layer = preset == "gemma3-tiny" ? 3 : 4;
    if (preset == "gemma3-tiny") c->swa_pattern = 3;
    c->weight_type = "F32";
    synth::write_synthetic_model(*c, path.string());
  }
  return path.string();
}

// One runner, two sequences on it: `ring` with rings for steps of ring_step tokens and
// `full` holding the whole context on every layer.
struct RingAndFull {
  std::unique_ptr<Sequence> ring, full;
};

inline RingAndFull open_ring_pair(const std::string& preset, const BackendMaker& make, KvCacheType type,
                                  int32_t ring_step, int32_t n_ctx = 256) {
  std::shared_ptr<const GgufFile> file = GgufFile::open(window_model(preset));
  RingAndFull p;
  p.ring = std::make_unique<Sequence>(file, make(), SequenceOptions{.n_ctx = n_ctx, .kv_type = type, .ring_step = ring_step});
  p.full = std::make_unique<Sequence>(p.ring->runner(), SequenceOptions{.n_ctx = n_ctx, .kv_type = type, .ring_step = 0});
  return p;
}

inline std::vector<int32_t> ring_test_tokens(int32_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out;
  for (int32_t i = 0; i < n; ++i) out.push_back(3 + static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab - 3)));
  return out;
}

inline bool same_float_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Feeds `tokens` to both sequences in causal steps of `chunk`, every row's logits
// compared bit for bit.
inline void feed_ring_and_full(RingAndFull& p, const std::vector<int32_t>& tokens, int32_t chunk, const std::string& what) {
  for (size_t at = 0; at < tokens.size(); at += static_cast<size_t>(chunk)) {
    const std::vector<int32_t> piece(tokens.begin() + static_cast<std::ptrdiff_t>(at),
                                     tokens.begin() + static_cast<std::ptrdiff_t>(std::min(tokens.size(), at + chunk)));
    StepBatch a = StepBatch::causal(piece, p.ring->n_past(), true), b = StepBatch::causal(piece, p.full->n_past(), true);
    ASSERT_TRUE(same_float_bits(p.ring->forward(a), p.full->forward(b))) << what << ": the step at " << p.ring->n_past();
    p.ring->commit(a.size());
    p.full->commit(b.size());
  }
}

// Prompt steps and one-token steps past several turns of the rings, with each cache
// type: every row's logits are the whole-context cache's, bit for bit.
inline void check_ring_steps(const BackendMaker& make, const std::string& name, const std::vector<KvCacheType>& types) {
  for (const char* preset : {"gemma3-tiny", "gemma2-tiny"})
    for (KvCacheType type : types) {
      const std::string what = std::string(preset) + " " + name + " " + kv_cache_type_name(type);
      RingAndFull p = open_ring_pair(preset, make, type, 8);
      ASSERT_TRUE(p.ring->kv_cache().shape().has_rings()) << what;
      const std::vector<int32_t> tokens = ring_test_tokens(120, p.ring->config().n_vocab, 7);
      feed_ring_and_full(p, std::vector<int32_t>(tokens.begin(), tokens.begin() + 90), 8, what);
      feed_ring_and_full(p, std::vector<int32_t>(tokens.begin() + 90, tokens.end()), 1, what);
      EXPECT_EQ(p.ring->n_past(), 120) << what;
      // A rewind within a step (a rejected guess) stays exact.
      p.ring->truncate(114);
      p.full->truncate(114);
      feed_ring_and_full(p, std::vector<int32_t>(tokens.begin() + 100, tokens.begin() + 112), 4, what + " after a rewind");
    }
}

// Steps whose rows read the region (COMPRESSED rows, FAFO's guesses; every row with
// --kv-drop) after a policy exchanged entries, rows moved into place: on a window layer
// the region's entries inside the window, found by logical index, so the bits stay the
// whole-context cache's.
inline void check_ring_region(const BackendMaker& make, const std::string& name) {
  for (bool drop : {false, true}) {
    const std::string what = name + (drop ? " kv-drop" : " compressed rows");
    RingAndFull p = open_ring_pair("gemma3-tiny", make, KvCacheType::F32, 8);
    KvPolicyOptions stream;
    stream.name = "stream";
    stream.budget = 12;
    stream.sinks = 4;
    p.ring->set_kv_policy(make_kv_policy(stream), drop);
    p.full->set_kv_policy(make_kv_policy(stream), drop);
    const std::vector<int32_t> tokens = ring_test_tokens(82, p.ring->config().n_vocab, 11);
    feed_ring_and_full(p, std::vector<int32_t>(tokens.begin(), tokens.begin() + 64), 8, what);
    p.ring->end_prefill();
    p.full->end_prefill();
    EXPECT_FALSE(p.ring->kv_layout().is_identity()) << what;  // the region took entries from far away
    for (int32_t k = 0; k < 8; ++k) {
      // A FULL row, then two COMPRESSED rows at the next positions (a guess chain).
      const int32_t n = p.ring->n_past();
      auto step = [&] {
        StepBatch b;
        b.add(tokens[static_cast<size_t>(64 + 2 * k)], n, {}, true);
        b.add(tokens[static_cast<size_t>(65 + 2 * k)], n + 1, {0}, true, PrefixView::Compressed);
        b.add(tokens[static_cast<size_t>(66 + 2 * k)], n + 2, {0, 1}, true, PrefixView::Compressed);
        return b;
      };
      StepBatch a = step(), b = step();
      ASSERT_TRUE(same_float_bits(p.ring->forward(a), p.full->forward(b))) << what << " at " << n;
      p.ring->commit_rows({0, 2});  // a row moved into place
      p.full->commit_rows({0, 2});
    }
  }
}

inline std::vector<int32_t> ring_greedy(Sequence& m, const Tokenizer& tok, Strategy s, const KvPolicyOptions& kv = {}) {
  GenerationOptions o;
  o.n_predict = 120;
  o.stop_at_end_of_generation = false;  // a random model may well pick the end first
  o.sampling.temperature = 0;
  o.prefill_chunk = 32;
  o.decoding.strategy = s;
  o.kv = kv;
  return generate(m, tok, ring_test_tokens(40, m.config().n_vocab, 9), o).ids;
}

// Every strategy's greedy ids with rings on the window layers (for steps of 64 tokens:
// rings of 79, turned over several times) are plain decoding's with the whole context,
// with and without a KV policy.
inline void check_ring_strategies(const BackendMaker& make, const std::string& name) {
  KvPolicyOptions snapkv;
  snapkv.name = "snapkv";
  snapkv.budget = 24;
  snapkv.recent = 8;
  snapkv.window = 4;
  RingAndFull p = open_ring_pair("gemma3-tiny", make, KvCacheType::F32, 64);
  ASSERT_EQ(p.ring->kv_cache().shape().ring(0), 79) << name;
  const Tokenizer tok(Vocab::from_gguf(p.ring->file()));
  const std::vector<int32_t> ar = ring_greedy(*p.full, tok, Strategy::Ar);
  ASSERT_EQ(ar.size(), 120u);
  EXPECT_EQ(ring_greedy(*p.ring, tok, Strategy::Ar), ar) << name;
  for (const KvPolicyOptions& kv : {KvPolicyOptions{}, snapkv})
    for (Strategy s : {Strategy::Jacobi, Strategy::Lookahead, Strategy::Fafo})
      EXPECT_EQ(ring_greedy(*p.ring, tok, s, kv), ar) << name << " " << strategy_name(s) << " policy " << kv.name;
}

}  // namespace fafo::test
