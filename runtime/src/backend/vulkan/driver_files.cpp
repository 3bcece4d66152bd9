#include "backend/vulkan/driver_files.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include <nlohmann/json.hpp>
#include <vulkan/vulkan.h>

#include "fafo/cache_dir.h"

namespace fafo::vulkan {

namespace {

namespace fs = std::filesystem;

constexpr const char* kGlx = "libGLX_nvidia.so.0";
constexpr const char* kEgl = "libEGL_nvidia.so.0";

struct IcdFile {
  std::string path;
  std::string library;  // as the file names it
  std::string api_version;
  bool loader_searched = false;
};

bool is_nvidia(const IcdFile& f) {
  const std::string name = fs::path(f.library).filename().string();
  return name == kGlx || name == kEgl;
}

std::vector<IcdFile> read_icd_files(const DriverSearch& search) {
  std::vector<IcdFile> out;
  for (size_t d = 0; d < search.icd_dirs.size(); ++d) {
    std::error_code ec;
    if (!fs::is_directory(search.icd_dirs[d], ec)) continue;
    std::vector<fs::path> files;
    for (const fs::directory_entry& e : fs::directory_iterator(search.icd_dirs[d], ec))
      if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const fs::path& p : files) {
      try {
        std::ifstream in(p);
        const nlohmann::json j = nlohmann::json::parse(in);
        const nlohmann::json& icd = j.at("ICD");
        IcdFile f;
        f.path = p.string();
        f.library = icd.at("library_path").get<std::string>();
        f.api_version = icd.value("api_version", "1.3.0");
        f.loader_searched = d < search.loader_searched;
        out.push_back(std::move(f));
      } catch (const std::exception&) {
        // Not an ICD file this code understands: the loader will judge it.
      }
    }
  }
  return out;
}

// The library's path: as named when it has a folder, else the first of the search's
// folders that holds it; "" when none does.
std::string resolve(const DriverSearch& search, const std::string& library) {
  std::error_code ec;
  if (library.find('/') != std::string::npos) return fs::exists(library, ec) ? library : "";
  for (const std::string& dir : search.library_dirs) {
    const fs::path p = fs::path(dir) / library;
    if (fs::exists(p, ec)) return p.string();
  }
  return "";
}

bool write_icd_file(const fs::path& path, const std::string& library, const std::string& api_version) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  const nlohmann::json j = {{"file_format_version", "1.0.1"},
                            {"ICD", {{"library_path", library}, {"api_version", api_version}}}};
  const fs::path tmp = path.string() + "." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    out << j.dump(1) << "\n";
    if (!out) return false;
  }
  fs::rename(tmp, path, ec);
  return !ec;
}

std::vector<std::string> split(const char* value, const std::string& fallback) {
  std::vector<std::string> out;
  std::stringstream s(value && *value ? value : fallback);
  for (std::string item; std::getline(s, item, ':');)
    if (!item.empty()) out.push_back(item);
  return out;
}

// The loader's own probe of a driver library: negotiate the interface, then ask for
// vkCreateInstance. The library stays loaded (NVIDIA's do not expect to be unloaded).
bool library_gives_instance(const std::string& path) {
  void* lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) return false;
  using Negotiate = VkResult (*)(uint32_t*);
  using GetProc = PFN_vkVoidFunction (*)(VkInstance, const char*);
  if (auto negotiate = reinterpret_cast<Negotiate>(::dlsym(lib, "vk_icdNegotiateLoaderICDInterfaceVersion"))) {
    uint32_t version = 5;
    if (negotiate(&version) != VK_SUCCESS) return false;
  }
  auto get = reinterpret_cast<GetProc>(::dlsym(lib, "vk_icdGetInstanceProcAddr"));
  return get && get(VK_NULL_HANDLE, "vkCreateInstance") != nullptr;
}

}  // namespace

DriverSearch machine_driver_search() {
  DriverSearch s;
  const char* home = std::getenv("HOME");
  for (const std::string& d : split(std::getenv("XDG_CONFIG_DIRS"), "/etc/xdg")) s.icd_dirs.push_back(d + "/vulkan/icd.d");
  s.icd_dirs.push_back("/etc/vulkan/icd.d");
  if (const char* data_home = std::getenv("XDG_DATA_HOME"); data_home && *data_home)
    s.icd_dirs.push_back(std::string(data_home) + "/vulkan/icd.d");
  else if (home && *home)
    s.icd_dirs.push_back(std::string(home) + "/.local/share/vulkan/icd.d");
  for (const std::string& d : split(std::getenv("XDG_DATA_DIRS"), "/usr/local/share:/usr/share"))
    s.icd_dirs.push_back(d + "/vulkan/icd.d");
  s.loader_searched = s.icd_dirs.size();
  s.icd_dirs.push_back("/usr/local/nvidia/share/vulkan/icd.d");  // NVIDIA's container runtime puts it here

  s.library_dirs = split(std::getenv("LD_LIBRARY_PATH"), "");
  for (const char* d : {"/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu",
                        "/usr/lib/aarch64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib",
                        "/lib"})
    s.library_dirs.emplace_back(d);
  const fs::path cache = default_cache_dir();
  s.out_dir = (cache.empty() ? fs::temp_directory_path() / ("fafo-" + std::to_string(::getuid())) : cache / "vulkan")
                  .string();
  s.gives_instance = library_gives_instance;
  return s;
}

DriverChoice choose_vulkan_drivers(const DriverSearch& search) {
  const std::vector<IcdFile> files = read_icd_files(search);
  std::vector<const IcdFile*> nvidia;
  for (const IcdFile& f : files)
    if (is_nvidia(f)) nvidia.push_back(&f);
  if (nvidia.empty()) return {};
  auto works = [&](const IcdFile& f) {
    const std::string lib = resolve(search, f.library);
    return !lib.empty() && search.gives_instance(lib);
  };
  for (const IcdFile* f : nvidia)
    if (f->loader_searched && works(*f)) return {};  // the loader finds a working one itself

  DriverChoice choice;
  std::string chosen;
  for (const IcdFile* f : nvidia) {
    if (!f->loader_searched && works(*f)) {
      chosen = f->path;
      choice.note = "NVIDIA's Vulkan driver file " + f->path + ", outside the Vulkan loader's search path";
      break;
    }
  }
  if (chosen.empty()) {
    const IcdFile& broken = *nvidia.front();
    const std::string egl = resolve(search, kEgl);
    const std::string why = "NVIDIA's Vulkan driver file " + broken.path + " names " + broken.library +
                            ", which gives no Vulkan instance here (as on a machine without a display)";
    if (egl.empty() || !search.gives_instance(egl))
      return {"", why + (egl.empty() ? std::string("; no ") + kEgl + " to use instead"
                                     : std::string("; ") + egl + " gives none either")};
    const fs::path written = fs::path(search.out_dir) / "nvidia_egl_icd.json";
    if (!write_icd_file(written, egl, broken.api_version))
      return {"", why + "; could not write a driver file for " + egl + " to " + written.string()};
    chosen = written.string();
    choice.note = why + "; fafo uses the same driver's " + egl + " through " + chosen;
  }
  choice.driver_files = chosen;
  for (const IcdFile& f : files)  // every other driver the loader would have found stays
    if (f.loader_searched && !is_nvidia(f)) choice.driver_files += ":" + f.path;
  return choice;
}

const std::string& find_vulkan_drivers() {
  static std::once_flag once;
  static std::string note;
  std::call_once(once, [] {
    for (const char* v : {"VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES"})
      if (const char* set = std::getenv(v); set && *set) return;
    const DriverChoice choice = choose_vulkan_drivers(machine_driver_search());
    note = choice.note;
    if (!choice.driver_files.empty()) {
      ::setenv("VK_DRIVER_FILES", choice.driver_files.c_str(), 1);
      ::setenv("VK_ICD_FILENAMES", choice.driver_files.c_str(), 1);  // loaders older than 1.3.207 read this name
    }
  });
  return note;
}

}  // namespace fafo::vulkan
