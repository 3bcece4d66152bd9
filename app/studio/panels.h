// The ImGui panels of fafo-studio; each draws one window from the StudioState.
#pragma once

#include <string>

#include <imgui.h>

#include "studio_state.h"

namespace fafo::studio {

// Starts a frame's panels: they go under a menu bar of `top` pixels (the frame cleared
// s.layout before drawing the menu bar).
void begin_panels(StudioState& s, float top);
// Opens panel `title` where the view's layout puts it (on a view change, or always in
// screenshot mode) and records where it was drawn. Returns whether to draw its contents.
bool begin_panel(StudioState& s, const char* title);
// Says how many items (rows, cells, tokens, messages) the open panel drew.
void report_items(StudioState& s, int64_t n);
void end_panel();

// Text colours the panels share: an error, a note (a warning, a hint).
inline const ImVec4 kErrorText(1.0f, 0.4f, 0.4f, 1.0f);
inline const ImVec4 kNoteText(1.0f, 0.85f, 0.4f, 1.0f);


// The i-th colour of the palette series are drawn with (colour-blind safe, then grey
// and violet; repeats after 8).
unsigned int series_colour(size_t i);

// Display text of a token piece (newlines and tabs escaped).
std::string display_piece(const std::string& piece);

// The menu bar (File, the views, Server, Layout), each menu recorded in s.layout; returns its height.
float draw_menu_bar(StudioState& s);
// The in-app file dialog (a modal), when one is open.
void draw_file_dialog(StudioState& s);

// The chat view.
void draw_model_panel(StudioState& s);
void draw_decoding_panel(StudioState& s);
void draw_chat_panel(StudioState& s);
// The debugger view.
void draw_controls_panel(StudioState& s);
void draw_window_panel(StudioState& s);
void draw_candidates_panel(StudioState& s);
void draw_pool_panel(StudioState& s);
void draw_transcript_panel(StudioState& s);
void draw_kv_panel(StudioState& s);
void draw_charts_panel(StudioState& s);
// The Bench view. init_bench_view takes the setup's first values from the command line
// and starts the --bench run (what stops it lands in s.bench_setup.error).
void init_bench_view(StudioState& s, const AppOptions& o);
void draw_bench_setup_panel(StudioState& s);
void draw_bench_results_panel(StudioState& s);
void draw_bench_log_panel(StudioState& s);

}  // namespace fafo::studio
