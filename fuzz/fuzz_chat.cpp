// Fuzz target: `fafo chat` input. Lines of the input (split at '\n') are the user's
// turns of one conversation with a tiny random model (chatml template, greedy, FAFO),
// including text that looks like special tokens and template syntax; a turn that does
// not fit is a ChatTurnError, and the conversation goes on.
#include <unistd.h>

#include <filesystem>

#include "fafo/chat_session.h"
#include "fafo/open_model.h"
#include "synthetic_model.h"

namespace {

fafo::OpenedModel& model() {
  static fafo::OpenedModel m = [] {
    fafo::synth::SyntheticConfig c;
    c.n_layer = 1, c.n_embd = 32, c.n_head = 2, c.n_head_kv = 1, c.n_ff = 64, c.n_vocab = 300, c.n_ctx = 256;
    const std::string path = std::filesystem::temp_directory_path() / ("fafo-fuzz-chat-" + std::to_string(getpid()) + ".gguf");
    fafo::synth::write_synthetic_model(c, path);
    fafo::OpenOptions o;
    o.path = path;
    o.backend = fafo::BackendSpec{"cpu", "", 1};
    o.cache_dir = "off";
    fafo::OpenedModel opened = fafo::open_model(o);
    std::filesystem::remove(path);
    return opened;
  }();
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fafo::OpenedModel& m = model();
  fafo::ChatSession chat(*m.model, *m.tokenizer, fafo::ChatTemplate::builtin("chatml"),
                         fafo::chat_template_context(*m.tokenizer), "sys");
  fafo::GenerationOptions g;
  g.n_predict = 4;
  g.sampling.temperature = 0;
  g.decoding.strategy = fafo::Strategy::Fafo;
  g.kv.budget = 8;
  const std::string input(reinterpret_cast<const char*>(data), size);
  size_t start = 0;
  for (int turns = 0; start <= input.size() && turns < 8; ++turns) {
    const size_t end = std::min(input.find('\n', start), input.size());
    try {
      chat.turn(input.substr(start, end - start), g);
    } catch (const fafo::ChatTurnError&) {
    }
    start = end + 1;
  }
  return 0;
}
