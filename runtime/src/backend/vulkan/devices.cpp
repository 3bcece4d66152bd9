// list_vulkan_devices(): what `fafo devices` prints. Never throws for a missing
// driver or device: Vulkan being unavailable is an empty list.
#include <cstring>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "fafo/vulkan_devices.h"

namespace fafo {

namespace {

std::string type_name(VkPhysicalDeviceType type) {
  switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "cpu";
    default:
      return "other";
  }
}

std::string version_string(uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
         std::to_string(VK_API_VERSION_PATCH(v));
}

std::vector<std::string> subgroup_op_names(VkSubgroupFeatureFlags flags) {
  const std::pair<VkSubgroupFeatureFlagBits, const char*> names[] = {
      {VK_SUBGROUP_FEATURE_BASIC_BIT, "basic"},
      {VK_SUBGROUP_FEATURE_VOTE_BIT, "vote"},
      {VK_SUBGROUP_FEATURE_ARITHMETIC_BIT, "arithmetic"},
      {VK_SUBGROUP_FEATURE_BALLOT_BIT, "ballot"},
      {VK_SUBGROUP_FEATURE_SHUFFLE_BIT, "shuffle"},
      {VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT, "shuffle_relative"},
      {VK_SUBGROUP_FEATURE_CLUSTERED_BIT, "clustered"},
      {VK_SUBGROUP_FEATURE_QUAD_BIT, "quad"},
  };
  std::vector<std::string> out;
  for (const auto& [bit, name] : names)
    if (flags & bit) out.emplace_back(name);
  return out;
}

VulkanDeviceInfo describe(VkPhysicalDevice device, uint32_t index) {
  VulkanDeviceInfo info;
  info.index = index;

  uint32_t ext_count = 0;
  std::vector<VkExtensionProperties> exts;
  if (vkEnumerateDeviceExtensionProperties(device, nullptr, &ext_count, nullptr) == VK_SUCCESS) {
    exts.resize(ext_count);
    if (vkEnumerateDeviceExtensionProperties(device, nullptr, &ext_count, exts.data()) < 0) exts.clear();
    exts.resize(ext_count);
  }
  auto has_ext = [&](const char* name) {
    for (const VkExtensionProperties& e : exts)
      if (std::strcmp(e.extensionName, name) == 0) return true;
    return false;
  };

  VkPhysicalDeviceProperties base;
  vkGetPhysicalDeviceProperties(device, &base);
  const bool v12 = VK_API_VERSION_MAJOR(base.apiVersion) > 1 || VK_API_VERSION_MINOR(base.apiVersion) >= 2;
  const bool v13 = VK_API_VERSION_MAJOR(base.apiVersion) > 1 || VK_API_VERSION_MINOR(base.apiVersion) >= 3;

  // Properties: driver (1.2 core) and subgroups (1.1 core).
  VkPhysicalDeviceDriverProperties driver{};
  driver.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
  VkPhysicalDeviceSubgroupProperties subgroup{};
  subgroup.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
  VkPhysicalDeviceProperties2 props{};
  props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  props.pNext = &subgroup;
  if (v12) subgroup.pNext = &driver;
  vkGetPhysicalDeviceProperties2(device, &props);
  const VkPhysicalDeviceProperties& p = props.properties;

  info.name = p.deviceName;
  info.type = type_name(p.deviceType);
  info.api_version = version_string(p.apiVersion);
  info.vendor_id = p.vendorID;
  info.device_id = p.deviceID;
  if (v12 && driver.driverName[0] != '\0') {
    info.driver = driver.driverName;
    if (driver.driverInfo[0] != '\0') info.driver += std::string(" (") + driver.driverInfo + ")";
  } else {
    info.driver = "driver version " + std::to_string(p.driverVersion);
  }
  info.max_storage_buffer_range = p.limits.maxStorageBufferRange;
  info.max_compute_workgroup_invocations = p.limits.maxComputeWorkGroupInvocations;
  info.max_push_constants_size = p.limits.maxPushConstantsSize;
  info.subgroup_size = subgroup.subgroupSize;
  info.subgroup_in_compute = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
  info.subgroup_ops = subgroup_op_names(subgroup.supportedOperations);

  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(device, &mem);
  for (uint32_t h = 0; h < mem.memoryHeapCount; ++h)
    info.heaps.push_back({mem.memoryHeaps[h].size, (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0});

  // Features: the 1.1/1.2/1.3 feature structs, chained only where the device has them.
  if (v12) {
    VkPhysicalDeviceVulkan11Features f11{};
    f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
    VkPhysicalDeviceVulkan12Features f12{};
    f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    VkPhysicalDeviceVulkan13Features f13{};
    f13.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES;
    VkPhysicalDeviceFeatures2 features{};
    features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
    features.pNext = &f11;
    f11.pNext = &f12;
    if (v13) f12.pNext = &f13;
    vkGetPhysicalDeviceFeatures2(device, &features);
    info.storage_16bit = f11.storageBuffer16BitAccess;
    info.storage_8bit = f12.storageBuffer8BitAccess;
    info.shader_float16 = f12.shaderFloat16;
    info.shader_int8 = f12.shaderInt8;
    info.integer_dot_product = v13 && f13.shaderIntegerDotProduct;
  }
  info.integer_dot_product = info.integer_dot_product || has_ext("VK_KHR_shader_integer_dot_product");
  info.cooperative_matrix = has_ext("VK_KHR_cooperative_matrix") || has_ext("VK_NV_cooperative_matrix");
  return info;
}

}  // namespace

std::vector<VulkanDeviceInfo> list_vulkan_devices() {
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "fafo devices";
  app.apiVersion = VK_API_VERSION_1_3;
  VkInstanceCreateInfo create{};
  create.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  create.pApplicationInfo = &app;
  VkInstance instance = VK_NULL_HANDLE;
  if (vkCreateInstance(&create, nullptr, &instance) != VK_SUCCESS) return {};

  std::vector<VulkanDeviceInfo> out;
  uint32_t count = 0;
  if (vkEnumeratePhysicalDevices(instance, &count, nullptr) == VK_SUCCESS && count > 0) {
    std::vector<VkPhysicalDevice> devices(count);
    if (vkEnumeratePhysicalDevices(instance, &count, devices.data()) >= 0) {
      devices.resize(count);
      for (uint32_t i = 0; i < count; ++i) out.push_back(describe(devices[i], i));
    }
  }
  vkDestroyInstance(instance, nullptr);
  return out;
}

}  // namespace fafo
