#include "fafo/step_joiner.h"

#include <algorithm>
#include <exception>
#include <utility>
#include <vector>

namespace fafo {

StepJoiner::StepJoiner(std::chrono::microseconds max_wait, std::chrono::microseconds min_wait)
    : max_wait_(max_wait), min_wait_(std::min(min_wait, max_wait)) {}

void StepJoiner::enter() {
  std::lock_guard lock(mutex_);
  ++active_;
}

void StepJoiner::leave() {
  std::lock_guard lock(mutex_);
  if (active_ > 0) --active_;
  changed_.notify_all();  // a leader waiting for this sequence goes on
}

int32_t StepJoiner::active() const {
  std::lock_guard lock(mutex_);
  return active_;
}

StepJoiner::Stats StepJoiner::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::deque<StepJoiner::Waiting*> StepJoiner::take_batch() {
  Waiting* oldest = waiting_.front();
  std::deque<Waiting*> batch{oldest};
  waiting_.pop_front();
  const Sequence& lead = *oldest->model;
  if (!lead.joins_steps()) return batch;
  const auto rows = [](const Waiting* w) { return static_cast<int64_t>(w->request->batch->size()); };
  const auto logit_rows = [](const Waiting* w) { return static_cast<int64_t>(w->request->batch->logit_rows().size()); };
  int64_t tokens = rows(oldest), logits = logit_rows(oldest);
  const int64_t max_parts = lead.runner()->capabilities().max_step_sequences;
  // The smallest steps first: decode rows before multi-token steps and prefill chunks.
  std::vector<Waiting*> others(waiting_.begin(), waiting_.end());
  std::stable_sort(others.begin(), others.end(), [&](const Waiting* a, const Waiting* b) { return rows(a) < rows(b); });
  for (Waiting* w : others) {
    if (static_cast<int64_t>(batch.size()) >= max_parts) break;
    if (w->model->runner() != lead.runner() || !w->model->joins_steps()) continue;
    if (std::any_of(batch.begin(), batch.end(), [&](const Waiting* b) { return b->model == w->model; })) continue;
    if (tokens + rows(w) > StepRunner::kMaxStepTokens || logits + logit_rows(w) > lead.max_logit_rows()) continue;
    tokens += rows(w);
    logits += logit_rows(w);
    batch.push_back(w);
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), w));
  }
  return batch;
}

void StepJoiner::run(Sequence& model, StepRequest& request) {
  Waiting me{&model, &request, std::chrono::steady_clock::now()};
  std::unique_lock lock(mutex_);
  waiting_.push_back(&me);
  changed_.notify_all();
  while (!me.done) {
    if (running_) {
      changed_.wait(lock);
      continue;
    }
    // Lead the next step once every active sequence waits, or the oldest waited about
    // as long as a step takes (min_wait .. max_wait): a sequence doing host work is not
    // waited for longer than it would cost it to step alone.
    const auto limit = std::clamp<std::chrono::steady_clock::duration>(mean_step_, min_wait_, max_wait_);
    const auto deadline = waiting_.front()->since + limit;
    // A backend that computes one sequence per step joins nothing: no wait.
    const bool joins = waiting_.front()->model->runner()->capabilities().max_step_sequences > 1;
    if (joins && static_cast<int64_t>(waiting_.size()) < active_ && std::chrono::steady_clock::now() < deadline) {
      changed_.wait_until(lock, deadline);
      continue;
    }
    std::deque<Waiting*> batch = take_batch();
    running_ = true;
    lock.unlock();
    std::vector<std::pair<Sequence*, StepRequest*>> parts;
    for (Waiting* w : batch) parts.emplace_back(w->model, w->request);
    const auto started = std::chrono::steady_clock::now();
    try {
      Sequence::forward_joined(parts);
    } catch (...) {
      for (Waiting* w : batch) w->request->error = std::current_exception();
    }
    const auto took = std::chrono::steady_clock::now() - started;
    lock.lock();
    mean_step_ = stats_.steps == 0 ? took : mean_step_ + (took - mean_step_) / 8;
    running_ = false;
    for (Waiting* w : batch) w->done = true;
    ++stats_.steps;
    stats_.parts += static_cast<int64_t>(batch.size());
    stats_.most_parts = std::max<int64_t>(stats_.most_parts, static_cast<int64_t>(batch.size()));
    changed_.notify_all();
  }
}

}  // namespace fafo
