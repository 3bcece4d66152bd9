// A fixed pool of worker threads running index ranges in parallel (used by the CPU
// backend). parallel_for blocks until every chunk is done. A decoding step runs hundreds
// of short parallel_for calls back to back, so a thread that runs out of work first
// spins for up to kSpin (when the pool has no more threads than the machine has
// hardware threads) before it sleeps on a condition variable. An exception thrown by fn (in
// any thread) stops the handing out of further chunks; once every thread has finished the
// chunk it was running, parallel_for rethrows the first such exception in the caller.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fafo {

class ThreadPool {
 public:
  static constexpr int kMaxThreads = 1024;
  // n_threads <= 0: hardware concurrency; more than kMaxThreads: std::invalid_argument.
  // When the system cannot start a thread: std::runtime_error (the started ones are joined).
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Calls fn(begin, end, thread_index) over [0, n) split into contiguous chunks; the
  // calling thread takes part. Chunks are at least `grain` long.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker_loop(int index);
  // Runs fn over the chunks still to hand out, as thread `index`, until none are left or
  // one has thrown. Called and returns with `lock` held.
  void run_chunks(std::unique_lock<std::mutex>& lock, int index);
  void stop_and_join();
  // Returns when done() holds or after spin_ has passed (then done() may still be false).
  template <class Done>
  void spin_until(Done done) const;

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t chunk_ = 0;
  int64_t next_ = 0;
  // Written with mutex_ held; read without it only while spinning.
  std::atomic<int> pending_{0};
  std::exception_ptr error_;  // the first exception thrown by the current job
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  static constexpr std::chrono::microseconds kSpin{100};
  std::chrono::microseconds spin_{0};
};

}  // namespace fafo
