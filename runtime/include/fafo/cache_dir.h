// The folder fafo keeps what it learned about a machine in (the step-cost curves, a
// Vulkan driver file it wrote): $FAFO_CACHE_DIR, else $XDG_CACHE_HOME/fafo, else
// ~/.cache/fafo; empty when none of the variables is set.
#pragma once

#include <cstdlib>
#include <filesystem>

namespace fafo {

inline std::filesystem::path default_cache_dir() {
  if (const char* dir = std::getenv("FAFO_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "fafo";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache" / "fafo";
  return {};
}

}  // namespace fafo
