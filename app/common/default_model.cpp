#include "default_model.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace fafo::app {

namespace {

constexpr const char* kShippedModel = "stories260K.gguf";

std::string executable_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

}  // namespace

std::vector<std::string> default_model_candidates(const std::string& exe_dir) {
  std::vector<std::string> out;
  if (!exe_dir.empty()) {
    const std::filesystem::path d(exe_dir);
    for (const std::filesystem::path& rel :
         {std::filesystem::path("../share/fafo/models"), std::filesystem::path("../../assets/models"),
          std::filesystem::path("../data")})
      out.push_back((d / rel / kShippedModel).lexically_normal().string());
  }
#ifdef FAFO_SOURCE_ASSETS_DIR
  out.push_back((std::filesystem::path(FAFO_SOURCE_ASSETS_DIR) / "models" / kShippedModel).string());
#endif
  return out;
}

std::string default_model_path() {
  if (const char* env = std::getenv("FAFO_MODEL"); env && *env) {
    if (!std::filesystem::is_regular_file(env))
      throw std::runtime_error(std::string("$FAFO_MODEL is ") + env + ": no such file");
    return env;
  }
  std::string looked;
  for (const std::string& c : default_model_candidates(executable_dir())) {
    if (std::filesystem::is_regular_file(c)) return c;
    looked += "\n  " + c;
  }
  throw std::runtime_error("no model given: pass -m FILE.gguf or set FAFO_MODEL (the shipped " + std::string(kShippedModel) +
                           " was not found in:" + looked + ")");
}

void use_default_model_if_unset(std::string& path) {
  if (!path.empty()) return;
  path = default_model_path();
  std::fprintf(stderr, "model: %s (the default; -m picks another)\n", path.c_str());
}

}  // namespace fafo::app
