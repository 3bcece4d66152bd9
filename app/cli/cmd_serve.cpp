// `fafo serve`: the OpenAI-compatible HTTP server (app/server/) on a model.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "commands.h"
#include "fafo/corpus_index.h"
#include "fafo/device_error.h"
#include "fafo/open_model.h"
#include "generation_flags.h"
#include "default_model.h"
#include "input_files.h"
#include "model_flags.h"
#include "training_context.h"
#include "server.h"

namespace fafo::cli {

namespace {

struct ServeArgs {
  OpenOptions open;
  server::ServerOptions server;
  int parallel = 1;
  int queue = 64;
  std::string system_unused;
  bool quiet = false;  // --quiet: no line per request
  std::shared_ptr<bool> seed_given = std::make_shared<bool>(false);
};

int run_serve(ServeArgs& args) {
  if (args.server.model_name.empty()) args.server.model_name = std::filesystem::path(args.open.path).stem().string();
  // SIGINT and SIGTERM go to one thread that stops the server (blocked everywhere else,
  // including the server's threads, which inherit the mask).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::fprintf(stderr, "fafo serve: opening %s (%d slot%s)\n", args.open.path.c_str(), args.parallel,
               args.parallel == 1 ? "" : "s");
  // The draft model (--draft-model) is loaded once, beside the model, and every slot
  // drafts with its own sequence on it.
  server::SlotPool::DraftOpener open_draft;
  if (!args.server.defaults.decoding.draft_model_path.empty())
    open_draft = [&](const OpenedModel& target) {
      return open_draft_model(args.server.defaults.decoding, args.open, *target.model, target.tokenizer->vocab());
    };
  // auto counts every slot's KV cache; a load after a lost device keeps the first one's
  // placement (the old weights still hold their memory while it loads).
  args.open.sequences = args.parallel;
  const auto open = [&] {
    OpenedModel opened = open_model(args.open);
    args.open = same_placement(args.open, opened);
    return opened;
  };
  server::SlotPool pool(args.parallel, args.queue, open, open_draft);
  app::warn_if_past_training_context(*pool.model()->model);
  if (!args.quiet)
    args.server.log = [](const std::string& line) { std::fprintf(stderr, "fafo serve: %s\n", line.c_str()); };
  // The corpus index (--corpus) is opened once; every request reads it.
  args.server.defaults.corpus = open_corpus(args.server.defaults.decoding.corpus_path, pool.model()->tokenizer->vocab());
  server::Server http(args.server, pool);
  const int port = http.bind();
  {
    // The load the server starts on, held only for this message: after a lost device
    // the slots move to a new load, and the old one must go.
    const std::shared_ptr<const OpenedModel> served = pool.model();
    Sequence& m = *served->model;
    // The weights are loaded once; each slot adds its KV cache.
    // (On a layer split: every device's part of the cache, and of the memory in use.)
    const ModelWeights& w = m.runner()->weights();
    const uint64_t kv_bytes = m.kv_bytes();  // with the sliding-window layers' rings
    uint64_t in_use = 0;
    for (int32_t d = 0; d < w.n_devices(); ++d) in_use += memory_in_use(w.backend(d));
    const std::string placement = w.placement();
    if (!served->placement_note.empty()) std::fprintf(stderr, "fafo serve: %s\n", served->placement_note.c_str());
    const std::string memory = in_use > 0 ? ", memory " + format_bytes(in_use) + " with " + std::to_string(args.parallel) +
                                                " KV cache" + (args.parallel == 1 ? "" : "s") + " of " + format_bytes(kv_bytes)
                                          : "";
    std::fprintf(stderr,
                 "fafo serve: %s as '%s' on http://%s:%d (backend %s%s, context %d, %d slot%s on one load of the weights%s, "
                 "queue %d%s); Ctrl-C stops%s\n",
                 args.open.path.c_str(), args.server.model_name.c_str(), args.server.host.c_str(), port,
                 m.backend().name().c_str(), placement.empty() ? "" : (", " + placement).c_str(), m.n_ctx(), args.parallel,
                 args.parallel == 1 ? "" : "s", memory.c_str(),
                 args.queue, args.server.api_key.empty() ? "" : ", API key required",
                 args.quiet ? "" : "; one line per request follows (--quiet: none)");
  }
  std::thread stopper([&] {
    int sig = 0;
    sigwait(&stop_signals, &sig);
    std::fprintf(stderr, "fafo serve: stopping (%s)\n", sig == SIGINT ? "Ctrl-C" : "SIGTERM");
    http.stop();
  });
  http.listen();
  // listen() also returns when the server fails; wake the stopper either way.
  pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
  return 0;
}

}  // namespace

Command add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "An OpenAI-compatible HTTP server: /v1/chat/completions, /v1/completions, /v1/models, /health, /metrics");
  app::add_open_flags(cmd, args->open);
  cmd->add_option("--chat-template", args->open.chat_template,
                  "Chat template: a built-in name (" + builtin_chat_template_list() + ") or a Jinja file (default: the model's)");
  cmd->add_option("--host", args->server.host, "Address to listen on (0.0.0.0: every interface)")->capture_default_str();
  cmd->add_option("--port", args->server.port, "Port (0: any free port, printed at start)")
      ->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--parallel", args->parallel,
                  "Slots: requests generated at once, each with its own KV cache on one load of the weights")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--queue", args->queue, "Requests that may wait for a slot; more are answered 503")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--api-key", args->server.api_key, "Require 'Authorization: Bearer KEY' on every route but /health");
  cmd->add_option("--max-body", args->server.max_body_bytes, "Largest request body in bytes (413 beyond)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  cmd->add_option("--alias", args->server.model_name, "The model's name in /v1/models and requests (default: the file's stem)");
  cmd->add_flag("--quiet", args->quiet,
                "Log no line per request (by default each answered request is one line on stderr: method, path, "
                "status, prompt and completion tokens, milliseconds)");
  cmd->add_option("-n,--max-tokens", args->server.defaults.max_tokens,
                  "Reply length when a request gives no max_tokens (-1: until the end of generation or the context)")
      ->capture_default_str()
      ->check(CLI::Range(-1, 1 << 24));
  args->server.defaults.sampling = SamplerOptions{0.8f, 40, 0.95f, 0.05f, 0};
  args->server.defaults.decoding.strategy = Strategy::Auto;
  app::add_sampling_flags(cmd, args->server.defaults.sampling, args->seed_given);
  app::add_strategy_flag(cmd, args->server.defaults.decoding.strategy);
  app::add_decoding_flags(cmd, args->server.defaults.decoding, args->server.defaults.kv);
  return [args] {
    app::use_default_model_if_unset(args->open.path);
    args->server.defaults.decoding.validate();
    args->server.defaults.kv.validate();
    app::require_readable_file(args->open.path);
    app::require_decoding_files(args->server.defaults.decoding);
    app::require_chat_template_file(args->open.chat_template);
    args->server.defaults.random_seed = !*args->seed_given;
    return run_serve(*args);
  };
}

}  // namespace fafo::cli
