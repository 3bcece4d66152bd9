// What a Vulkan backend does, settled once from its options (VulkanBackendOptions) and
// the environment (FAFO_VULKAN_*; FAFO_VULKAN_VALIDATION and FAFO_VULKAN_FEATURES are the
// context's, read where it is made), so the backend's steps read flags. Every
// setting gives the same results as its alternatives except where its comment in
// vulkan_backend.h says otherwise (integer products round the activations); they exist
// to measure what each brings and to test one path on a device that defaults to another.
#pragma once

#include <filesystem>

#include "backend/vulkan/kernels.h"
#include "backend/vulkan/vulkan_backend.h"
#include "backend/vulkan/weight_kernels.h"

namespace fafo::vulkan {

struct BackendSettings {
  bool fuse_qkv = true;        // FAFO_VULKAN_FUSE=0: off
  bool fuse_norm = true;       // products of up to 8 tokens fuse their RMSNorm
  bool fuse_norm_off = false;  // turned off (not left off by default): integer products' too
  bool replay = true;          // FAFO_VULKAN_REPLAY=0: off
  bool int8 = false;           // integer products (WeightKernels::has_int8's formats)
  MatrixTilesUse tiles = MatrixTilesUse::Auto;  // Off where int8 is off
  Kernels::AttentionArgs::Mapping attention = Kernels::AttentionArgs::Mapping::Auto;
  bool tune = false;        // tune the products' rows per workgroup
  bool tune_again = false;  // measure every shape again (the kept choices unread)
  bool keep_tuning = false;             // keep the choices in tuning_dir
  std::filesystem::path tuning_dir;     // where (when keep_tuning)
};

// Throws std::runtime_error naming the variable and its accepted values for a value of
// FAFO_VULKAN_TILES, FAFO_VULKAN_ATTENTION or FAFO_VULKAN_TUNE it does not know.
BackendSettings resolve_settings(const VulkanBackendOptions& options, bool cpu_device);

}  // namespace fafo::vulkan
