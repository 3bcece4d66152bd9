#include "loaded_model.h"

#include <filesystem>
#include <stdexcept>

namespace fafo::cli {

LoadedModel load_model(const std::string& path, const BackendChoice& backend, int32_t n_ctx) {
  if (!std::filesystem::exists(path)) throw std::runtime_error(path + ": no such file");
  LoadedModel m;
  m.file = GgufFile::open(path);
  std::unique_ptr<Backend> be = make_backend(BackendSpec{backend.name, backend.device, backend.threads});
  ModelOptions options;
  options.n_ctx = n_ctx;
  options.kv_type = parse_kv_cache_type(backend.cache_type);
  m.model = std::make_unique<Model>(m.file, std::move(be), options);
  m.tokenizer = std::make_unique<Tokenizer>(Vocab::from_gguf(*m.file));
  if (m.tokenizer->vocab().size() != m.model->config().n_vocab)
    throw GgufError(path, "the vocabulary has " + std::to_string(m.tokenizer->vocab().size()) +
                              " tokens but token_embd.weight has " + std::to_string(m.model->config().n_vocab) + " rows");
  return m;
}

}  // namespace fafo::cli
