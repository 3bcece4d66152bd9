#include "backend/vulkan/context.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/vulkan/driver_files.h"
#include "backend/vulkan/memory_pool.h"
#include "backend/vulkan/vulkan_error.h"

namespace fafo::vulkan {

namespace {

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";
// The highest Vulkan version fafo uses (1.3 for computeFullSubgroups and integer dot
// product in core); a device is used at the lower of this and its own version.
constexpr uint32_t kApiVersion = VK_API_VERSION_1_3;

FeatureSelection feature_selection(const ContextOptions& options) {
  if (options.features) return parse_feature_selection(*options.features);
  const char* env = std::getenv("FAFO_VULKAN_FEATURES");
  return env ? parse_feature_selection(env) : FeatureSelection{};
}

bool layer_installed(const char* name) {
  uint32_t count = 0;
  if (vkEnumerateInstanceLayerProperties(&count, nullptr) != VK_SUCCESS) return false;
  std::vector<VkLayerProperties> layers(count);
  if (vkEnumerateInstanceLayerProperties(&count, layers.data()) < 0) return false;
  for (const VkLayerProperties& l : layers)
    if (std::strcmp(l.layerName, name) == 0) return true;
  return false;
}

bool instance_extension_present(const char* layer, const char* name) {
  uint32_t count = 0;
  if (vkEnumerateInstanceExtensionProperties(layer, &count, nullptr) != VK_SUCCESS) return false;
  std::vector<VkExtensionProperties> exts(count);
  if (vkEnumerateInstanceExtensionProperties(layer, &count, exts.data()) < 0) return false;
  for (const VkExtensionProperties& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

VKAPI_ATTR VkBool32 VKAPI_CALL on_debug_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                VkDebugUtilsMessageTypeFlagsEXT /*types*/,
                                                const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                void* user) {
  auto* log = static_cast<ValidationLog*>(user);
  std::string message = data && data->pMessage ? data->pMessage : "(no message)";
  if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
    log->add_error(std::move(message));
  } else if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
    log->add_warning(std::move(message));
  }
  return VK_FALSE;  // never abort the call
}

VkDebugUtilsMessengerCreateInfoEXT messenger_info(ValidationLog* log) {
  VkDebugUtilsMessengerCreateInfoEXT info{};
  info.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
  info.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  info.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  info.pfnUserCallback = on_debug_message;
  info.pUserData = log;
  return info;
}

uint32_t pick_default_device(const std::vector<VkPhysicalDevice>& devices) {
  for (VkPhysicalDeviceType wanted : {VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU, VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU}) {
    for (size_t i = 0; i < devices.size(); ++i) {
      VkPhysicalDeviceProperties p;
      vkGetPhysicalDeviceProperties(devices[i], &p);
      if (p.deviceType == wanted) return static_cast<uint32_t>(i);
    }
  }
  return 0;
}

}  // namespace

void ValidationLog::add_error(std::string message) {
  std::lock_guard<std::mutex> lock(mutex_);
  errors_.push_back(std::move(message));
}
void ValidationLog::add_warning(std::string message) {
  std::lock_guard<std::mutex> lock(mutex_);
  warnings_.push_back(std::move(message));
}
std::vector<std::string> ValidationLog::errors() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return errors_;
}
std::vector<std::string> ValidationLog::warnings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return warnings_;
}

Context::Context(ContextOptions options) : log_(options.validation_log) {
  if (!log_) log_ = std::make_shared<ValidationLog>();
  const FeatureSelection selection = feature_selection(options);  // a bad value fails before any Vulkan call
  try {
    VkApplicationInfo app{};
    app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
    app.pApplicationName = "fafo";
    app.pEngineName = "fafo";
    app.apiVersion = kApiVersion;

    std::vector<const char*> layers;
    std::vector<const char*> extensions;
    const bool validate = options.validation && layer_installed(kValidationLayer) &&
                          (instance_extension_present(nullptr, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) ||
                           instance_extension_present(kValidationLayer, VK_EXT_DEBUG_UTILS_EXTENSION_NAME));
    VkDebugUtilsMessengerCreateInfoEXT debug_info = messenger_info(log_.get());
    VkInstanceCreateInfo info{};
    info.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
    info.pApplicationInfo = &app;
    // Synchronization validation too: a missing barrier between dependent commands
    // (CommandSequence puts them only where needed) is reported like any layer error.
    const VkValidationFeatureEnableEXT sync = VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT;
    VkValidationFeaturesEXT features{};
    features.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT;
    features.enabledValidationFeatureCount = 1;
    features.pEnabledValidationFeatures = &sync;
    if (validate) {
      layers.push_back(kValidationLayer);
      extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
      info.pNext = &debug_info;  // also reports on vkCreateInstance / vkDestroyInstance
      if (instance_extension_present(kValidationLayer, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
        extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
        features.pNext = &debug_info;
        info.pNext = &features;
      }
    }
    info.enabledLayerCount = static_cast<uint32_t>(layers.size());
    info.ppEnabledLayerNames = layers.data();
    info.enabledExtensionCount = static_cast<uint32_t>(extensions.size());
    info.ppEnabledExtensionNames = extensions.data();
    find_vulkan_drivers();  // NVIDIA's driver on a machine without a display (driver_files.h)
    const VkResult created = vkCreateInstance(&info, nullptr, &instance_);
    if (created == VK_ERROR_INCOMPATIBLE_DRIVER)
      throw VulkanError("no Vulkan devices found (vkCreateInstance: no compatible Vulkan driver)");
    check(created, "vkCreateInstance");

    if (validate) {
      auto create_messenger = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
          vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
      if (!create_messenger) throw VulkanError("vkCreateDebugUtilsMessengerEXT", VK_ERROR_EXTENSION_NOT_PRESENT);
      check(create_messenger(instance_, &debug_info, nullptr, &messenger_), "vkCreateDebugUtilsMessengerEXT");
    }

    uint32_t count = 0;
    check(vkEnumeratePhysicalDevices(instance_, &count, nullptr), "vkEnumeratePhysicalDevices");
    if (count == 0) throw VulkanError("no Vulkan devices found");
    std::vector<VkPhysicalDevice> devices(count);
    check(vkEnumeratePhysicalDevices(instance_, &count, devices.data()), "vkEnumeratePhysicalDevices");
    if (options.device_index >= static_cast<int>(count))
      throw VulkanError("Vulkan device " + std::to_string(options.device_index) + " does not exist (" +
                        std::to_string(count) + " device" + (count == 1 ? "" : "s") + " found; see `fafo devices`)");
    device_index_ = options.device_index >= 0 ? static_cast<uint32_t>(options.device_index) : pick_default_device(devices);
    physical_device_ = devices[device_index_];
    vkGetPhysicalDeviceProperties(physical_device_, &properties_);
    vkGetPhysicalDeviceMemoryProperties(physical_device_, &memory_properties_);
    if (VK_API_VERSION_MAJOR(properties_.apiVersion) == 1 && VK_API_VERSION_MINOR(properties_.apiVersion) < 2)
      throw VulkanError(std::string("Vulkan device ") + properties_.deviceName + " supports Vulkan " +
                        std::to_string(VK_API_VERSION_MAJOR(properties_.apiVersion)) + "." +
                        std::to_string(VK_API_VERSION_MINOR(properties_.apiVersion)) + "; fafo needs 1.2");

    uint32_t family_count = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(physical_device_, &family_count, nullptr);
    std::vector<VkQueueFamilyProperties> families(family_count);
    vkGetPhysicalDeviceQueueFamilyProperties(physical_device_, &family_count, families.data());
    bool found = false;
    for (uint32_t f = 0; f < family_count && !found; ++f) {
      if (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) {
        queue_family_ = f;
        found = true;
      }
    }
    if (!found) throw VulkanError(std::string("Vulkan device ") + properties_.deviceName + " has no compute queue");

    const float priority = 1.0f;
    VkDeviceQueueCreateInfo queue_info{};
    queue_info.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
    queue_info.queueFamilyIndex = queue_family_;
    queue_info.queueCount = 1;
    queue_info.pQueuePriorities = &priority;
    // Optional features: the ones the device has and the selection allows, enabled
    // through the 1.1/1.2(/1.3) feature structs, or on a 1.2 device through the
    // extensions that carry the 1.3 ones.
    const uint32_t api_version = std::min(properties_.apiVersion, kApiVersion);
    const bool v13 = VK_API_VERSION_MINOR(api_version) >= 3 || VK_API_VERSION_MAJOR(api_version) > 1;
    detected_features_ = detect_device_features(instance_, physical_device_, api_version);
    features_ = select_features(detected_features_, selection);
    VkPhysicalDeviceVulkan11Features f11{};
    f11.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES;
    f11.storageBuffer16BitAccess = features_.storage_16bit;
    VkPhysicalDeviceVulkan12Features f12{};
    f12.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES;
    f12.storageBuffer8BitAccess = features_.storage_8bit;
    f12.shaderFloat16 = features_.shader_float16;
    f12.shaderInt8 = features_.shader_int8;
    f12.vulkanMemoryModel = features_.int8_matrix;  // the matrix tiles' shader declares it
    VkPhysicalDeviceVulkan13Features f13{};
    f13.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES;
    f13.computeFullSubgroups = features_.full_subgroups;
    f13.shaderIntegerDotProduct = features_.integer_dot_product;
    VkPhysicalDeviceSubgroupSizeControlFeaturesEXT size_control{};
    size_control.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES_EXT;
    size_control.computeFullSubgroups = features_.full_subgroups;
    VkPhysicalDeviceShaderIntegerDotProductFeaturesKHR dot{};
    dot.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES_KHR;
    dot.shaderIntegerDotProduct = features_.integer_dot_product;
    VkPhysicalDeviceCooperativeMatrixFeaturesNV matrix{};
    matrix.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_NV;
    matrix.cooperativeMatrix = VK_TRUE;
    std::vector<const char*> device_extensions;
    f11.pNext = &f12;
    void** tail = &f12.pNext;
    if (features_.int8_matrix) {
      device_extensions.push_back(VK_NV_COOPERATIVE_MATRIX_EXTENSION_NAME);
      *tail = &matrix;
      tail = &matrix.pNext;
    }
    if (v13) {
      *tail = &f13;
    } else {
      // detect_device_features saw these only through their extensions.
      if (features_.full_subgroups) {
        device_extensions.push_back(VK_EXT_SUBGROUP_SIZE_CONTROL_EXTENSION_NAME);
        *tail = &size_control;
        tail = &size_control.pNext;
      }
      if (features_.integer_dot_product) {
        device_extensions.push_back(VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
        *tail = &dot;
      }
    }

    VkDeviceCreateInfo device_info{};
    device_info.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
    device_info.pNext = &f11;
    device_info.queueCreateInfoCount = 1;
    device_info.pQueueCreateInfos = &queue_info;
    device_info.enabledExtensionCount = static_cast<uint32_t>(device_extensions.size());
    device_info.ppEnabledExtensionNames = device_extensions.data();
    check(vkCreateDevice(physical_device_, &device_info, nullptr, &device_), "vkCreateDevice");
    vkGetDeviceQueue(device_, queue_family_, 0, &queue_);

    VkCommandPoolCreateInfo pool_info{};
    pool_info.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
    pool_info.flags = 0;  // most command buffers live for one submission, a step's replayed ones longer
    pool_info.queueFamilyIndex = queue_family_;
    check(vkCreateCommandPool(device_, &pool_info, nullptr, &command_pool_), "vkCreateCommandPool");
    memory_ = std::make_unique<MemoryPool>(physical_device_, device_, device_name());
  } catch (...) {
    destroy();
    throw;
  }
}

Context::~Context() { destroy(); }

void Context::destroy() {
  if (device_ != VK_NULL_HANDLE) {
    vkDeviceWaitIdle(device_);
    memory_.reset();
    if (command_pool_ != VK_NULL_HANDLE) vkDestroyCommandPool(device_, command_pool_, nullptr);
    vkDestroyDevice(device_, nullptr);
  }
  command_pool_ = VK_NULL_HANDLE;
  device_ = VK_NULL_HANDLE;
  if (messenger_ != VK_NULL_HANDLE) {
    auto destroy_messenger = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy_messenger) destroy_messenger(instance_, messenger_, nullptr);
    messenger_ = VK_NULL_HANDLE;
  }
  if (instance_ != VK_NULL_HANDLE) vkDestroyInstance(instance_, nullptr);
  instance_ = VK_NULL_HANDLE;
}

uint32_t Context::find_memory_type(uint32_t type_bits, VkMemoryPropertyFlags required,
                                   VkMemoryPropertyFlags preferred) const {
  int fallback = -1;
  for (uint32_t i = 0; i < memory_properties_.memoryTypeCount; ++i) {
    if (!(type_bits & (1u << i))) continue;
    const VkMemoryPropertyFlags flags = memory_properties_.memoryTypes[i].propertyFlags;
    if ((flags & required) != required) continue;
    if ((flags & preferred) == preferred) return i;
    if (fallback < 0) fallback = static_cast<int>(i);
  }
  if (fallback < 0) throw VulkanError("no Vulkan memory type with the required properties on " + device_name());
  return static_cast<uint32_t>(fallback);
}

}  // namespace fafo::vulkan
