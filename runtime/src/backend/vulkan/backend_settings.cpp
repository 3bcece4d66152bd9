#include "backend/vulkan/backend_settings.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "fafo/cache_dir.h"

namespace fafo::vulkan {

namespace {

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) == value;
}
bool env_off(const char* name) { return env_is(name, "0"); }
// The variable's value, or "" when unset.
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}
[[noreturn]] void bad_value(const char* name, const std::string& value, const char* accepted) {
  throw std::runtime_error(std::string(name) + "=" + value + ": expected " + accepted);
}

}  // namespace

BackendSettings resolve_settings(const VulkanBackendOptions& options, bool cpu_device) {
  BackendSettings s;
  s.fuse_qkv = options.fuse_qkv && !env_off("FAFO_VULKAN_FUSE");
  // Fused RMSNorms: the option, else FAFO_VULKAN_FUSE_NORM, else on GPUs only (on a CPU
  // device such as lavapipe the fused product costs more than the dispatch it saves:
  // stories260K's one-token step 5.5 ms fused, 3.4 ms apart).
  const bool norm_env_off = env_off("FAFO_VULKAN_FUSE") || env_off("FAFO_VULKAN_FUSE_NORM");
  s.fuse_norm = options.fuse_norm ? *options.fuse_norm
                                  : !norm_env_off && (env_is("FAFO_VULKAN_FUSE_NORM", "1") || !cpu_device);
  s.fuse_norm_off = options.fuse_norm ? !*options.fuse_norm : norm_env_off;
  s.replay = options.replay && !env_off("FAFO_VULKAN_REPLAY");
  s.int8 = options.int8_products ? *options.int8_products
                                 : !env_off("FAFO_VULKAN_INT8") && (env_is("FAFO_VULKAN_INT8", "1") || !cpu_device);

  if (options.matrix_tiles) {
    s.tiles = *options.matrix_tiles;
  } else if (const std::string v = env("FAFO_VULKAN_TILES"); !v.empty()) {
    if (v == "1") s.tiles = MatrixTilesUse::Auto;
    else if (v == "0") s.tiles = MatrixTilesUse::Off;
    else if (v == "loops") s.tiles = MatrixTilesUse::Loops;
    else bad_value("FAFO_VULKAN_TILES", v, "0, 1 or loops");
  }
  if (!s.int8) s.tiles = MatrixTilesUse::Off;  // checked above even where unused

  using Mapping = Kernels::AttentionArgs::Mapping;
  if (options.attention) {
    s.attention = *options.attention;
  } else if (const std::string v = env("FAFO_VULKAN_ATTENTION"); !v.empty()) {
    if (v == "workgroup") s.attention = Mapping::Workgroup;
    else if (v == "serial") s.attention = Mapping::Serial;
    else if (v == "grouped") s.attention = Mapping::Grouped;
    else bad_value("FAFO_VULKAN_ATTENTION", v, "workgroup, serial or grouped");
  }

  if (options.tune) {
    s.tune = *options.tune;
    s.tune_again = *options.tune && options.tune_again;
  } else if (const std::string v = env("FAFO_VULKAN_TUNE"); !v.empty()) {
    if (v == "1") s.tune = true;
    else if (v == "again") s.tune = s.tune_again = true;
    else if (v != "0") bad_value("FAFO_VULKAN_TUNE", v, "0, 1 or again");
  } else {
    s.tune = !cpu_device;
  }
  const std::filesystem::path dir =
      options.tuning_dir.empty() ? default_cache_dir() : std::filesystem::path(options.tuning_dir);
  s.keep_tuning = s.tune && options.tuning_dir != "off" && !dir.empty();
  if (s.keep_tuning) s.tuning_dir = dir;
  return s;
}

}  // namespace fafo::vulkan
