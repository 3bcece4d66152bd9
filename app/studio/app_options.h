// fafo-studio's command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fafo/decoding.h"
#include "fafo/kv_policy.h"
#include "fafo/sampler.h"

namespace fafo::studio {

enum class View { Chat, Debugger };

struct AppOptions {
  std::string replay;       // --replay TRACE.jsonl
  std::string model;        // --model M (opened at start)
  std::string prompt;       // --prompt P: a raw prompt generated for the debugger
  std::vector<std::string> chat;  // --chat TEXT (repeatable): chat messages sent in turn
  View view = View::Chat;   // --view; default: debugger with --replay or --prompt, else chat
  int32_t steps = 0;        // --steps K: steps to generate / show (0: all)
  int32_t n_predict = 256;  // -n
  int32_t n_ctx = 0;        // -c
  std::string cache_type = "f32";  // --cache-type f32|f16
  SamplerOptions sampling{0.0f, 40, 0.95f, 0.05f, 0xFAF0};  // --temp (default 0: greedy) --top-k --top-p --min-p --seed
  std::string backend = "auto";  // --backend
  std::string device;            // --device
  int threads = 0;
  std::string system;            // --system
  std::string chat_template;     // --chat-template NAME ("" = the model's)
  DecodingOptions decoding;      // --strategy, --window, --ngram, --guesses, --lookback
  KvPolicyOptions kv;            // --kv-policy, --kv-budget
  std::string screenshot;   // --screenshot OUT.png: render headless and exit
  std::string layout_json;  // --layout-json FILE: with --screenshot, where each panel was drawn
  std::string empty_panel;  // --debug-empty-panel NAME: draw that panel without contents (tests)
  std::string browse;       // --browse DIR: open the model file dialog in DIR at start
  int width = 1600, height = 1000;
  bool help = false;
};

// Throws std::invalid_argument with a message for unknown flags or bad values.
AppOptions parse_app_options(const std::vector<std::string>& args);
const char* app_usage();
const char* view_name(View v);

}  // namespace fafo::studio
