// The registry of compiled-in backends and make_backend(). Which backends exist is
// decided by CMake: fafo_backend_list.inc holds one FAFO_BACKEND(name) line per backend
// of this build, and each backend defines `BackendInfo name_backend_info()`.
#include "fafo/backend_registry.h"

#include <algorithm>
#include <stdexcept>

namespace fafo {

#define FAFO_BACKEND(n) BackendInfo n##_backend_info();
#include "fafo_backend_list.inc"
#undef FAFO_BACKEND

const std::vector<BackendInfo>& backend_registry() {
  static const std::vector<BackendInfo> registry = {
#define FAFO_BACKEND(n) n##_backend_info(),
#include "fafo_backend_list.inc"
#undef FAFO_BACKEND
  };
  return registry;
}

const BackendInfo* find_backend(const std::string& name) {
  for (const BackendInfo& b : backend_registry())
    if (b.name == name) return &b;
  return nullptr;
}

std::vector<std::string> available_backends() {
  std::vector<std::string> names;
  for (const BackendInfo& b : backend_registry()) names.push_back(b.name);
  return names;
}

std::string default_backend_name(bool latent_attention) {
  const BackendInfo* best = nullptr;
  for (const BackendInfo& b : backend_registry()) {
    if (b.auto_rank <= 0 || (best && best->auto_rank >= b.auto_rank)) continue;
    if (latent_attention && !b.runs_latent_attention) continue;
    const std::vector<BackendDevice> devices = b.devices();
    if (std::any_of(devices.begin(), devices.end(), [](const BackendDevice& d) { return d.gpu; })) best = &b;
  }
  if (best) return best->name;
  for (const BackendInfo& b : backend_registry())
    if (b.auto_rank == 0) return b.name;
  return backend_registry().front().name;
}

std::unique_ptr<Backend> make_backend(const BackendSpec& spec) {
  const std::string name =
      spec.name == "auto" || spec.name.empty() ? default_backend_name(spec.latent_attention) : spec.name;
  if (const BackendInfo* b = find_backend(name)) {
    std::unique_ptr<Backend> backend = b->create(spec);
    if (spec.memory_limit > 0) {
      BackendMemory* memory = backend->memory();
      if (memory == nullptr)
        throw std::invalid_argument("the " + backend->name() + " backend cannot limit its memory (--memory-limit)");
      memory->set_memory_limit(spec.memory_limit);
    }
    if (const std::optional<FaultPlan> fault = take_injected_fault()) backend->inject_fault(*fault);
    return backend;
  }
  std::string names;
  for (const std::string& n : available_backends()) names += (names.empty() ? "" : ", ") + n;
  // Backends fafo has but this build may lack, with what it takes to build them.
  static const std::pair<const char*, const char*> kOptional[] = {
      {"vulkan", "it was configured without the Vulkan SDK; install libvulkan-dev and glslang-tools and rebuild"},
      {"cuda", "it was configured without a CUDA toolkit; install one (nvcc) and rebuild, -DFAFO_CUDA=ON to require it"},
  };
  for (const auto& [known, how] : kOptional)
    if (name == known)
      throw std::runtime_error("this build of fafo has no " + name + " backend (" + how + "); available: auto, " + names);
  throw std::runtime_error("unknown backend '" + spec.name + "' (available: auto, " + names + ")");
}

}  // namespace fafo
