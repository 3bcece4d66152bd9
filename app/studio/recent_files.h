// The models opened lately, most recent first, kept in a small JSON file
// ($XDG_CONFIG_HOME/fafo-studio/recent.json, else ~/.config/fafo-studio/recent.json).
// A missing, unreadable or corrupt file is an empty list, never an error.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace fafo::studio {

class RecentFiles {
 public:
  // Where the list lives by default (empty when neither variable is set).
  static std::filesystem::path default_path();

  // Reads `file` (an empty path keeps the list in memory only).
  explicit RecentFiles(std::filesystem::path file, size_t max_entries = 10);

  const std::vector<std::string>& paths() const { return paths_; }
  // Moves `path` (made absolute) to the front, drops the oldest past the maximum and
  // saves. Returns false when the file cannot be written (problem() says why).
  bool add(const std::string& path);
  // Why the file could not be read or written ("" when it could).
  const std::string& problem() const { return problem_; }

 private:
  bool save();
  std::filesystem::path file_;
  size_t max_;
  std::vector<std::string> paths_;
  std::string problem_;
};

}  // namespace fafo::studio
