#include "test_support.h"

#include <cstdlib>
#include <unistd.h>

namespace fafo::test {

std::filesystem::path shared_path(const std::string& relative) {
  const char* env = std::getenv("FAFO_SHARED_DIR");
  std::filesystem::path root = env && *env ? std::filesystem::path(env) : std::filesystem::path(FAFO_SHARED_DIR);
  return root / relative;
}

std::filesystem::path binary_path(const std::string& relative) {
  return std::filesystem::path(FAFO_BINARY_DIR) / relative;
}

std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("fafo-test-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace fafo::test
