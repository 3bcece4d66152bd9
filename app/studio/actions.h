// What the studio's controls do that queues a job on the engine: open a model (File >
// Open model, Recent models, the Model panel), start a new chat (Chat, Decoding), send
// a message (Chat) and run a prompt (the Debugger's Run). A Debugger run held paused,
// as the first start leaves one waiting for Step or Resume, keeps the engine busy; these
// controls stay enabled while it waits, and each action ends it first, so its job runs
// next instead of queueing behind a run that waits for a press that may never come.
// Plain C++ (no ImGui): the panels call these, and the tests drive them.
#pragma once

#include "studio_state.h"

namespace fafo::studio {

// Whether the engine's generation is a Debugger run (not a reply) held paused: its
// generator waits in the gate after a step, for Step or Resume. Reads s.ev and the gate.
bool debugger_run_held(const StudioState& s);
// Whether the actions below can queue their job now: the engine is idle, or it holds a
// Debugger run paused (which they end first).
bool engine_free(const StudioState& s);
// Ends a Debugger run held paused: asks it to stop and lets it go on from the step it
// waits after, so it ends there and the job queued next runs. Returns whether there was one.
bool end_held_run(StudioState& s);

// Opens s.settings.open with s.settings.system (the conversation's system text).
void queue_open_model(StudioState& s);
// A new conversation with the settings' chat template and system text.
void queue_new_chat(StudioState& s);
// Sends s.input with the settings' generation options and clears it. When it ended a
// held Debugger run, the Debugger's playback follows the reply (Pause there holds it).
void queue_message(StudioState& s);
// The Debugger's Run: s.debug_prompt with debugger_generation(s.settings), stopping after
// s.debug_max_steps steps (0: at the reply length). While the Debugger's playback is
// paused the run starts paused too: its first step is shown once made, and Step or
// Resume goes on.
void queue_debugger_run(StudioState& s);

}  // namespace fafo::studio
