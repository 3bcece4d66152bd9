#include "step_gate.h"

#include <utility>

namespace fafo::studio {

void StepGate::begin(int32_t max_steps, bool paused) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++epoch_;
  queue_.clear();
  max_steps_ = max_steps;
  stop_ = false;
  paused_ = paused;
  permits_ = 0;
  stats_ = {};
}

void StepGate::end() {
  std::lock_guard<std::mutex> lock(mutex_);
  paused_ = false;
  permits_ = 0;
}

void StepGate::on_step(const StepTrace& t) {
  std::unique_lock<std::mutex> lock(mutex_);
  queue_.push_back(t);
  const auto now = Clock::now();
  if (stats_.steps == 0) first_token_ = now;
  ++stats_.steps;
  stats_.tokens += static_cast<int64_t>(t.accepted.size());
  stats_.decode_seconds = std::chrono::duration<double>(now - first_token_).count();
  if (max_steps_ > 0 && stats_.steps >= max_steps_) stop_ = true;
  waiting_ = true;
  wake_.wait(lock, [this] { return released(); });
  waiting_ = false;
  if (permits_ > 0) --permits_;
}

bool StepGate::should_stop() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stop_ || closed_;
}

void StepGate::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);  // no lost wake-up between the waiter's check and its wait
    stop_ = true;
  }
  wake_.notify_all();
}

void StepGate::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
  }
  wake_.notify_all();
}

bool StepGate::drain(std::vector<StepTrace>& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  const bool fresh = drained_epoch_ != epoch_;
  if (fresh) out.clear();
  drained_epoch_ = epoch_;
  for (auto& t : queue_) out.push_back(std::move(t));
  queue_.clear();
  return fresh;
}

void StepGate::set_paused(bool paused) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    paused_ = paused;
    permits_ = 0;
  }
  wake_.notify_all();
}

bool StepGate::paused() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return paused_;
}

void StepGate::allow_one_step() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++permits_;
  }
  wake_.notify_all();
}

bool StepGate::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return waiting_ && !released();
}

LiveStats StepGate::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace fafo::studio
