// The Vulkan object model of fafo, smallest first:
//   Context          instance (+ validation layer and debug messenger when asked),
//                    one physical device, its logical device (with the optional
//                    features of devices.h that the device has and FAFO_VULKAN_FEATURES
//                    allows), a compute queue, a command pool and the MemoryPool
//                    (memory_pool.h) that every buffer's memory comes from. Owns
//                    them; everything else borrows the Context, which must outlive
//                    every object created from it.
//   Buffer           (buffer.h) a storage buffer bound to a range of the MemoryPool,
//                    move-only.
//   ComputePipeline  (pipeline.h) an embedded SPIR-V shader + layout + push constants.
//   CommandSequence  (command_sequence.h) dispatches recorded into one command
//                    buffer, submitted once and waited for with a fence.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <vulkan/vulkan.h>

#include "backend/vulkan/devices.h"

namespace fafo::vulkan {

class MemoryPool;

// Messages of the Khronos validation layer, gathered by the debug messenger. Shared
// so that a caller can still read it after the Context is destroyed (leaks are
// reported while the device is destroyed).
class ValidationLog {
 public:
  void add_error(std::string message);
  void add_warning(std::string message);
  std::vector<std::string> errors() const;
  std::vector<std::string> warnings() const;

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> errors_;
  std::vector<std::string> warnings_;
};

struct ContextOptions {
  // Device index in vkEnumeratePhysicalDevices order; -1 picks the first discrete
  // GPU, else the first integrated GPU, else the first device.
  int device_index = -1;
  // Enable VK_LAYER_KHRONOS_validation (when installed) and record its messages in
  // validation_log (created when null).
  bool validation = false;
  std::shared_ptr<ValidationLog> validation_log;
  // Which optional features the kernels may use, as FAFO_VULKAN_FEATURES (devices.h)
  // writes it; unset = the environment variable (unset too: every feature the device
  // has). Tests set it to compare the portable and the optional paths.
  std::optional<std::string> features;
};

class Context {
 public:
  // Throws VulkanError when there is no Vulkan driver, no device, or the chosen
  // device does not exist or has no compute queue; std::runtime_error for a bad
  // FAFO_VULKAN_FEATURES (before touching Vulkan).
  explicit Context(ContextOptions options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  VkInstance instance() const { return instance_; }
  VkPhysicalDevice physical_device() const { return physical_device_; }
  VkDevice device() const { return device_; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return queue_family_; }
  VkCommandPool command_pool() const { return command_pool_; }
  uint32_t device_index() const { return device_index_; }
  const VkPhysicalDeviceProperties& properties() const { return properties_; }
  const VkPhysicalDeviceMemoryProperties& memory_properties() const { return memory_properties_; }
  std::string device_name() const { return properties_.deviceName; }
  // The optional features enabled on the device for the kernels to use, and all the
  // device has (whether enabled or not).
  const DeviceFeatures& features() const { return features_; }
  const DeviceFeatures& detected_features() const { return detected_features_; }

  // Whether the validation layer is active (asked for and installed).
  bool validation_enabled() const { return messenger_ != VK_NULL_HANDLE; }
  const std::shared_ptr<ValidationLog>& validation_log() const { return log_; }

  // The device memory blocks buffers are placed in. The pool is the one part of a
  // Context that changes after construction (it is thread-safe), so a const Context
  // still hands it out.
  MemoryPool& memory() const { return *memory_; }

  // A memory type allowed by type_bits with every `required` flag, preferring one
  // that also has the `preferred` flags; throws VulkanError when none has them.
  uint32_t find_memory_type(uint32_t type_bits, VkMemoryPropertyFlags required,
                            VkMemoryPropertyFlags preferred) const;

 private:
  void destroy();

  std::shared_ptr<ValidationLog> log_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_device_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  uint32_t device_index_ = 0;
  VkCommandPool command_pool_ = VK_NULL_HANDLE;
  std::unique_ptr<MemoryPool> memory_;
  VkPhysicalDeviceProperties properties_{};
  VkPhysicalDeviceMemoryProperties memory_properties_{};
  DeviceFeatures detected_features_;
  DeviceFeatures features_;
};

}  // namespace fafo::vulkan
