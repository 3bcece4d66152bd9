// The cpu backend's KV cache (runtime/src/backend/host/host_kv_cache.h): an F16 cache
// holds fp16 words (half an F32 cache's memory), a Q8_0 / Q4_0 cache GGUF blocks, and each
// computes with exactly the values it stored: attention (FULL rows over a permuted order,
// COMPRESSED rows over a region), the keys a policy reads and the slots' exchanges and
// moves give the bits of an F32 cache that holds those values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/simd_kv_rows.h"
#include "backend/cpu/simd_matmul.h"
#include "backend/host/host_kv_cache.h"
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

// `values` (rows of kKvDim) as a cache of `type` holds them: each row quantized to its
// blocks and back (F32 and F16 inputs here are already what those caches hold).
std::vector<float> as_stored(KvCacheType type, std::vector<float> values) {
  if (!kv_cache_type_quantized(type)) return values;
  const TensorType blocks = type == KvCacheType::Q8_0 ? TensorType::Q8_0 : TensorType::Q4_0;
  std::vector<uint8_t> packed(tensor_row_bytes(blocks, kKvDim));
  for (size_t r = 0; r < values.size() / kKvDim; ++r) {
    quantize_row(blocks, values.data() + r * kKvDim, packed.data(), kKvDim);
    dequantize_row(blocks, packed.data(), values.data() + r * kKvDim, kKvDim);
  }
  return values;
}

// kRows rows (every other one COMPRESSED) attending over kPast committed entries whose
// layout holds a region of 40 chosen entries (FULL rows then visit a permuted order),
// then the keys of a few slots after an exchange and a move. The cache is of `type`, its
// keys and values `stored_as` would hold them.
CacheRun attend(KvCacheType type, KvCacheType stored_as) {
  std::unique_ptr<Backend> be = make_backend(BackendSpec{"cpu", "", 2});
  const uint64_t before = memory_in_use(*be);
  std::unique_ptr<KvCache> kv = be->create_kv_cache(KvCacheShape{1, 512, kKvDim, type});
  CacheRun r;
  r.cache_bytes = memory_in_use(*be) - before;
  const std::vector<float> k = as_stored(stored_as, half_values(1, int64_t{kPast} * kKvDim)),
                           v = as_stored(stored_as, half_values(2, int64_t{kPast} * kKvDim));
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
  be->write_rows(nk, as_stored(stored_as, half_values(4, int64_t{kRows} * kKvDim)));
  be->write_rows(nv, as_stored(stored_as, half_values(5, int64_t{kRows} * kKvDim)));
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
  const CacheRun f32 = attend(KvCacheType::F32, KvCacheType::F16), f16 = attend(KvCacheType::F16, KvCacheType::F16);
  EXPECT_EQ(f16.cache_bytes * 2, f32.cache_bytes);
  EXPECT_EQ(f32.cache_bytes, uint64_t{512} * 2 * kKvDim * sizeof(float));
  ASSERT_EQ(f16.out.size(), f32.out.size());
  EXPECT_EQ(std::memcmp(f16.out.data(), f32.out.data(), f32.out.size() * sizeof(float)), 0);
  EXPECT_EQ(f16.keys, f32.keys);
  // Not all zero: the values were stored and read back.
  EXPECT_NE(f32.keys, std::vector<float>(f32.keys.size(), 0.0f));
}

// A block cache stores what it is given as its blocks, once: the F32 cache given the
// blocks' values computes the same bits (the quantized cache's store of the step's rows
// included), with 34 or 18 bytes for each 128 of f32's.
TEST(HostKvCache, BlockCachesComputeWithTheirBlocksValues) {
  const CacheRun q8 = attend(KvCacheType::Q8_0, KvCacheType::F32), f32_of_q8 = attend(KvCacheType::F32, KvCacheType::Q8_0);
  const CacheRun q4 = attend(KvCacheType::Q4_0, KvCacheType::F32), f32_of_q4 = attend(KvCacheType::F32, KvCacheType::Q4_0);
  EXPECT_EQ(q8.cache_bytes * 128, f32_of_q8.cache_bytes * 34);
  EXPECT_EQ(q4.cache_bytes * 128, f32_of_q4.cache_bytes * 18);
  ASSERT_EQ(q8.out.size(), f32_of_q8.out.size());
  EXPECT_EQ(std::memcmp(q8.out.data(), f32_of_q8.out.data(), q8.out.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(q4.out.data(), f32_of_q4.out.data(), q4.out.size() * sizeof(float)), 0);
  EXPECT_EQ(q8.keys, f32_of_q8.keys);
  EXPECT_EQ(q4.keys, f32_of_q4.keys);
  EXPECT_NE(q8.keys, q4.keys);  // the blocks differ: the comparison sees their values
}

// A slice of a block row (an attention item's head) widens to the values read_keys gives
// for the whole row: slices inside a block (heads of 16), across blocks, and across the
// 16-block chunks Rows::widen decodes at a time (576 values: 18 blocks).
TEST(HostKvCache, ASliceOfABlockRowIsThatPartOfTheRow) {
  constexpr int32_t kWide = 576;
  std::unique_ptr<Backend> be = make_backend(BackendSpec{"cpu", "", 2});
  for (KvCacheType type : {KvCacheType::Q8_0, KvCacheType::Q4_0, KvCacheType::F16}) {
    std::unique_ptr<KvCache> kv = be->create_kv_cache(KvCacheShape{1, 8, kWide, type});
    const std::vector<float> k = half_values(6, int64_t{3} * kWide), v = half_values(7, int64_t{3} * kWide);
    kv->write(0, 2, 3, k.data(), v.data());
    auto* host = dynamic_cast<host::HostKvCache*>(kv.get());
    ASSERT_NE(host, nullptr);
    const std::vector<float> rows = kv->read_keys(0, {2, 3, 4});
    for (const auto& [first, n] : {std::pair{0, 16}, {16, 16}, {24, 16}, {500, 40}, {496, 80}, {0, kWide}}) {
      std::vector<float> part(static_cast<size_t>(n));
      host->keys(0).widen(3, first, n, part.data());
      EXPECT_EQ(part, std::vector<float>(rows.begin() + kWide + first, rows.begin() + kWide + first + n))
          << kv_cache_type_name(type) << " [" << first << ", " << first + n << ")";
    }
  }
}

void expect_vector_widening_gives_the_rows_floats() {
  std::unique_ptr<Backend> be = make_backend(BackendSpec{"cpu", "", 2});
  constexpr int32_t kWide = 1024;
  std::vector<float> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = fp16_to_fp32(static_cast<uint16_t>(h));
  for (KvCacheType type : {KvCacheType::F16, KvCacheType::Q8_0, KvCacheType::Q4_0}) {
    std::unique_ptr<KvCache> kv = be->create_kv_cache(KvCacheShape{1, 64, kWide, type});
    std::vector<float> values = all;
    if (type != KvCacheType::F16)  // finite values of every magnitude for the blocks
      for (size_t i = 0; i < values.size(); ++i) values[i] = half_value(9, static_cast<int64_t>(i)) * std::ldexp(1.0f, static_cast<int>(i / 32 % 40) - 20);
    kv->write(0, 0, 64, values.data(), values.data());
    auto* host = dynamic_cast<host::HostKvCache*>(kv.get());
    ASSERT_NE(host, nullptr);
    const std::vector<int32_t> slots = {5, 0, 63, 17, 17, 40};
    for (const auto& [first, n] : {std::pair{0, kWide}, {64, 64}, {960, 64}, {16, 24}, {3, 200}}) {
      std::vector<float> got(slots.size() * static_cast<size_t>(n)), want(got.size());
      cpu::widen_kv_rows_simd(host->keys(0), slots.data(), static_cast<int32_t>(slots.size()), first, n, got.data());
      for (size_t j = 0; j < slots.size(); ++j) host->keys(0).widen(slots[j], first, n, want.data() + j * static_cast<size_t>(n));
      for (size_t i = 0; i < got.size(); ++i) {
        if (std::isnan(got[i]) && std::isnan(want[i])) continue;
        ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
            << kv_cache_type_name(type) << " [" << first << ", " << first + n << ") value " << i << ": " << got[i] << " vs " << want[i];
      }
    }
  }
}

// The F16 rows widen every one of the 65536 half bit patterns (zeros, subnormals,
// normals, infinities, NaNs) to fp16_to_fp32's float.
TEST(HostKvCache, AnF16RowWidensEveryHalfAsTheRuntimeDoes) {
  std::unique_ptr<Backend> be = make_backend(BackendSpec{"cpu", "", 2});
  std::unique_ptr<KvCache> kv = be->create_kv_cache(KvCacheShape{1, 64, 1024, KvCacheType::F16});
  std::vector<float> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = fp16_to_fp32(static_cast<uint16_t>(h));
  kv->write(0, 0, 64, all.data(), all.data());
  auto* host = dynamic_cast<host::HostKvCache*>(kv.get());
  ASSERT_NE(host, nullptr);
  std::vector<float> row(1024);
  for (int32_t slot = 0; slot < 64; ++slot) {
    host->values(0).widen(slot, 0, 1024, row.data());
    for (uint32_t i = 0; i < 1024; ++i) {
      const uint32_t h = static_cast<uint32_t>(slot) * 1024 + i;
      if (std::isnan(all[h])) {
        EXPECT_TRUE(std::isnan(row[i])) << std::hex << h;
      } else {
        EXPECT_EQ(std::memcmp(&row[i], &all[h], sizeof(float)), 0) << std::hex << h << ": " << row[i] << " vs " << all[h];
      }
    }
  }
}

// The cpu backend's vector widening (backend/cpu/simd_kv_rows.h) gives Rows::widen's
// bits on every instruction set of the build: every half pattern (infinities and NaNs
// too, which an emulated half conversion gets wrong), and Q8_0 / Q4_0 rows as whole
// blocks (a head of 64 at 64) and as slices inside and across blocks, for slots in any
// order.
TEST(HostKvCache, VectorWideningGivesTheRowsFloats) {
  for (const std::string& target : cpu::simd_targets()) {
    SCOPED_TRACE(target);
    cpu::use_simd_target(target);
    expect_vector_widening_gives_the_rows_floats();
  }
  cpu::use_simd_target("");
}

}  // namespace
}  // namespace fafo
