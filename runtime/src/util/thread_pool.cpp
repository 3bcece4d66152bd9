#include "util/thread_pool.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace fafo {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (n_threads > kMaxThreads)
    throw std::invalid_argument("thread count " + std::to_string(n_threads) + " is too large (at most " +
                                std::to_string(kMaxThreads) + ")");
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& w : workers_) w.join();
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
  ++generation_;
  lock.unlock();
  wake_.notify_all();

  // The caller works too.
  for (;;) {
    lock.lock();
    const int64_t begin = next_;
    next_ = std::min(job_n_, next_ + chunk_);
    lock.unlock();
    if (begin >= job_n_) break;
    fn(begin, std::min(job_n_, begin + chunk_), 0);
  }
  lock.lock();
  done_.wait(lock, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    for (;;) {
      const int64_t begin = next_;
      if (begin >= job_n_) break;
      next_ = std::min(job_n_, next_ + chunk_);
      const int64_t end = next_;
      const auto* job = job_;
      lock.unlock();
      (*job)(begin, end, index);
      lock.lock();
    }
    if (--pending_ == 0) done_.notify_all();
  }
}

}  // namespace fafo
