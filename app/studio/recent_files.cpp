#include "recent_files.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <system_error>

#include <nlohmann/json.hpp>

namespace fafo::studio {

std::filesystem::path RecentFiles::default_path() {
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  if (xdg && *xdg) return std::filesystem::path(xdg) / "fafo-studio" / "recent.json";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::filesystem::path(home) / ".config" / "fafo-studio" / "recent.json";
  return {};
}

RecentFiles::RecentFiles(std::filesystem::path file, size_t max_entries) : file_(std::move(file)), max_(max_entries) {
  if (file_.empty()) return;
  std::ifstream in(file_);
  if (!in) return;  // not there yet
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    for (const auto& p : j.at("recent"))
      if (p.is_string() && paths_.size() < max_) paths_.push_back(p.get<std::string>());
  } catch (const std::exception& e) {
    paths_.clear();
    problem_ = file_.string() + ": ignored (" + e.what() + ")";
  }
}

bool RecentFiles::add(const std::string& path) {
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(path, ec);
  const std::string p = ec ? path : abs.lexically_normal().string();
  paths_.erase(std::remove(paths_.begin(), paths_.end(), p), paths_.end());
  paths_.insert(paths_.begin(), p);
  if (paths_.size() > max_) paths_.resize(max_);
  return save();
}

bool RecentFiles::save() {
  if (file_.empty()) return true;
  std::error_code ec;
  std::filesystem::create_directories(file_.parent_path(), ec);
  // Write a temporary file and rename it: a crash never leaves half a list.
  const std::filesystem::path tmp = file_.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << nlohmann::json{{"version", 1}, {"recent", paths_}}.dump(2) << '\n';
    if (!out) {
      problem_ = file_.string() + ": cannot write the recent-files list";
      return false;
    }
  }
  std::filesystem::rename(tmp, file_, ec);
  if (ec) {
    problem_ = file_.string() + ": " + ec.message();
    return false;
  }
  problem_.clear();
  return true;
}

}  // namespace fafo::studio
