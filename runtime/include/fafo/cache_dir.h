// The folder fafo keeps what it learned about a machine in (the step-cost curves, a
// Vulkan driver file it wrote): $FAFO_CACHE_DIR, else $XDG_CACHE_HOME/fafo, else
// ~/.cache/fafo; empty when none of the variables is set.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace fafo {

inline std::filesystem::path default_cache_dir() {
  if (const char* dir = std::getenv("FAFO_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::filesystem::path(xdg) / "fafo";
  if (const char* home = std::getenv("HOME"); home && *home) return std::filesystem::path(home) / ".cache" / "fafo";
  return {};
}

// Writes `text` to `file` so that a reader never sees half of it: into a temporary file
// beside it, then renamed into place (its folder created first). Returns "" or why it
// could not be written (nothing left behind).
inline std::string write_cache_file(const std::filesystem::path& file, const std::string& text) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  if (ec) return "cannot create " + file.parent_path().string() + ": " + ec.message();
  const std::filesystem::path temporary = file.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    if (!out) return "cannot write " + temporary.string();
    out << text;
    out.flush();
    if (!out) {
      std::filesystem::remove(temporary, ec);
      return "cannot write " + temporary.string();
    }
  }
  std::filesystem::rename(temporary, file, ec);
  if (ec) {
    std::filesystem::remove(temporary, ec);
    return "cannot rename into " + file.string() + ": " + ec.message();
  }
  return "";
}

}  // namespace fafo
