// The fafo-studio window: GLFW + OpenGL3 + Dear ImGui, the frame loop, and the
// headless screenshot mode.
#pragma once

#include "app_options.h"
#include "studio_state.h"

namespace fafo::studio {

// Whether DISPLAY or WAYLAND_DISPLAY is set (checked before loading anything).
bool have_display();
extern const char* const kNoDisplayMessage;

// Runs the UI until the window closes (or, with --screenshot, until the PNG is
// written). Returns the process exit code; prints a clear error without a display.
int run_studio(StudioState& state, const AppOptions& options);

}  // namespace fafo::studio
