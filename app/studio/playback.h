// Which step of a growing trace sequence the panels show: follows new steps at a
// given speed unless paused; single steps while paused.
#pragma once

#include <cstddef>

namespace fafo::studio {

class Playback {
 public:
  // Advances the cursor by the elapsed time (seconds) at `speed` steps per second
  // (speed <= 0: jump to the newest step). `available` is the number of steps known.
  void update(double seconds, size_t available);
  void pause() { paused_ = true; }
  void resume() { paused_ = false; }
  // One step forward (pauses playback).
  void step_once(size_t available);
  void step_back();
  void seek(size_t index, size_t available);
  // A new sequence of steps begins: show from its start again (pause state kept).
  void restart() {
    shown_ = 0;
    credit_ = 0.0;
  }

  bool paused() const { return paused_; }
  double speed() const { return speed_; }
  void set_speed(double steps_per_second) { speed_ = steps_per_second; }
  // Steps shown so far: the panels show step `shown() - 1` (none when 0).
  size_t shown() const { return shown_; }

 private:
  bool paused_ = false;
  double speed_ = 0.0;
  double credit_ = 0.0;
  size_t shown_ = 0;
};

}  // namespace fafo::studio
