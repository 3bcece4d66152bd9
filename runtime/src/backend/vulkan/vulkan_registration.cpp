// How the rest of fafo sees the Vulkan backend: its entry in the backend registry (the
// devices `fafo devices` lists, with their details), the device a --device string
// names, and the tuning entry points of fafo/vulkan_tuning.h.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backend/vulkan/driver_files.h"
#include "backend/vulkan/vulkan_backend.h"
#include "fafo/backend_registry.h"
#include "fafo/vulkan_devices.h"
#include "fafo/vulkan_tuning.h"

namespace fafo {
namespace vulkan {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

int resolve_device(const std::string& device) {
  const std::vector<VulkanDeviceInfo> devices = list_vulkan_devices();
  if (devices.empty()) throw std::runtime_error("no Vulkan devices found (see `fafo devices`)");
  std::string listing;
  for (const VulkanDeviceInfo& d : devices) listing += "\n  " + std::to_string(d.index) + ": " + d.name;
  const bool numeric = !device.empty() && std::all_of(device.begin(), device.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  if (numeric) {
    const long index = std::strtol(device.c_str(), nullptr, 10);
    if (index >= 0 && index < static_cast<long>(devices.size())) return static_cast<int>(index);
    throw std::runtime_error("Vulkan device " + device + " does not exist; the devices are:" + listing);
  }
  for (const VulkanDeviceInfo& d : devices)
    if (lower(d.name).find(lower(device)) != std::string::npos) return static_cast<int>(d.index);
  throw std::runtime_error("no Vulkan device's name contains '" + device + "'; the devices are:" + listing);
}

}  // namespace vulkan

namespace {

// What `fafo devices` prints about a Vulkan device, label by label.
std::vector<std::pair<std::string, std::string>> vulkan_details(const VulkanDeviceInfo& d) {
  auto yes_no = [](bool b) { return std::string(b ? "yes" : "no"); };
  std::vector<std::pair<std::string, std::string>> out;
  char ids[64];
  std::snprintf(ids, sizeof ids, "0x%04x / 0x%04x", d.vendor_id, d.device_id);
  out.emplace_back("type", d.type);
  out.emplace_back("driver", d.driver);
  out.emplace_back("Vulkan API version", d.api_version);
  out.emplace_back("vendor / device id", ids);
  for (size_t h = 0; h < d.heaps.size(); ++h)
    out.emplace_back("memory heap " + std::to_string(h),
                     format_bytes(d.heaps[h].size) + (d.heaps[h].device_local ? " (device local)" : "") +
                         (d.heaps[h].free_known ? ", " + format_bytes(d.heaps[h].free) + " free" : ""));
  out.emplace_back("maxStorageBufferRange", format_bytes(d.max_storage_buffer_range) + " (" +
                                                std::to_string(d.max_storage_buffer_range) + " bytes)");
  out.emplace_back("max workgroup invocations", std::to_string(d.max_compute_workgroup_invocations));
  out.emplace_back("max push constants", std::to_string(d.max_push_constants_size) + " bytes");
  out.emplace_back("16-bit storage", yes_no(d.storage_16bit));
  out.emplace_back("8-bit storage", yes_no(d.storage_8bit));
  out.emplace_back("shaderFloat16", yes_no(d.shader_float16));
  out.emplace_back("shaderInt8", yes_no(d.shader_int8));
  std::string ops;
  for (const std::string& op : d.subgroup_ops) ops += (ops.empty() ? "" : " ") + op;
  out.emplace_back("subgroup size", std::to_string(d.subgroup_size) + " (compute: " + yes_no(d.subgroup_in_compute) +
                                        "; ops: " + (ops.empty() ? "none" : ops) + ")");
  out.emplace_back("integer dot product", yes_no(d.integer_dot_product));
  out.emplace_back("cooperative matrix",
                   yes_no(d.cooperative_matrix) + (d.int8_matrix ? " (8-bit 16x8x32: fafo's matrix tiles)" : ""));
  out.emplace_back("fafo uses", d.features_in_use);
  if (!d.tuning.empty()) out.emplace_back("tuned products", d.tuning);
  return out;
}

}  // namespace

// Registered in backend_registry.cpp (FAFO_BACKEND(vulkan)).
BackendInfo vulkan_backend_info() {
  BackendInfo info;
  info.name = "vulkan";
  info.display_name = "Vulkan";
  info.summary = "compute shaders on any Vulkan device (within 1e-4 of the reference backend, T-invariant)";
  info.auto_rank = 1;
  info.devices = [] {
    std::vector<BackendDevice> out;
    for (const VulkanDeviceInfo& d : list_vulkan_devices()) {
      BackendDevice b;
      b.index = static_cast<int>(d.index);
      b.name = d.name;
      b.kind = d.type == "cpu" || d.type == "other" ? d.type : d.type + " GPU";
      // A software rasterizer such as lavapipe is a Vulkan device too, but on the
      // machine it emulates a GPU on, the CPU backend is faster: only a real GPU counts.
      b.gpu = d.type != "cpu" && d.type != "other";
      b.details = vulkan_details(d);
      out.push_back(std::move(b));
    }
    return out;
  };
  info.device_note = [] { return vulkan::find_vulkan_drivers(); };
  info.create = [](const BackendSpec& spec) {
    vulkan::VulkanBackendOptions options;
    options.device = spec.device;
    return vulkan::make_backend(options);
  };
  return info;
}

std::vector<std::string> vulkan_tune_now(Backend& backend) { return vulkan::tune_now(backend); }

std::string vulkan_tuning_file(const Backend& backend) { return vulkan::tuning_file(backend); }

}  // namespace fafo
