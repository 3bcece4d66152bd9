#include "playback.h"

#include <algorithm>

namespace fafo::studio {

void Playback::update(double seconds, size_t available) {
  shown_ = std::min(shown_, available);
  if (paused_) {
    if (wanted_ && shown_ < available) {
      ++shown_;
      wanted_ = false;
    }
    return;
  }
  if (speed_ <= 0.0) {
    shown_ = available;
    return;
  }
  credit_ += seconds * speed_;
  while (credit_ >= 1.0 && shown_ < available) {
    ++shown_;
    credit_ -= 1.0;
  }
  if (shown_ == available) credit_ = std::min(credit_, 1.0);
}

void Playback::step_once(size_t available) {
  paused_ = true;
  wanted_ = shown_ >= available;
  if (shown_ < available) ++shown_;
}

void Playback::step_back() {
  paused_ = true;
  wanted_ = false;
  if (shown_ > 1) --shown_;
}

void Playback::seek(size_t index, size_t available) {
  paused_ = true;
  wanted_ = false;
  shown_ = std::min(index + 1, available);
}

}  // namespace fafo::studio
