// The in-app file dialog's model: one directory's subdirectories and the files with
// the wanted extensions (e.g. ".gguf"), navigated by name. Plain C++, no ImGui.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fafo::studio {

struct BrowserEntry {
  std::string name;
  bool directory = false;
  uintmax_t size = 0;  // bytes (files)
};

class FileBrowser {
 public:
  // Shows `start` (or its parent when it is a file; the current directory when empty).
  FileBrowser(const std::filesystem::path& start, std::vector<std::string> extensions);

  const std::filesystem::path& directory() const { return dir_; }
  // ".." first (when there is a parent), then directories, then matching files; each
  // group sorted by name; hidden entries (".name") left out.
  const std::vector<BrowserEntry>& entries() const { return entries_; }
  // Why the directory could not be listed ("" when it could).
  const std::string& error() const { return error_; }

  // Opens an entry by name: enters a directory (".." goes up) and returns nullopt, or
  // returns the full path of a file.
  std::optional<std::filesystem::path> open(const std::string& name);
  void go(const std::filesystem::path& dir);
  void refresh();

 private:
  bool wanted(const std::filesystem::path& p) const;
  std::filesystem::path dir_;
  std::vector<std::string> extensions_;
  std::vector<BrowserEntry> entries_;
  std::string error_;
};

// "1.2 MiB" and the like.
std::string human_size(uintmax_t bytes);

}  // namespace fafo::studio
