#include "attention_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "fafo/model.h"

namespace fafo::cli {

nlohmann::json run_attention_bench(const std::string& model_path, const BackendSpec& choice,
                                   const AttentionBenchOptions& o) {
  const auto file = GgufFile::open(model_path);
  const ModelConfig c = ModelConfig::from_gguf(*file);
  const int32_t max_ctx = *std::max_element(o.contexts.begin(), o.contexts.end());
  const BackendSpec spec{choice.name, choice.device, choice.threads};
  auto be = make_backend(spec);
  // One layer of the model's attention shape is enough: attention cost is per layer.
  KvCache& kv = be->create_kv_cache(KvCacheShape{1, max_ctx + o.rows, c.kv_dim(), KvCacheType::F32});
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int32_t chunk = 1024;
  std::vector<float> k(static_cast<size_t>(chunk) * static_cast<size_t>(c.kv_dim())), v(k.size());
  for (int32_t first = 0; first < max_ctx; first += chunk) {
    for (auto& x : k) x = normal(rng);
    for (auto& x : v) x = normal(rng);
    kv.write(0, first, std::min(chunk, max_ctx - first), k.data(), v.data());
  }
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  Activation q = be->alloc_activation(o.rows, q_dim), out = be->alloc_activation(o.rows, q_dim);
  const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim))};

  auto time_step = [&](int32_t n_past, int32_t region, PrefixView view) {
    StepBatch batch;
    std::vector<int32_t> sees;
    for (int32_t i = 0; i < o.rows; ++i) {
      batch.add(1, n_past + i, sees, false, view);
      sees.push_back(i);
    }
    batch.set_n_past(n_past);
    kv.reset_layout(region, 0, n_past);  // [region | rest]: COMPRESSED rows read the first `region` entries
    std::vector<double> ms;
    for (int r = 0; r < o.repetitions; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      be->begin_step(batch);
      be->attention(0, q, shape, out);
      be->finish_step();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return *std::min_element(ms.begin(), ms.end());
  };

  std::printf("\nattention of %d COMPRESSED rows (one layer, %d heads / %d KV heads x %d), region of %d entries:\n",
              o.rows, c.n_head, c.n_head_kv, c.head_dim, o.budget);
  std::printf("| context | with region ms | without region ms | FULL rows ms |\n|---:|---:|---:|---:|\n");
  nlohmann::json rows = nlohmann::json::array();
  for (int32_t n : o.contexts) {
    const double with_region = time_step(n, std::min(o.budget, n), PrefixView::Compressed);
    const double without = time_step(n, n, PrefixView::Compressed);  // the "region" is everything
    const double full = time_step(n, std::min(o.budget, n), PrefixView::Full);
    std::printf("| %d | %.3f | %.3f | %.3f |\n", n, with_region, without, full);
    rows.push_back({{"context", n}, {"region_ms", with_region}, {"no_region_ms", without}, {"full_ms", full}});
  }
  // Swap cost: exchanging entries between the region and the rest, all layers of the model.
  auto be_full = make_backend(spec);
  KvCache& kv_full = be_full->create_kv_cache(KvCacheShape{c.n_layer, 4096, c.kv_dim(), KvCacheType::F32});
  std::vector<std::pair<int32_t, int32_t>> pairs;
  for (int32_t i = 0; i < 8; ++i) pairs.emplace_back(i, 1024 + 37 * i);
  const int reps = 2000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) kv_full.swap_slots(pairs);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / (reps * 8.0);
  std::printf("\nregion swap: %.3f us per exchanged entry (%d layers x K and V of %d floats); a FAFO step exchanges about one entry per accepted token\n",
              us, c.n_layer, c.kv_dim());
  return {{"rows", o.rows}, {"budget", o.budget}, {"attention", rows}, {"swap_us_per_entry", us}};
}

}  // namespace fafo::cli
