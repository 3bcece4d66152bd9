// The Vulkan devices this machine offers, as `fafo devices` lists them.
// Available in every build: without Vulkan support compiled in, or without a Vulkan
// loader or driver at run time, list_vulkan_devices() returns an empty list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fafo {

struct VulkanMemoryHeap {
  uint64_t size = 0;          // bytes
  bool device_local = false;  // VK_MEMORY_HEAP_DEVICE_LOCAL_BIT
  uint64_t free = 0;          // what the driver's budget leaves this process (VK_EXT_memory_budget)
  bool free_known = false;    // whether the device offers that extension
};

struct VulkanDeviceInfo {
  uint32_t index = 0;       // position in vkEnumeratePhysicalDevices order (--device N)
  std::string name;         // deviceName
  std::string type;         // "integrated", "discrete", "virtual", "cpu" or "other"
  std::string driver;       // driver name and info (VK_KHR_driver_properties), or the vendor id
  std::string api_version;  // "major.minor.patch"
  uint32_t vendor_id = 0;
  uint32_t device_id = 0;
  std::vector<VulkanMemoryHeap> heaps;
  uint64_t max_storage_buffer_range = 0;  // bytes
  uint32_t max_compute_workgroup_invocations = 0;
  uint32_t max_push_constants_size = 0;

  // Optional features (a portable path needs none of them).
  bool storage_16bit = false;  // storageBuffer16BitAccess
  bool storage_8bit = false;   // storageBuffer8BitAccess
  bool shader_float16 = false;
  bool shader_int8 = false;
  uint32_t subgroup_size = 0;          // 0 when unknown
  bool subgroup_in_compute = false;    // subgroup operations supported in compute shaders
  std::vector<std::string> subgroup_ops;  // "basic", "vote", "arithmetic", "ballot", "shuffle", ...
  bool integer_dot_product = false;    // VK_KHR_shader_integer_dot_product (or Vulkan 1.3 feature)
  bool cooperative_matrix = false;     // VK_KHR_cooperative_matrix or VK_NV_cooperative_matrix present
  bool int8_matrix = false;            // the 8-bit shape fafo's matrix tiles use (VK_NV_cooperative_matrix)
  // The products' rows per workgroup kept for this device, driver and build (`fafo tune`):
  // "12 product shapes (FILE)", "none kept yet", or why the kept file is not used.
  std::string tuning;
  // Which of them fafo's kernels use on this device and why the others are not
  // (FAFO_VULKAN_FEATURES applied), as the backend description says it.
  std::string features_in_use;
};

// Every Vulkan device, in enumeration order; empty when Vulkan is unavailable.
std::vector<VulkanDeviceInfo> list_vulkan_devices();

}  // namespace fafo
