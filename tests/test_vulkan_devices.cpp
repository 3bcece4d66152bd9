// `fafo devices` and list_vulkan_devices(): every device with sane fields when Vulkan
// is there, and "no Vulkan devices found" with exit 0 when it is not.
#include <string>

#include "fafo/vulkan_devices.h"
#include "test_support.h"

namespace {


TEST(VulkanDevices, ListedDevicesHaveTheirProperties) {
  const std::vector<fafo::VulkanDeviceInfo> devices = fafo::list_vulkan_devices();
#if !FAFO_HAVE_VULKAN
  EXPECT_TRUE(devices.empty());
  GTEST_SKIP() << "fafo was built without Vulkan";
#endif
  if (devices.empty()) GTEST_SKIP() << "no Vulkan devices found on this machine";
  for (size_t i = 0; i < devices.size(); ++i) {
    const fafo::VulkanDeviceInfo& d = devices[i];
    SCOPED_TRACE(d.name);
    EXPECT_EQ(d.index, i);
    EXPECT_FALSE(d.name.empty());
    EXPECT_TRUE(d.type == "integrated" || d.type == "discrete" || d.type == "virtual" || d.type == "cpu" ||
                d.type == "other")
        << d.type;
    EXPECT_FALSE(d.driver.empty());
    EXPECT_EQ(d.api_version.rfind("1.", 0), 0u) << d.api_version;
    EXPECT_FALSE(d.heaps.empty());
    for (const fafo::VulkanMemoryHeap& h : d.heaps) EXPECT_GT(h.size, 0u);
    EXPECT_GE(d.max_storage_buffer_range, 1u << 27) << "Vulkan guarantees 2^27 bytes";
    EXPECT_GE(d.max_push_constants_size, 128u);
    EXPECT_EQ(d.features_in_use.rfind("optional features: ", 0), 0u) << d.features_in_use;
    if (d.subgroup_size >= 2 && d.subgroup_in_compute) {
      EXPECT_NE(d.features_in_use.find("subgroup"), std::string::npos) << d.features_in_use;
    }
  }
}

TEST(VulkanDevices, CommandListsEveryDevice) {
#if !FAFO_HAVE_VULKAN
  GTEST_SKIP() << "built without the Vulkan backend (FAFO_VULKAN=OFF): fafo devices lists none";
#endif
  const fafo::test::CommandResult o = fafo::test::run_fafo("devices");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const std::vector<fafo::VulkanDeviceInfo> devices = fafo::list_vulkan_devices();
  if (devices.empty()) {
    EXPECT_HAS(o.out, "no Vulkan devices found");
    return;
  }
  for (const fafo::VulkanDeviceInfo& d : devices) {
    EXPECT_HAS(o.out, "device " + std::to_string(d.index) + ": " + d.name);
  }
  for (const char* field : {"type:", "driver:", "Vulkan API version:", "memory heap 0:", "maxStorageBufferRange:",
                            "16-bit storage:", "8-bit storage:", "shaderFloat16:", "subgroup size:",
                            "integer dot product:", "cooperative matrix:", "fafo uses:"}) {
    EXPECT_HAS(o.out, field);
  }
}

TEST(VulkanDevices, NoDriverIsNotAnError) {
#if !FAFO_HAVE_VULKAN
  GTEST_SKIP() << "built without the Vulkan backend (FAFO_VULKAN=OFF): fafo devices lists none";
#endif
  // Point the loader at a driver list that does not exist: no device, exit 0.
  const std::string fafo = fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo"));
  const fafo::test::CommandResult o = fafo::test::run_command(
      "VK_ICD_FILENAMES=/nonexistent/fafo_icd.json VK_DRIVER_FILES=/nonexistent/fafo_icd.json " + fafo + " devices");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_HAS(o.out, "no Vulkan devices found");
}

}  // namespace
