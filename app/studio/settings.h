// What the chat view's Model and Decoding panels edit: which model to open and how,
// how a conversation starts, and how each reply is generated. Plain C++.
#pragma once

#include <string>

#include "app_options.h"
#include "engine.h"
#include "fafo/generator.h"
#include "fafo/open_model.h"

namespace fafo::studio {

struct StudioSettings {
  // The model to open: path, backend, context size, KV cache type, and the chat
  // template ("" = the model's own), which also applies to each New chat.
  OpenOptions open;
  std::string system;  // the system message a conversation starts with
  // Each reply: n_predict, sampling, strategy and parameters, KV policy.
  GenerationOptions generation;
  // Whether the user picked the strategy (--strategy, or the Decoding panel). Until then
  // the chat runs `auto` and the Debugger runs `fafo`, the decoding it is there to show.
  bool strategy_chosen = false;
};

// The options a Debugger run uses: the settings' generation, with fafo for an `auto`
// the user did not pick.
GenerationOptions debugger_generation(const StudioSettings& s);

StudioSettings settings_from_options(const AppOptions& o);
ChatSetup chat_setup(const StudioSettings& s);
// Why the generation settings cannot be used ("" when they can).
std::string settings_problem(const StudioSettings& s);

}  // namespace fafo::studio
