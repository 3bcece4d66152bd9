// fafo-studio: replays a recorded trace or generates live, and shows what
// multi-token decoding does step by step (see app_options.cpp for the usage).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "app_options.h"
#include "fafo/backend.h"
#include "fafo/gguf.h"
#include "fafo/model.h"
#include "fafo/tokenizer.h"
#include "live_session.h"
#include "studio_app.h"
#include "trace_io.h"

namespace {

struct OpenModel {
  std::shared_ptr<const fafo::GgufFile> file;
  std::unique_ptr<fafo::Model> model;
  std::unique_ptr<fafo::Tokenizer> tokenizer;
};

OpenModel open_model(const std::string& path, int threads) {
  if (!std::filesystem::exists(path)) throw std::runtime_error(path + ": no such file");
  OpenModel m;
  m.file = fafo::GgufFile::open(path);
  m.model = std::make_unique<fafo::Model>(m.file, fafo::make_cpu_backend(threads), fafo::ModelOptions{});
  m.tokenizer = std::make_unique<fafo::Tokenizer>(fafo::Vocab::from_gguf(*m.file));
  return m;
}

int run(const fafo::studio::AppOptions& o) {
  using namespace fafo::studio;
  StudioState state;
  OpenModel m;
  if (!o.model.empty()) {
    m = open_model(o.model, o.threads);
    state.text = make_token_text(*m.tokenizer);
  }
  std::unique_ptr<LiveSession> live;
  if (!o.replay.empty()) {
    state.traces = load_trace_jsonl(o.replay);
    state.source = "replay: " + o.replay + " (" + std::to_string(state.traces.size()) + " steps)";
    state.playback.set_speed(4.0);
  }
  if (!have_display()) {  // after checking the inputs, before starting a generator
    std::fputs(kNoDisplayMessage, stderr);
    return 3;
  }
  if (o.replay.empty()) {
    LiveOptions lo;
    lo.prompt = o.prompt;
    lo.max_steps = o.steps;
    lo.generation.n_predict = o.n_predict;
    lo.generation.sampling.temperature = o.temperature;
    lo.generation.decoding = o.decoding;
    live = std::make_unique<LiveSession>(*m.model, *m.tokenizer, lo);
    state.live = live.get();
    state.prompt = o.prompt;
    state.source = std::string("live: ") + o.model + " (" + fafo::strategy_name(o.decoding.strategy) + ")";
    live->start();
  }
  return run_studio(state, o);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto options = fafo::studio::parse_app_options(std::vector<std::string>(argv + 1, argv + argc));
    if (options.help) {
      std::fputs(fafo::studio::app_usage(), stdout);
      return 0;
    }
    return run(options);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "fafo-studio: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fafo-studio: %s\n", e.what());
    return 1;
  }
}
