// fafo: command-line entry point. Dispatches to the subcommands in cmd_*.cpp.
#include <cstdio>
#include <exception>

#include "commands.h"
#include "fafo/progress.h"

int main(int argc, char** argv) {
  CLI::App app{"fafo: a portable runtime for Llama-family models (GGUF), with lossless multi-token decoding"};
  app.set_version_flag("--version", "fafo 0.1.0");
  app.require_subcommand(1);
  const fafo::cli::Command info = fafo::cli::add_info_command(app);
  const fafo::cli::Command run = fafo::cli::add_run_command(app);
  const fafo::cli::Command chat = fafo::cli::add_chat_command(app);
  const fafo::cli::Command tokenize = fafo::cli::add_tokenize_command(app);
  const fafo::cli::Command bench = fafo::cli::add_bench_command(app);
  const fafo::cli::Command devices = fafo::cli::add_devices_command(app);
  const fafo::cli::Command index = fafo::cli::add_index_command(app);
  const fafo::cli::Command quantize = fafo::cli::add_quantize_command(app);
  const fafo::cli::Command perplexity = fafo::cli::add_perplexity_command(app);
  const fafo::cli::Command serve = fafo::cli::add_serve_command(app);
  const fafo::cli::Command tune = fafo::cli::add_tune_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "fafo: error: %s\nRun 'fafo --help' or 'fafo SUBCOMMAND --help' for the options.\n", e.what());
    return 2;
  }
  fafo::install_terminal_progress();  // long waits get a line where stderr is a terminal (fafo/progress.h)
  try {
    if (app.got_subcommand("info")) return info();
    if (app.got_subcommand("run")) return run();
    if (app.got_subcommand("chat")) return chat();
    if (app.got_subcommand("tokenize")) return tokenize();
    if (app.got_subcommand("bench")) return bench();
    if (app.got_subcommand("devices")) return devices();
    if (app.got_subcommand("index")) return index();
    if (app.got_subcommand("quantize")) return quantize();
    if (app.got_subcommand("perplexity")) return perplexity();
    if (app.got_subcommand("serve")) return serve();
    if (app.got_subcommand("tune")) return tune();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "fafo: error: %s\n", e.what());
    return 1;
  }
  return 1;
}
