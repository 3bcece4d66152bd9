#include "studio_model.h"

#include <filesystem>
#include <optional>
#include <stdexcept>

namespace fafo::studio {

StudioModel load_studio_model(const ModelRequest& request) {
  if (request.path.empty()) throw std::runtime_error("no model file chosen");
  if (!std::filesystem::is_regular_file(request.path)) throw std::runtime_error(request.path + ": no such file");
  StudioModel m;
  m.path = request.path;
  m.file = GgufFile::open(request.path);
  std::unique_ptr<Backend> backend = make_backend(request.backend);
  ModelOptions options;
  options.n_ctx = request.n_ctx;
  options.kv_type = request.kv_type;
  m.model = std::make_unique<Model>(m.file, std::move(backend), options);
  m.tokenizer = std::make_unique<Tokenizer>(Vocab::from_gguf(*m.file));
  if (m.tokenizer->vocab().size() != m.model->config().n_vocab)
    throw GgufError(request.path, "the vocabulary has " + std::to_string(m.tokenizer->vocab().size()) +
                                      " tokens but token_embd.weight has " + std::to_string(m.model->config().n_vocab) +
                                      " rows");
  return m;
}

ChatTemplate studio_chat_template(const GgufFile& file, const std::string& choice, std::string* note) {
  if (!choice.empty()) return ChatTemplate::builtin(choice);
  const GgufValue* v = file.find("tokenizer.chat_template");
  if (!v || v->type != GgufType::STRING) {
    if (note) *note = "the model has no chat template: using chatml";
    return ChatTemplate::builtin("chatml");
  }
  try {
    return ChatTemplate::from_source(v->as_string(), "gguf");
  } catch (const ChatTemplateError& e) {
    const std::string like = builtin_template_name_for(v->as_string()).value_or("chatml");
    if (note) *note = std::string("the model's chat template cannot be used (") + e.what() + "): using " + like;
    return ChatTemplate::builtin(like);
  }
}

std::string model_summary(const StudioModel& m) {
  const ModelConfig& c = m.model->config();
  std::string name = c.name.empty() ? std::filesystem::path(m.path).stem().string() : c.name;
  return name + ": " + c.arch + ", " + std::to_string(c.n_layer) + " layers, dim " + std::to_string(c.n_embd) +
         ", vocab " + std::to_string(c.n_vocab) + ", context " + std::to_string(m.model->n_ctx()) + "; " +
         m.model->backend().description();
}

}  // namespace fafo::studio
