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

// What the last layers of `file` take on a device: their weights as the file stores
// them, `sequences` KV caches of n_ctx entries, plus (any layer at all) the output head
// and one step's buffers (512 rows of each activation, the logits), with 5% and 16 MiB
// for what a backend adds (alignment, scratch). Each tensor is looked at once.
class DeviceBytes {
 public:
  // ring_step > 0: the sliding-window layers hold rings (KvCacheShape::ring) of
  // window + ring_step - 1 entries where that is below n_ctx.
  DeviceBytes(const GgufFile& file, const ModelConfig& c, int32_t n_ctx, KvCacheType kv_type, int32_t sequences = 1,
              int32_t ring_step = StepRunner::kMaxStepTokens)
      : layer_(static_cast<size_t>(c.n_layer), 0) {

    for (const GgufTensor& t : file.tensors()) {
      if (!t.name.starts_with("blk.")) continue;
      const size_t dot = t.name.find('.', 4);
      int32_t l = -1;
      try {
        l = std::stoi(t.name.substr(4, dot == std::string::npos ? std::string::npos : dot - 4));
      } catch (const std::exception&) {
        continue;
      }
      if (l >= 0 && l < c.n_layer) layer_[static_cast<size_t>(l)] += t.n_bytes;
    }
    for (int32_t l = 0; l < c.n_layer; ++l) {
      const int64_t k = c.mla() ? c.mla_rank_k[static_cast<size_t>(l)] : c.kv_dim();
      const int64_t v = c.mla() ? c.mla_rank_v[static_cast<size_t>(l)] : c.kv_dim();
      const int64_t ring = c.mla() || ring_step <= 0 || c.window_of(l) == 0 ? 0 : int64_t{c.window_of(l)} + ring_step - 1;
      const int64_t entries = ring > 0 && ring < n_ctx ? ring : n_ctx;
      layer_[static_cast<size_t>(l)] += static_cast<uint64_t>(std::max(1, sequences)) * static_cast<uint64_t>(entries) *
                                        (kv_row_bytes(kv_type, static_cast<int32_t>(k)) +
                                         kv_row_bytes(kv_type, static_cast<int32_t>(v)));
    }
    const GgufTensor* head = file.find_tensor("output.weight");
    const GgufTensor* embd = file.find_tensor("token_embd.weight");
    if (!head) head = embd;
    if (head) fixed_ += head->n_bytes;
    if (embd && head != embd) embedding_ = embd->n_bytes;
    if (const GgufTensor* norm = file.find_tensor("output_norm.weight")) fixed_ += norm->n_bytes;
    const uint64_t q_dim = static_cast<uint64_t>(c.n_head) * static_cast<uint64_t>(c.head_dim);
    const uint64_t widths = (c.moe() ? 7 : 6) * static_cast<uint64_t>(c.n_embd) + 4 * q_dim + 4 * static_cast<uint64_t>(c.kv_dim()) +
                            2 * static_cast<uint64_t>(c.moe() ? c.n_ff_exp : c.n_ff) +
                            static_cast<uint64_t>(c.n_expert) + static_cast<uint64_t>(c.n_vocab);
    fixed_ += 512 * widths * 4;
  }
  // The last `n` layers (every layer: the embedding there too); 0 for none.
  uint64_t last(int32_t n) const {
    const int32_t n_layer = static_cast<int32_t>(layer_.size());
    if (n <= 0) return 0;
    n = std::min(n, n_layer);
    uint64_t bytes = fixed_ + (n == n_layer ? embedding_ : 0);
    for (int32_t l = n_layer - n; l < n_layer; ++l) bytes += layer_[static_cast<size_t>(l)];
    return bytes + bytes / 20 + (uint64_t{16} << 20);
  }
  // The most last layers that fit in `free` bytes (from the top, so the sum is kept).
  int32_t most_that_fit(uint64_t free) const {
    const int32_t n_layer = static_cast<int32_t>(layer_.size());
    if (last(n_layer) <= free) return n_layer;
    int32_t n = 0;
    while (n + 1 < n_layer && last(n + 1) <= free) ++n;
    return n;
  }

 private:
  std::vector<uint64_t> layer_;  // weights and KV cache per layer
  uint64_t fixed_ = 0;           // the output head and norm, a step's buffers
  uint64_t embedding_ = 0;       // an untied embedding, on the device holding every layer
};

int32_t context_for(const OpenOptions& options, const ModelConfig& c) {
  return options.n_ctx > 0 ? options.n_ctx : std::min(c.n_ctx_train, 4096);
}

std::string part_name(const SplitPart& p) {
  std::string name = p.backend;
  if (!p.device.empty()) name.append(":").append(p.device);
  return name;
}

// options.split's devices with their layer counts.
std::vector<DevicePart> split_devices(const OpenOptions& options, const ModelConfig& c, bool latent) {
  const std::vector<SplitPart>& split = options.split;
  int64_t given = 0;  // (counts are at most INT_MAX each)
  const SplitPart* rest = nullptr;
  for (const SplitPart& p : split) {
    if (p.layers < 0) rest = &p;
    else given += p.layers;
  }
  if (!rest && given != c.n_layer)
    throw std::invalid_argument("--split " + split_text(split) + " places " + std::to_string(given) +
                                " layers; the model has " + std::to_string(c.n_layer));
  if (rest && given >= c.n_layer)
    throw std::invalid_argument("--split " + split_text(split) + " leaves no layer of the model's " +
                                std::to_string(c.n_layer) + " for " + part_name(*rest));
  std::vector<DevicePart> devices;
  for (const SplitPart& p : split) {
    BackendSpec spec{p.backend, p.device, options.backend.threads};
    spec.latent_attention = latent;
    spec.repack = options.backend.repack;
    if (p.backend != "cpu") spec.memory_limit = options.backend.memory_limit;
    devices.push_back(DevicePart{make_backend(spec), p.layers < 0 ? c.n_layer - static_cast<int32_t>(given) : p.layers});
  }
  return devices;
}

// The weights on `backend`, or split: options.split's devices; or the first layers on
// the cpu backend, the last `gpu_layers` on `backend` (nothing to split where that
// backend is the cpu).
std::shared_ptr<StepRunner> step_runner(const std::shared_ptr<const GgufFile>& file, const BackendSpec& backend,
                                        const OpenOptions& options, std::string& note) {
  const ModelConfig c = ModelConfig::from_gguf(*file);
  const int32_t n_layer = c.n_layer;
  if (!options.split.empty())
    return std::make_shared<StepRunner>(
        std::make_unique<ModelWeights>(file, split_devices(options, c, backend.latent_attention)));
  const std::string name = backend.name == "auto" ? default_backend_name(backend.latent_attention) : backend.name;
  int32_t gpu_layers = options.gpu_layers;
  if (gpu_layers < 0 && gpu_layers != OpenOptions::kGpuLayersAuto) gpu_layers = n_layer;
  if (name == "cpu") gpu_layers = n_layer;
  std::unique_ptr<Backend> device =
      gpu_layers > 0 || gpu_layers == OpenOptions::kGpuLayersAuto ? make_backend(backend) : nullptr;
  if (gpu_layers == OpenOptions::kGpuLayersAuto) {
    const int32_t n_ctx = context_for(options, c);
    const uint64_t free = memory_free(*device);
    const DeviceBytes bytes(*file, c, n_ctx, options.kv_type, options.sequences,
                            options.swa_full ? 0 : StepRunner::kMaxStepTokens);
    gpu_layers = bytes.most_that_fit(free);
    if (gpu_layers < n_layer)
      note = "the model needs about " + format_bytes(bytes.last(n_layer)) + " on " + device->name() +
             " for a context of " + std::to_string(n_ctx) + ", " + format_bytes(free) + " is free there: " +
             (gpu_layers == 0 ? "every layer on the cpu backend"
                              : "its last " + std::to_string(gpu_layers) + " of " + std::to_string(n_layer) +
                                    " layers there, the others on the cpu backend") +
             " (--gpu-layers auto; -1 to ask for every layer there)";
    if (gpu_layers == 0) device.reset();
  }
  if (gpu_layers >= n_layer) return std::make_shared<StepRunner>(file, std::move(device));
  BackendSpec cpu{"cpu", "", backend.threads};
  cpu.latent_attention = backend.latent_attention;
  cpu.repack = backend.repack;
  if (gpu_layers == 0) return std::make_shared<StepRunner>(file, make_backend(cpu));
  std::vector<DevicePart> devices;
  devices.push_back(DevicePart{make_backend(cpu), n_layer - gpu_layers});
  devices.push_back(DevicePart{std::move(device), gpu_layers});
  return std::make_shared<StepRunner>(std::make_unique<ModelWeights>(file, std::move(devices)));
}

}  // namespace

uint64_t device_bytes_for_layers(const GgufFile& file, int32_t layers, int32_t n_ctx, KvCacheType kv_type) {
  const ModelConfig c = ModelConfig::from_gguf(file);
  return DeviceBytes(file, c, n_ctx > 0 ? n_ctx : std::min(c.n_ctx_train, 4096), kv_type).last(layers);
}

OpenOptions same_placement(const OpenOptions& options, const OpenedModel& opened) {
  OpenOptions same = options;
  if (!options.split.empty() || options.gpu_layers != OpenOptions::kGpuLayersAuto) return same;
  const ModelWeights& w = opened.model->runner()->weights();
  if (w.n_devices() > 1) same.gpu_layers = w.layer_count(w.n_devices() - 1);
  else same.gpu_layers = opened.placement_note.empty() ? -1 : 0;  // a note on one device: every layer left it
  return same;
}

std::vector<SplitPart> parse_split(const std::string& text) {
  std::vector<SplitPart> parts;
  size_t start = 0;
  int32_t without_count = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) throw std::invalid_argument("'" + text + "' has an empty part (BACKEND[:DEVICE][=LAYERS],...)");
    SplitPart p;
    std::string where = item;
    if (const size_t eq = item.find('='); eq != std::string::npos) {
      where = item.substr(0, eq);
      const std::string count = item.substr(eq + 1);
      size_t used = 0;
      int n = 0;
      try {
        n = std::stoi(count, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (count.empty() || used != count.size() || n < 1)
        throw std::invalid_argument("'" + item + "': '" + count + "' is not a layer count (1 or more)");
      p.layers = n;
    } else {
      ++without_count;
    }
    if (const size_t colon = where.find(':'); colon != std::string::npos) {
      p.backend = where.substr(0, colon);
      p.device = where.substr(colon + 1);
      if (p.device.empty()) throw std::invalid_argument("'" + item + "' names no device after ':'");
    } else {
      p.backend = where;
    }
    if (p.backend.empty()) throw std::invalid_argument("'" + item + "' names no backend");
    parts.push_back(p);
  }
  if (without_count > 1)
    throw std::invalid_argument("'" + text + "': only one device may go without a layer count (it takes the rest)");
  if (parts.size() < 2) throw std::invalid_argument("'" + text + "' names one device; a split needs two or more");
  return parts;
}

std::string split_text(const std::vector<SplitPart>& split) {
  std::string text;
  for (const SplitPart& p : split) {
    if (!text.empty()) text += ',';
    text += part_name(p);
    if (p.layers >= 0) text.append("=").append(std::to_string(p.layers));
  }
  return text;
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
  if (options.swa_full) model_options.ring_step = 0;
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
  options.ring_step = opened.model->ring_step();
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
  o.swa_full = target.swa_full;
  o.cache_dir = "off";
  if (decoding.draft_model_path == "self" && decoding.draft_backend.empty() && decoding.draft_device.empty()) {
    // The target drafting for itself: a second sequence on the loaded weights.
    SequenceOptions options;
    options.n_ctx = target_model.n_ctx();
    options.kv_type = target.kv_type;
    options.ring_step = target_model.ring_step();
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
