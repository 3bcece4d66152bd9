// Measures the rows-per-workgroup candidates of product shapes on the device
// (matmul_tuning.h says how the choice is made and kept).
//
// A shape is measured on the model's weight buffers of that shape (up to
// WeightKernels::kMaxTuningWeights of them, in turn, so that each dispatch reads its
// weights from memory as a step does rather than from a cache holding one matrix), with
// inputs of zeros (the time of a product does not depend on its values) in scratch
// buffers: for each candidate, a batch of dispatches is timed on the host clock around
// its submission (recording included, the same for every candidate), the batch sized
// so that it runs for about 2 ms (4 to 64 dispatches); kSamples batches give the
// candidate's samples. A candidate whose samples spread by more than
// kMaxSpread is measured again, up to kAttempts times in all, keeping its steadiest set.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/vulkan/matmul_tuning.h"
#include "backend/vulkan/weight_kernels.h"

namespace fafo::vulkan {

class Buffer;
class Context;

inline constexpr int kSamples = 5;
inline constexpr int kAttempts = 3;
// A bandwidth no device has: a product faster than reading its weights at this speed
// was not measured (choose_rows' floor).
inline constexpr double kImpossibleBytesPerSecond = 20e12;

// Times one batch: the seconds per dispatch of `count` dispatches of `rows` rows per
// workgroup (the measurement: Tuner's own, or a test's).
using BatchTimer = std::function<double(uint32_t rows, uint32_t count)>;

// The candidates' timings through `timer`, each re-measured while it spreads too much.
std::vector<CandidateTiming> time_candidates(const std::vector<uint32_t>& candidates, const BatchTimer& timer);

class MatmulTuner {
 public:
  MatmulTuner(const Context& context, const WeightKernels& kernels);

  // Measures `shape` (its weights, as WeightKernels::take_untuned noted them: at least
  // one) and chooses its rows per workgroup. Throws VulkanError where the device fails.
  RowChoice tune(const TunedShape& shape, const std::vector<const Buffer*>& weights) const;

 private:
  const Context& context_;
  const WeightKernels& kernels_;
};

}  // namespace fafo::vulkan
