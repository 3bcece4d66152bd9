// ThreadPool: every index is visited exactly once; an exception thrown by fn, in the
// caller's chunk or in a worker's, reaches the caller only after every thread has left
// fn, and the pool keeps working; a thread the system refuses to start is an error, not
// std::terminate.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "util/thread_pool.h"

#if defined(__linux__) && defined(__GLIBC__)
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

namespace fafo {
namespace {

using namespace std::chrono_literals;

// Waits (at most 10 s, so that a broken pool fails instead of hanging) until flag is set.
void wait_for(const std::atomic<bool>& flag) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!flag.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(100us);
}

// Runs parallel_for over [0, n) and checks that every index was visited exactly once.
void expect_each_index_once(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> visits(static_cast<size_t>(n));
  std::atomic<bool> bad_thread{false};
  pool.parallel_for(n, grain, [&](int64_t begin, int64_t end, int thread) {
    if (thread < 0 || thread >= pool.size() || begin >= end) bad_thread = true;
    for (int64_t i = begin; i < end; ++i) visits[static_cast<size_t>(i)].fetch_add(1);
  });
  EXPECT_FALSE(bad_thread);
  int64_t wrong = 0;
  for (const auto& v : visits) wrong += v.load() != 1;
  EXPECT_EQ(wrong, 0) << "indices not visited exactly once, n = " << n << ", grain = " << grain;
}

TEST(ThreadPool, EveryIndexVisitedExactlyOnce) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.size(), 4);
  for (const int64_t n : {1, 2, 3, 7, 16, 17, 100, 1000, 12345})
    for (const int64_t grain : {1, 4, 64, 5000}) expect_each_index_once(pool, n, grain);
  ThreadPool single(1);
  EXPECT_EQ(single.size(), 1);
  expect_each_index_once(single, 1000, 1);
  pool.parallel_for(0, 1, [](int64_t, int64_t, int) { FAIL() << "called for n = 0"; });
}

TEST(ThreadPool, TooManyThreadsIsRejected) {
  EXPECT_THROW(ThreadPool(ThreadPool::kMaxThreads + 1), std::invalid_argument);
  EXPECT_THROW(ThreadPool(1 << 30), std::invalid_argument);
}

TEST(ThreadPool, ExceptionInTheCallersChunkWaitsForTheWorkers) {
  // fn and its state are declared before the pool so that they outlive it: a pool that
  // lets the exception out early must fail this test, not crash on dangling references.
  std::atomic<bool> worker_entered{false}, caller_throws{false};
  std::atomic<int> active{0};
  const std::function<void(int64_t, int64_t, int)> fn = [&](int64_t, int64_t, int thread) {
    if (thread == 0) {
      wait_for(worker_entered);  // a worker is inside fn when the caller throws
      caller_throws = true;
      throw std::runtime_error("caller chunk failed");
    }
    ++active;
    worker_entered = true;
    wait_for(caller_throws);
    std::this_thread::sleep_for(30ms);  // still running fn after the caller threw
    --active;
  };
  ThreadPool pool(4);
  const int64_t n = 4096;  // 16 chunks of 256: enough for every thread
  try {
    pool.parallel_for(n, 1, fn);
    ADD_FAILURE() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "caller chunk failed");
    ASSERT_EQ(active.load(), 0) << "parallel_for returned while workers were still running fn";
  }
  EXPECT_TRUE(worker_entered);
  expect_each_index_once(pool, n, 1);
}

TEST(ThreadPool, ExceptionInAWorkerReachesTheCaller) {
  ThreadPool pool(4);
  const int64_t n = 4096;
  const int64_t chunks = 16;
  std::atomic<bool> worker_threw{false};
  std::atomic<int> chunks_run{0}, active{0};
  try {
    pool.parallel_for(n, 1, [&](int64_t, int64_t, int thread) {
      ++chunks_run;
      if (thread != 0) {
        worker_threw = true;
        throw std::logic_error("worker " + std::to_string(thread) + " failed");
      }
      ++active;
      wait_for(worker_threw);
      std::this_thread::sleep_for(20ms);  // lets the pool record the error
      --active;
    });
    ADD_FAILURE() << "no exception";
  } catch (const std::logic_error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("worker ", 0), 0u) << e.what();
    EXPECT_EQ(active.load(), 0);
  }
  EXPECT_TRUE(worker_threw);
  // After the first exception no further chunks are handed out: each thread runs at most
  // the chunk it had plus, for the caller, none after its first.
  EXPECT_LT(chunks_run.load(), chunks);
  expect_each_index_once(pool, n, 1);

  // Every chunk throws: one exception comes back, and the pool still works.
  for (int round = 0; round < 20; ++round) {
    EXPECT_THROW(pool.parallel_for(n, 1, [](int64_t, int64_t, int) { throw std::out_of_range("every chunk"); }),
                 std::out_of_range);
  }
  expect_each_index_once(pool, 12345, 1);
}

TEST(ThreadPool, ExceptionWithoutWorkersPropagates) {
  ThreadPool pool(4);
  // n <= grain: the caller runs everything itself.
  EXPECT_THROW(pool.parallel_for(10, 100, [](int64_t, int64_t, int) { throw std::runtime_error("x"); }),
               std::runtime_error);
  expect_each_index_once(pool, 1000, 1);
}

#if defined(__linux__) && defined(__GLIBC__)
// In a child process whose address space leaves room for only a couple of thread stacks,
// ThreadPool(64) must throw std::runtime_error (after joining the threads it started)
// instead of destroying joinable threads, which calls std::terminate.
TEST(ThreadPool, ThreadCreationFailureIsAnError) {
  enum : int { kThrew = 0, kNoFailure = 3, kOtherException = 4, kBadMessage = 5, kNoLimit = 6 };
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    pthread_attr_t attr;
    size_t stack = 0;
    if (pthread_getattr_default_np(&attr) != 0 || pthread_attr_getstacksize(&attr, &stack) != 0 || stack == 0)
      _exit(kNoLimit);
    std::ifstream statm("/proc/self/statm");
    uint64_t pages = 0;
    if (!(statm >> pages)) _exit(kNoLimit);
    const uint64_t vm = pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    rlimit limit{};
    if (getrlimit(RLIMIT_AS, &limit) != 0) _exit(kNoLimit);
    limit.rlim_cur = vm + 2 * stack + (4u << 20);
    if (limit.rlim_max != RLIM_INFINITY && limit.rlim_cur > limit.rlim_max) _exit(kNoLimit);
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(kNoLimit);
    try {
      ThreadPool pool(64);
      _exit(kNoFailure);
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      _exit(msg.find("64 threads") != std::string::npos ? kThrew : kBadMessage);
    } catch (...) {
      _exit(kOtherException);
    }
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_FALSE(WIFSIGNALED(status)) << "the child died of signal " << WTERMSIG(status)
                                    << " (std::terminate on a joinable thread?)";
  ASSERT_TRUE(WIFEXITED(status));
  const int code = WEXITSTATUS(status);
  if (code == kNoFailure || code == kNoLimit) GTEST_SKIP() << "could not make thread creation fail here";
  EXPECT_EQ(code, kThrew) << "3: no failure, 4: another exception type, 5: message does not name the count";
}
#endif

}  // namespace
}  // namespace fafo
