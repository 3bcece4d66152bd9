// Flags that say which model to open and how (fafo::OpenOptions), shared by the
// `fafo` subcommands and fafo-studio so both describe them the same way.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "fafo/open_model.h"

namespace fafo::app {

// -m,--model FILE. Returned so that a command can make it required.
CLI::Option* add_model_flag(CLI::App* cmd, std::string& path);
// --backend, --device, -t,--threads (fafo::BackendSpec) and --cache-type (the KV cache type).
void add_backend_flags(CLI::App* cmd, BackendSpec& backend, KvCacheType& kv_type);
// -c,--ctx-size.
void add_context_flag(CLI::App* cmd, int32_t& n_ctx);
// -m, the backend flags, -c, --gpu-layers and --split: everything of OpenOptions but the chat template.
// Returns -m's option.
CLI::Option* add_open_flags(CLI::App* cmd, OpenOptions& open);

}  // namespace fafo::app
