// `fafo devices`: every backend of this build (the registry, fafo/backend_registry.h)
// with the devices it finds and what it knows about each: for Vulkan the type,
// driver, memory, limits and the optional features the backend can use. A backend
// without devices (no Vulkan driver) is not an error.
#include <algorithm>
#include <cstdio>
#include <string>

#include "commands.h"
#include "fafo/backend_registry.h"

namespace fafo::cli {

Command add_devices_command(CLI::App& app) {
  app.add_subcommand("devices",
                    "List every backend of this build and its devices (the names and indexes the other commands' "
                    "--backend and --device take), their memory and features; it takes no options");
  return [] {
    bool first = true;
    for (const BackendInfo& b : backend_registry()) {
      if (!first) std::printf("\n");
      first = false;
      std::printf("backend %s: %s\n", b.name.c_str(), b.summary.c_str());
      const std::vector<BackendDevice> devices = b.devices();
      if (devices.empty()) std::printf("  no %s devices found\n", b.display_name.c_str());
      if (b.device_note)
        if (const std::string note = b.device_note(); !note.empty()) std::printf("  note: %s\n", note.c_str());
      for (const BackendDevice& d : devices) {
        std::printf("device %d: %s\n", d.index, d.name.c_str());
        size_t width = 0;
        for (const auto& [label, value] : d.details) width = std::max(width, label.size() + 1);
        for (const auto& [label, value] : d.details)
          std::printf("  %-*s %s\n", static_cast<int>(width), (label + ":").c_str(), value.c_str());
      }
    }
    std::printf("\n--backend auto picks %s here.\n", default_backend_name().c_str());
    return 0;
  };
}

}  // namespace fafo::cli
