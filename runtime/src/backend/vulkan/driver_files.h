// NVIDIA's Vulkan driver on a machine without a display. The driver's ICD file names
// libGLX_nvidia.so.0, whose vk_icdGetInstanceProcAddr gives no vkCreateInstance when no
// X server runs (seen on an H100 cloud machine, driver 580: "Found no drivers!"); the
// same driver's EGL library, libEGL_nvidia.so.0, carries the same Vulkan entry points and
// works there. And container images put the ICD file under /usr/local/nvidia/share, which
// the Vulkan loader does not search.
//
// Before the process's first vkCreateInstance, find_vulkan_drivers() checks for both and,
// where one applies, points the loader at a driver file that works (VK_DRIVER_FILES,
// with every other driver file of the loader's own search kept), so that `fafo` finds
// the GPU with no setting. It does nothing when the user set a driver variable, when no
// NVIDIA ICD file exists, or when the loader already finds one that works.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace fafo::vulkan {

struct DriverSearch {
  std::vector<std::string> icd_dirs;      // where ICD files are looked for, the loader's own first
  size_t loader_searched = 0;             // icd_dirs[0, loader_searched) are the loader's search path
  std::vector<std::string> library_dirs;  // where a library named without a path is looked for
  std::string out_dir;                    // where a written ICD file goes
  // Whether the library at this path gives vkCreateInstance through vk_icdGetInstanceProcAddr.
  std::function<bool(const std::string& path)> gives_instance;
};

struct DriverChoice {
  std::string driver_files;  // the VK_DRIVER_FILES value to set; "" when nothing is to change
  std::string note;          // what was found and done, for `fafo devices`; "" when nothing
};

// The machine's search: the loader's ICD folders (XDG_CONFIG_DIRS, /etc, XDG_DATA_DIRS,
// /usr/local/share, /usr/share), then /usr/local/nvidia/share/vulkan/icd.d; libraries on
// LD_LIBRARY_PATH, /usr/local/nvidia/lib64 and the system's folders; ICD files written to
// FAFO_CACHE_DIR (or ~/.cache/fafo); the probe dlopen()s the library.
DriverSearch machine_driver_search();

// What to do, from the files alone (no environment read, nothing set): testable.
DriverChoice choose_vulkan_drivers(const DriverSearch& search);

// Once per process, before the first Vulkan instance: applies choose_vulkan_drivers()
// to this machine unless VK_DRIVER_FILES, VK_ICD_FILENAMES or VK_ADD_DRIVER_FILES is set.
// Returns the note (also on later calls).
const std::string& find_vulkan_drivers();

}  // namespace fafo::vulkan
