#include "default_model.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "input_files.h"

namespace fafo::app {

namespace {

constexpr const char* kShippedModel = "stories260K.gguf";
constexpr const char* kShippedPrompts = "mt_bench_20.jsonl";

std::string executable_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

// `file` in `folder` of assets/ as installed, in the build tree, in `extra` (relative
// to exe_dir) and in the source tree.
std::vector<std::string> shipped_candidates(const std::string& exe_dir, const std::string& folder, const char* file,
                                            const std::vector<std::filesystem::path>& extra) {
  std::vector<std::string> out;
  if (!exe_dir.empty()) {
    const std::filesystem::path d(exe_dir);
    std::vector<std::filesystem::path> rel = {std::filesystem::path("../share/fafo") / folder,
                                              std::filesystem::path("../../assets") / folder};
    rel.insert(rel.end(), extra.begin(), extra.end());
    for (const std::filesystem::path& r : rel) out.push_back((d / r / file).lexically_normal().string());
  }
#ifdef FAFO_SOURCE_ASSETS_DIR
  out.push_back((std::filesystem::path(FAFO_SOURCE_ASSETS_DIR) / folder / file).string());
#endif
  return out;
}

}  // namespace

std::vector<std::string> default_model_candidates(const std::string& exe_dir) {
  return shipped_candidates(exe_dir, "models", kShippedModel, {std::filesystem::path("../data")});
}

std::string default_model_path() {
  if (const char* env = std::getenv("FAFO_MODEL"); env && *env) {
    try {
      require_readable_file(env);
    } catch (const std::runtime_error& e) {
      throw std::runtime_error(std::string(e.what()) + " ($FAFO_MODEL)");
    }
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

std::vector<std::string> default_prompts_candidates(const std::string& exe_dir) {
  return shipped_candidates(exe_dir, "prompts", kShippedPrompts, {std::filesystem::path("../data")});
}

std::string default_prompts_path() {
  std::string looked;
  for (const std::string& c : default_prompts_candidates(executable_dir())) {
    if (std::filesystem::is_regular_file(c)) return c;
    looked += "\n  " + c;
  }
  throw std::runtime_error("--strategies without --prompts runs the shipped " + std::string(kShippedPrompts) +
                           ", which was not found in:" + looked + "\n(give --prompts FILE.jsonl)");
}

}  // namespace fafo::app
