// The ImGui panels of fafo-studio; each draws one window from the StudioState.
#pragma once

#include "studio_state.h"

namespace fafo::studio {

// Where a panel goes on first use: fractions of the display.
struct PanelRect {
  float x, y, w, h;
};
// Opens a panel window at `rect` (first use only); returns whether to draw its contents.
bool begin_panel(const char* title, PanelRect rect);
void end_panel();

// Display text of a token piece (newlines and tabs escaped).
std::string display_piece(const std::string& piece);

void draw_controls_panel(StudioState& s);
void draw_window_panel(const StudioState& s);
void draw_candidates_panel(const StudioState& s);
void draw_transcript_panel(StudioState& s);
void draw_kv_panel(const StudioState& s);
void draw_charts_panel(const StudioState& s);
void draw_chat_panel(const StudioState& s);

}  // namespace fafo::studio
