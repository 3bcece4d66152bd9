// make_backend(): turns a user's backend choice into a Backend.
#include <stdexcept>

#include "fafo/backend.h"
#include "fafo/vulkan_devices.h"

namespace fafo {

#if FAFO_HAVE_VULKAN
// runtime/src/backend/vulkan/vulkan_backend.cpp
std::unique_ptr<Backend> make_vulkan_backend(const std::string& device);
#endif

const char* kv_cache_type_name(KvCacheType t) { return t == KvCacheType::F16 ? "f16" : "f32"; }

KvCacheType parse_kv_cache_type(const std::string& name) {
  if (name == "f32") return KvCacheType::F32;
  if (name == "f16") return KvCacheType::F16;
  throw std::invalid_argument("unknown KV cache type '" + name + "' (use f32 or f16)");
}

std::vector<std::string> available_backends() {
#if FAFO_HAVE_VULKAN
  return {"cpu", "vulkan"};
#else
  return {"cpu"};
#endif
}

std::string default_backend_name() {
#if FAFO_HAVE_VULKAN
  // A software rasterizer such as lavapipe is a Vulkan device too, but on the machine
  // it emulates a GPU on, the CPU backend is faster: only a real GPU makes vulkan the default.
  for (const VulkanDeviceInfo& d : list_vulkan_devices())
    if (d.type != "cpu") return "vulkan";
#endif
  return "cpu";
}

std::unique_ptr<Backend> make_backend(const BackendSpec& spec) {
  const std::string name = spec.name == "auto" || spec.name.empty() ? default_backend_name() : spec.name;
  if (name == "cpu") return make_cpu_backend(spec.threads);
  if (name == "vulkan") {
#if FAFO_HAVE_VULKAN
    return make_vulkan_backend(spec.device);
#else
    throw std::runtime_error("this build of fafo has no Vulkan backend (it was configured without the Vulkan SDK; "
                             "install libvulkan-dev and glslang-tools and rebuild)");
#endif
  }
  std::string names;
  for (const std::string& n : available_backends()) names += (names.empty() ? "" : ", ") + n;
  throw std::runtime_error("unknown backend '" + spec.name + "' (available: auto, " + names + ")");
}

}  // namespace fafo
