#include "file_browser.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <system_error>

namespace fafo::studio {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

FileBrowser::FileBrowser(const std::filesystem::path& start, std::vector<std::string> extensions)
    : extensions_(std::move(extensions)) {
  for (std::string& e : extensions_) e = lower(e);
  std::error_code ec;
  std::filesystem::path dir = start.empty() ? std::filesystem::current_path(ec) : start;
  if (!std::filesystem::is_directory(dir, ec)) dir = dir.parent_path();
  if (dir.empty()) dir = std::filesystem::current_path(ec);
  go(dir);
}

bool FileBrowser::wanted(const std::filesystem::path& p) const {
  if (extensions_.empty()) return true;
  const std::string ext = lower(p.extension().string());
  return std::find(extensions_.begin(), extensions_.end(), ext) != extensions_.end();
}

void FileBrowser::go(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::path abs = std::filesystem::absolute(dir, ec);
  dir_ = (ec ? dir : abs).lexically_normal();
  if (dir_.has_relative_path() && dir_.filename().empty()) dir_ = dir_.parent_path();  // "a/b/" -> "a/b"
  refresh();
}

void FileBrowser::refresh() {
  entries_.clear();
  error_.clear();
  std::vector<BrowserEntry> dirs, files;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir_, std::filesystem::directory_options::skip_permission_denied, ec), end;
       !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.') continue;
    std::error_code e2;
    if (it->is_directory(e2)) {
      dirs.push_back({name, true, 0});
    } else if (it->is_regular_file(e2) && wanted(it->path())) {
      files.push_back({name, false, it->file_size(e2)});
    }
  }
  if (ec) error_ = dir_.string() + ": " + ec.message();
  auto by_name = [](const BrowserEntry& a, const BrowserEntry& b) { return a.name < b.name; };
  std::sort(dirs.begin(), dirs.end(), by_name);
  std::sort(files.begin(), files.end(), by_name);
  if (dir_.has_parent_path() && dir_.parent_path() != dir_) entries_.push_back({"..", true, 0});
  entries_.insert(entries_.end(), dirs.begin(), dirs.end());
  entries_.insert(entries_.end(), files.begin(), files.end());
}

std::optional<std::filesystem::path> FileBrowser::open(const std::string& name) {
  if (name == "..") {
    go(dir_.parent_path());
    return std::nullopt;
  }
  const std::filesystem::path p = dir_ / name;
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) {
    go(p);
    return std::nullopt;
  }
  return p;
}

std::string human_size(uintmax_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace fafo::studio
