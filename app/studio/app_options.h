// fafo-studio's command line, parsed with CLI11. The flags it shares with `fafo`
// (the model and backend, sampling, decoding, the chat's system text and template)
// come from app/common, so both programs describe them the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_runner.h"
#include "fafo/decoding.h"
#include "fafo/kv_policy.h"
#include "fafo/open_model.h"
#include "fafo/sampler.h"

namespace fafo::studio {

enum class View { Chat, Debugger, Bench };

struct AppOptions {
  std::string replay;       // --replay TRACE.jsonl
  OpenOptions open;         // -m,--model M (opened at start), --backend, --device, -t, -c, --cache-type, --chat-template
  std::string prompt;       // --prompt P: a raw prompt generated for the debugger
  std::vector<std::string> chat;  // --chat TEXT (repeatable): chat messages sent in turn
  // --view; default: bench with --bench, chat with --chat, --browse or without a model to
  // open, else the debugger (on a prompt of its own when neither --prompt nor --replay
  // gives it steps)
  View view = View::Chat;
  int32_t steps = 0;        // --steps K: steps to generate / show (0: all)
  // The debugger's run of the default prompt waits after its first step for Step or
  // Resume: a start with a model to open that names no prompt, trace, chat, bench or
  // --steps, and either --view debugger or no view and no --browse (`fafo-studio`, the
  // first start of a new user; `fafo-studio --view debugger`).
  bool start_paused = false;
  int32_t n_predict = 256;  // -n
  SamplerOptions sampling{0.0f, 40, 0.95f, 0.05f, 0xFAF0};  // --temp (default 0: greedy) --top-k --top-p --min-p --seed
  std::string system;       // --system
  DecodingOptions decoding = [] {  // --strategy (default auto), --window, --ngram, --guesses, --lookback, ...
    DecodingOptions d;
    d.strategy = Strategy::Auto;
    return d;
  }();
  bool strategy_given = false;  // --strategy was given (else the debugger runs fafo: settings.h)
  KvPolicyOptions kv;       // --kv-policy, --kv-budget, --sinks, --recent, --update-interval
  std::string bench_devices;  // --bench DEVICES: run the Bench view's benchmark on --model at start ("all" or a list)
  bench::BenchConfig bench_config;  // --bench-pp, --bench-tg, --bench-curve, --bench-repetitions: the Bench view's setup
  std::string bench_prompts;        // --bench-prompts FILE.jsonl: the Bench view's strategies side by side over these
  int32_t bench_n_prompts = 20;     // --bench-n-prompts N: prompts to use from that file
  std::string screenshot;   // --screenshot OUT.png: render headless and exit
  std::string layout_json;  // --layout-json FILE: with --screenshot, where each panel was drawn
  std::string empty_panel;  // --debug-empty-panel NAME: draw that panel without contents (tests; not in --help)
  std::string browse;       // --browse DIR: open the model file dialog in DIR at start
  int width = 1600, height = 1000;
  bool help = false;        // -h,--help: print app_usage() and exit
  // The command line without --screenshot and --layout-json (and their values): what a
  // screenshot says it was taken with.
  std::vector<std::string> args;
};

// The raw prompt the debugger runs when no --prompt gives one.
inline constexpr const char* kDefaultPrompt = "Once upon a time";

// Throws std::invalid_argument with a message for unknown flags, bad values and
// flags that do not go together.
// `default_model`: the model opened when neither -m nor --replay is given (main passes
// the shipped one, app/common/default_model.h; empty: none, the user picks one). With
// --replay and no -m, open.path stays empty: main picks the model (replay_model, trace_io.h).
AppOptions parse_app_options(const std::vector<std::string>& args, const std::string& default_model = "");
// The --help text, generated from the same flag definitions the parser uses.
std::string app_usage();
const char* view_name(View v);

}  // namespace fafo::studio
