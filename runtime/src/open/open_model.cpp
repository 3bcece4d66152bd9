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
#include "fafo/device_error.h"
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

namespace {

// The bytes the last `n` layers of `file` take on a device: their weights as the file
// stores them, one sequence's KV cache of n_ctx entries, plus (n > 0) the output head
// and one step's buffers (512 rows of each activation, the logits), with 5% and 16 MiB
// for what a backend adds (alignment, scratch).
uint64_t bytes_on_device(const GgufFile& file, const ModelConfig& c, int32_t n_ctx, KvCacheType kv_type, int32_t n) {
  if (n <= 0) return 0;
  n = std::min(n, c.n_layer);
  uint64_t bytes = 0;
  const size_t entry = kv_type == KvCacheType::F16 ? 2 : 4;
  for (int32_t l = c.n_layer - n; l < c.n_layer; ++l) {
    const std::string prefix = "blk." + std::to_string(l) + ".";
    for (const GgufTensor& t : file.tensors())
      if (t.name.starts_with(prefix)) bytes += t.n_bytes;
    const int64_t k = c.mla() ? c.mla_rank_k[static_cast<size_t>(l)] : c.kv_dim();
    const int64_t v = c.mla() ? c.mla_rank_v[static_cast<size_t>(l)] : c.kv_dim();
    bytes += static_cast<uint64_t>(n_ctx) * static_cast<uint64_t>(k + v) * entry;
  }
  const GgufTensor* head = file.find_tensor("output.weight");
  const GgufTensor* embd = file.find_tensor("token_embd.weight");
  if (!head) head = embd;
  if (head) bytes += head->n_bytes;
  if (n == c.n_layer && embd && head != embd) bytes += embd->n_bytes;  // every layer: the embedding there too
  if (const GgufTensor* norm = file.find_tensor("output_norm.weight")) bytes += norm->n_bytes;
  const uint64_t q_dim = static_cast<uint64_t>(c.n_head) * static_cast<uint64_t>(c.head_dim);
  const uint64_t widths = 6 * static_cast<uint64_t>(c.n_embd) + 4 * q_dim + 4 * static_cast<uint64_t>(c.kv_dim()) +
                          2 * static_cast<uint64_t>(c.n_ff) + static_cast<uint64_t>(c.n_vocab);
  bytes += 512 * widths * 4;
  return bytes + bytes / 20 + (uint64_t{16} << 20);
}

// The weights on `backend`, or split: the first layers on the cpu backend, the last
// `gpu_layers` on `backend` (nothing to split where that backend is the cpu).
std::shared_ptr<StepRunner> step_runner(const std::shared_ptr<const GgufFile>& file, const BackendSpec& backend,
                                        const OpenOptions& options, std::string& note) {
  const ModelConfig c = ModelConfig::from_gguf(*file);
  const int32_t n_layer = c.n_layer;
  const std::string name = backend.name == "auto" ? default_backend_name(backend.latent_attention) : backend.name;
  int32_t gpu_layers = options.gpu_layers;
  if (gpu_layers < 0 && gpu_layers != OpenOptions::kGpuLayersAuto) gpu_layers = n_layer;
  if (name == "cpu") gpu_layers = n_layer;
  std::unique_ptr<Backend> device =
      gpu_layers > 0 || gpu_layers == OpenOptions::kGpuLayersAuto ? make_backend(backend) : nullptr;
  if (gpu_layers == OpenOptions::kGpuLayersAuto) {
    const int32_t n_ctx = options.n_ctx > 0 ? options.n_ctx : std::min(c.n_ctx_train, 4096);
    const uint64_t free = memory_free(*device);
    const uint64_t all = bytes_on_device(*file, c, n_ctx, options.kv_type, n_layer);
    gpu_layers = n_layer;
    while (gpu_layers > 0 && bytes_on_device(*file, c, n_ctx, options.kv_type, gpu_layers) > free) --gpu_layers;
    if (gpu_layers < n_layer)
      note = "--gpu-layers auto: the model needs about " + format_bytes(all) + " on " + device->name() + " for a context of " +
             std::to_string(n_ctx) + ", " + format_bytes(free) + " is free there: " +
             (gpu_layers == 0 ? "every layer on the cpu backend"
                              : std::to_string(gpu_layers) + " of its " + std::to_string(n_layer) + " layers fit");
    if (gpu_layers == 0) device.reset();
  }
  if (gpu_layers >= n_layer) return std::make_shared<StepRunner>(file, std::move(device));
  BackendSpec cpu{"cpu", "", backend.threads};
  cpu.latent_attention = backend.latent_attention;
  if (gpu_layers == 0) return std::make_shared<StepRunner>(file, make_backend(cpu));
  std::vector<DevicePart> devices;
  devices.push_back(DevicePart{make_backend(cpu), n_layer - gpu_layers});
  devices.push_back(DevicePart{std::move(device), gpu_layers});
  return std::make_shared<StepRunner>(std::make_unique<ModelWeights>(file, std::move(devices)));
}

}  // namespace

uint64_t device_bytes_for_layers(const GgufFile& file, int32_t layers, int32_t n_ctx, KvCacheType kv_type) {
  const ModelConfig c = ModelConfig::from_gguf(file);
  return bytes_on_device(file, c, n_ctx > 0 ? n_ctx : std::min(c.n_ctx_train, 4096), kv_type, layers);
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
  std::string placement_note;
  auto model = std::make_unique<Sequence>(step_runner(file, backend, options, placement_note), model_options);
  auto auto_state = std::make_unique<AutoState>();
  const std::filesystem::path cache_dir = options.cache_dir.empty() ? default_cache_dir() : std::filesystem::path(options.cache_dir);
  // (A split's step costs are its devices' together: measured, never kept under one's name.)
  if (options.cache_dir != "off" && !cache_dir.empty() && model->runner()->weights().n_devices() == 1) {
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
  return {std::move(file), std::move(model), std::move(tokenizer), std::move(chat), std::move(auto_state),
          std::move(placement_note)};
}

OpenedModel open_sequence(const OpenedModel& opened) {
  SequenceOptions options;
  options.n_ctx = opened.model->n_ctx();
  options.kv_type = opened.model->kv_type();
  auto model = std::make_unique<Sequence>(opened.model->runner(), options);
  auto auto_state = std::make_unique<AutoState>();
  if (opened.auto_state) auto_state->set_step_cost_cache(opened.auto_state->step_cost_cache());
  return {opened.file, std::move(model), std::make_unique<Tokenizer>(opened.tokenizer->vocab()), opened.chat,
          std::move(auto_state), ""};
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
