#include "fafo/prompt_compression.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "fafo/generator.h"
#include "fafo/sequence.h"
#include "fafo/sampler.h"

namespace fafo {

void PromptCompressOptions::validate() const {
  if (!method.empty() && method != "speckv")
    throw std::invalid_argument("unknown --prompt-compress method '" + method + "' (choose speckv)");
  if (budget < 2) throw std::invalid_argument("--prompt-budget must be at least 2 (the first and the last token are kept)");
  if (window < 1 || window >= Sequence::kMaxStepTokens)
    throw std::invalid_argument("the SpecPC window must be in 1.." + std::to_string(Sequence::kMaxStepTokens - 1));
  if (skip_layers < 0 || pool_kernel < 1) throw std::invalid_argument("SpecPC: skipped layers >= 0 and pooling kernel >= 1");
}

std::string PromptCompressOptions::describe() const {
  return "prompt-compress " + method + " budget " + std::to_string(budget);
}

namespace {

// Captures the queries of a step's last `rows` rows; keeps no region.
class CaptureLastRows final : public KvPolicy {
 public:
  explicit CaptureLastRows(int32_t rows) : rows_(rows) {}
  std::string name() const override { return "capture"; }
  int32_t budget() const override { return 0; }
  std::vector<int32_t> wanted_query_rows(int32_t step_size) const override {
    std::vector<int32_t> rows;
    for (int32_t r = std::max(0, step_size - rows_); r < step_size; ++r) rows.push_back(r);
    return rows;
  }
  std::optional<std::vector<int32_t>> choose(const KvPolicyEvent&, const KvInspector&) override { return std::nullopt; }

 private:
  int32_t rows_;
};

// The draft's attention scores of prompt tokens [0, n): the prompt is fed, the token
// the draft predicts after it is drawn greedily, and the last `w` prompt rows are run
// again with it so one step holds every scoring row.
std::vector<double> draft_scores(Sequence& draft, const std::vector<int32_t>& prompt, int32_t w,
                                 const PromptCompressOptions& o, int32_t chunk) {
  const int32_t n = static_cast<int32_t>(prompt.size());
  const std::vector<float> logits = prefill(draft, prompt, chunk);
  const int32_t next = argmax(logits.data() + logits.size() - static_cast<size_t>(draft.config().n_vocab), draft.config().n_vocab);
  draft.truncate(n - w);
  draft.set_kv_policy(std::make_unique<CaptureLastRows>(w + 1));
  std::vector<int32_t> tail(prompt.end() - w, prompt.end());
  tail.push_back(next);
  StepBatch step = StepBatch::causal(tail, draft.n_past());
  draft.forward_argmax(step);
  draft.commit(step.size());  // the keys of [0, n) are now committed
  return attention_scores(*draft.inspector(), n, AttentionScoreOptions{w + 1, o.skip_layers, true, true});
}

}  // namespace

std::vector<int32_t> compress_prompt(Sequence& draft, const std::vector<int32_t>& prompt, const PromptCompressOptions& o,
                                     int32_t chunk) {
  o.validate();
  const int32_t n = static_cast<int32_t>(prompt.size());
  if (n <= o.budget) return prompt;
  if (n + 1 > draft.n_ctx())
    throw std::length_error("SpecPC: the draft model's context (" + std::to_string(draft.n_ctx()) +
                            ") cannot hold the prompt (" + std::to_string(n) + " tokens) and one token after it");
  const int32_t w = std::min({o.window, o.budget - 1, n - 1});  // the first token is kept too
  draft.truncate(0);
  std::vector<double> scores;
  try {
    scores = w > 0 ? draft_scores(draft, prompt, w, o, chunk) : std::vector<double>(static_cast<size_t>(n), 0.0);
  } catch (...) {
    draft.set_kv_policy(nullptr);
    draft.truncate(0);
    throw;
  }
  draft.set_kv_policy(nullptr);
  draft.truncate(0);

  std::vector<double> pooled(scores.size(), 0.0);
  const int32_t half = o.pool_kernel / 2;
  for (int32_t j = 0; j < n; ++j)
    for (int32_t d = std::max(0, j - half); d <= std::min(n - 1, j + half); ++d)
      pooled[static_cast<size_t>(j)] = std::max(pooled[static_cast<size_t>(j)], scores[static_cast<size_t>(d)]);
  std::vector<char> keep(static_cast<size_t>(n), 0);
  keep[0] = 1;
  for (int32_t j = n - w; j < n; ++j) keep[static_cast<size_t>(j)] = 1;
  std::vector<int32_t> order(static_cast<size_t>(n - w - 1));
  std::iota(order.begin(), order.end(), 1);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return pooled[static_cast<size_t>(a)] > pooled[static_cast<size_t>(b)]; });
  for (int32_t i = 0; i < o.budget - w - 1 && i < static_cast<int32_t>(order.size()); ++i) keep[static_cast<size_t>(order[static_cast<size_t>(i)])] = 1;
  std::vector<int32_t> out;
  for (int32_t j = 0; j < n; ++j)
    if (keep[static_cast<size_t>(j)]) out.push_back(prompt[static_cast<size_t>(j)]);
  return out;
}

}  // namespace fafo
