// The server's slots: `--parallel N` sequences on one load of the model's weights
// (one StepRunner), each with its own KV cache and the tokens it holds, so N requests
// generate at once and a conversation that comes back finds its earlier turns still
// cached. The slots' steps go through one StepJoiner (fafo/step_joiner.h): the steps
// that leased slots ask for at the same time run as one step over the weights, where
// the backend joins steps (cpu, reference, cuda; Vulkan runs them one by one). A request takes the free slot whose cache shares
// the longest prefix with its prompt; beyond N running requests, up to `max_queue` wait
// for a slot and the rest are refused (the server answers 503).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "fafo/open_model.h"
#include "fafo/step_joiner.h"

namespace fafo::server {

struct Slot {
  int index = 0;
  std::shared_ptr<OpenedModel> model;
  std::shared_ptr<Sequence> draft;  // its draft model's sequence (--draft-model), or null
  std::vector<int32_t> cached;  // the tokens the KV cache holds, in order
};

class SlotPool {
 public:
  // Loads a draft model for a target (--draft-model); the pool makes every other slot's
  // draft a sequence on what it loaded.
  using DraftOpener = std::function<std::shared_ptr<Sequence>(const OpenedModel& target)>;
  // Opens the model once (`open`), and the draft model once (`open_draft`, when given),
  // and makes n sequences on their weights; throws what `open` or `open_draft` or a KV
  // cache that does not fit throws.
  SlotPool(int n, int max_queue, const std::function<OpenedModel()>& open, DraftOpener open_draft = {});

  class Lease {
   public:
    Lease() = default;
    Lease(SlotPool* pool, Slot* slot) : pool_(pool), slot_(slot) {}
    Lease(Lease&& o) noexcept : pool_(o.pool_), slot_(o.slot_) { o.pool_ = nullptr, o.slot_ = nullptr; }
    Lease& operator=(Lease&& o) noexcept;
    ~Lease() { release(); }
    Slot* operator->() const { return slot_; }
    Slot& operator*() const { return *slot_; }
    explicit operator bool() const { return slot_ != nullptr; }
    void release();

   private:
    SlotPool* pool_ = nullptr;
    Slot* slot_ = nullptr;
  };

  // Waits for a free slot (the one whose cache shares the longest prefix with `prompt`);
  // an empty lease when `max_queue` requests already wait.
  Lease acquire(const std::vector<int32_t>& prompt);

  // After a lost device or a changed file: loads the model again (`open`) when the
  // slot's weights are the current ones, and makes the slot a sequence on the current
  // weights; every other slot moves to them, at once when it is not leased, else when
  // its lease is given back (so the old load is freed once the requests on it end;
  // /metrics' fafo_weight_loads shows it). On failure the slot keeps its model, whose
  // next request fails with the same error.
  void reopen(Slot& slot);

  int size() const { return static_cast<int>(slots_.size()); }
  int max_queue() const { return max_queue_; }
  int busy() const;
  int waiting() const;
  // The model the slots' current weights were loaded by (for names, the template, the
  // context size), kept alive by the caller while a reopen may replace it.
  std::shared_ptr<const OpenedModel> model() const;
  // The joiner of the slots' steps (null with one slot).
  const StepJoiner* joiner() const { return joiner_.get(); }

 private:
  void give_back(Slot* slot);
  // Makes a leased slot a sequence on the current weights if it is not one (when leased
  // and when given back).
  void refresh(Slot& slot);
  // After a new load (reopen, base_mutex_ held): every slot not leased moves to it now,
  // so the old load goes as soon as the leased ones' requests end.
  void move_idle_slots();
  // A new sequence on the current draft weights (null without a draft model).
  std::shared_ptr<Sequence> draft_sequence() const;

  // Sends the slot's steps through the joiner.
  void join(Slot& slot) const;

  std::function<OpenedModel()> open_;
  std::shared_ptr<StepJoiner> joiner_;
  DraftOpener open_draft_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<bool> in_use_;
  int max_queue_;
  int waiting_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  std::shared_ptr<OpenedModel> base_;  // loaded the current weights (a slot's model, or one a slot had)
  std::shared_ptr<Sequence> base_draft_;  // loaded the current draft weights (with base_)
  mutable std::mutex base_mutex_;
};

// The length of the longest common prefix of two token lists.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b);

}  // namespace fafo::server
