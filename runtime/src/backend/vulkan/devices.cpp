// list_vulkan_devices(): what `fafo devices` prints. Never throws for a missing
// driver or device: Vulkan being unavailable is an empty list. Also the detection and
// selection of the optional features the kernels may use (devices.h), shared with
// Context so that both see a device the same way.
#include "backend/vulkan/devices.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <vulkan/vulkan.h>

#include "backend/vulkan/driver_files.h"
#include "backend/vulkan/matmul_tuning.h"
#include "fafo/cache_dir.h"
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

VulkanDeviceInfo describe(VkInstance instance, VkPhysicalDevice device, uint32_t index) {
  VulkanDeviceInfo info;
  info.index = index;

  VkPhysicalDeviceProperties base;
  vkGetPhysicalDeviceProperties(device, &base);
  const bool v12 = VK_API_VERSION_MAJOR(base.apiVersion) > 1 || VK_API_VERSION_MINOR(base.apiVersion) >= 2;

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
  const std::vector<uint64_t> budget_free = vulkan::heap_budget_free(device);
  for (uint32_t h = 0; h < mem.memoryHeapCount; ++h)
    info.heaps.push_back({mem.memoryHeaps[h].size, (mem.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0,
                          h < budget_free.size() ? budget_free[h] : 0, h < budget_free.size()});

  const vulkan::DeviceFeatures features = vulkan::detect_device_features(instance, device, p.apiVersion);
  info.storage_16bit = features.storage_16bit;
  info.storage_8bit = features.storage_8bit;
  info.shader_float16 = features.shader_float16;
  info.shader_int8 = features.shader_int8;
  // The extension alone counts here (fafo devices lists what a device offers).
  info.integer_dot_product = features.integer_dot_product || vulkan::has_device_extension(device, "VK_KHR_shader_integer_dot_product");
  info.cooperative_matrix = features.cooperative_matrix;
  info.int8_matrix = features.int8_matrix;
  if (const std::filesystem::path dir = default_cache_dir(); !dir.empty()) {
    vulkan::MatmulTuning kept(dir, vulkan::tuning_device_key(p.deviceName, p.vendorID, p.deviceID, p.driverVersion));
    const std::string why = kept.load();
    const size_t n = kept.choices().size();
    info.tuning = !why.empty() ? why
                  : n == 0     ? "none kept yet (fafo tune, or a GPU's first run of each shape)"
                               : std::to_string(n) + " product shape" + (n == 1 ? "" : "s") + " (" +
                                     kept.file().string() + ")";
  }
  // What a backend on this device would use, under FAFO_VULKAN_FEATURES when it is set.
  vulkan::FeatureSelection selection;
  if (const char* env = std::getenv("FAFO_VULKAN_FEATURES")) {
    try {
      selection = vulkan::parse_feature_selection(env);
    } catch (const std::exception& e) {
      info.features_in_use = e.what();
      return info;
    }
  }
  info.features_in_use = vulkan::describe_features(vulkan::select_features(features, selection), features);
  return info;
}

}  // namespace

std::vector<VulkanDeviceInfo> list_vulkan_devices() {
  vulkan::find_vulkan_drivers();
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
      for (uint32_t i = 0; i < count; ++i) out.push_back(describe(instance, devices[i], i));
    }
  }
  vkDestroyInstance(instance, nullptr);
  return out;
}

}  // namespace fafo

namespace fafo::vulkan {

bool has_device_extension(VkPhysicalDevice device, const char* name) {
  uint32_t count = 0;
  if (vkEnumerateDeviceExtensionProperties(device, nullptr, &count, nullptr) != VK_SUCCESS) return false;
  std::vector<VkExtensionProperties> exts(count);
  if (vkEnumerateDeviceExtensionProperties(device, nullptr, &count, exts.data()) < 0) return false;
  exts.resize(count);
  for (const VkExtensionProperties& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

std::vector<uint64_t> heap_budget_free(VkPhysicalDevice device) {
  if (!has_device_extension(device, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME)) return {};
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{};
  budget.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT;
  VkPhysicalDeviceMemoryProperties2 mem{};
  mem.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2;
  mem.pNext = &budget;
  vkGetPhysicalDeviceMemoryProperties2(device, &mem);
  std::vector<uint64_t> free(mem.memoryProperties.memoryHeapCount, 0);
  for (uint32_t h = 0; h < mem.memoryProperties.memoryHeapCount; ++h)
    free[h] = budget.heapBudget[h] > budget.heapUsage[h] ? budget.heapBudget[h] - budget.heapUsage[h] : 0;
  return free;
}

namespace {

bool at_least(uint32_t version, uint32_t minor) {
  return VK_API_VERSION_MAJOR(version) > 1 || VK_API_VERSION_MINOR(version) >= minor;
}

// The words of FAFO_VULKAN_FEATURES that name one feature, with its flag.
struct FeatureWord {
  const char* word;
  bool FeatureSelection::*flag;
};
constexpr FeatureWord kFeatureWords[] = {
    {"subgroup", &FeatureSelection::subgroup}, {"fp16", &FeatureSelection::fp16},
    {"storage16", &FeatureSelection::storage16}, {"storage8", &FeatureSelection::storage8},
    {"int8", &FeatureSelection::int8},         {"dot", &FeatureSelection::dot},
    {"matrix", &FeatureSelection::matrix},
};

// Whether the device's VK_NV_cooperative_matrix reports the tiles' 8-bit shape, and a
// 32-bit float matrix of the same rows and columns, in compute shaders.
bool has_int8_matrix_shape(VkInstance instance, VkPhysicalDevice device) {
  const auto get = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesNV>(
      vkGetInstanceProcAddr(instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesNV"));
  if (!get) return false;
  uint32_t count = 0;
  if (get(device, &count, nullptr) != VK_SUCCESS || count == 0) return false;
  std::vector<VkCooperativeMatrixPropertiesNV> shapes(count);
  for (VkCooperativeMatrixPropertiesNV& s : shapes) s.sType = VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV;
  if (get(device, &count, shapes.data()) < 0) return false;
  shapes.resize(count);
  // The shader's integer product, and its float fragments of the same M x N (its
  // accumulators and scales: a type the device must list too).
  bool int8 = false, float32 = false;
  for (const VkCooperativeMatrixPropertiesNV& s : shapes) {
    if (s.scope != VK_SCOPE_SUBGROUP_NV || s.MSize != kInt8MatrixShape.m || s.NSize != kInt8MatrixShape.n) continue;
    if (s.KSize == kInt8MatrixShape.k && s.AType == VK_COMPONENT_TYPE_SINT8_NV && s.BType == VK_COMPONENT_TYPE_SINT8_NV &&
        s.CType == VK_COMPONENT_TYPE_SINT32_NV && s.DType == VK_COMPONENT_TYPE_SINT32_NV)
      int8 = true;
    if (s.CType == VK_COMPONENT_TYPE_FLOAT32_NV || s.DType == VK_COMPONENT_TYPE_FLOAT32_NV) float32 = true;
  }
  return int8 && float32;
}

void set_all(FeatureSelection& s, bool on) {
  for (const FeatureWord& w : kFeatureWords) s.*w.flag = on;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

}  // namespace

FeatureSelection parse_feature_selection(std::string_view spec) {
  FeatureSelection selection;  // starts from `all`
  while (true) {
    const size_t comma = spec.find(',');
    const std::string_view item = trim(spec.substr(0, comma));
    if (item == "all") {
      set_all(selection, true);
    } else if (item == "portable" || item == "none") {
      set_all(selection, false);
    } else if (!item.empty()) {
      const bool on = item.front() != '-';
      const std::string_view name = item.front() == '-' || item.front() == '+' ? item.substr(1) : item;
      const FeatureWord* found = nullptr;
      for (const FeatureWord& w : kFeatureWords)
        if (name == w.word) found = &w;
      if (!found) {
        std::string words;
        for (const FeatureWord& w : kFeatureWords) words += std::string(words.empty() ? "" : ", ") + w.word;
        throw std::runtime_error("FAFO_VULKAN_FEATURES: unknown item \"" + std::string(item) +
                                 "\"; expected a comma list of all, portable, none, or a feature name with an "
                                 "optional - (off) or + (on): " + words);
      }
      selection.*found->flag = on;
    }
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
  return selection;
}

DeviceFeatures detect_device_features(VkInstance instance, VkPhysicalDevice device, uint32_t api_version) {
  DeviceFeatures f;
  const bool v13 = at_least(api_version, 3);

  VkPhysicalDeviceSubgroupProperties subgroup{};
  subgroup.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
  VkPhysicalDeviceProperties2 props{};
  props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  props.pNext = &subgroup;
  vkGetPhysicalDeviceProperties2(device, &props);
  const bool compute = (subgroup.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
  const bool basic = (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT) != 0;
  f.subgroup_size = subgroup.subgroupSize;
  f.subgroup_shuffle = compute && basic && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT) != 0;
  f.subgroup_arithmetic =
      compute && basic && (subgroup.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) != 0;

  // The 1.1 and 1.2 feature structs (fafo needs 1.2), the 1.3 one from 1.3 on, else
  // the extensions that carry the same features on 1.2 devices.
  VkPhysicalDeviceVulkan11Features f11{};
  f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
  VkPhysicalDeviceVulkan12Features f12{};
  f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
  VkPhysicalDeviceVulkan13Features f13{};
  f13.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES;
  VkPhysicalDeviceSubgroupSizeControlFeaturesEXT size_control{};
  size_control.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT;
  VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR dot{};
  dot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR;
  VkPhysicalDeviceCooperativeMatrixFeaturesNV matrix{};
  matrix.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
  const bool nv_matrix = has_device_extension(device, VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
  VkPhysicalDeviceFeatures2 features{};
  features.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2;
  features.pNext = &f11;
  f11.pNext = &f12;
  void** tail = &f12.pNext;
  if (nv_matrix) {
    *tail = &matrix;
    tail = &matrix.pNext;
  }
  if (v13) {
    *tail = &f13;
    tail = &f13.pNext;
  } else {
    if (has_device_extension(device, VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME)) {
      *tail = &size_control;
      tail = &size_control.pNext;
    }
    if (has_device_extension(device, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME)) {
      *tail = &dot;
      tail = &dot.pNext;
    }
  }
  vkGetPhysicalDeviceFeatures2(device, &features);
  f.full_subgroups = v13 ? f13.computeFullSubgroups : size_control.computeFullSubgroups;
  f.integer_dot_product = v13 ? f13.shaderIntegerDotProduct : dot.shaderIntegerDotProduct;
  f.storage_16bit = f11.storageBuffer16BitAccess;
  f.storage_8bit = f12.storageBuffer8BitAccess;
  f.shader_float16 = f12.shaderFloat16;
  f.shader_int8 = f12.shaderInt8;
  f.cooperative_matrix = has_device_extension(device, "VK_KHR_cooperative_matrix") || nv_matrix;
  VkPhysicalDeviceCooperativeMatrixPropertiesNV matrix_props{};
  matrix_props.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_NV;
  if (nv_matrix) {
    VkPhysicalDeviceProperties2 p2{};
    p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
    p2.pNext = &matrix_props;
    vkGetPhysicalDeviceProperties2(device, &p2);
  }
  f.int8_matrix = nv_matrix && matrix.cooperativeMatrix && f.shader_int8 && f12.vulkanMemoryModel &&
                  f.subgroup_size == 32 && (matrix_props.cooperativeMatrixSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                  has_int8_matrix_shape(instance, device);
  return f;
}

DeviceFeatures select_features(const DeviceFeatures& detected, const FeatureSelection& selection) {
  DeviceFeatures e;
  e.subgroup_size = detected.subgroup_size;  // a fact about the device, kept for reports
  e.subgroup_shuffle = selection.subgroup && detected.subgroup_shuffle;
  e.subgroup_arithmetic = selection.subgroup && detected.subgroup_arithmetic;
  e.full_subgroups = selection.subgroup && detected.full_subgroups;
  e.storage_16bit = selection.storage16 && detected.storage_16bit;
  e.storage_8bit = selection.storage8 && detected.storage_8bit;
  e.shader_float16 = selection.fp16 && detected.shader_float16;
  e.shader_int8 = selection.int8 && detected.shader_int8;
  e.integer_dot_product = selection.dot && detected.integer_dot_product;
  e.int8_matrix = selection.matrix && e.shader_int8 && detected.int8_matrix;
  e.cooperative_matrix = e.int8_matrix;  // the extension is enabled for it
  return e;
}

std::string describe_features(const DeviceFeatures& enabled, const DeviceFeatures& detected) {
  std::vector<std::string> used;
  if (enabled.subgroup_matmul())
    used.push_back("subgroup shuffle (" + std::to_string(enabled.subgroup_size) + " lanes, for the split-rows matmul)");
  if (enabled.storage_16bit)
    used.emplace_back("16-bit storage (attention reads an f16 KV cache as halves, where a probe finds them widened "
                      "exactly)");
  if (enabled.integer_dot_product)
    used.emplace_back("integer dot product (enabled for the split-rows integer products' byte sums: the backend "
                      "description says where they use it)");
  if (enabled.int8_matrix)
    used.emplace_back("cooperative matrix (NV, 16x8x32 8-bit: the integer products of steps over 8 tokens in "
                      "matrix tiles)");
  const std::string uses = used.empty() ? "none (portable path)" : join(used);
  std::vector<std::string> idle;    // enabled for future kernels
  std::vector<std::string> unused;  // detected, not enabled
  auto sort = [&](bool on, bool has, std::string name) {
    if (on) {
      idle.push_back(std::move(name));
    } else if (has) {
      unused.push_back(std::move(name));
    }
  };
  if (!enabled.subgroup_matmul() && detected.subgroup_matmul()) unused.emplace_back("subgroup shuffle");
  sort(enabled.shader_float16, detected.shader_float16, "fp16");
  if (!enabled.storage_16bit && detected.storage_16bit) unused.emplace_back("16-bit storage");
  sort(enabled.storage_8bit, detected.storage_8bit, "8-bit storage");
  sort(enabled.shader_int8, detected.shader_int8, "int8");
  if (detected.integer_dot_product && !enabled.integer_dot_product) unused.emplace_back("integer dot product");
  if (detected.int8_matrix && !enabled.int8_matrix) unused.emplace_back("cooperative matrix");
  std::string out = "optional features: " + uses;
  if (!idle.empty()) out += "; enabled, no kernel uses them yet: " + join(idle);
  if (!unused.empty()) out += "; turned off: " + join(unused);
  if (detected.subgroup_shuffle && !detected.subgroup_matmul())
    out += "; subgroup shuffle present, not used (full subgroups cannot be required)";
  if (detected.cooperative_matrix && !detected.int8_matrix)
    out += "; cooperative matrix present, not used (the matrix tiles need VK_NV_cooperative_matrix with a 16x8x32 "
           "signed 8-bit shape, shaderInt8, vulkanMemoryModel and 32-lane subgroups)";
  return out;
}

}  // namespace fafo::vulkan
