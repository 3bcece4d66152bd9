#include "app_options.h"

#include <algorithm>
#include <memory>
#include <stdexcept>

#include <CLI/CLI.hpp>

#include "chat_flags.h"
#include "generation_flags.h"
#include "model_flags.h"

namespace fafo::studio {

namespace {

constexpr const char* kDescription =
    "fafo-studio: chat with a local model and watch multi-token decoding step by step\n"
    "\n"
    "  fafo-studio [--model M]                          the debugger, a fafo run of \"Once upon a time\" paused at its\n"
    "                                                   first step: Step or Resume (default model: $FAFO_MODEL, else\n"
    "                                                   the shipped one)\n"
    "  fafo-studio [--model M] --view chat              the chat view\n"
    "  fafo-studio --model M --chat TEXT [--chat ...]   chat: send these messages in turn\n"
    "  fafo-studio --model M --prompt P [--steps K]     the debugger on a raw prompt, running (default strategy: fafo;\n"
    "                                                   the chat's: auto; with --steps and neither --prompt nor --chat:\n"
    "                                                   \"Once upon a time\")\n"
    "  fafo-studio --replay TRACE.jsonl [--model M]     step through a recorded `fafo run --trace`, on the model the\n"
    "                                                   trace names (a \"model\" field), else the default one\n"
    "  fafo-studio --model M --bench DEVICES            the Bench view: `fafo bench --devices` measured and plotted\n";

constexpr const char* kFooter =
    "Recent models are kept in $XDG_CONFIG_HOME/fafo-studio/recent.json (or ~/.config/...).";

// The Bench view's: which devices to measure at start, and the setup's first values
// (the same meaning as `fafo bench`'s --pp, --tg, --curve, --repetitions, --prompts,
// --n-prompts).
void bench_flags(CLI::App* app, AppOptions& o) {
  app->add_option("--bench", o.bench_devices,
                  "Run the Bench view's benchmark on --model at start: all (every device of every backend), or "
                  "BACKEND[:DEVICE],... (e.g. cpu,vulkan:0,reference)");
  app->add_option("--bench-pp", o.bench_config.pp, "Bench view: prompt-processing test length (0 = skip)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 20));
  app->add_option("--bench-tg", o.bench_config.tg, "Bench view: generation test length (0 = skip)")
      ->capture_default_str()->check(CLI::Range(0, 1 << 20));
  app->add_option("--bench-curve", o.bench_config.curve, "Bench view: step sizes T of the step-cost curve t(T)")
      ->delimiter(',')->capture_default_str()->check(CLI::Range(1, 512));
  app->add_option("--bench-repetitions", o.bench_config.repetitions, "Bench view: repetitions per measurement")
      ->capture_default_str()->check(CLI::Range(1, 1000));
  app->add_option("--bench-prompts", o.bench_prompts,
                  "Bench view: JSONL prompts (MT-Bench, GSM8K or {\"prompt\": ...}) to run every strategy over");
  app->add_option("--bench-n-prompts", o.bench_n_prompts, "Bench view: prompts to use from that file")
      ->capture_default_str()->check(CLI::Range(1, 100000));
}

// The parser, every flag writing into `o`.
std::unique_ptr<CLI::App> make_parser(AppOptions& o, bool& view_given) {
  auto app = std::make_unique<CLI::App>(kDescription, "fafo-studio");
  app->footer(kFooter);
  app->add_option("--replay", o.replay, "Step through a recorded `fafo run --trace` file (JSON lines)");
  app->add_option("-p,--prompt", o.prompt, "A raw prompt (BOS first) generated for the debugger");
  app->add_option("--chat", o.chat, "A chat message; repeat it to send several in turn")->allow_extra_args(false);
  app->add_option_function<std::string>(
         "--view",
         [&o, &view_given](const std::string& v) {
           o.view = v == "chat" ? View::Chat : v == "bench" ? View::Bench : View::Debugger;
           view_given = true;
         },
         "The view to show first (default: bench with --bench, chat with --chat, --browse or without a model, else "
         "debugger)")
      ->check(CLI::IsMember({"chat", "debugger", "bench"}));
  app->add_option("--steps", o.steps, "Steps to generate / show (0: all)")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--browse", o.browse, "Open the model file dialog in this folder");
  app::add_open_flags(app.get(), o.open);
  app::add_chat_flags(app.get(), o.system, o.open.chat_template);
  app::add_reply_length_flag(app.get(), o.n_predict);
  app::add_sampling_flags(app.get(), o.sampling);
  app::add_strategy_flag(app.get(), o.decoding.strategy);
  app::add_decoding_flags(app.get(), o.decoding, o.kv);
  bench_flags(app.get(), o);
  app->add_option("--screenshot", o.screenshot,
                  "Render headless after --steps steps (or when the --chat replies are done), write this PNG and exit "
                  "(needs a display: run under xvfb-run)");
  app->add_option("--layout-json", o.layout_json, "With --screenshot: each panel's rectangle and what it drew, as JSON");
  app->add_option("--debug-empty-panel", o.empty_panel)->group("");  // tests: draw that panel without contents
  app->add_option("--width", o.width, "Window width")->capture_default_str()->check(CLI::Range(320, 1 << 14));
  app->add_option("--height", o.height, "Window height")->capture_default_str()->check(CLI::Range(240, 1 << 14));
  return app;
}

// What CLI11 cannot check one flag at a time.
void check_together(AppOptions& o, bool view_given) {
  const bool bench = !o.bench_devices.empty();
  if (bench && (!o.prompt.empty() || !o.chat.empty() || !o.replay.empty()))
    throw std::invalid_argument("--bench measures speed alone: it takes no --prompt, --chat or --replay");
  if (bench && o.open.path.empty()) throw std::invalid_argument("--bench needs --model M");
  // No prompt, trace, chat, bench or model to browse for, and a model to open: the
  // debugger runs the default prompt, paused after its first step unless --steps says
  // how far to run.
  const bool debugger_start = view_given ? o.view == View::Debugger : o.browse.empty();
  if (!bench && o.prompt.empty() && o.chat.empty() && o.replay.empty() && !o.open.path.empty() && debugger_start) {
    o.prompt = kDefaultPrompt;
    o.start_paused = o.steps == 0;
  }
  if (!view_given)
    o.view = bench ? View::Bench : !o.replay.empty() || !o.prompt.empty() ? View::Debugger : View::Chat;
  if (!o.replay.empty() && (!o.prompt.empty() || !o.chat.empty()))
    throw std::invalid_argument("--replay shows a recorded trace: it takes no --prompt or --chat");
  if ((!o.prompt.empty() || !o.chat.empty()) && o.open.path.empty())
    throw std::invalid_argument("--prompt and --chat need --model M");
  if (!o.prompt.empty() && !o.chat.empty()) throw std::invalid_argument("give --prompt (debugger) or --chat, not both");
  if (!o.layout_json.empty() && o.screenshot.empty()) throw std::invalid_argument("--layout-json needs --screenshot");
  o.decoding.validate();
  o.kv.validate();
}

}  // namespace

const char* view_name(View v) {
  switch (v) {
    case View::Chat: return "chat";
    case View::Debugger: return "debugger";
    case View::Bench: return "bench";
  }
  return "?";
}

AppOptions parse_app_options(const std::vector<std::string>& args, const std::string& default_model) {
  AppOptions o;
  bool view_given = false;
  const std::unique_ptr<CLI::App> app = make_parser(o, view_given);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app->parse(reversed);
  } catch (const CLI::CallForHelp&) {
    o.help = true;
    return o;
  } catch (const CLI::ParseError& e) {
    throw std::invalid_argument(e.what());
  }
  o.strategy_given = app->get_option("--strategy")->count() > 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--screenshot" || a == "--layout-json") ++i;  // and its value
    else if (a.rfind("--screenshot=", 0) != 0 && a.rfind("--layout-json=", 0) != 0) o.args.push_back(a);
  }
  if (o.open.path.empty() && o.replay.empty()) o.open.path = default_model;
  check_together(o, view_given);
  return o;
}

std::string app_usage() {
  AppOptions o;
  bool view_given = false;
  return make_parser(o, view_given)->help();
}

}  // namespace fafo::studio
