// Between a generator on a worker thread and the UI: every StepTrace the generator
// reports is queued for the UI to drain each frame, and the debugger's pause /
// single-step / stop act here, before the generator's next step. The UI never waits
// on the generator; while paused, the generator waits in on_step().
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "fafo/decoding.h"

namespace fafo::studio {

// This generation's progress, for live tokens/s and tau.
struct LiveStats {
  int64_t steps = 0;      // steps reported (the prefill step included)
  int64_t tokens = 0;     // tokens they emitted
  double decode_seconds = 0.0;  // since the prefill step reported its token
  // Tokens per second of decoding (after the first token), as GenerationResult counts it.
  double tokens_per_second() const { return decode_seconds > 0.0 && tokens > 1 ? (tokens - 1) / decode_seconds : 0.0; }
  double tau() const { return steps ? static_cast<double>(tokens) / static_cast<double>(steps) : 0.0; }
};

class StepGate {
 public:
  // A new generation starts: its traces replace the previous one's (see drain), the
  // stop request is cleared, it stops by itself after max_steps steps (0: never), and
  // with `paused` it waits after its first step (set_paused(true)); else it runs until
  // the debugger pauses it. A pause set before begin() does not reach this generation.
  void begin(int32_t max_steps = 0, bool paused = false);
  // The generation ended: its pause ends with it (paused() is false until the next
  // generation begins paused or the debugger pauses it).
  void end();
  // The generator's StepCallback: queues the trace, then waits while paused (until
  // resumed, given one step, stopped or closed).
  void on_step(const StepTrace& t);
  // Whether the generation should stop (stop() or close() was called, or max_steps were
  // reached): the generator's token callback returns !should_stop().
  bool should_stop() const;
  // Asks the running generation to stop; releases a paused one. Returns at once. The
  // next begin() clears it.
  void stop();
  // For good (the engine is being destroyed): stops the running generation and every one
  // that begins after, none of which waits in on_step(). begin() does not clear it.
  void close();

  // Moves the traces produced since the last call into `out`. When a new generation
  // has begun since then, `out` is cleared first (the views show one generation).
  // Returns true when it was cleared.
  bool drain(std::vector<StepTrace>& out);
  // Pauses the running generation after its current step, or lets it run on.
  void set_paused(bool paused);
  bool paused() const;
  void allow_one_step();  // while paused: lets the generator run exactly one more step
  // Whether the generator waits in on_step() now: false from the moment resume, a step,
  // stop() or close() releases it, before it has left.
  bool waiting() const;
  LiveStats stats() const;

 private:
  using Clock = std::chrono::steady_clock;
  // Whether a generator waiting in on_step() may go on (mutex_ held).
  bool released() const { return !paused_ || permits_ > 0 || stop_ || closed_; }
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<StepTrace> queue_;
  uint64_t epoch_ = 0, drained_epoch_ = 0;
  int32_t max_steps_ = 0;
  bool paused_ = false;
  bool waiting_ = false;
  bool stop_ = false;
  bool closed_ = false;
  int permits_ = 0;
  LiveStats stats_;
  Clock::time_point first_token_{};
};

}  // namespace fafo::studio
