#include "app_options.h"

#include <stdexcept>

#include "fafo/backend.h"

namespace fafo::studio {

namespace {

int32_t to_int(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    const int value = std::stoi(v, &used);
    if (used == v.size()) return value;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(flag + ": expected an integer, got '" + v + "'");
}

float to_float(const std::string& flag, const std::string& v) {
  try {
    size_t used = 0;
    const float value = std::stof(v, &used);
    if (used == v.size()) return value;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(flag + ": expected a number, got '" + v + "'");
}

}  // namespace

const char* view_name(View v) { return v == View::Chat ? "chat" : "debugger"; }

AppOptions parse_app_options(const std::vector<std::string>& args) {
  AppOptions o;
  o.decoding.strategy = Strategy::Fafo;
  bool view_given = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw std::invalid_argument(a + ": missing value");
      return args[++i];
    };
    if (a == "-h" || a == "--help") o.help = true;
    else if (a == "--replay") o.replay = value();
    else if (a == "--model" || a == "-m") o.model = value();
    else if (a == "--prompt" || a == "-p") o.prompt = value();
    else if (a == "--chat") o.chat.push_back(value());
    else if (a == "--view") {
      const std::string& v = value();
      if (v == "chat") o.view = View::Chat;
      else if (v == "debugger") o.view = View::Debugger;
      else throw std::invalid_argument("--view: expected chat or debugger, got '" + v + "'");
      view_given = true;
    }
    else if (a == "--steps") o.steps = to_int(a, value());
    else if (a == "-n" || a == "--n-predict") o.n_predict = to_int(a, value());
    else if (a == "-c" || a == "--ctx-size") o.n_ctx = to_int(a, value());
    else if (a == "--cache-type") o.cache_type = value();
    else if (a == "--temp") o.sampling.temperature = to_float(a, value());
    else if (a == "--top-k") o.sampling.top_k = to_int(a, value());
    else if (a == "--top-p") o.sampling.top_p = to_float(a, value());
    else if (a == "--min-p") o.sampling.min_p = to_float(a, value());
    else if (a == "--seed") o.sampling.seed = static_cast<uint64_t>(to_int(a, value()));
    else if (a == "--backend") o.backend = value();
    else if (a == "--device") o.device = value();
    else if (a == "--threads" || a == "-t") o.threads = to_int(a, value());
    else if (a == "--system") o.system = value();
    else if (a == "--chat-template") o.chat_template = value();
    else if (a == "--strategy") o.decoding.strategy = parse_strategy(value());
    else if (a == "--window") o.decoding.window = to_int(a, value());
    else if (a == "--ngram") o.decoding.ngram = to_int(a, value());
    else if (a == "--guesses") o.decoding.guesses = to_int(a, value());
    else if (a == "--lookback") o.decoding.lookback = to_int(a, value());
    else if (a == "--kv-policy") o.kv.name = value();
    else if (a == "--kv-budget") o.kv.budget = to_int(a, value());
    else if (a == "--screenshot") o.screenshot = value();
    else if (a == "--layout-json") o.layout_json = value();
    else if (a == "--debug-empty-panel") o.empty_panel = value();
    else if (a == "--browse") o.browse = value();
    else if (a == "--width") o.width = to_int(a, value());
    else if (a == "--height") o.height = to_int(a, value());
    else throw std::invalid_argument("unknown option '" + a + "' (see --help)");
  }
  if (o.help) return o;
  // --model M --steps K alone: the debugger on the default prompt (headless screenshots).
  if (o.prompt.empty() && o.chat.empty() && o.replay.empty() && !o.model.empty() && o.steps > 0)
    o.prompt = "Once upon a time";
  if (!view_given) o.view = !o.replay.empty() || !o.prompt.empty() ? View::Debugger : View::Chat;
  if (!o.replay.empty() && (!o.prompt.empty() || !o.chat.empty()))
    throw std::invalid_argument("--replay shows a recorded trace: it takes no --prompt or --chat");
  if ((!o.prompt.empty() || !o.chat.empty()) && o.model.empty())
    throw std::invalid_argument("--prompt and --chat need --model M");
  if (!o.prompt.empty() && !o.chat.empty()) throw std::invalid_argument("give --prompt (debugger) or --chat, not both");
  if (o.steps < 0) throw std::invalid_argument("--steps must be >= 0");
  if (o.n_ctx < 0) throw std::invalid_argument("--ctx-size must be >= 0");
  parse_kv_cache_type(o.cache_type);  // throws naming the accepted words
  if (o.width < 320 || o.height < 240) throw std::invalid_argument("--width/--height too small");
  if (!o.layout_json.empty() && o.screenshot.empty()) throw std::invalid_argument("--layout-json needs --screenshot");
  o.decoding.validate();
  o.kv.validate();
  return o;
}

const char* app_usage() {
  return "fafo-studio: chat with a local model and watch multi-token decoding step by step\n"
         "\n"
         "  fafo-studio [--model M]                          the chat view (open a model in the app or with --model)\n"
         "  fafo-studio --model M --chat TEXT [--chat ...]   chat: send these messages in turn\n"
         "  fafo-studio --model M --prompt P [--steps K]     the debugger on a raw prompt (default strategy: fafo;\n"
         "                                                   with --steps and neither --prompt nor --chat: \"Once upon a time\")\n"
         "  fafo-studio --replay TRACE.jsonl [--model M]     step through a recorded `fafo run --trace`\n"
         "\n"
         "options:\n"
         "  --view chat|debugger  which view to show first\n"
         "  --browse DIR          open the model file dialog in DIR\n"
         "  --backend auto|cpu|vulkan  --device N|NAME  --threads T  -c N (context size)\n"
         "  --cache-type f32|f16 (KV cache)\n"
         "  --strategy ar|jacobi|lookahead|fafo  --window W  --ngram N  --guesses G  --lookback k\n"
         "  --kv-policy stream|quest|snapkv|chunks  --kv-budget B\n"
         "  -n N (tokens per reply at most, default 256)  --temp T (default 0)  --top-k K  --top-p P  --min-p P  --seed S\n"
         "  --system TEXT  --chat-template NAME (chatml, llama2, llama3, mistral, phi3, gemma, deepseek-r1)\n"
         "  --screenshot OUT.png  render headless after K steps (or when the chat replies are done),\n"
         "                        write the PNG and exit (needs a display: run under xvfb-run)\n"
         "  --layout-json FILE    with --screenshot: each panel's rectangle and what it drew, as JSON\n"
         "  --width W --height H  window size (default 1600x1000)\n"
         "\n"
         "Recent models are kept in $XDG_CONFIG_HOME/fafo-studio/recent.json (or ~/.config/...).\n";
}

}  // namespace fafo::studio
