// list_vulkan_devices() for builds without the Vulkan backend: there is none to list.
#include "fafo/vulkan_devices.h"

namespace fafo {

std::vector<VulkanDeviceInfo> list_vulkan_devices() { return {}; }

}  // namespace fafo
