#include "backend/vulkan/matmul_tuner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "backend/vulkan/buffer.h"
#include "backend/vulkan/command_sequence.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/kernels.h"

namespace fafo::vulkan {

std::vector<CandidateTiming> time_candidates(const std::vector<uint32_t>& candidates, const BatchTimer& timer) {
  std::vector<CandidateTiming> out;
  for (const uint32_t rows : candidates) {
    (void)timer(rows, 1);  // warm-up: the pipeline's first use
    // Batches of about 2 ms (at least 4 dispatches, at most 64).
    const double one = std::max(timer(rows, 4), 1e-9);
    const uint32_t count = static_cast<uint32_t>(std::clamp(std::ceil(2e-3 / one), 4.0, 64.0));
    CandidateTiming best{rows, {}};
    for (int attempt = 0; attempt < kAttempts; ++attempt) {
      CandidateTiming t{rows, {}};
      for (int i = 0; i < kSamples; ++i) t.samples.push_back(timer(rows, count));
      if (best.samples.empty() || t.spread() < best.spread()) best = t;
      if (best.spread() <= kMaxSpread) break;
    }
    out.push_back(std::move(best));
  }
  return out;
}

MatmulTuner::MatmulTuner(const Context& context, const WeightKernels& kernels) : context_(context), kernels_(kernels) {}

RowChoice MatmulTuner::tune(const TunedShape& shape, const std::vector<const Buffer*>& weights) const {
  if (weights.empty()) throw std::invalid_argument("MatmulTuner::tune: no weight buffer for " + shape.text());
  const WeightShaderKey& key = shape.key;
  const uint32_t T = key.tile;
  const uint32_t x_stride = key.int8 ? Kernels::q8_row_words(shape.cols) : shape.cols;
  Buffer x(context_, uint64_t{T} * x_stride * 4, Memory::Device);
  Buffer out(context_, uint64_t{T} * shape.rows * 4, Memory::Device);
  Buffer gain(context_, uint64_t{shape.cols} * 4, Memory::Device);
  {
    CommandSequence seq(context_);
    seq.zero(x);
    seq.zero(gain);
    seq.submit_and_wait();
  }
  MatmulVariant v;
  v.mapping = key.kind == WeightShaderKey::Kind::WholeRows ? MatmulMapping::WholeRows : MatmulMapping::SplitRows;
  if (key.kind == WeightShaderKey::Kind::SplitRows) {
    v.tile = T;
    v.reduction = key.subgroup ? MatmulReduction::Subgroup : MatmulReduction::Portable;
    if (key.int8) v.dot = key.dot;
  }
  v.int8 = key.int8;
  const MatmulShape s{T, shape.rows, shape.cols, x_stride, shape.rows, 0};
  const InputNorm norm = key.norm ? InputNorm{&gain, 1e-5f} : InputNorm{};
  const BatchTimer timer = [&](uint32_t rows, uint32_t count) {
    v.rows_per_group = rows;
    CommandSequence seq(context_, std::max<uint32_t>(count, 1));
    for (uint32_t i = 0; i < count; ++i) {
      const Buffer& w = *weights[i % weights.size()];
      if (key.gated)
        kernels_.matmul_gated(seq, shape.type, w, x, out, s, v, norm);
      else
        kernels_.matmul(seq, shape.type, w, x, out, s, v, norm);
    }
    const auto start = std::chrono::steady_clock::now();
    seq.submit_and_wait();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    return took.count() / count;
  };
  const std::vector<CandidateTiming> timings = time_candidates(kernels_.row_candidates(shape), timer);
  const double bytes = static_cast<double>(WeightKernels::weight_bytes(shape.type, shape.rows, shape.cols)) *
                       (key.gated ? 2.0 : 1.0);
  return choose_rows(timings, kernels_.default_rows(shape), bytes / kImpossibleBytesPerSecond);
}

}  // namespace fafo::vulkan
