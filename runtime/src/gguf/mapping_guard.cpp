#include "fafo/mapping_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>

namespace fafo {

namespace {

struct Slot {
  std::atomic<uintptr_t> base{0};
  std::atomic<size_t> size{0};
  std::atomic<bool> damaged{false};
};

constexpr int kSlots = 256;
Slot g_slots[kSlots];
uintptr_t g_page = 4096;
struct sigaction g_previous {};
std::mutex g_install;
bool g_installed = false;

// Async-signal-safe: atomics and mmap only.
void on_sigbus(int sig, siginfo_t* info, void* context) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    const uintptr_t base = s.base.load(std::memory_order_acquire);
    const size_t size = s.size.load(std::memory_order_acquire);
    if (base == 0 || addr < base || addr >= base + size) continue;
    const uintptr_t page = addr & ~(g_page - 1);
    void* zeros = ::mmap(reinterpret_cast<void*>(page), base + size - page, PROT_READ,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (zeros == MAP_FAILED) break;
    s.damaged.store(true, std::memory_order_release);
    return;  // the read runs again and sees zeros
  }
  // Not a guarded map: what would have happened without this handler.
  if ((g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_sigaction) {
    g_previous.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);
}

void install_once() {
  std::lock_guard<std::mutex> lock(g_install);
  if (g_installed) return;
  const long page = ::sysconf(_SC_PAGESIZE);
  if (page > 0) g_page = static_cast<uintptr_t>(page);
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  if (::sigaction(SIGBUS, &sa, &g_previous) == 0) g_installed = true;
}

}  // namespace

int guard_mapping(const void* base, size_t size) {
  if (!base || size == 0) return -1;
  install_once();
  for (int i = 0; i < kSlots; ++i) {
    uintptr_t expected = 0;
    Slot& s = g_slots[i];
    // A free slot has size 0, so the handler matches it only once the size is stored.
    if (s.base.compare_exchange_strong(expected, reinterpret_cast<uintptr_t>(base), std::memory_order_acq_rel)) {
      s.damaged.store(false, std::memory_order_release);
      s.size.store(size, std::memory_order_release);
      return i;
    }
  }
  return -1;
}

void unguard_mapping(int handle) {
  if (handle < 0 || handle >= kSlots) return;
  Slot& s = g_slots[handle];
  s.size.store(0, std::memory_order_release);
  s.base.store(0, std::memory_order_release);
}

bool mapping_damaged(int handle) {
  return handle >= 0 && handle < kSlots && g_slots[handle].damaged.load(std::memory_order_acquire);
}

}  // namespace fafo
