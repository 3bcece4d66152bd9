#include "fafo/read_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace fafo {

std::string read_whole_file(const std::string& path, std::string_view what) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw std::runtime_error(path + ": cannot read " + std::string(what) + ": it is a folder");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  if (in) bytes << in.rdbuf();
  if (!in || in.bad()) throw std::runtime_error(path + ": cannot read " + std::string(what));
  return bytes.str();
}

}  // namespace fafo
