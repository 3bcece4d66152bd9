#include "slot_pool.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "fafo/device_error.h"

namespace fafo::server {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

namespace {

// What the model's devices have allocated, all of a layer split's together.
uint64_t memory_in_use_on_every_device(const Sequence& m) {
  const ModelWeights& w = m.runner()->weights();
  uint64_t bytes = 0;
  for (int32_t d = 0; d < w.n_devices(); ++d) bytes += memory_in_use(w.backend(d));
  return bytes;
}

}  // namespace

SlotPool::SlotPool(int n, int max_queue, const std::function<OpenedModel()>& open, DraftOpener open_draft)
    : open_(open), open_draft_(std::move(open_draft)), max_queue_(max_queue) {
  if (n < 1) throw std::invalid_argument("--parallel must be at least 1");
  base_ = std::make_shared<OpenedModel>(open());
  if (open_draft_) base_draft_ = open_draft_(*base_);
  if (n > 1) joiner_ = std::make_shared<StepJoiner>();
  for (int i = 0; i < n; ++i) {
    auto s = std::make_unique<Slot>();
    s->index = i;
    const uint64_t before = memory_in_use_on_every_device(*base_->model);
    try {
      s->model = i == 0 ? base_ : std::make_shared<OpenedModel>(open_sequence(*base_));
      s->draft = i == 0 ? base_draft_ : draft_sequence();
    } catch (const std::exception& e) {
      // Name what fits: the weights and i slots.
      Sequence& m = *base_->model;
      const uint64_t in_use = memory_in_use_on_every_device(m);
      throw std::runtime_error("--parallel " + std::to_string(n) + " does not fit: the weights and " + std::to_string(i) +
                               " slot" + (i == 1 ? "" : "s") + " (a KV cache of " + std::to_string(m.n_ctx()) +
                               " tokens each) use " + format_bytes(std::max(in_use, before)) + ", and slot " +
                               std::to_string(i + 1) + "'s failed: " + e.what() + "; use --parallel " +
                               std::to_string(i) + " or less, or a smaller --ctx-size");
    }
    join(*s);
    slots_.push_back(std::move(s));
  }
  in_use_.assign(slots_.size(), false);
}

void SlotPool::join(Slot& slot) const {
  if (joiner_ && slot.model) slot.model->model->set_step_joiner(joiner_);
}

std::shared_ptr<Sequence> SlotPool::draft_sequence() const {
  if (!base_draft_) return nullptr;
  SequenceOptions options;
  options.n_ctx = base_draft_->n_ctx();
  options.kv_type = base_draft_->kv_type();
  options.ring_step = base_draft_->ring_step();  // --swa-full's choice too
  return std::make_shared<Sequence>(base_draft_->runner(), options);
}

std::shared_ptr<const OpenedModel> SlotPool::model() const {
  std::lock_guard<std::mutex> lock(base_mutex_);
  return base_;
}

SlotPool::Lease& SlotPool::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = o.pool_, slot_ = o.slot_;
    o.pool_ = nullptr, o.slot_ = nullptr;
  }
  return *this;
}

void SlotPool::Lease::release() {
  if (pool_ && slot_) pool_->give_back(slot_);
  pool_ = nullptr, slot_ = nullptr;
}

SlotPool::Lease SlotPool::acquire(const std::vector<int32_t>& prompt) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto any_free = [&] {
    for (bool b : in_use_)
      if (!b) return true;
    return false;
  };
  if (!any_free()) {
    if (waiting_ >= max_queue_) return {};
    ++waiting_;
    freed_.wait(lock, any_free);
    --waiting_;
  }
  size_t best = slots_.size(), best_len = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (in_use_[i]) continue;
    const size_t len = common_prefix(slots_[i]->cached, prompt);
    if (best == slots_.size() || len > best_len) best = i, best_len = len;
  }
  in_use_[best] = true;
  if (joiner_) joiner_->enter();  // a leased slot steps soon: joined steps wait for it
  lock.unlock();
  refresh(*slots_[best]);
  return Lease(this, slots_[best].get());
}

void SlotPool::refresh(Slot& slot) {
  std::lock_guard<std::mutex> lock(base_mutex_);
  if (slot.model->model->runner() == base_->model->runner()) return;
  try {
    slot.model = std::make_shared<OpenedModel>(open_sequence(*base_));
    slot.draft = draft_sequence();
    slot.cached.clear();
    join(slot);
  } catch (...) {
    // The slot keeps its model; its request fails and reopens it.
  }
}

void SlotPool::give_back(Slot* slot) {
  refresh(*slot);  // a slot still on a replaced load moves now, so that load can go
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_[static_cast<size_t>(slot->index)] = false;
    if (joiner_) joiner_->leave();
  }
  freed_.notify_one();
}

void SlotPool::reopen(Slot& slot) {
  slot.cached.clear();
  std::lock_guard<std::mutex> lock(base_mutex_);
  try {
    if (slot.model->model->runner() == base_->model->runner()) {
      // The current weights failed: load them (and the draft model's) again. The slot
      // drops its models first, so that the old weights go once no other slot runs on them.
      slot.model.reset();
      slot.draft.reset();
      base_ = std::make_shared<OpenedModel>(open_());
      if (open_draft_) base_draft_ = open_draft_(*base_);
      slot.model = base_;
      slot.draft = base_draft_;
      move_idle_slots();
    } else {
      slot.model = std::make_shared<OpenedModel>(open_sequence(*base_));
      slot.draft = draft_sequence();
    }
  } catch (...) {
    if (!slot.model) slot.model = base_;
    if (!slot.draft) slot.draft = base_draft_;
  }
  join(slot);
}

void SlotPool::move_idle_slots() {
  std::lock_guard<std::mutex> lock(mutex_);  // no slot is leased meanwhile
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& idle = *slots_[i];
    if (in_use_[i] || idle.model->model->runner() == base_->model->runner()) continue;
    try {
      auto model = std::make_shared<OpenedModel>(open_sequence(*base_));
      std::shared_ptr<Sequence> draft = draft_sequence();
      idle.model = std::move(model);
      idle.draft = std::move(draft);
      idle.cached.clear();
      join(idle);
    } catch (...) {
      // It stays on the old load and moves when next leased or given back (refresh).
    }
  }
}

int SlotPool::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int n = 0;
  for (bool b : in_use_) n += b ? 1 : 0;
  return n;
}

int SlotPool::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return waiting_;
}

}  // namespace fafo::server
