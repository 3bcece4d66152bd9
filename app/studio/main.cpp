// fafo-studio: chat with a local model, and watch what multi-token decoding does step
// by step, live or replayed from a recorded trace (see app_options.cpp for the usage).
#include <cstdio>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "app_options.h"
#include "default_model.h"
#include "engine.h"
#include "recent_files.h"
#include "studio_app.h"
#include "trace_io.h"

namespace {

int run(fafo::studio::AppOptions o, const std::string& default_model) {
  using namespace fafo::studio;
  StudioState state;
  if (!o.replay.empty()) {
    TraceFile trace = load_trace_file(o.replay);
    state.traces = std::move(trace.steps);
    state.source = "replay: " + o.replay + " (" + std::to_string(state.traces.size()) + " steps)";
    state.playback.set_speed(4.0);
    if (o.open.path.empty()) {  // no -m: the trace's model, else the default one
      const ReplayModel m = replay_model(o.replay, trace.model, default_model);
      o.open.path = m.path;
      if (m.path.empty()) std::fprintf(stderr, "fafo-studio: no model to open (%s)\n", m.why.c_str());
      else std::fprintf(stderr, "model: %s (%s)\n", m.path.c_str(), m.why.c_str());
      state.model_note = m.path.empty() ? "no model open: " + m.why : "model: " + m.path + " (" + m.why + ")";
    }
  }
  state.view = o.view;
  state.settings = settings_from_options(o);
  state.empty_panel = o.empty_panel;
  if (!o.prompt.empty()) state.debug_prompt = o.prompt;
  state.debug_max_steps = o.steps;
  if (!o.browse.empty()) {
    state.browser.emplace(o.browse, std::vector<std::string>{".gguf"});
    state.browse = StudioState::Browse::Model;
  }
  if (!have_display()) {  // after checking the inputs, before starting the engine
    std::fputs(kNoDisplayMessage, stderr);
    return 3;
  }
  RecentFiles recent(RecentFiles::default_path());
  state.recent = &recent;
  Engine engine;
  state.engine = &engine;
  const fafo::GenerationOptions& g = state.settings.generation;
  if (!o.open.path.empty()) engine.open_model(state.settings.open, state.settings.system);
  if (!o.prompt.empty()) {
    const fafo::GenerationOptions debug = debugger_generation(state.settings);
    if (o.start_paused) {
      // Held after its first step: the panels show it, Step runs one more, Resume plays
      // the rest at the speed slider's 5 steps a second; the controls that queue a job
      // end it first (actions.h).
      state.playback.step_once(0);
      state.playback.set_speed(5.0);
    }
    engine.run_prompt(o.prompt, debug, o.steps, o.start_paused);
    state.source = std::string("live: ") + o.open.path + " (" + fafo::strategy_name(debug.decoding.strategy) + ")";
  }
  for (const std::string& message : o.chat) engine.send(message, g);
  return run_studio(state, o);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::string default_model;  // the shipped model, or $FAFO_MODEL; none found: the user picks one
    try {
      default_model = fafo::app::default_model_path();
    } catch (const std::exception&) {
    }
    const auto options = fafo::studio::parse_app_options(std::vector<std::string>(argv + 1, argv + argc), default_model);
    if (!options.help && !default_model.empty() && options.open.path == default_model)
      std::fprintf(stderr, "model: %s (the default; -m picks another)\n", default_model.c_str());
    if (options.help) {
      std::fputs(fafo::studio::app_usage().c_str(), stdout);
      return 0;
    }
    return run(options, default_model);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "fafo-studio: error: %s\nRun 'fafo-studio --help' for the options.\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fafo-studio: %s\n", e.what());
    return 1;
  }
}
