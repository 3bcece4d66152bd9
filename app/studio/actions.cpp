#include "actions.h"

namespace fafo::studio {

bool debugger_run_held(const StudioState& s) {
  if (!s.engine || s.ev.activity != EngineView::Activity::Generating || !s.ev.pending_user.empty()) return false;
  // Waiting, not only paused: a generator that waits has begun its generation, so the
  // stop request end_held_run() makes cannot be cleared by that generation's begin().
  const StepGate& gate = s.engine->gate();
  return gate.paused() && gate.waiting();
}

bool engine_free(const StudioState& s) { return s.engine && (!s.ev.busy || debugger_run_held(s)); }

bool end_held_run(StudioState& s) {
  if (!debugger_run_held(s)) return false;
  s.engine->stop();
  s.engine->gate().set_paused(false);
  return true;
}

void queue_open_model(StudioState& s) {
  end_held_run(s);
  s.engine->open_model(s.settings.open, s.settings.system);
}

void queue_new_chat(StudioState& s) {
  end_held_run(s);
  s.engine->new_chat(chat_setup(s.settings));
}

void queue_message(StudioState& s) {
  if (end_held_run(s)) s.playback.resume();
  s.engine->send(s.input, s.settings.generation);
  s.input.clear();
}

void queue_debugger_run(StudioState& s) {
  end_held_run(s);
  const GenerationOptions g = debugger_generation(s.settings);
  const bool paused = s.playback.paused();
  if (paused) s.playback.pause_for_next_sequence();
  s.engine->run_prompt(s.debug_prompt, g, s.debug_max_steps, paused);
  s.source = "live: " + s.ev.model_path + " (" + strategy_name(g.decoding.strategy) + ")";
}

}  // namespace fafo::studio
