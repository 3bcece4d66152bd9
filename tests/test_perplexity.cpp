// fafo/perplexity.h: the estimate equals the mean negative log-likelihood of each
// chunk's second half computed from one forward pass over the whole chunk; the lossy
// modes change it only when they drop something; bad requests are clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "fafo/generator.h"
#include "fafo/open_model.h"
#include "fafo/perplexity.h"
#include "synthetic_model.h"
#include "test_support.h"

namespace {

using namespace fafo;

OpenedModel open_stories(const std::string& path, int32_t n_ctx) {
  OpenOptions o;
  o.path = path;
  o.backend = BackendSpec{"cpu", "", 2};
  o.n_ctx = n_ctx;
  o.cache_dir = "off";
  return open_model(o);
}

std::vector<int32_t> text_tokens(const Tokenizer& tok, size_t at_least) {
  std::string text;
  std::vector<int32_t> ids;
  for (int i = 0; ids.size() < at_least; ++i) {
    text += "Once upon a time there was a little girl named Lily " + std::to_string(i) +
            ". She liked to play in the park with her friend Tom, and the sun was warm. ";
    ids = tok.encode(text, true);
  }
  return ids;
}

// The same measurement done by hand: each chunk in one causal step with every row's logits.
double by_hand(Sequence& model, const std::vector<int32_t>& tokens, int32_t n, int32_t chunks, int32_t bos) {
  double sum = 0;
  int64_t count = 0;
  const int32_t V = model.config().n_vocab;
  for (int32_t c = 0; c < chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * n, tokens.begin() + (c + 1) * n);
    chunk[0] = bos;
    model.truncate(0);
    StepBatch step = StepBatch::causal(chunk, 0, true);
    const std::vector<float> logits = model.forward(step);
    for (int32_t i = n / 2; i + 1 < n; ++i) {
      const float* row = &logits[static_cast<size_t>(i) * V];
      double mx = row[0], z = 0;
      for (int32_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      for (int32_t v = 0; v < V; ++v) z += std::exp(row[v] - mx);
      sum += std::log(z) + mx - row[chunk[static_cast<size_t>(i + 1)]];
      ++count;
    }
  }
  return std::exp(sum / static_cast<double>(count));
}

TEST(Perplexity, EqualsTheMeanLikelihoodOfEachChunksSecondHalf) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenedModel m = open_stories(model_path.string(), 128);
  const std::vector<int32_t> tokens = text_tokens(*m.tokenizer, 3 * 128 + 20);
  PerplexityOptions o;
  o.bos = m.tokenizer->vocab().bos;
  std::vector<double> seen;
  const PerplexityResult r = perplexity(*m.model, tokens, o, [&](const PerplexityChunk& c) {
    EXPECT_EQ(c.index, static_cast<int32_t>(seen.size()));
    EXPECT_EQ(c.n_chunks, 3);
    seen.push_back(c.running);
  });
  EXPECT_EQ(r.chunks, 3);
  EXPECT_EQ(r.n_ctx, 128);
  EXPECT_EQ(r.scored, 3 * (128 - 64 - 1));
  EXPECT_EQ(r.running, seen);
  EXPECT_DOUBLE_EQ(r.running.back(), r.ppl);
  EXPECT_TRUE(r.lossy.empty());
  EXPECT_GT(r.ppl, 1.0);
  EXPECT_GT(r.error, 0.0);
  EXPECT_LT(r.error, r.ppl);
  const double want = by_hand(*m.model, tokens, 128, 3, o.bos);
  EXPECT_NEAR(r.ppl, want, want * 1e-9);
  // --chunks and -c.
  o.max_chunks = 2;
  o.n_ctx = 64;
  const PerplexityResult two = perplexity(*m.model, tokens, o);
  EXPECT_EQ(two.chunks, 2);
  EXPECT_NEAR(two.ppl, by_hand(*m.model, tokens, 64, 2, o.bos), two.ppl * 1e-9);
}

// --kl-base: KL(base || model) and top-1 agreement per scored token, against the same
// sums done by hand over one forward pass of each chunk; 0 and 100% from itself.
TEST(Perplexity, KlDivergenceFromABaseModel) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenedModel m = open_stories(model_path.string(), 128);
  OpenedModel same = open_stories(model_path.string(), 128);
  const std::vector<int32_t> tokens = text_tokens(*m.tokenizer, 2 * 128 + 20);
  PerplexityOptions o;
  o.bos = m.tokenizer->vocab().bos;
  o.base = same.model.get();
  const PerplexityResult self = perplexity(*m.model, tokens, o);
  EXPECT_EQ(self.kl, 0.0);
  EXPECT_EQ(self.top1_agreement, 1.0);

  synth::SyntheticConfig cfg;
  cfg.n_vocab = m.model->config().n_vocab;
  cfg.n_ctx = 256;
  const std::string other_path = (test::temp_dir("perplexity-kl") / "other.gguf").string();
  synth::write_synthetic_model(cfg, other_path);
  OpenedModel other = open_stories(other_path, 128);
  o.base = other.model.get();
  const PerplexityResult r = perplexity(*m.model, tokens, o);
  double kl = 0;
  int64_t agree = 0, count = 0;
  const int32_t n_vocab = m.model->config().n_vocab;
  for (int32_t c = 0; c < 2; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * 128, tokens.begin() + (c + 1) * 128);
    chunk[0] = o.bos;
    auto logits = [&](Sequence& model) {
      model.truncate(0);
      StepBatch b = StepBatch::causal(chunk, 0, true);
      std::vector<float> out = model.forward(b);
      model.truncate(0);
      return out;
    };
    const std::vector<float> p = logits(*other.model), q = logits(*m.model);
    for (int32_t i = 64; i + 1 < 128; ++i) {
      const float* pr = &p[static_cast<size_t>(i) * n_vocab];
      const float* qr = &q[static_cast<size_t>(i) * n_vocab];
      const double mp = *std::max_element(pr, pr + n_vocab), mq = *std::max_element(qr, qr + n_vocab);
      double zp = 0, zq = 0;
      for (int32_t v = 0; v < n_vocab; ++v) zp += std::exp(pr[v] - mp), zq += std::exp(qr[v] - mq);
      for (int32_t v = 0; v < n_vocab; ++v) {
        const double lp = pr[v] - mp - std::log(zp), lq = qr[v] - mq - std::log(zq);
        kl += std::exp(lp) * (lp - lq);
      }
      agree += std::max_element(pr, pr + n_vocab) - pr == std::max_element(qr, qr + n_vocab) - qr;
      ++count;
    }
  }
  EXPECT_GT(r.kl, 0.01);
  EXPECT_NEAR(r.kl, kl / count, 1e-6 * (kl / count));
  EXPECT_GT(r.kl_error, 0.0);
  EXPECT_DOUBLE_EQ(r.top1_agreement, static_cast<double>(agree) / count);
  EXPECT_LT(r.top1_agreement, 1.0);
  PerplexityOptions plain = o;
  plain.base = nullptr;
  EXPECT_NEAR(r.ppl, perplexity(*m.model, tokens, plain).ppl, r.ppl * 1e-12);  // unchanged by the base

  cfg.n_vocab = n_vocab + 1;
  synth::write_synthetic_model(cfg, other_path);
  OpenedModel wider = open_stories(other_path, 128);
  o.base = wider.model.get();
  EXPECT_THROW(perplexity(*m.model, tokens, o), std::invalid_argument);
}

TEST(Perplexity, LossyModesChangeItOnlyWhenTheyDropSomething) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenedModel m = open_stories(model_path.string(), 128);
  OpenedModel draft = open_stories(model_path.string(), 128);
  const std::vector<int32_t> tokens = text_tokens(*m.tokenizer, 2 * 128);
  PerplexityOptions o;
  o.bos = m.tokenizer->vocab().bos;
  o.max_chunks = 2;
  const double plain = perplexity(*m.model, tokens, o).ppl;
  o.draft = draft.model.get();
  for (const std::string policy : {"snapkv", "stream", "speckv", "chunks", "quest"}) {
    PerplexityOptions d = o;
    d.kv_drop = true;
    d.kv.name = policy;
    d.kv.recent = 8;
    d.kv.budget = 128;  // the whole chunk: nothing is dropped
    const PerplexityResult keep_all = perplexity(*m.model, tokens, d);
    EXPECT_NEAR(keep_all.ppl, plain, plain * 1e-9) << policy;
    ASSERT_EQ(keep_all.lossy.size(), 1u);
    EXPECT_EQ(keep_all.lossy[0], "kv-drop " + policy + " budget 128");
    // The second half is read as decoding reads it: with room for the first half only,
    // its own tokens are dropped as they age past --recent.
    d.kv.budget = 64;
    EXPECT_NE(perplexity(*m.model, tokens, d).ppl, plain) << policy;
    EXPECT_EQ(m.model->kv_policy(), nullptr);
    EXPECT_FALSE(m.model->kv_drop());
    d.kv.budget = 12;
    EXPECT_NE(perplexity(*m.model, tokens, d).ppl, plain) << policy;
  }
  PerplexityOptions pc = o;
  pc.prompt_compress.method = "speckv";
  pc.prompt_compress.budget = 64;
  EXPECT_NEAR(perplexity(*m.model, tokens, pc).ppl, plain, plain * 1e-9);
  pc.prompt_compress.budget = 16;
  const PerplexityResult compressed = perplexity(*m.model, tokens, pc);
  EXPECT_NE(compressed.ppl, plain);
  EXPECT_EQ(compressed.lossy, std::vector<std::string>{"prompt-compress speckv budget 16"});
}

TEST(Perplexity, BadRequestsAreClearErrors) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  OpenedModel m = open_stories(model_path.string(), 128);
  const std::vector<int32_t> tokens = text_tokens(*m.tokenizer, 100);
  PerplexityOptions o;
  auto message = [&](const PerplexityOptions& opts, const std::vector<int32_t>& t) {
    try {
      perplexity(*m.model, t, opts);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(o, std::vector<int32_t>(tokens.begin(), tokens.begin() + 100)).find("less than one chunk of 128"), std::string::npos);
  o.n_ctx = 63;
  EXPECT_NE(message(o, tokens).find("even"), std::string::npos);
  o.n_ctx = 256;
  EXPECT_NE(message(o, tokens).find("exceeds the model's context 128"), std::string::npos);
  o.n_ctx = 64;
  o.kv_drop = true;
  o.kv.name = "speckv";
  EXPECT_NE(message(o, tokens).find("draft model"), std::string::npos);
  o.kv_drop = false;
  o.prompt_compress.method = "speckv";
  EXPECT_NE(message(o, tokens).find("draft model"), std::string::npos);
}

}  // namespace
