// list_vulkan_devices() and the tuning calls for builds without the Vulkan backend:
// there is no device to list and nothing to tune.
#include "fafo/vulkan_devices.h"
#include "fafo/vulkan_tuning.h"

namespace fafo {

std::vector<VulkanDeviceInfo> list_vulkan_devices() { return {}; }
std::vector<std::string> vulkan_tune_now(Backend&) { return {}; }
std::string vulkan_tuning_file(const Backend&) { return ""; }

}  // namespace fafo
