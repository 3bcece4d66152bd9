// What the panels of fafo-studio read and control: the view shown, the engine and
// this frame's copy of its state, the settings being edited, the debugger's steps and
// which one is shown, the file dialog, and where each panel was drawn.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "app_options.h"
#include "engine.h"
#include "fafo/decoding.h"
#include "file_browser.h"
#include "layout.h"
#include "playback.h"
#include "recent_files.h"
#include "settings.h"
#include "view_models.h"

namespace fafo::studio {

struct StudioState {
  View view = View::Chat;
  bool relayout = true;               // put the view's panels where the layout says (next frame)
  bool fixed_layout = false;          // always (screenshots)
  bool quit = false;                  // File > Quit
  Engine* engine = nullptr;
  EngineView ev;                      // the engine's state this frame
  StudioSettings settings;
  RecentFiles* recent = nullptr;
  uint64_t seen_model_serial = 0;

  // The debugger.
  std::string source;                 // "replay: FILE", "live: ..."
  std::vector<StepTrace> traces;      // every step known so far (one generation)
  Playback playback;
  TokenText text;                     // empty without a model
  int selected_token = -1;            // transcript index clicked last
  int selected_layer = 0;             // KV map
  std::string debug_prompt = "Once upon a time";
  int32_t debug_max_steps = 0;

  // The chat.
  std::string input;                  // the message being typed
  size_t chat_seen = 0;               // text length last drawn (scrolls to the end when it grows)

  // The file dialog.
  enum class Browse { None, Model, Trace } browse = Browse::None;
  std::optional<FileBrowser> browser;
  std::string browse_error;

  // Where the panels were drawn this frame; a panel to draw without contents (tests).
  LayoutRecord layout;
  std::string empty_panel;

  std::span<const StepTrace> shown() const { return {traces.data(), playback.shown()}; }
  const StepTrace* current() const { return playback.shown() ? &traces[playback.shown() - 1] : nullptr; }
  const StepTrace* previous() const { return playback.shown() > 1 ? &traces[playback.shown() - 2] : nullptr; }
};

}  // namespace fafo::studio
