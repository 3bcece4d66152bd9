// The CPU attention kernel: a head's keys split into parts and combined
// (flash-decoding style) equals one pass and a float64 reference; long contexts stay
// lossless for multi-token decoding.
#include <cmath>
#include <random>

#include "backend/host/scalar_kernels.h"
#include "fafo/generator.h"
#include "model_fixtures.h"
#include "test_support.h"

using namespace fafo;

TEST(CpuAttention, SplitPartsCombineToTheReference) {
  const int32_t n = 5003, D = 24, stride = 3 * D, offset = D;  // the head sits in the middle of a slot
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> K(static_cast<size_t>(n) * stride), V(K.size()), q(D);
  for (auto& x : K) x = normal(rng);
  for (auto& x : V) x = normal(rng);
  for (auto& x : q) x = normal(rng);
  std::vector<int32_t> slots(static_cast<size_t>(n));
  for (int32_t j = 0; j < n; ++j) slots[static_cast<size_t>(j)] = (j * 7919) % n;  // a permutation
  const float scale = 0.2f;

  std::vector<double> s(static_cast<size_t>(n)), ref(D, 0.0);
  double mx = -1e300, total = 0;
  for (int32_t j = 0; j < n; ++j) {
    double d = 0;
    for (int32_t x = 0; x < D; ++x) d += static_cast<double>(q[x]) * K[static_cast<size_t>(slots[j]) * stride + offset + x];
    s[static_cast<size_t>(j)] = d * scale;
    mx = std::max(mx, s[static_cast<size_t>(j)]);
  }
  for (int32_t j = 0; j < n; ++j) total += s[static_cast<size_t>(j)] = std::exp(s[static_cast<size_t>(j)] - mx);
  for (int32_t j = 0; j < n; ++j)
    for (int32_t x = 0; x < D; ++x) ref[x] += s[static_cast<size_t>(j)] / total * V[static_cast<size_t>(slots[j]) * stride + offset + x];

  std::vector<float> scratch(static_cast<size_t>(n));
  for (int32_t part_size : {n, 2048, 1000, 1}) {
    std::vector<scalar::AttentionPart> parts;
    std::vector<float> accs;
    for (int32_t first = 0; first < n; first += part_size) {
      const int32_t count = std::min(part_size, n - first);
      accs.resize(accs.size() + D);
      parts.push_back(scalar::attend_head_part(q.data(), scalar::KvRows{K.data(), stride, offset, D}, scalar::KvRows{V.data(), stride, offset, D},
                                            slots.data() + first, count, scalar::ScoreMap{scale}, scratch.data(), accs.data() + accs.size() - D));
    }
    std::vector<float> out(D);
    scalar::combine_parts(parts.data(), accs.data(), static_cast<int32_t>(parts.size()), D, out.data());
    for (int32_t x = 0; x < D; ++x) EXPECT_NEAR(out[x], ref[x], 2e-5) << "parts of " << part_size << ", dim " << x;
  }
}

TEST(CpuAttention, LongContextStepsStayLossless) {
  // Rows with more than 2048 keys are split across threads; multi-token steps and
  // one-token steps must still agree exactly.
  synth::SyntheticConfig c;
  c.n_layer = 1, c.n_embd = 32, c.n_head = 4, c.n_head_kv = 2, c.n_ff = 48, c.n_vocab = 270, c.n_ctx = 2600;
  const auto path = (test::temp_dir("long-attn") / "m.gguf").string();
  synth::write_synthetic_model(c, path);
  auto m = test::load_test_model(path, 2600);
  std::vector<int32_t> prompt;
  std::mt19937 rng(9);
  for (int i = 0; i < 2100; ++i) prompt.push_back(std::uniform_int_distribution<int32_t>(3, 60)(rng));
  GenerationOptions o;
  o.n_predict = 40;
  o.sampling.temperature = 0;
  o.stop_at_end_of_generation = false;
  o.decoding.pool_from_prompt = true;
  const auto ar = generate(*m.model, *m.tokenizer, prompt, o);
  for (Strategy s : {Strategy::Lookahead, Strategy::Fafo}) {
    o.decoding.strategy = s;
    EXPECT_EQ(generate(*m.model, *m.tokenizer, prompt, o).ids, ar.ids) << strategy_name(s);
  }
}
