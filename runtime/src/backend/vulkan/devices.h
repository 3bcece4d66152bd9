// The optional Vulkan features fafo's kernels may use, detected at run time. Every
// kernel has a portable path that needs none of them; a feature is used only when the
// device has it and the user did not turn it off.
//
// FAFO_VULKAN_FEATURES (read when a Context is created; ContextOptions::features
// overrides it) restricts what is used: a comma list applied left to right, starting
// from `all`:
//     all                 every feature the device has (the default)
//     portable, none      no optional feature at all
//     -WORD               not this feature
//     WORD, +WORD         this feature too (when the device has it)
// with WORD one of
//     subgroup    subgroup shuffle with full subgroups: the split-rows matmul reduces
//                 its 32 lane sums in registers (shaders/matmul.comp), same bits
//     fp16        shaderFloat16            (enabled; no kernel uses it yet)
//     storage16   storageBuffer16BitAccess: attention reads an f16 KV cache as
//                 float16_t where a start-up probe finds the halves widened exactly
//                 (shaders/attention.comp STORAGE16=1), else it unpacks 32-bit words
//     storage8    storageBuffer8BitAccess  (enabled; no kernel uses it yet)
//     int8        shaderInt8               (enabled; no kernel uses it yet)
//     dot         shaderIntegerDotProduct: the split-rows integer products sum their
//                 bytes with OpSDot (shaders/int_units.glsl DOT4, tools/spirv_dot4.py),
//                 the same integers as the plain arithmetic otherwise
//     matrix      VK_NV_cooperative_matrix with 8-bit integer matrices (needs int8 too):
//                 the integer products of steps over 8 tokens in matrix tiles
//                 (shaders/matmul_tiles.comp), the same bits as without
// e.g. `portable`, `-subgroup`, `portable,subgroup`. Anything else is an error naming
// the accepted words. VK_KHR_cooperative_matrix is only detected: this build's glslang
// cannot compile its shaders.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <vulkan/vulkan.h>

namespace fafo::vulkan {

// Optional features of one device: what it supports (detect_device_features) or what a
// Context enabled for its kernels (select_features).
struct DeviceFeatures {
  uint32_t subgroup_size = 0;        // the device's default subgroup size (0: unknown)
  bool subgroup_shuffle = false;     // basic + shuffle operations in compute shaders
  bool subgroup_arithmetic = false;  // basic + arithmetic operations in compute shaders
  bool full_subgroups = false;       // computeFullSubgroups (Vulkan 1.3, or VK_EXT_subgroup_size_control)
  bool storage_16bit = false;        // storageBuffer16BitAccess
  bool storage_8bit = false;         // storageBuffer8BitAccess
  bool shader_float16 = false;       // shaderFloat16 (fp16 arithmetic)
  bool shader_int8 = false;          // shaderInt8
  bool integer_dot_product = false;  // shaderIntegerDotProduct (Vulkan 1.3, or VK_KHR_shader_integer_dot_product)
  bool cooperative_matrix = false;   // VK_KHR/NV_cooperative_matrix present (enabled: int8_matrix)
  // VK_NV_cooperative_matrix's cooperativeMatrix with the 8-bit shape of the matrix tiles
  // (signed 8-bit A and B, 32-bit C and result, kInt8MatrixShape, subgroup scope) and a
  // float32 matrix of its M x N, in compute shaders, with shaderInt8, vulkanMemoryModel
  // and 32-lane subgroups, which the tiles' shader needs.
  bool int8_matrix = false;

  // Whether the subgroup split-rows matmul can run: shuffles, and full subgroups
  // required at pipeline creation, which makes the shader's lane numbering dense (it
  // numbers invocations by subgroup, so it needs no assumption on how the
  // implementation maps local invocations to subgroups). Partial subgroups, possible
  // without that guarantee, would leave lanes unnumbered: then the portable path runs.
  bool subgroup_matmul() const { return subgroup_shuffle && full_subgroups && subgroup_size >= 2; }
};

// Which optional features a Context may use (FAFO_VULKAN_FEATURES).
struct FeatureSelection {
  bool subgroup = true;
  bool fp16 = true;
  bool storage16 = true;
  bool storage8 = true;
  bool int8 = true;
  bool dot = true;
  bool matrix = true;
};

// The cooperative-matrix shape (M x N x K) of shaders/matmul_tiles.comp's fragments.
struct MatrixShape {
  uint32_t m, n, k;
};
inline constexpr MatrixShape kInt8MatrixShape{16, 8, 32};

// Parses a FAFO_VULKAN_FEATURES value (grammar above). Throws std::runtime_error naming
// the accepted words for anything else.
FeatureSelection parse_feature_selection(std::string_view spec);

// Whether the device offers the extension `name`.
bool has_device_extension(VkPhysicalDevice device, const char* name);

// Per memory heap, the bytes this process may still allocate there by the driver's
// budget (VK_EXT_memory_budget: heapBudget less heapUsage, what other programs use
// counted); empty where the device does not offer the extension.
std::vector<uint64_t> heap_budget_free(VkPhysicalDevice device);

// What the device supports. `api_version` is the version the device is used at (the
// lower of the instance's and the device's): 1.3 features are read only from 1.3 on.
// `instance` is the device's (for the cooperative-matrix shapes' query).
DeviceFeatures detect_device_features(VkInstance instance, VkPhysicalDevice device, uint32_t api_version);

// The detected features restricted to the selection: what a Context enables.
DeviceFeatures select_features(const DeviceFeatures& detected, const FeatureSelection& selection);

// Part of the backend description: the optional features enabled and those detected
// but not used, with why, e.g. "optional features: subgroup shuffle (8 lanes, for the
// split-rows matmul); ...".
std::string describe_features(const DeviceFeatures& enabled, const DeviceFeatures& detected);

}  // namespace fafo::vulkan
