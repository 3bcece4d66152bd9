#include "backend/vulkan/product_tuning.h"

#include <cstdio>
#include <map>

#include "backend/vulkan/backend_settings.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/weight_kernels.h"
#include "fafo/device_error.h"
#include "fafo/progress.h"

namespace fafo::vulkan {

ProductTuning::ProductTuning(const Context& context, WeightKernels& kernels, const BackendSettings& settings)
    : kernels_(kernels),
      keep_(settings.keep_tuning),
      dir_(settings.keep_tuning ? settings.tuning_dir : "."),
      device_(context.device_name()) {
  const VkPhysicalDeviceProperties& p = context.properties();
  tuning_ = MatmulTuning(dir_, tuning_device_key(context.device_name(), p.vendorID, p.deviceID, p.driverVersion));
  if (keep_ && !settings.tune_again) {
    if (const std::string why = tuning_.load(); !why.empty())
      std::fprintf(stderr, "fafo: Vulkan tuning: %s; measuring again\n", why.c_str());
  }
  tuner_ = std::make_unique<MatmulTuner>(context, kernels_);
  kernels_.set_tuning(&tuning_);
  kernels_.collect_untuned(true);
}

void ProductTuning::stop(const std::string& why) {
  std::fprintf(stderr, "fafo: Vulkan tuning stopped: %s\n", why.c_str());
  tuner_.reset();
  kernels_.collect_untuned(false);
  (void)kernels_.take_untuned();
}

void ProductTuning::measure_new_shapes() {
  if (!tuner_) return;
  const std::vector<WeightKernels::Untuned> todo = kernels_.take_untuned();
  if (todo.empty()) return;
  std::vector<TunedShape> shapes;
  for (const WeightKernels::Untuned& u : todo) shapes.push_back(u.shape);
  std::map<TunedShape, RowChoice> measured;
  try {
    kernels_.prepare_candidates(shapes);  // their pipelines, on several threads
    ProgressTask progress("tuning Vulkan products for " + device_ + " (" + std::to_string(todo.size()) +
                              " new shape" + (todo.size() == 1 ? "" : "s") + ")",
                          todo.size());
    for (const WeightKernels::Untuned& u : todo) {
      measured[u.shape] = tuner_->tune(u.shape, u.weights);
      tuning_.set(u.shape, measured[u.shape]);
      progress.advance();
    }
  } catch (const DeviceError& e) {
    if (e.kind() == DeviceError::Kind::Lost) throw;
    stop(e.what());
  } catch (const std::exception& e) {
    stop(e.what());
  }
  if (keep_ && !measured.empty()) {
    MatmulTuning kept(dir_, tuning_.device_key());
    (void)kept.load();  // an unreadable file is replaced
    for (const auto& [shape, c] : measured) kept.set(shape, c);
    if (const std::string why = kept.store(); !why.empty())
      std::fprintf(stderr, "fafo: Vulkan tuning not kept: %s\n", why.c_str());
  }
}

std::vector<std::string> ProductTuning::lines() const {
  std::vector<std::string> out;
  for (const auto& [shape, c] : tuning_.choices()) {
    char head[160];
    std::snprintf(head, sizeof head, ": %u rows per workgroup (default %u), %.2fx;", c.rows, c.default_rows, c.gain());
    std::string line = shape.text() + head;
    for (const CandidateTiming& t : c.candidates) {
      char one[64];
      std::snprintf(one, sizeof one, " %u: %.3f ms (spread %.2f)", t.rows, t.median() * 1e3, t.spread());
      line += one;
    }
    out.push_back(line);
  }
  return out;
}

}  // namespace fafo::vulkan
