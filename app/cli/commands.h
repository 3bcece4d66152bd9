// Subcommands of the `fafo` CLI. Each registers its options on the CLI11 app and
// returns the function that runs it (returning the process exit code).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace fafo::cli {

using Command = std::function<int()>;

Command add_info_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_tokenize_command(CLI::App& app);
Command add_chat_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_devices_command(CLI::App& app);
Command add_index_command(CLI::App& app);
Command add_quantize_command(CLI::App& app);
Command add_perplexity_command(CLI::App& app);
Command add_serve_command(CLI::App& app);
Command add_tune_command(CLI::App& app);

}  // namespace fafo::cli
