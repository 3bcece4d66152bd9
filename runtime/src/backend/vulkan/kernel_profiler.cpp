#include "backend/vulkan/kernel_profiler.h"

#include <algorithm>
#include <utility>

#include "backend/vulkan/context.h"
#include "backend/vulkan/vulkan_error.h"

namespace fafo::vulkan {

namespace {
constexpr uint32_t kFirstCapacity = 1024;
}  // namespace

KernelProfiler::KernelProfiler(const Context& context) : device_(context.device()) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(context.physical_device(), &n, nullptr);
  std::vector<VkQueueFamilyProperties> families(n);
  vkGetPhysicalDeviceQueueFamilyProperties(context.physical_device(), &n, families.data());
  const uint32_t bits = context.queue_family() < n ? families[context.queue_family()].timestampValidBits : 0;
  const float period = context.properties().limits.timestampPeriod;
  if (bits == 0) {
    unsupported_ = "device " + context.device_name() + " has no timestamps on its compute queue";
    return;
  }
  if (!(period > 0.0f)) {
    unsupported_ = "device " + context.device_name() + " reports no timestamp period";
    return;
  }
  ns_per_tick_ = period;
  valid_mask_ = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  make_pool(kFirstCapacity);
}

KernelProfiler::~KernelProfiler() {
  if (pool_ != VK_NULL_HANDLE) vkDestroyQueryPool(device_, pool_, nullptr);
}

void KernelProfiler::make_pool(uint32_t capacity) {
  if (pool_ != VK_NULL_HANDLE) vkDestroyQueryPool(device_, pool_, nullptr);
  pool_ = VK_NULL_HANDLE;
  VkQueryPoolCreateInfo info{};
  info.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO;
  info.queryType = VK_QUERY_TYPE_TIMESTAMP;
  info.queryCount = capacity;
  check(vkCreateQueryPool(device_, &info, nullptr, &pool_), "vkCreateQueryPool");
  capacity_ = capacity;
}

void KernelProfiler::begin(VkCommandBuffer commands) {
  if (!unsupported_.empty()) return;
  // The pool is only in use while a step runs (steps are submitted and waited for one
  // at a time), so it can grow between steps.
  if (overflow_) make_pool(capacity_ * 2);
  overflow_ = false;
  pending_.clear();
  vkCmdResetQueryPool(commands, pool_, 0, capacity_);
  vkCmdWriteTimestamp(commands, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, 0);
}

void KernelProfiler::after(VkCommandBuffer commands, const std::string& name) {
  if (!unsupported_.empty()) return;
  auto [it, added] = index_.try_emplace(name, profile_.kernels.size());
  if (added) profile_.kernels.push_back({name, 0, 0.0, 0.0});
  pending_.push_back({it->second, 0.0});
  if (pending_.size() + 1 > capacity_) {
    overflow_ = true;  // this step is not timed; the next one gets a pool twice as large
    return;
  }
  vkCmdWriteTimestamp(commands, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, pool_, static_cast<uint32_t>(pending_.size()));
}

void KernelProfiler::add_bytes(double bytes) {
  if (!pending_.empty()) pending_.back().bytes += bytes;
}

void KernelProfiler::collect(uint32_t dispatches, uint32_t barriers, bool ends_step) {
  if (!unsupported_.empty() || overflow_ || pending_.empty()) {
    pending_.clear();
    return;
  }
  std::vector<uint64_t> ticks(pending_.size() + 1);
  check(vkGetQueryPoolResults(device_, pool_, 0, static_cast<uint32_t>(ticks.size()), ticks.size() * sizeof(uint64_t),
                              ticks.data(), sizeof(uint64_t), VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
        "vkGetQueryPoolResults");
  const auto elapsed = [&](size_t i) {  // seconds between timestamps i and i + 1
    const uint64_t d = (ticks[i + 1] - ticks[i]) & valid_mask_;
    return static_cast<double>(d) * ns_per_tick_ * 1e-9;
  };
  for (size_t i = 0; i < pending_.size(); ++i) {
    KernelProfile::Kernel& k = profile_.kernels[pending_[i].kernel];
    ++k.calls;
    k.seconds += elapsed(i);
    k.bytes += pending_[i].bytes;
    profile_.step_seconds += elapsed(i);
  }
  if (ends_step) ++profile_.steps;
  profile_.dispatches += dispatches;
  profile_.barriers += barriers;
  pending_.clear();
}

KernelProfile KernelProfiler::take() {
  KernelProfile out = std::move(profile_);
  profile_ = {};
  index_.clear();
  pending_.clear();
  return out;
}

}  // namespace fafo::vulkan
