#include "app_options.h"

#include <stdexcept>

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

}  // namespace

AppOptions parse_app_options(const std::vector<std::string>& args) {
  AppOptions o;
  o.decoding.strategy = Strategy::Fafo;
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
    else if (a == "--steps") o.steps = to_int(a, value());
    else if (a == "-n") o.n_predict = to_int(a, value());
    else if (a == "--temp") o.temperature = std::stof(value());
    else if (a == "--threads") o.threads = to_int(a, value());
    else if (a == "--strategy") o.decoding.strategy = parse_strategy(value());
    else if (a == "--window") o.decoding.window = to_int(a, value());
    else if (a == "--ngram") o.decoding.ngram = to_int(a, value());
    else if (a == "--guesses") o.decoding.guesses = to_int(a, value());
    else if (a == "--lookback") o.decoding.lookback = to_int(a, value());
    else if (a == "--screenshot") o.screenshot = value();
    else if (a == "--width") o.width = to_int(a, value());
    else if (a == "--height") o.height = to_int(a, value());
    else throw std::invalid_argument("unknown option '" + a + "' (see --help)");
  }
  if (o.help) return o;
  if (o.replay.empty() && o.model.empty())
    throw std::invalid_argument("give --replay TRACE.jsonl or --model M (see --help)");
  if (o.steps < 0) throw std::invalid_argument("--steps must be >= 0");
  if (o.width < 320 || o.height < 240) throw std::invalid_argument("--width/--height too small");
  o.decoding.validate();
  return o;
}

const char* app_usage() {
  return "fafo-studio: live visual debugger of multi-token decoding\n"
         "\n"
         "  fafo-studio --replay TRACE.jsonl [--model M]     step through a recorded `fafo run --trace`\n"
         "  fafo-studio --model M [--prompt P] [--steps K]   generate live (default strategy: fafo)\n"
         "\n"
         "options:\n"
         "  --strategy ar|jacobi|lookahead|fafo  --window W  --ngram N  --guesses G  --lookback k\n"
         "  -n N (tokens at most, default 256)  --temp T (default 0)  --threads T\n"
         "  --screenshot OUT.png  render headless after K steps, write the PNG and exit\n"
         "                        (needs a display: run under xvfb-run)\n"
         "  --width W --height H  window size (default 1600x1000)\n";
}

}  // namespace fafo::studio
