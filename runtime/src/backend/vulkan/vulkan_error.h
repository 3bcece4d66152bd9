// Vulkan failures as C++ exceptions: every VkResult error names the call that failed.
#pragma once

#include <stdexcept>
#include <string>

#include <vulkan/vulkan.h>

#include "fafo/device_error.h"

namespace fafo::vulkan {

class VulkanError : public std::runtime_error {
 public:
  VulkanError(const std::string& call, VkResult result);
  explicit VulkanError(const std::string& message) : std::runtime_error(message) {}
  VkResult result() const { return result_; }

 private:
  VkResult result_ = VK_ERROR_UNKNOWN;
};

// "VK_ERROR_OUT_OF_DEVICE_MEMORY" etc.; the number for codes it does not know.
std::string result_name(VkResult result);

// Throws for any result < 0, naming the call and the result ("vkQueueSubmit failed:
// VK_ERROR_DEVICE_LOST"): fafo::DeviceError for out of device or host memory and a lost
// device (what a caller can recover from), VulkanError for the rest.
void check(VkResult result, const char* call);

}  // namespace fafo::vulkan
