// What the panels of fafo-studio read and control: the steps known so far, which
// one is shown, the token text, and the live generator (if any).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "fafo/decoding.h"
#include "live_session.h"
#include "playback.h"
#include "view_models.h"

namespace fafo::studio {

struct StudioState {
  std::string source;                 // "replay FILE" or "live: MODEL"
  std::string prompt;                 // live mode: the prompt text
  std::vector<StepTrace> traces;      // every step known so far
  Playback playback;
  TokenText text;                     // empty without a model
  LiveSession* live = nullptr;        // live mode only
  int selected_token = -1;            // transcript index clicked last

  std::span<const StepTrace> shown() const { return {traces.data(), playback.shown()}; }
  const StepTrace* current() const { return playback.shown() ? &traces[playback.shown() - 1] : nullptr; }
  const StepTrace* previous() const { return playback.shown() > 1 ? &traces[playback.shown() - 2] : nullptr; }
};

}  // namespace fafo::studio
