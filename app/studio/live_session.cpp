#include "live_session.h"

#include <exception>
#include <utility>

namespace fafo::studio {

LiveSession::LiveSession(Model& model, const Tokenizer& tokenizer, LiveOptions options)
    : model_(model), tokenizer_(tokenizer), options_(std::move(options)) {}

LiveSession::~LiveSession() { stop(); }

void LiveSession::start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { run(); });
}

void LiveSession::run() {
  try {
    GenerationOptions g = options_.generation;
    g.on_step = [this](const StepTrace& t) { on_step(t); };
    const auto prompt = tokenizer_.encode(options_.prompt, true);
    generate(model_, tokenizer_, prompt, g, [this](int32_t) { return !stop_.load(); });
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = e.what();
  }
  finished_.store(true);
}

void LiveSession::on_step(const StepTrace& t) {
  std::unique_lock<std::mutex> lock(mutex_);
  queue_.push_back(t);
  const int64_t n = ++produced_;
  if (options_.max_steps > 0 && n >= options_.max_steps) stop_.store(true);
  // Paused: wait here (before the next step) until resumed, single-stepped or stopped.
  wake_.wait(lock, [this] { return !paused_ || permits_ > 0 || stop_.load(); });
  if (permits_ > 0) --permits_;
}

void LiveSession::drain(std::vector<StepTrace>& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& t : queue_) out.push_back(std::move(t));
  queue_.clear();
}

void LiveSession::set_paused(bool paused) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    paused_ = paused;
    permits_ = 0;
  }
  wake_.notify_all();
}

void LiveSession::allow_one_step() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++permits_;
  }
  wake_.notify_all();
}

void LiveSession::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);  // no lost wake-up between the waiter's check and its wait
    stop_.store(true);
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::string LiveSession::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

}  // namespace fafo::studio
