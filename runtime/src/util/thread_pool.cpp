#include "util/thread_pool.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace fafo {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (n_threads > kMaxThreads)
    throw std::invalid_argument("thread count " + std::to_string(n_threads) + " is too large (at most " +
                                std::to_string(kMaxThreads) + ")");
  // Spinning only pays while every thread has a hardware thread of its own.
  if (static_cast<unsigned>(n_threads) <= std::thread::hardware_concurrency()) spin_ = kSpin;
  workers_.reserve(static_cast<size_t>(n_threads - 1));
  try {
    for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
  } catch (const std::exception& e) {
    // Destroying a joinable std::thread calls std::terminate: stop the started ones first.
    const size_t started = workers_.size();
    stop_and_join();
    throw std::runtime_error("cannot start " + std::to_string(n_threads) + " threads (the system refused thread " +
                             std::to_string(started + 1) + ": " + e.what() + "); use fewer threads");
  }
}

ThreadPool::~ThreadPool() { stop_and_join(); }

void ThreadPool::stop_and_join() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_)
    if (w.joinable()) w.join();
}

template <class Done>
void ThreadPool::spin_until(Done done) const {
  if (spin_.count() == 0) return;
  const auto deadline = std::chrono::steady_clock::now() + spin_;
  for (int i = 1; !done(); ++i) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) return;
  }
}

void ThreadPool::run_chunks(std::unique_lock<std::mutex>& lock, int index) {
  for (;;) {
    const int64_t begin = next_;
    if (begin >= job_n_) return;
    next_ = std::min(job_n_, next_ + chunk_);
    const int64_t end = next_;
    const auto* job = job_;
    lock.unlock();
    std::exception_ptr error;
    try {
      (*job)(begin, end, index);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error) {
      if (!error_) error_ = error;
      next_ = job_n_;  // hand out no further chunks
      return;
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  const int64_t threads = size();
  if (threads == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  std::unique_lock<std::mutex> lock(mutex_);
  job_ = &fn;
  job_n_ = n;
  chunk_ = std::max<int64_t>(grain, (n + threads * 4 - 1) / (threads * 4));
  next_ = 0;
  pending_ = static_cast<int>(workers_.size());
  error_ = nullptr;
  ++generation_;
  lock.unlock();
  wake_.notify_all();

  // The caller works too. Whatever happens, it waits for every worker before returning:
  // they hold references to fn and to whatever fn captured.
  lock.lock();
  run_chunks(lock, 0);
  if (pending_ != 0) {
    lock.unlock();
    spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; });
    lock.lock();
  }
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
  std::exception_ptr error = std::exchange(error_, nullptr);
  lock.unlock();
  if (error) std::rethrow_exception(error);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (!stop_ && generation_ == seen) {
      lock.unlock();
      spin_until([&] { return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen; });
      lock.lock();
    }
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    run_chunks(lock, index);
    if (--pending_ == 0) done_.notify_all();
  }
}

}  // namespace fafo
