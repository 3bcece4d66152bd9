#include "attention_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>

#include "fafo/backend_registry.h"
#include "fafo/model_config.h"

namespace fafo::cli {

nlohmann::json run_attention_bench(const std::string& model_path, const BackendSpec& choice,
                                   const AttentionBenchOptions& o) {
  const auto file = GgufFile::open(model_path);
  const ModelConfig c = ModelConfig::from_gguf(*file);
  const int32_t max_ctx = *std::max_element(o.contexts.begin(), o.contexts.end());
  const BackendSpec spec{choice.name, choice.device, choice.threads};
  // An MLA model's random up-projections: declared first, as they must outlive the
  // backend (host backends use uploaded floats in place).
  std::vector<float> k_weights, v_weights;
  auto be = make_backend(spec);
  // One layer of the model's attention shape is enough: attention cost is per layer. An
  // MLA model's first layer caches latents of its ranks and recovers them with random
  // up-projections of the file's shapes (the cost does not depend on their values).
  KvCacheShape cache_shape{1, max_ctx + o.rows, c.kv_dim(), KvCacheType::F32};
  if (c.mla()) {
    if (!be->capabilities().latent_attention)
      throw std::runtime_error("the " + be->name() + " backend does not run multi-head latent attention (MLA) models");
    cache_shape.key_dims = {c.mla_rank_k[0]};
    cache_shape.value_dims = {c.mla_rank_v[0]};
  }
  const std::unique_ptr<KvCache> kv_owned = be->create_kv_cache(cache_shape);
  KvCache& kv = *kv_owned;
  const int32_t key_width = cache_shape.key_dim(0), value_width = cache_shape.value_dim(0);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random_floats = [&](size_t n) {
    std::vector<float> x(n);
    for (auto& f : x) f = normal(rng);
    return x;
  };
  const int32_t chunk = 1024;
  for (int32_t first = 0; first < max_ctx; first += chunk) {
    const int32_t n = std::min(chunk, max_ctx - first);
    const auto k = random_floats(static_cast<size_t>(n) * static_cast<size_t>(key_width));
    const auto v = random_floats(static_cast<size_t>(n) * static_cast<size_t>(value_width));
    kv.write(0, first, n, k.data(), v.data());
  }
  Weight k_up, v_up;
  if (c.mla()) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(key_width));
    k_weights = random_floats(static_cast<size_t>(c.kv_dim()) * static_cast<size_t>(key_width));
    v_weights = random_floats(static_cast<size_t>(c.kv_dim()) * static_cast<size_t>(value_width));
    for (auto& x : k_weights) x *= scale;
    k_up = be->upload_weight(TensorType::F32, c.kv_dim(), key_width, k_weights.data());
    v_up = be->upload_weight(TensorType::F32, c.kv_dim(), value_width, v_weights.data());
  }
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  Activation q = be->alloc_activation(o.rows, q_dim), out = be->alloc_activation(o.rows, q_dim);
  const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, c.attention_scale(), c.attn_softcap};

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
      be->begin_step(batch, kv);
      if (c.mla())
        be->latent_attention(0, q, shape, k_up, v_up, c.rope, out);
      else
        be->attention(0, q, shape, out);
      be->finish_step();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return *std::min_element(ms.begin(), ms.end());
  };

  std::printf("\nattention of %d COMPRESSED rows (one layer, %d heads / %d KV heads x %d%s), region of %d entries:\n",
              o.rows, c.n_head, c.n_head_kv, c.head_dim,
              c.mla() ? (", MLA latent ranks K " + std::to_string(key_width) + " / V " + std::to_string(value_width)).c_str() : "",
              o.budget);
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
  KvCacheShape full_shape{c.n_layer, 4096, c.kv_dim(), KvCacheType::F32};
  full_shape.key_dims = c.mla_rank_k;  // empty (the plain cache) unless MLA
  full_shape.value_dims = c.mla_rank_v;
  const std::unique_ptr<KvCache> kv_full_owned = be_full->create_kv_cache(full_shape);
  KvCache& kv_full = *kv_full_owned;
  std::vector<std::pair<int32_t, int32_t>> pairs;
  for (int32_t i = 0; i < 8; ++i) pairs.emplace_back(i, 1024 + 37 * i);
  const int reps = 2000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) kv_full.swap_slots(pairs);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / (reps * 8.0);
  std::printf("\nregion swap: %.3f us per exchanged entry (%d layers, %lld floats of K and V); a FAFO step exchanges about one entry per accepted token\n",
              us, c.n_layer, static_cast<long long>(full_shape.floats_per_entry()));
  return {{"rows", o.rows}, {"budget", o.budget}, {"attention", rows}, {"swap_us_per_entry", us}};
}

}  // namespace fafo::cli
