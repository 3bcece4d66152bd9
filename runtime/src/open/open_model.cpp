// Opening a model for use (runtime/include/fafo/open_model.h): the file, the weights and
// a first sequence, its tokenizer, chat template and what auto keeps; draft models and
// more sequences on loaded weights. Above model/ (which knows no decoding strategy) and
// decode/.
#include "fafo/open_model.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <stdexcept>

#include "fafo/corpus_index.h"
#include "fafo/read_file.h"

namespace fafo {

namespace {

// The model's own template, or the built-in format standing in for it.
ResolvedChatTemplate model_chat_template(const GgufFile& file) {
  const GgufValue* v = file.find("tokenizer.chat_template");
  if (!v || v->type != GgufType::STRING)
    return {ChatTemplate::builtin("chatml"), "the model has no chat template (tokenizer.chat_template): using chatml"};
  try {
    return {ChatTemplate::from_source(v->as_string(), "gguf"), ""};
  } catch (const ChatTemplateError& e) {
    const std::optional<std::string> like = builtin_template_name_for(v->as_string());
    const std::string name = like.value_or("chatml");
    return {ChatTemplate::builtin(name), std::string("the model's chat template (tokenizer.chat_template) cannot be used (") +
                                             e.what() + "): using " + name +
                                             (like ? ", the built-in format it looks like" : "")};
  }
}

}  // namespace

ResolvedChatTemplate resolve_chat_template(const GgufFile& file, const std::string& choice) {
  if (choice.empty()) return model_chat_template(file);
  const std::vector<std::string>& names = builtin_chat_template_names();
  if (std::find(names.begin(), names.end(), choice) != names.end()) return {ChatTemplate::builtin(choice), ""};
  if (std::filesystem::is_regular_file(choice)) return {ChatTemplate::from_source(read_whole_file(choice, "the chat template file"), choice), ""};
  throw std::invalid_argument("chat template '" + choice + "' is neither a built-in format (" + builtin_chat_template_list() +
                              ") nor a Jinja template file");
}

OpenedModel open_model(const OpenOptions& options) {
  const std::string& path = options.path;
  if (path.empty()) throw std::runtime_error("no model file chosen");
  if (!std::filesystem::exists(path)) throw std::runtime_error(path + ": no such file");
  if (!std::filesystem::is_regular_file(path)) throw std::runtime_error(path + ": not a file");
  std::shared_ptr<const GgufFile> file = GgufFile::open(path);
  ResolvedChatTemplate chat = resolve_chat_template(*file, options.chat_template);  // before the slow part
  SequenceOptions model_options;
  model_options.n_ctx = options.n_ctx;
  model_options.kv_type = options.kv_type;
  BackendSpec backend = options.backend;
  backend.latent_attention = file->find("fafo.mla.rank_k") != nullptr;  // auto: a backend that runs MLA
  auto model = std::make_unique<Sequence>(file, make_backend(backend), model_options);
  auto auto_state = std::make_unique<AutoState>();
  const std::filesystem::path cache_dir = options.cache_dir.empty() ? default_cache_dir() : std::filesystem::path(options.cache_dir);
  if (options.cache_dir != "off" && !cache_dir.empty()) {
    try {
      auto_state->set_step_cost_cache(StepCostCache::for_model(cache_dir, path, model->backend(), options.kv_type));
    } catch (const std::filesystem::filesystem_error&) {
      // The file vanished or cannot be examined: no cache, measured when needed.
    }
  }
  auto tokenizer = std::make_unique<Tokenizer>(Vocab::from_gguf(*file));
  if (tokenizer->vocab().size() != model->config().n_vocab)
    throw GgufError(path, "the vocabulary has " + std::to_string(tokenizer->vocab().size()) +
                              " tokens but token_embd.weight has " + std::to_string(model->config().n_vocab) + " rows");
  return {std::move(file), std::move(model), std::move(tokenizer), std::move(chat), std::move(auto_state)};
}

OpenedModel open_sequence(const OpenedModel& opened) {
  SequenceOptions options;
  options.n_ctx = opened.model->n_ctx();
  options.kv_type = opened.model->kv_type();
  auto model = std::make_unique<Sequence>(opened.model->runner(), options);
  auto auto_state = std::make_unique<AutoState>();
  if (opened.auto_state) auto_state->set_step_cost_cache(opened.auto_state->step_cost_cache());
  return {opened.file, std::move(model), std::make_unique<Tokenizer>(opened.tokenizer->vocab()), opened.chat,
          std::move(auto_state)};
}

std::string vocabulary_difference(const Vocab& target, const Vocab& draft) {
  if (target.size() != draft.size())
    return "the target has " + std::to_string(target.size()) + " tokens, the draft model " + std::to_string(draft.size());
  for (int32_t i = 0; i < target.size(); ++i) {
    const size_t k = static_cast<size_t>(i);
    if (target.tokens[k] != draft.tokens[k])
      return "token " + std::to_string(i) + " is '" + target.tokens[k] + "' in the target, '" + draft.tokens[k] +
             "' in the draft model";
    const TokenKind a = k < target.kinds.size() ? target.kinds[k] : TokenKind::Normal;
    const TokenKind b = k < draft.kinds.size() ? draft.kinds[k] : TokenKind::Normal;
    if (a != b) return "token " + std::to_string(i) + " ('" + target.tokens[k] + "') is of another kind in the draft model";
  }
  return "";  // special ids may differ (a base model drafting for its instruct tune): drafts are only token ids
}

std::shared_ptr<Sequence> open_draft_model(const DecodingOptions& decoding, const OpenOptions& target,
                                        const Sequence& target_model, const Vocab& target_vocab) {
  if (decoding.draft_model_path.empty()) return nullptr;
  OpenOptions o;
  o.path = decoding.draft_model_path == "self" ? target.path : decoding.draft_model_path;
  o.backend = target.backend;
  if (!decoding.draft_backend.empty()) {
    o.backend.name = decoding.draft_backend;
    o.backend.device.clear();
  }
  if (!decoding.draft_device.empty()) o.backend.device = decoding.draft_device;
  o.n_ctx = target_model.n_ctx();
  o.kv_type = target.kv_type;
  o.cache_dir = "off";
  if (decoding.draft_model_path == "self" && decoding.draft_backend.empty() && decoding.draft_device.empty()) {
    // The target drafting for itself: a second sequence on the loaded weights.
    SequenceOptions options;
    options.n_ctx = target_model.n_ctx();
    options.kv_type = target.kv_type;
    return std::make_shared<Sequence>(target_model.runner(), options);
  }
  OpenedModel draft = open_model(o);
  if (const std::string why = vocabulary_difference(target_vocab, draft.tokenizer->vocab()); !why.empty())
    throw std::runtime_error(o.path + ": the draft model's vocabulary differs from the target's: " + why +
                             "; a draft model needs the target's vocabulary, token for token");
  return std::shared_ptr<Sequence>(std::move(draft.model));
}

std::string draft_model_key(const DecodingOptions& d, const OpenOptions& target) {
  const std::string file = d.draft_model_path == "self" ? "self:" + target.path + "|" + target.backend.name + "|" +
                                                              target.backend.device
                                                        : d.draft_model_path;
  return file + "|" + d.draft_backend + "|" + d.draft_device;
}

DecodingResources open_decoding_resources(const DecodingOptions& decoding, const OpenOptions& target,
                                          const Sequence& target_model, const Vocab& target_vocab, bool draft_also_needed,
                                          const DecodingResources& kept) {
  DecodingResources r;
  r.corpus = open_corpus(decoding.corpus_path, target_vocab, kept.corpus);
  if (decoding.strategy == Strategy::Draft || draft_also_needed) {
    r.draft_key = draft_model_key(decoding, target);
    r.draft_model = kept.draft_model && kept.draft_key == r.draft_key
                        ? kept.draft_model
                        : open_draft_model(decoding, target, target_model, target_vocab);
    if (!r.draft_model) r.draft_key.clear();
  }
  return r;
}

}  // namespace fafo
