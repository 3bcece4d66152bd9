// The KV compression policies behind fafo/kv_policy.h. Each returns the logical
// entries the region should hold; KvLayout moves them there.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "fafo/kv_policy.h"
#include "fafo/step_batch.h"

namespace fafo {

std::vector<std::string> kv_policy_names(bool with_draft) {
  std::vector<std::string> names = {"stream", "quest", "snapkv", "chunks"};
  if (with_draft) names.push_back("speckv");  // SnapKV scored with a draft model's predicted queries
  return names;
}

void KvPolicyOptions::validate() const {
  auto check = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
  };
  const std::vector<std::string> names = kv_policy_names();
  std::string choices;
  for (size_t i = 0; i < names.size(); ++i)
    choices += std::string(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  check(std::find(names.begin(), names.end(), name) != names.end(),
        "unknown KV policy '" + name + "' (choose " + choices + ")");
  check(budget >= 1 && budget <= (1 << 22), "--kv-budget must be in 1..4194304");
  check(sinks >= 0, "--sinks must be >= 0");
  check(recent >= 1, "--recent must be >= 1");
  check(update_interval >= 1, "--update-interval must be >= 1");
  check(dense_layers >= 0, "dense layers must be >= 0");
  check(page >= 1 && chunk >= 1 && pool_kernel >= 1, "page, chunk and pooling sizes must be >= 1");
  // The window's queries come from the prompt's last step (wanted_query_rows), so it
  // cannot exceed a step's tokens.
  check(window >= 1 && window <= StepBatch::kMaxTokens,
        "the observation window must be in 1.." + std::to_string(StepBatch::kMaxTokens));
  check(lookahead >= 1 && lookahead <= 256, "--kv-lookahead must be in 1..256");
}

namespace {

// The most recent `count` entries of [0, n) appended to `out`.
void add_recent(std::vector<int32_t>& out, int32_t n, int32_t count) {
  for (int32_t i = std::max(0, n - count); i < n; ++i) out.push_back(i);
}

std::vector<int32_t> sorted_unique(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

std::vector<int32_t> everything(int32_t n) {
  std::vector<int32_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  return all;
}

class StreamPolicy final : public KvPolicy {
 public:
  explicit StreamPolicy(const KvPolicyOptions& o) : o_(o) { o_.sinks = std::min(o_.sinks, o_.budget); }
  std::string name() const override { return "stream"; }
  int32_t budget() const override { return o_.budget; }
  std::optional<std::vector<int32_t>> choose(const KvPolicyEvent& e, const KvInspector&) override {
    if (e.n_past <= o_.budget) return everything(e.n_past);
    std::vector<int32_t> out;
    for (int32_t i = 0; i < o_.sinks; ++i) out.push_back(i);
    add_recent(out, e.n_past, o_.budget - o_.sinks);
    return out;
  }

 private:
  KvPolicyOptions o_;
};

}  // namespace

std::vector<double> attention_scores(const KvInspector& kv, int32_t n_keys, const AttentionScoreOptions& o) {
  const int32_t H = kv.n_head(), D = kv.head_dim(), group = kv.n_head() / kv.n_head_kv();
  const int32_t kv_dim = kv.n_head_kv() * D;
  std::vector<double> scores(static_cast<size_t>(n_keys), 0.0);
  if (n_keys <= 0) return scores;
  const float scale = kv.attention_scale();
  const double cap = kv.attention_softcap();
  std::vector<double> s(static_cast<size_t>(n_keys)), layer(static_cast<size_t>(n_keys)), head(static_cast<size_t>(n_keys));
  for (int32_t l = std::min(o.skip_layers, kv.n_layer() - 1); l < kv.n_layer(); ++l) {
    if (!kv.global_layer(l)) continue;
    const std::vector<float> q = kv.captured_queries(l);
    const int32_t rows = static_cast<int32_t>(q.size()) / (H * D);
    if (rows == 0) continue;
    const std::vector<float> k = kv.keys(l, 0, n_keys);
    const int32_t first = std::max(0, rows - o.rows), used = rows - first;
    std::fill(layer.begin(), layer.end(), 0.0);
    for (int32_t h = 0; h < H; ++h) {
      std::fill(head.begin(), head.end(), 0.0);
      for (int32_t r = first; r < rows; ++r) {
        const double weight = o.ramp ? static_cast<double>(r - first + 1) / used : 1.0;
        const float* qh = &q[static_cast<size_t>(r * H * D + h * D)];
        double mx = -INFINITY;
        for (int32_t j = 0; j < n_keys; ++j) {
          const float* kj = &k[static_cast<size_t>(j) * static_cast<size_t>(kv_dim) + static_cast<size_t>((h / group) * D)];
          double d = 0;
          for (int32_t x = 0; x < D; ++x) d += static_cast<double>(qh[x]) * kj[x];
          s[static_cast<size_t>(j)] = cap > 0.0 ? cap * std::tanh(d * scale / cap) : d * scale;
          mx = std::max(mx, s[static_cast<size_t>(j)]);
        }
        double total = 0;
        for (double& v : s) total += v = std::exp(v - mx);
        for (int32_t j = 0; j < n_keys; ++j) head[static_cast<size_t>(j)] += weight * s[static_cast<size_t>(j)] / total;
      }
      for (int32_t j = 0; j < n_keys; ++j) {
        double& to = layer[static_cast<size_t>(j)];
        to = o.max_over_heads ? std::max(to, head[static_cast<size_t>(j)]) : to + head[static_cast<size_t>(j)];
      }
    }
    for (int32_t j = 0; j < n_keys; ++j) scores[static_cast<size_t>(j)] += layer[static_cast<size_t>(j)];
  }
  return scores;
}

namespace {

// SnapKV, chunked top-k and SpecKV: score the prompt once after prefill, keep the best
// prompt entries (single tokens after max-pooling, or whole chunks), plus the recent ones.
class PromptScoredPolicy final : public KvPolicy {
 public:
  explicit PromptScoredPolicy(const KvPolicyOptions& o)
      : o_(o), chunked_(o.name == "chunks"), rows_(o.window + (o.name == "speckv" ? o.lookahead : 0)) {
    o_.recent = std::min(o_.recent, o_.budget);
  }
  std::string name() const override { return o_.name; }
  int32_t budget() const override { return o_.budget; }
  // The observation window: the last rows of a step (the prompt's last queries; for
  // speckv followed by the lookahead rows).
  std::vector<int32_t> wanted_query_rows(int32_t step_size) const override {
    std::vector<int32_t> rows;
    for (int32_t r = std::max(0, step_size - rows_); r < step_size; ++r) rows.push_back(r);
    return rows;
  }
  std::optional<std::vector<int32_t>> choose(const KvPolicyEvent& e, const KvInspector& kv) override {
    if (e.kind == KvPolicyEvent::Prefilled) kept_ = score_prompt(e.prompt_end, kv);
    if (e.n_past <= o_.budget) return everything(e.n_past);
    std::vector<int32_t> out;
    add_recent(out, e.n_past, o_.recent);
    for (int32_t i : kept_) {
      if (static_cast<int32_t>(out.size()) >= o_.budget) break;
      if (i < e.n_past - o_.recent) out.push_back(i);
    }
    return sorted_unique(out);
  }

 private:
  std::vector<int32_t> score_prompt(int32_t prompt_end, const KvInspector& kv) const {
    if (prompt_end == 0) return {};
    const std::vector<double> votes = attention_scores(kv, prompt_end, AttentionScoreOptions{rows_, 0, false, false});
    std::vector<int32_t> order;
    if (chunked_) {
      const int32_t n_chunks = (prompt_end + o_.chunk - 1) / o_.chunk;
      std::vector<double> chunk_score(static_cast<size_t>(n_chunks), 0.0);
      for (int32_t j = 0; j < prompt_end; ++j) chunk_score[static_cast<size_t>(j / o_.chunk)] += votes[static_cast<size_t>(j)];
      std::vector<int32_t> chunks(static_cast<size_t>(n_chunks));
      std::iota(chunks.begin(), chunks.end(), 0);
      std::stable_sort(chunks.begin(), chunks.end(), [&](int32_t a, int32_t b) { return chunk_score[static_cast<size_t>(a)] > chunk_score[static_cast<size_t>(b)]; });
      for (int32_t c : chunks)
        for (int32_t j = c * o_.chunk; j < std::min(prompt_end, (c + 1) * o_.chunk); ++j) order.push_back(j);
    } else {
      // Max-pool the votes so neighbours of important tokens come along (kernel 5).
      std::vector<double> pooled(votes.size());
      const int32_t half = o_.pool_kernel / 2;
      for (int32_t j = 0; j < prompt_end; ++j) {
        double m = 0;
        for (int32_t d = -half; d <= half; ++d)
          if (j + d >= 0 && j + d < prompt_end) m = std::max(m, votes[static_cast<size_t>(j + d)]);
        pooled[static_cast<size_t>(j)] = m;
      }
      order.resize(static_cast<size_t>(prompt_end));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return pooled[static_cast<size_t>(a)] > pooled[static_cast<size_t>(b)]; });
    }
    return order;
  }

  KvPolicyOptions o_;
  bool chunked_;
  int32_t rows_;               // captured rows that score
  std::vector<int32_t> kept_;  // prompt entries, best first
};

// Quest: per-page elementwise min/max keys, maintained as entries arrive; pages
// ranked by the upper bound of q.k for the newest token's query.
class QuestPolicy final : public KvPolicy {
 public:
  explicit QuestPolicy(const KvPolicyOptions& o) : o_(o) { o_.recent = std::min(o_.recent, o_.budget); }
  std::string name() const override { return "quest"; }
  int32_t budget() const override { return o_.budget; }
  int32_t dense_layers() const override { return o_.dense_layers; }
  // Row 0: the newest committed token's query ranks the pages.
  std::vector<int32_t> wanted_query_rows(int32_t step_size) const override {
    return step_size > 0 ? std::vector<int32_t>{0} : std::vector<int32_t>{};
  }
  std::optional<std::vector<int32_t>> choose(const KvPolicyEvent& e, const KvInspector& kv) override {
    if (e.n_past < summarized_) reset();
    summarize(e.n_past, kv);
    if (e.n_past <= o_.budget) return everything(e.n_past);
    if (e.kind == KvPolicyEvent::Prefilled || e.step % o_.update_interval == 0 || pages_.empty()) pages_ = rank_pages(e.n_past, kv);
    std::vector<int32_t> out;
    add_recent(out, e.n_past, o_.recent);
    for (int32_t p : pages_) {
      for (int32_t j = p * o_.page; j < std::min((p + 1) * o_.page, e.n_past - o_.recent); ++j) {
        if (static_cast<int32_t>(out.size()) >= o_.budget) break;
        out.push_back(j);
      }
    }
    return sorted_unique(out);
  }

 private:
  void reset() {
    min_.clear();
    max_.clear();
    summarized_ = 0;
    pages_.clear();
  }

  // Folds keys [summarized_, n) into the per-layer page min/max.
  void summarize(int32_t n, const KvInspector& kv) {
    if (n <= summarized_) return;
    const int32_t kv_dim = kv.n_head_kv() * kv.head_dim();
    const size_t n_pages = static_cast<size_t>((n + o_.page - 1) / o_.page);
    min_.resize(static_cast<size_t>(kv.n_layer()));
    max_.resize(static_cast<size_t>(kv.n_layer()));
    for (int32_t l = 0; l < kv.n_layer(); ++l) {
      if (!kv.global_layer(l)) continue;  // ranked by the global layers only
      auto& mn = min_[static_cast<size_t>(l)];
      auto& mx = max_[static_cast<size_t>(l)];
      mn.resize(n_pages * static_cast<size_t>(kv_dim), INFINITY);
      mx.resize(n_pages * static_cast<size_t>(kv_dim), -INFINITY);
      const std::vector<float> k = kv.keys(l, summarized_, n - summarized_);
      for (int32_t j = summarized_; j < n; ++j) {
        const size_t page = static_cast<size_t>(j / o_.page);
        for (int32_t d = 0; d < kv_dim; ++d) {
          const float v = k[static_cast<size_t>(j - summarized_) * static_cast<size_t>(kv_dim) + static_cast<size_t>(d)];
          float& lo = mn[page * static_cast<size_t>(kv_dim) + static_cast<size_t>(d)];
          float& hi = mx[page * static_cast<size_t>(kv_dim) + static_cast<size_t>(d)];
          lo = std::min(lo, v);
          hi = std::max(hi, v);
        }
      }
    }
    summarized_ = n;
  }

  std::vector<int32_t> rank_pages(int32_t n, const KvInspector& kv) const {
    const int32_t H = kv.n_head(), D = kv.head_dim(), group = kv.n_head() / kv.n_head_kv(), kv_dim = kv.n_head_kv() * D;
    const int32_t n_pages = (n + o_.page - 1) / o_.page;
    std::vector<double> score(static_cast<size_t>(n_pages), 0.0);
    for (int32_t l = std::min(o_.dense_layers, kv.n_layer()); l < kv.n_layer(); ++l) {
      if (!kv.global_layer(l)) continue;
      const std::vector<float> q = kv.captured_queries(l);
      if (q.size() < static_cast<size_t>(H * D)) continue;  // no step captured yet
      for (int32_t p = 0; p < n_pages; ++p)
        for (int32_t h = 0; h < H; ++h) {
          const size_t base = static_cast<size_t>(p) * static_cast<size_t>(kv_dim) + static_cast<size_t>((h / group) * D);
          double ub = 0;
          for (int32_t d = 0; d < D; ++d) {
            const double qd = q[static_cast<size_t>(h * D + d)];
            ub += std::max(qd * min_[static_cast<size_t>(l)][base + static_cast<size_t>(d)], qd * max_[static_cast<size_t>(l)][base + static_cast<size_t>(d)]);
          }
          // Raw bounds summed over heads: the attention scale is common to every page,
          // but a soft-cap (Gemma 2) is monotonic per head only, so pages are ranked by
          // their uncapped bounds.
          score[static_cast<size_t>(p)] += ub;
        }
    }
    std::vector<int32_t> order(static_cast<size_t>(n_pages));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)]; });
    return order;
  }

  KvPolicyOptions o_;
  std::vector<std::vector<float>> min_, max_;  // per layer: pages x kv_dim
  int32_t summarized_ = 0;
  std::vector<int32_t> pages_;  // best first
};

}  // namespace

std::unique_ptr<KvPolicy> make_kv_policy(const KvPolicyOptions& o) {
  o.validate();
  if (o.name == "stream") return std::make_unique<StreamPolicy>(o);
  if (o.name == "quest") return std::make_unique<QuestPolicy>(o);
  return std::make_unique<PromptScoredPolicy>(o);
}

}  // namespace fafo
