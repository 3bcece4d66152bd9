#include "backend/vulkan/vulkan_error.h"

namespace fafo::vulkan {

std::string result_name(VkResult result) {
  switch (result) {
#define FAFO_VK_RESULT(name) \
  case name:                 \
    return #name;
    FAFO_VK_RESULT(VK_SUCCESS)
    FAFO_VK_RESULT(VK_NOT_READY)
    FAFO_VK_RESULT(VK_TIMEOUT)
    FAFO_VK_RESULT(VK_EVENT_SET)
    FAFO_VK_RESULT(VK_EVENT_RESET)
    FAFO_VK_RESULT(VK_INCOMPLETE)
    FAFO_VK_RESULT(VK_ERROR_OUT_OF_HOST_MEMORY)
    FAFO_VK_RESULT(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    FAFO_VK_RESULT(VK_ERROR_INITIALIZATION_FAILED)
    FAFO_VK_RESULT(VK_ERROR_DEVICE_LOST)
    FAFO_VK_RESULT(VK_ERROR_MEMORY_MAP_FAILED)
    FAFO_VK_RESULT(VK_ERROR_LAYER_NOT_PRESENT)
    FAFO_VK_RESULT(VK_ERROR_EXTENSION_NOT_PRESENT)
    FAFO_VK_RESULT(VK_ERROR_FEATURE_NOT_PRESENT)
    FAFO_VK_RESULT(VK_ERROR_INCOMPATIBLE_DRIVER)
    FAFO_VK_RESULT(VK_ERROR_TOO_MANY_OBJECTS)
    FAFO_VK_RESULT(VK_ERROR_FORMAT_NOT_SUPPORTED)
    FAFO_VK_RESULT(VK_ERROR_FRAGMENTED_POOL)
    FAFO_VK_RESULT(VK_ERROR_UNKNOWN)
    FAFO_VK_RESULT(VK_ERROR_OUT_OF_POOL_MEMORY)
    FAFO_VK_RESULT(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    FAFO_VK_RESULT(VK_ERROR_FRAGMENTATION)
    FAFO_VK_RESULT(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
#undef FAFO_VK_RESULT
    default:
      return "VkResult " + std::to_string(static_cast<int>(result));
  }
}

VulkanError::VulkanError(const std::string& call, VkResult result)
    : std::runtime_error(call + " failed: " + result_name(result)), result_(result) {}

void check(VkResult result, const char* call) {
  if (result >= 0) return;
  const std::string what = std::string(call) + " failed: " + result_name(result);
  if (result == VK_ERROR_OUT_OF_DEVICE_MEMORY || result == VK_ERROR_OUT_OF_HOST_MEMORY)
    throw DeviceError(DeviceError::Kind::OutOfMemory, what);
  if (result == VK_ERROR_DEVICE_LOST) throw DeviceError(DeviceError::Kind::Lost, what);
  throw VulkanError(call, result);
}

}  // namespace fafo::vulkan
