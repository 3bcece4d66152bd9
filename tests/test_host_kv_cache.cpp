// The cpu backend's KV cache (runtime/src/backend/host/host_kv_cache.h): an F16 cache
// holds fp16 words, half an F32 cache's memory, and computes with exactly the values it
// rounded: attention (FULL rows over a permuted order, COMPRESSED rows over a region),
// the keys a policy reads and the slots' exchanges and moves give an F32 cache's bits
// when that cache holds the same fp16-rounded values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "fafo/backend.h"
#include "fafo/kv_cache.h"
#include "fafo/step_batch.h"
#include "fafo/tensor_type.h"

namespace fafo {
namespace {

constexpr int32_t kPast = 300, kHeads = 4, kKvHeads = 2, kHeadDim = 32, kKvDim = kKvHeads * kHeadDim, kRows = 6;

// A value in [-1.5, 1.5) that fp16 holds exactly.
float half_value(uint32_t seed, int64_t i) {
  const uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ (seed * 40503u + 17u);
  const float x = static_cast<float>(h % 30011u) / 30011.0f * 3.0f - 1.5f;
  return fp16_to_fp32(fp32_to_fp16(x));
}

std::vector<float> half_values(uint32_t seed, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = half_value(seed, i);
  return v;
}

struct CacheRun {
  std::vector<float> out, keys;
  uint64_t cache_bytes = 0;
};

// kRows rows (every other one COMPRESSED) attending over kPast committed entries whose
// layout holds a region of 40 chosen entries (FULL rows then visit a permuted order),
// then the keys of a few slots after an exchange and a move.
CacheRun attend(KvCacheType type) {
  std::unique_ptr<Backend> be = make_backend(BackendSpec{"cpu", "", 2});
  const uint64_t before = memory_in_use(*be);
  std::unique_ptr<KvCache> kv = be->create_kv_cache(KvCacheShape{1, 512, kKvDim, type});
  CacheRun r;
  r.cache_bytes = memory_in_use(*be) - before;
  const std::vector<float> k = half_values(1, int64_t{kPast} * kKvDim), v = half_values(2, int64_t{kPast} * kKvDim);
  kv->write(0, 0, kPast, k.data(), v.data());
  kv->reset_layout(40, 0, kPast);
  std::vector<int32_t> chosen(40);
  for (int32_t i = 0; i < 40; ++i) chosen[static_cast<size_t>(i)] = (i * 97 + 13) % kPast;
  kv->select(chosen);

  StepBatch b;
  for (int32_t i = 0; i < kRows; ++i) {
    std::vector<int32_t> sees(static_cast<size_t>(i));
    std::iota(sees.begin(), sees.end(), 0);
    b.add(i, kPast + i, sees, true, i % 2 ? PrefixView::Compressed : PrefixView::Full);
  }
  b.set_n_past(kPast);
  Activation q = be->alloc_activation(kRows, kHeads * kHeadDim), nk = be->alloc_activation(kRows, kKvDim),
             nv = be->alloc_activation(kRows, kKvDim), out = be->alloc_activation(kRows, kHeads * kHeadDim);
  be->write_rows(q, half_values(3, int64_t{kRows} * kHeads * kHeadDim));
  be->write_rows(nk, half_values(4, int64_t{kRows} * kKvDim));
  be->write_rows(nv, half_values(5, int64_t{kRows} * kKvDim));
  be->begin_step(b, *kv);
  kv->store(0, nk, nv);
  be->attention(0, q, AttentionShape{kHeads, kKvHeads, kHeadDim, 1.0f / std::sqrt(float{kHeadDim}), 0.0f, 0}, out);
  be->finish_step();
  r.out = be->read_rows(out, kRows);
  kv->swap_slots({{3, 250}, {17, 301}});
  kv->move_slots({{5, 302}, {302, 0}});
  r.keys = kv->read_keys(0, {0, 3, 5, 17, 250, 301, 302, 303});
  kv.reset();
  return r;
}

TEST(HostKvCache, AnF16CacheHoldsHalvesAndGivesTheBitsOfTheValuesItRounded) {
  const CacheRun f32 = attend(KvCacheType::F32), f16 = attend(KvCacheType::F16);
  EXPECT_EQ(f16.cache_bytes * 2, f32.cache_bytes);
  EXPECT_EQ(f32.cache_bytes, uint64_t{512} * 2 * kKvDim * sizeof(float));
  ASSERT_EQ(f16.out.size(), f32.out.size());
  EXPECT_EQ(std::memcmp(f16.out.data(), f32.out.data(), f32.out.size() * sizeof(float)), 0);
  EXPECT_EQ(f16.keys, f32.keys);
  // Not all zero: the values were stored and read back.
  EXPECT_NE(f32.keys, std::vector<float>(f32.keys.size(), 0.0f));
}

}  // namespace
}  // namespace fafo
