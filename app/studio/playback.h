// Which step of a growing trace sequence the panels show: follows new steps at a
// given speed unless paused; single steps while paused. A single step asked for past
// the newest step known is shown as soon as that step comes (a live generation that
// the debugger lets run one step).
#pragma once

#include <cstddef>

namespace fafo::studio {

class Playback {
 public:
  // Advances the cursor by the elapsed time (seconds) at `speed` steps per second
  // (speed <= 0: jump to the newest step). `available` is the number of steps known.
  void update(double seconds, size_t available);
  void pause() { paused_ = true; }
  void resume() {
    paused_ = false;
    wanted_ = false;
    first_of_next_ = false;
  }
  // One step forward (pauses playback); at the newest step, the next one to come.
  void step_once(size_t available);
  void step_back();
  void seek(size_t index, size_t available);
  // A new sequence of steps begins: show from its start again (pause state and a step
  // asked for kept: paused, the new sequence's first step is shown when it comes).
  void restart() {
    shown_ = 0;
    credit_ = 0.0;
    if (first_of_next_) wanted_ = true;
    first_of_next_ = false;
  }
  // Pauses, and asks for the first step of the next sequence (the next restart()): a
  // run started paused shows its first step when it comes, whatever steps of the last
  // sequence come before it. resume() forgets it.
  void pause_for_next_sequence() {
    paused_ = true;
    first_of_next_ = true;
  }

  bool paused() const { return paused_; }
  // Whether a step asked for by step_once() has not come yet.
  bool waiting_for_step() const { return wanted_; }
  double speed() const { return speed_; }
  void set_speed(double steps_per_second) { speed_ = steps_per_second; }
  // Steps shown so far: the panels show step `shown() - 1` (none when 0).
  size_t shown() const { return shown_; }

 private:
  bool paused_ = false;
  bool wanted_ = false;
  bool first_of_next_ = false;
  double speed_ = 0.0;
  double credit_ = 0.0;
  size_t shown_ = 0;
};

}  // namespace fafo::studio
