// The check that joined steps give each part the bits of its step alone
// (tests/test_joined_steps.cpp runs it on the cpu and reference backends,
// tests/test_cuda_host.cpp on cuda-emulated).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fafo/kv_policy.h"
#include "fafo/sequence.h"
#include "fafo/tokenizer.h"

namespace fafo::test {

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// One step of each kind a decoding strategy issues, for a sequence at n_past:
//   0: one decode token;  1: a FAFO-like step (the input token FULL, three guesses that
//   see only the compressed region and each other in a chain, logits for all);
//   2: a causal chunk of 4 with logits for all;  3: a prefill chunk of 12, last logits.
inline StepBatch step_of_kind(int kind, int32_t n_past, int32_t seed) {
  const auto tok = [&](int32_t i) { return 1 + (seed * 37 + i * 11) % 500; };
  switch (kind) {
    case 0:
      return StepBatch::causal({tok(0)}, n_past);
    case 1: {
      StepBatch b;
      b.add(tok(0), n_past, {}, true);
      b.add(tok(1), n_past + 1, {0}, true, PrefixView::Compressed);
      b.add(tok(2), n_past + 2, {0, 1}, true, PrefixView::Compressed);
      b.add(tok(3), n_past + 1, {0}, true, PrefixView::Compressed);
      return b;
    }
    case 2:
      return StepBatch::causal({tok(0), tok(1), tok(2), tok(3)}, n_past, true);
    default: {
      std::vector<int32_t> chunk;
      for (int32_t i = 0; i < 12; ++i) chunk.push_back(tok(i));
      return StepBatch::causal(chunk, n_past);
    }
  }
}

inline KvPolicyOptions snapkv() {
  KvPolicyOptions kv;
  kv.name = "snapkv";
  kv.budget = 16;
  kv.recent = 4;
  kv.window = 4;
  return kv;
}

// Four sequences on `runner` at different contexts (one with a KV policy whose region
// its guesses read, one empty), each step kind once: joined, each part's logits,
// argmax, top-k, captured queries and the keys and values it stores equal the
// sequence's step alone, bit for bit.
inline void check_joined_steps(const std::shared_ptr<StepRunner>& runner, const Tokenizer& tokenizer) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  SequenceOptions options;
  options.n_ctx = 256;
  for (int i = 0; i < 4; ++i) seqs.push_back(std::make_unique<Sequence>(runner, options));
  const std::vector<std::string> prompts = {"Once upon a time there was a little dog",
                                            "Lily and Tom went to the park. Lily and Tom went to the park and they played",
                                            "The sun", ""};
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& m = *seqs[i];
    if (i == 1) m.set_kv_policy(make_kv_policy(snapkv()));
    if (prompts[i].empty()) continue;
    StepBatch prefill = StepBatch::causal(tokenizer.encode(prompts[i], true), 0);
    m.forward(prefill);
    m.commit(prefill.size());
    m.end_prefill();
  }
  const int kinds[] = {0, 1, 2, 3};
  const StepWant wants[] = {StepWant::Argmax, StepWant::TopK, StepWant::Logits, StepWant::Logits};
  // Alone: each sequence's step, its results, the queries its policy captured, and the
  // logits of the next token after committing the step's first row.
  std::vector<StepRequest> alone(seqs.size());
  std::vector<std::vector<float>> alone_logits(seqs.size()), alone_next(seqs.size()), alone_queries(seqs.size());
  std::vector<StepBatch> batches, alone_batches;
  for (size_t i = 0; i < seqs.size(); ++i)
    batches.push_back(step_of_kind(kinds[i], seqs[i]->n_past(), static_cast<int32_t>(i)));
  alone_batches = batches;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& m = *seqs[i];
    const int32_t n = m.n_past();
    StepBatch b = batches[i];
    alone_logits[i] = m.forward(b);
    alone[i] = StepRequest{&alone_batches[i], wants[i], 5};
    Sequence::forward_joined({{&m, &alone[i]}});
    ASSERT_FALSE(alone[i].error);
    if (i == 1) alone_queries[i] = m.inspector()->captured_queries(0);
    m.commit(1);
    StepBatch next = StepBatch::causal({42}, m.n_past());
    alone_next[i] = m.forward(next);
    m.truncate(n);
  }
  ASSERT_FALSE(alone_queries[1].empty());
  // Joined: the same steps as one step, twice: logits, then mixed results.
  std::vector<StepBatch> joined_batches = batches;
  std::vector<StepRequest> logits(seqs.size()), mixed(seqs.size());
  std::vector<std::pair<Sequence*, StepRequest*>> parts;
  for (size_t i = 0; i < seqs.size(); ++i) {
    logits[i] = StepRequest{&joined_batches[i], StepWant::Logits};
    parts.emplace_back(seqs[i].get(), &logits[i]);
  }
  Sequence::forward_joined(parts);
  for (size_t i = 0; i < seqs.size(); ++i) {
    ASSERT_FALSE(logits[i].error) << i;
    EXPECT_TRUE(same_bits(logits[i].logits, alone_logits[i])) << "sequence " << i;
  }
  parts.clear();
  joined_batches = batches;
  for (size_t i = 0; i < seqs.size(); ++i) {
    mixed[i] = StepRequest{&joined_batches[i], wants[i], 5};
    parts.emplace_back(seqs[i].get(), &mixed[i]);
  }
  Sequence::forward_joined(parts);
  for (size_t i = 0; i < seqs.size(); ++i) {
    SCOPED_TRACE("sequence " + std::to_string(i));
    ASSERT_FALSE(mixed[i].error);
    EXPECT_EQ(mixed[i].ids, alone[i].ids);
    EXPECT_EQ(mixed[i].top.ids, alone[i].top.ids);
    EXPECT_EQ(mixed[i].top.k, alone[i].top.k);
    EXPECT_TRUE(same_bits(mixed[i].top.values, alone[i].top.values));
    EXPECT_TRUE(same_bits(mixed[i].logits, alone[i].logits));
  }
  EXPECT_EQ(mixed[0].ids.size(), 1u);
  EXPECT_EQ(mixed[1].top.rows(), 4);
  EXPECT_TRUE(same_bits(seqs[1]->inspector()->captured_queries(0), alone_queries[1]));
  // What the joined step stored: the next token's logits after committing its first row.
  for (size_t i = 0; i < seqs.size(); ++i) {
    Sequence& m = *seqs[i];
    m.commit(1);
    StepBatch next = StepBatch::causal({42}, m.n_past());
    EXPECT_TRUE(same_bits(m.forward(next), alone_next[i])) << "sequence " << i;
  }
}

}  // namespace fafo::test
