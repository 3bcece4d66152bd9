#include "loaded_model.h"

#include <filesystem>
#include <stdexcept>

namespace fafo::cli {

LoadedModel load_model(const std::string& path, const BackendChoice& backend, int32_t n_ctx) {
  if (!std::filesystem::exists(path)) throw std::runtime_error(path + ": no such file");
  LoadedModel m;
  m.file = GgufFile::open(path);
  std::unique_ptr<Backend> be;
  if (backend.name == "cpu") {
    be = make_cpu_backend(backend.threads);
  } else {
    throw std::runtime_error("unknown backend '" + backend.name + "' (available: cpu)");
  }
  ModelOptions options;
  options.n_ctx = n_ctx;
  m.model = std::make_unique<Model>(m.file, std::move(be), options);
  m.tokenizer = std::make_unique<Tokenizer>(Vocab::from_gguf(*m.file));
  if (m.tokenizer->vocab().size() != m.model->config().n_vocab)
    throw GgufError(path, "the vocabulary has " + std::to_string(m.tokenizer->vocab().size()) +
                              " tokens but token_embd.weight has " + std::to_string(m.model->config().n_vocab) + " rows");
  return m;
}

}  // namespace fafo::cli
