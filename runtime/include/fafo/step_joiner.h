// StepJoiner: runs the steps that sequences on the same weights ask for at about the
// same time as one step (Sequence::forward_joined), so that N sequences decoding together
// read the weights once per token instead of N times: the server's slots.
//
// Each sequence's thread calls run() (Sequence::forward* does, once Sequence::set_step_joiner
// is set) and blocks. The first caller while no joined step runs leads: it waits until
// every active sequence (enter() .. leave()) has a step waiting, or until about one
// step's time has passed (a sequence busy with host work is not waited for long; no
// wait at all where the backend computes one sequence per step), then takes the
// waiting steps that fit one step and runs them; the rest wait for the next one. The
// oldest waiting step always goes first, then the smallest (a decode row before a
// prefill chunk), within the row budget (StepRunner::kMaxStepTokens tokens and
// max_logit_rows() logit rows) and the backend's capabilities().max_step_sequences. Every sequence
// gets its rows' bits as if it had stepped alone (backends are T-invariant across the
// parts of a step), so joining never changes a token.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>

#include "fafo/sequence.h"

namespace fafo {

class StepJoiner {
 public:
  // A leader waits for active sequences that have not asked for their step yet about
  // as long as a joined step takes, within min_wait .. max_wait.
  explicit StepJoiner(std::chrono::microseconds max_wait = std::chrono::microseconds(2000),
                      std::chrono::microseconds min_wait = std::chrono::microseconds(50));
  StepJoiner(const StepJoiner&) = delete;
  StepJoiner& operator=(const StepJoiner&) = delete;

  // A sequence starts (enter) or stops (leave) decoding: a leader waits for each active
  // sequence's step.
  void enter();
  void leave();
  int32_t active() const;

  // Runs `request` for `model`, joined with the steps other threads ask for meanwhile;
  // returns when it is done (request.error holds what failed).
  void run(Sequence& model, StepRequest& request);

  struct Stats {
    int64_t steps = 0;  // joined steps run
    int64_t parts = 0;  // sequences' steps run in them (parts / steps: the sequences per step)
    int64_t most_parts = 0;  // the most in one step
  };
  Stats stats() const;

 private:
  struct Waiting {
    Sequence* model;
    StepRequest* request;
    std::chrono::steady_clock::time_point since;
    bool done = false;
  };
  // The waiting steps the next joined step takes (the caller holds mutex_).
  std::deque<Waiting*> take_batch();

  const std::chrono::microseconds max_wait_, min_wait_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Waiting*> waiting_;
  int32_t active_ = 0;
  bool running_ = false;
  std::chrono::steady_clock::duration mean_step_{};  // of the joined steps run so far (a running mean)
  Stats stats_;
};

// enter() on construction, leave() on destruction (a server slot's lease).
class StepJoinerActive {
 public:
  explicit StepJoinerActive(StepJoiner* joiner) : joiner_(joiner) {
    if (joiner_) joiner_->enter();
  }
  ~StepJoinerActive() {
    if (joiner_) joiner_->leave();
  }
  StepJoinerActive(const StepJoinerActive&) = delete;
  StepJoinerActive& operator=(const StepJoinerActive&) = delete;

 private:
  StepJoiner* joiner_;
};

}  // namespace fafo
