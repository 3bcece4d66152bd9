// The (cos, sin) tables of a step's RoPE: one per distinct parameter set in a step (the
// queries and keys of a layer share it, and so does every layer with the same RoPE),
// angles from RopeParams::angle as the reference computes them, each times the
// parameters' attn_factor. A table of an earlier step gives its memory to a new one.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "fafo/backend.h"
#include "fafo/step_batch.h"
#include "ops_kv_cache.h"

namespace fafo::cuda {

template <typename Device>
class RopeTables {
 public:
  // The table of `p` for the positions of `batch`, the step counted `step`: made and
  // uploaded the first time the step asks for these parameters.
  const float* get(Device& device, const RopeParams& p, const StepBatch& batch, uint64_t step) {
    for (Table& r : tables_)
      if (r.step == step && same(r.params, p)) return r.data;
    const uint32_t n_pairs = static_cast<uint32_t>(p.n_dims / 2);
    std::vector<float> table(static_cast<size_t>(batch.size()) * n_pairs * 2);
    for (int32_t t = 0; t < batch.size(); ++t)
      for (uint32_t i = 0; i < n_pairs; ++i) {
        const float theta = p.angle(batch.positions()[static_cast<size_t>(t)], static_cast<int32_t>(i));
        table[(static_cast<size_t>(t) * n_pairs + i) * 2] = std::cos(theta) * p.attn_factor;
        table[(static_cast<size_t>(t) * n_pairs + i) * 2 + 1] = std::sin(theta) * p.attn_factor;
      }
    Table* slot = nullptr;
    for (Table& r : tables_)
      if (r.step != step) slot = &r;  // a table of an earlier step: its memory is free again
    if (!slot) slot = &tables_.emplace_back();
    slot->params = p;
    slot->step = step;
    slot->data = slot->memory.put(device, table);
    return slot->data;
  }

 private:
  static bool same(const RopeParams& a, const RopeParams& b) {
    return a.n_dims == b.n_dims && a.freq_base == b.freq_base && a.freq_scale == b.freq_scale &&
           a.freq_factors == b.freq_factors && a.attn_factor == b.attn_factor;
  }
  struct Table {
    RopeParams params;
    uint64_t step = 0;
    Staging<Device> memory;
    const float* data = nullptr;
  };
  std::vector<Table> tables_;
};

}  // namespace fafo::cuda
