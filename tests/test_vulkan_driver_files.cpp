// NVIDIA's Vulkan driver on a machine without a display (backend/vulkan/driver_files.h):
// which driver file fafo points the loader at, from ICD files in temporary folders and
// a probe told which libraries give an instance; and the real probe on lavapipe.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "test_support.h"

#if FAFO_HAVE_VULKAN
#include "backend/vulkan/driver_files.h"

namespace fafo::vulkan {
namespace {

namespace fs = std::filesystem;

struct Machine {
  fs::path root;
  fs::path loader_dir, nvidia_dir, lib_dir, out_dir;
  std::set<std::string> working;  // library file names whose probe succeeds

  explicit Machine(const std::string& name) : root(fafo::test::temp_dir(name)) {
    loader_dir = root / "usr/share/vulkan/icd.d";
    nvidia_dir = root / "usr/local/nvidia/share/vulkan/icd.d";
    lib_dir = root / "lib";
    out_dir = root / "cache";
    for (const fs::path& d : {loader_dir, nvidia_dir, lib_dir}) fs::create_directories(d);
  }
  void icd(const fs::path& dir, const std::string& file, const std::string& library) const {
    std::ofstream(dir / file) << R"({"file_format_version": "1.0.1", "ICD": {"library_path": ")" << library
                              << R"(", "api_version": "1.4.312"}})";
  }
  void library(const std::string& name, bool works) {
    std::ofstream(lib_dir / name) << "not a real library";
    if (works) working.insert(name);
  }
  DriverSearch search() const {
    DriverSearch s;
    s.icd_dirs = {loader_dir.string(), nvidia_dir.string()};
    s.loader_searched = 1;
    s.library_dirs = {lib_dir.string()};
    s.out_dir = out_dir.string();
    s.gives_instance = [this](const std::string& path) { return working.count(fs::path(path).filename().string()) > 0; };
    return s;
  }
};

TEST(VulkanDriverFiles, NothingChangesWithoutAnNvidiaDriverFile) {
  Machine m("driver_files_none");
  m.icd(m.loader_dir, "lvp_icd.x86_64.json", "/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so");
  const DriverChoice c = choose_vulkan_drivers(m.search());
  EXPECT_EQ(c.driver_files, "");
  EXPECT_EQ(c.note, "");
}

TEST(VulkanDriverFiles, NothingChangesWhenTheLoaderFindsAWorkingNvidiaDriver) {
  Machine m("driver_files_glx_works");
  m.icd(m.loader_dir, "nvidia_icd.json", "libGLX_nvidia.so.0");
  m.library("libGLX_nvidia.so.0", true);
  m.library("libEGL_nvidia.so.0", true);
  const DriverChoice c = choose_vulkan_drivers(m.search());
  EXPECT_EQ(c.driver_files, "");
  EXPECT_EQ(c.note, "");
  EXPECT_FALSE(fs::exists(m.out_dir));
}

TEST(VulkanDriverFiles, WithoutADisplayTheEglLibraryIsUsedAndTheOtherDriversKept) {
  Machine m("driver_files_egl");
  m.icd(m.loader_dir, "lvp_icd.x86_64.json", "/usr/lib/x86_64-linux-gnu/libvulkan_lvp.so");
  m.icd(m.loader_dir, "nvidia_icd.json", "libGLX_nvidia.so.0");
  m.library("libGLX_nvidia.so.0", false);  // no vkCreateInstance without a display
  m.library("libEGL_nvidia.so.0", true);
  const DriverChoice c = choose_vulkan_drivers(m.search());
  const fs::path written = m.out_dir / "nvidia_egl_icd.json";
  EXPECT_EQ(c.driver_files, written.string() + ":" + (m.loader_dir / "lvp_icd.x86_64.json").string());
  EXPECT_HAS(c.note, "libGLX_nvidia.so.0");
  EXPECT_HAS(c.note, "libEGL_nvidia.so.0");
  ASSERT_TRUE(fs::exists(written));
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(written));
  EXPECT_EQ(j["ICD"]["library_path"], (m.lib_dir / "libEGL_nvidia.so.0").string());  // absolute: no search needed
  EXPECT_EQ(j["ICD"]["api_version"], "1.4.312");
}

TEST(VulkanDriverFiles, AnNvidiaDriverFileOutsideTheLoadersSearchIsAdded) {
  Machine m("driver_files_container");
  m.icd(m.nvidia_dir, "nvidia_icd.json", "libGLX_nvidia.so.0");
  m.library("libGLX_nvidia.so.0", true);
  const DriverChoice c = choose_vulkan_drivers(m.search());
  EXPECT_EQ(c.driver_files, (m.nvidia_dir / "nvidia_icd.json").string());
  EXPECT_HAS(c.note, "outside the Vulkan loader's search path");
}

TEST(VulkanDriverFiles, WhenNeitherLibraryWorksTheNoteSaysWhyAndNothingIsSet) {
  Machine m("driver_files_broken");
  m.icd(m.nvidia_dir, "nvidia_icd.json", "libGLX_nvidia.so.0");
  m.library("libGLX_nvidia.so.0", false);
  const DriverChoice missing = choose_vulkan_drivers(m.search());
  EXPECT_EQ(missing.driver_files, "");
  EXPECT_HAS(missing.note, "no libEGL_nvidia.so.0");
  m.library("libEGL_nvidia.so.0", false);
  const DriverChoice broken = choose_vulkan_drivers(m.search());
  EXPECT_EQ(broken.driver_files, "");
  EXPECT_HAS(broken.note, "gives none either");
}

TEST(VulkanDriverFiles, AMalformedDriverFileIsLeftToTheLoader) {
  Machine m("driver_files_malformed");
  std::ofstream(m.loader_dir / "broken.json") << "{ not json";
  m.icd(m.loader_dir, "nvidia_icd.json", "libGLX_nvidia.so.0");
  m.library("libGLX_nvidia.so.0", false);
  m.library("libEGL_nvidia.so.0", true);
  const DriverChoice c = choose_vulkan_drivers(m.search());
  EXPECT_EQ(c.driver_files, (m.out_dir / "nvidia_egl_icd.json").string());
}

// The real probe: lavapipe's library gives vkCreateInstance the way the loader asks for
// it; a library that is no Vulkan driver does not.
TEST(VulkanDriverFiles, TheProbeAsksADriverLibraryAsTheLoaderDoes) {
  const DriverSearch s = machine_driver_search();
  std::string lavapipe;
  for (const std::string& dir : s.library_dirs)
    if (fs::exists(fs::path(dir) / "libvulkan_lvp.so")) {
      lavapipe = (fs::path(dir) / "libvulkan_lvp.so").string();
      break;
    }
  if (lavapipe.empty()) GTEST_SKIP() << "no lavapipe library (libvulkan_lvp.so) on this machine";
  EXPECT_TRUE(s.gives_instance(lavapipe));
  std::string not_a_driver;
  for (const std::string& dir : s.library_dirs)
    if (fs::exists(fs::path(dir) / "libm.so.6")) {
      not_a_driver = (fs::path(dir) / "libm.so.6").string();
      break;
    }
  ASSERT_FALSE(not_a_driver.empty());
  EXPECT_FALSE(s.gives_instance(not_a_driver));
  EXPECT_FALSE(s.gives_instance("/nonexistent/libGLX_nvidia.so.0"));
}

}  // namespace
}  // namespace fafo::vulkan
#endif  // FAFO_HAVE_VULKAN
