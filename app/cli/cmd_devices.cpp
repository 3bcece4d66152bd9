// `fafo devices`: every Vulkan device with its type, driver, memory, limits and the
// optional features the Vulkan backend can use. No Vulkan is not an error.
#include <cstdio>
#include <string>

#include "commands.h"
#include "fafo/vulkan_devices.h"

namespace fafo::cli {

namespace {

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  const double gib = static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
  if (gib >= 1.0) {
    std::snprintf(buf, sizeof buf, "%.2f GiB", gib);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  }
  return buf;
}

const char* yes_no(bool b) { return b ? "yes" : "no"; }

void print_device(const VulkanDeviceInfo& d) {
  std::printf("device %u: %s\n", d.index, d.name.c_str());
  std::printf("  type:                      %s\n", d.type.c_str());
  std::printf("  driver:                    %s\n", d.driver.c_str());
  std::printf("  Vulkan API version:        %s\n", d.api_version.c_str());
  std::printf("  vendor / device id:        0x%04x / 0x%04x\n", d.vendor_id, d.device_id);
  for (size_t h = 0; h < d.heaps.size(); ++h) {
    std::printf("  memory heap %zu:             %s%s\n", h, format_bytes(d.heaps[h].size).c_str(),
                d.heaps[h].device_local ? " (device local)" : "");
  }
  std::printf("  maxStorageBufferRange:     %s (%llu bytes)\n", format_bytes(d.max_storage_buffer_range).c_str(),
              static_cast<unsigned long long>(d.max_storage_buffer_range));
  std::printf("  max workgroup invocations: %u\n", d.max_compute_workgroup_invocations);
  std::printf("  max push constants:        %u bytes\n", d.max_push_constants_size);
  std::printf("  16-bit storage:            %s\n", yes_no(d.storage_16bit));
  std::printf("  8-bit storage:             %s\n", yes_no(d.storage_8bit));
  std::printf("  shaderFloat16:             %s\n", yes_no(d.shader_float16));
  std::printf("  shaderInt8:                %s\n", yes_no(d.shader_int8));
  std::string ops;
  for (const std::string& op : d.subgroup_ops) ops += (ops.empty() ? "" : " ") + op;
  std::printf("  subgroup size:             %u (compute: %s; ops: %s)\n", d.subgroup_size,
              yes_no(d.subgroup_in_compute), ops.empty() ? "none" : ops.c_str());
  std::printf("  integer dot product:       %s\n", yes_no(d.integer_dot_product));
  std::printf("  cooperative matrix:        %s\n", yes_no(d.cooperative_matrix));
  std::printf("  fafo uses:                 %s\n", d.features_in_use.c_str());
}

}  // namespace

Command add_devices_command(CLI::App& app) {
  app.add_subcommand("devices", "List the Vulkan devices, their memory and optional features");
  return [] {
    const std::vector<VulkanDeviceInfo> devices = list_vulkan_devices();
    if (devices.empty()) {
      std::printf("no Vulkan devices found\n");
      return 0;
    }
    for (size_t i = 0; i < devices.size(); ++i) {
      if (i > 0) std::printf("\n");
      print_device(devices[i]);
    }
    return 0;
  };
}

}  // namespace fafo::cli
