// What the panels of fafo-studio read and control: the view shown, the engine and
// this frame's copy of its state, the settings being edited, the debugger's steps and
// which one is shown, the Bench view's run and setup, the file dialog, and where each
// panel was drawn.
#pragma once

#include <future>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "app_options.h"
#include "bench_runner.h"
#include "bench_session.h"
#include "engine.h"
#include "server_session.h"
#include "fafo/decoding.h"
#include "file_browser.h"
#include "layout.h"
#include "playback.h"
#include "recent_files.h"
#include "settings.h"
#include "view_models.h"

namespace fafo::studio {

// What the Bench view's setup panel edits, and what Run and Save said.
struct BenchSetup {
  std::string model_path;             // measured when no model is open in the chat view
  int threads = 0;                    // CPU threads of the host backends (0: all)
  // Every device of this build (resolve_bench_targets("all")), listed once off the UI thread.
  std::future<std::vector<bench::BenchTarget>> listing;
  std::vector<bench::BenchTarget> targets;
  std::string targets_error;
  bool choose_all = true;             // tick every device once they are listed
  std::vector<std::string> chosen;    // labels of the ticked devices
  bench::BenchConfig config;          // pp, tg, repetitions, new tokens per prompt, strategies
  std::string curve;                  // the step sizes of t(T), comma-separated (empty: skip)
  std::string prompts_file;           // JSONL prompts for the strategies (empty: skip)
  int32_t n_prompts = 20;
  std::string error;                  // why the last Run (or --bench) did not start
  std::string prefix = "bench";       // Save report: PREFIX.md, .csv, .json, .png
  std::vector<std::string> saved;     // what the last Save wrote
  std::string save_error;
};

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
  std::string model_note;             // which model the start opened and why (a replay without -m)
  std::string trace_problem;          // why the replayed trace does not fit the open model ("": it fits)
  std::vector<StepTrace> traces;      // every step known so far (one generation)
  Playback playback;
  TokenText text;                     // empty without a model
  int selected_token = -1;            // transcript index clicked last
  int selected_layer = 0;             // KV map
  std::string debug_prompt = kDefaultPrompt;
  int32_t debug_max_steps = 0;

  // The chat.
  std::string input;                  // the message being typed
  size_t chat_seen = 0;               // text length last drawn (scrolls to the end when it grows)

  // The Bench view.
  BenchSession bench;
  // The Server menu: an OpenAI-compatible server on the open model.
  ServerSession server;
  int server_port = 8080;
  BenchSnapshot bench_now;            // the run's state this frame
  BenchSetup bench_setup;
  size_t bench_log_seen = 0;          // log lines last drawn (scrolls to the end when more come)

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
