// Where the Vulkan backend's buffers live: RangeAllocator's placement of ranges in a
// block (no device needed), and MemoryPool's blocks on whatever Vulkan device the
// machine has (lavapipe in CI), with the Khronos validation layer enabled when it is
// installed: many buffers share a block, freed ranges are reused, large requests get a
// block of their own, alignment, and requests past maxMemoryAllocationSize or the heap
// fail with the sizes. Device tests are skipped, with the reason, when there is no
// Vulkan device or fafo was built without Vulkan.
#include <gtest/gtest.h>

#if FAFO_HAVE_VULKAN

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/vulkan/allocator.h"
#include "backend/vulkan/buffer.h"
#include "backend/vulkan/context.h"
#include "backend/vulkan/descriptor_cache.h"
#include "backend/vulkan/memory_pool.h"
#include "backend/vulkan/range_allocator.h"
#include "backend/vulkan/vulkan_error.h"
#include "vulkan_test_support.h"

namespace {

using fafo::vulkan::Allocator;
using fafo::vulkan::Buffer;
using fafo::vulkan::Context;
using fafo::vulkan::DescriptorCache;
using fafo::vulkan::Memory;
using fafo::vulkan::MemoryPool;
using fafo::vulkan::RangeAllocator;
using fafo::vulkan::ValidationLog;
using fafo::vulkan::VulkanError;

constexpr uint64_t kKiB = 1024, kMiB = 1024 * 1024;

// --- RangeAllocator -------------------------------------------------------------------

TEST(RangeAllocator, PlacesFirstFitAndMergesFreedRanges) {
  RangeAllocator r(1000);
  EXPECT_EQ(r.allocate(100, 1), 0u);
  EXPECT_EQ(r.allocate(100, 1), 100u);
  EXPECT_EQ(r.allocate(100, 1), 200u);
  EXPECT_EQ(r.used(), 300u);
  r.free(100, 100);
  EXPECT_EQ(r.free_ranges(), 2u);        // [100, 200) and [300, 1000)
  EXPECT_EQ(r.allocate(50, 1), 100u);    // first fit: the hole
  EXPECT_EQ(r.allocate(80, 1), 300u);    // the rest of the hole is too small
  r.free(100, 50);
  r.free(0, 100);
  r.free(300, 80);
  r.free(200, 100);                      // joins [0, 200) and [300, 1000)
  EXPECT_TRUE(r.empty());
  EXPECT_EQ(r.free_ranges(), 1u);
  EXPECT_EQ(r.allocate(1000, 1), 0u);
  EXPECT_EQ(r.allocate(1, 1), std::nullopt);
}

TEST(RangeAllocator, AlignsAndKeepsThePaddingFree) {
  RangeAllocator r(4096);
  EXPECT_EQ(r.allocate(10, 1), 0u);
  EXPECT_EQ(r.allocate(100, 256), 256u);  // [10, 256) stays free
  EXPECT_EQ(r.allocate(200, 1), 10u);     // and is used by the next range that fits there
  EXPECT_EQ(r.allocate(64, 64), 384u);    // 356 rounded up to 64
  EXPECT_EQ(r.used(), 374u);
  // Alignments that are not powers of two work too.
  EXPECT_EQ(r.allocate(1, 1000), 1000u);
}

TEST(RangeAllocator, RefusesWhatItCannotHoldAndBadFrees) {
  RangeAllocator r(256);
  EXPECT_EQ(r.allocate(257, 1), std::nullopt);
  EXPECT_EQ(r.allocate(200, 128), 0u);
  EXPECT_EQ(r.allocate(50, 128), std::nullopt);  // 56 bytes free, but not at a multiple of 128
  EXPECT_THROW(r.allocate(0, 1), std::invalid_argument);
  EXPECT_THROW(r.free(300, 10), std::logic_error);  // outside the block
  r.free(0, 200);
  EXPECT_THROW(r.free(0, 200), std::logic_error);   // freed twice
  EXPECT_TRUE(r.empty());
}

// --- MemoryPool on a device -------------------------------------------------------------

class VulkanMemory : public fafo::test::ValidatedVulkanSuite<fafo::test::NoKernels> {
 protected:
  // A pool of its own on the suite's device, with small limits.
  static std::unique_ptr<MemoryPool> small_pool(MemoryPool::Limits limits) {
    return std::make_unique<MemoryPool>(context_->physical_device(), context_->device(), context_->device_name(), limits);
  }
  // The host-visible, coherent memory type buffers of Memory::HostVisible use.
  static uint32_t host_type() {
    return context_->find_memory_type(~0u, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                      0);
  }
  static VkMemoryRequirements request(VkDeviceSize size, VkDeviceSize alignment = 16) {
    return VkMemoryRequirements{size, alignment, 1u << host_type()};
  }
};

TEST_F(VulkanMemory, ManyBuffersShareOneBlockWithoutOverlapping) {
  const MemoryPool::Stats before = context_->memory().stats();
  std::vector<Buffer> buffers;
  for (uint32_t i = 0; i < 100; ++i) buffers.emplace_back(*context_, 4 * kKiB + 4 * i, Memory::HostVisible);
  const MemoryPool::Stats during = context_->memory().stats();
  EXPECT_LE(during.device_allocations - before.device_allocations, 1u);
  EXPECT_LE(during.blocks, before.blocks + 1);
  EXPECT_EQ(during.ranges, before.ranges + 100);
  // Each buffer holds its own bytes.
  for (uint32_t i = 0; i < buffers.size(); ++i) {
    std::vector<uint32_t> words(buffers[i].size() / 4, i * 0x01010101u);
    buffers[i].upload(words.data(), words.size() * 4);
  }
  for (uint32_t i = 0; i < buffers.size(); ++i) {
    std::vector<uint32_t> words(buffers[i].size() / 4);
    buffers[i].download(words.data(), words.size() * 4);
    for (uint32_t w : words) ASSERT_EQ(w, i * 0x01010101u) << "buffer " << i;
  }
  buffers.clear();
  const MemoryPool::Stats after = context_->memory().stats();
  EXPECT_EQ(after.ranges, before.ranges);
  EXPECT_EQ(after.used_bytes, before.used_bytes);
}

TEST_F(VulkanMemory, TheBackendsDeviceBuffersShareBlocks) {
  // What a model load does: many zeroed device buffers through the Allocator.
  DescriptorCache descriptors(*context_);
  Allocator allocator(*context_, 0);
  const MemoryPool::Stats before = context_->memory().stats();
  std::vector<Buffer> buffers;
  for (int i = 0; i < 64; ++i) buffers.push_back(allocator.device(64 * kKiB, "a test buffer"));
  EXPECT_LE(context_->memory().stats().device_allocations - before.device_allocations, 1u);
  EXPECT_EQ(allocator.allocated(), 64 * 64 * kKiB);
  for (Buffer& b : buffers) allocator.release(b, descriptors);
  EXPECT_EQ(allocator.allocated(), 0u);
  EXPECT_EQ(context_->memory().stats().ranges, before.ranges);
}

TEST_F(VulkanMemory, FreedRangesAreReusedAndOneEmptyBlockIsKept) {
  auto pool = small_pool({kMiB, 0, 0});
  const MemoryPool::Range a = pool->allocate(request(100 * kKiB), host_type());
  EXPECT_EQ(pool->stats().device_allocations, 1u);
  pool->free(a);
  EXPECT_EQ(pool->stats().blocks, 1u);  // kept, empty, for the next request
  EXPECT_EQ(pool->stats().used_bytes, 0u);
  const MemoryPool::Range b = pool->allocate(request(300 * kKiB), host_type());
  EXPECT_EQ(pool->stats().device_allocations, 1u);
  EXPECT_EQ(b.memory, a.memory);
  EXPECT_EQ(b.offset, 0u);
  // Filling the block opens a second; emptying both keeps only one.
  const MemoryPool::Range c = pool->allocate(request(400 * kKiB), host_type());
  const MemoryPool::Range d = pool->allocate(request(400 * kKiB), host_type());
  EXPECT_EQ(c.memory, b.memory);
  EXPECT_NE(d.memory, b.memory);
  EXPECT_EQ(pool->stats().blocks, 2u);
  pool->free(b);
  pool->free(c);
  pool->free(d);
  EXPECT_EQ(pool->stats().blocks, 1u);
  EXPECT_EQ(pool->stats().ranges, 0u);
}

TEST_F(VulkanMemory, ALargeRequestGetsABlockOfItsOwnFreedWithIt) {
  auto pool = small_pool({kMiB, 0, 0});
  const MemoryPool::Range small = pool->allocate(request(64 * kKiB), host_type());
  const MemoryPool::Range large = pool->allocate(request(600 * kKiB), host_type());
  EXPECT_NE(large.memory, small.memory);
  EXPECT_EQ(large.offset, 0u);
  MemoryPool::Stats s = pool->stats();
  EXPECT_EQ(s.blocks, 2u);
  EXPECT_EQ(s.dedicated_blocks, 1u);
  EXPECT_EQ(s.block_bytes, kMiB + large.size);
  pool->free(large);
  s = pool->stats();
  EXPECT_EQ(s.blocks, 1u);
  EXPECT_EQ(s.dedicated_blocks, 0u);
  pool->free(small);
}

TEST_F(VulkanMemory, RangesFollowTheBuffersAlignmentAndTheAtomSize) {
  auto pool = small_pool({kMiB, 0, 0});
  const VkDeviceSize atom = context_->properties().limits.nonCoherentAtomSize;
  std::vector<MemoryPool::Range> ranges;
  for (const VkDeviceSize alignment : {VkDeviceSize{1}, VkDeviceSize{4}, VkDeviceSize{256}, VkDeviceSize{64}}) {
    ranges.push_back(pool->allocate(request(3, alignment), host_type()));
    EXPECT_EQ(ranges.back().offset % alignment, 0u);
    EXPECT_EQ(ranges.back().offset % atom, 0u);
    EXPECT_EQ(ranges.back().size % atom, 0u);
    EXPECT_GE(ranges.back().size, 3u);
    EXPECT_NE(ranges.back().mapped, nullptr);
  }
  for (const MemoryPool::Range& r : ranges) pool->free(r);
}

TEST_F(VulkanMemory, RequestsPastTheLimitsFailWithTheSizes) {
  auto pool = small_pool({kMiB, 2 * kMiB, 3 * kMiB});
  EXPECT_EQ(pool->block_bytes(), kMiB);
  EXPECT_EQ(pool->max_allocation(), 2 * kMiB);
  try {
    pool->allocate(request(2 * kMiB + 256), host_type());
    ADD_FAILURE() << "a range over maxMemoryAllocationSize was placed";
  } catch (const VulkanError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("maxMemoryAllocationSize"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(2 * kMiB + 256)), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(2 * kMiB)), std::string::npos) << what;
  }
  // The heap holds 3 MiB: two large ranges of 1.25 MiB, then only 0.5 MiB is left.
  const MemoryPool::Range a = pool->allocate(request(1280 * kKiB), host_type());
  const MemoryPool::Range b = pool->allocate(request(1280 * kKiB), host_type());
  try {
    pool->allocate(request(1280 * kKiB), host_type());
    ADD_FAILURE() << "the heap was overcommitted";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("out of device memory"), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(1280 * kKiB)), std::string::npos) << what;
    EXPECT_NE(what.find(std::to_string(3 * kMiB)), std::string::npos) << what;
  }
  // A shared block shrinks to what the heap has left.
  const MemoryPool::Range c = pool->allocate(request(100 * kKiB), host_type());
  EXPECT_EQ(pool->stats().block_bytes, 3 * kMiB);
  pool->free(a);
  pool->free(b);
  pool->free(c);
}

}  // namespace

#else  // !FAFO_HAVE_VULKAN

TEST(VulkanMemory, Skipped) { GTEST_SKIP() << "fafo was built without Vulkan (FAFO_VULKAN=OFF or not found)"; }

#endif
