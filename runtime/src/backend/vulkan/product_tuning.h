// A Vulkan backend's tuning of its products (VulkanBackendOptions::tune): the choices
// its products follow (matmul_tuning.h), the shapes its steps ran without one measured
// after the step (matmul_tuner.h), and the cache file they are merged into.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "backend/vulkan/matmul_tuner.h"
#include "backend/vulkan/matmul_tuning.h"

namespace fafo::vulkan {

class Context;
class WeightKernels;
struct BackendSettings;

class ProductTuning {
 public:
  // Reads the kept choices (unless settings.tune_again) and makes `kernels` follow them
  // and note the shapes without one. `kernels` must outlive this.
  ProductTuning(const Context& context, WeightKernels& kernels, const BackendSettings& settings);
  ProductTuning(const ProductTuning&) = delete;  // `kernels` holds a pointer to tuning_
  ProductTuning& operator=(const ProductTuning&) = delete;

  // Measures the shapes noted since the last call and keeps their choices (merged into
  // what the file holds now: other models' shapes stay). A failure that leaves the
  // device usable is said once on stderr and ends the tuning (the steps run with the
  // choices made so far); a lost device (fafo::DeviceError) is rethrown.
  void measure_new_shapes();
  // One line per choice held: "SHAPE: R rows per workgroup (default D), G x; R: T ms
  // (spread S) ...".
  std::vector<std::string> lines() const;
  // The file the choices are kept in ("" when they are not kept).
  std::string file() const { return keep_ ? tuning_.file().string() : std::string(); }
  bool active() const { return tuner_ != nullptr; }

 private:
  void stop(const std::string& why);

  WeightKernels& kernels_;
  MatmulTuning tuning_;
  std::unique_ptr<MatmulTuner> tuner_;  // null once stopped
  bool keep_ = false;
  std::filesystem::path dir_;
  std::string device_;  // its name, for the progress line
};

}  // namespace fafo::vulkan
