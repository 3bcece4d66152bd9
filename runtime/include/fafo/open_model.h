// Opening a GGUF model for use: the file, the backend, the model, its tokenizer and
// the chat template to talk to it with, in one call. `fafo` (run, chat, bench),
// fafo-studio and the tests open models only through open_model().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fafo/auto_state.h"
#include "fafo/backend.h"
#include "fafo/chat_template.h"
#include "fafo/gguf.h"
#include "fafo/sequence.h"
#include "fafo/tokenizer.h"

namespace fafo {

// One device of OpenOptions::split: a backend and device (BackendSpec's name and
// device; threads and the memory limit come from OpenOptions::backend) and how many
// consecutive layers it holds.
struct SplitPart {
  std::string backend;  // a registry name ("cpu", "vulkan", "cuda", "reference")
  std::string device;   // --device's forms; "" the backend's default
  int32_t layers = -1;  // -1: the layers the others leave (one part at most)
  bool operator==(const SplitPart&) const = default;
};

// `--split`'s text: comma-separated BACKEND[:DEVICE][=LAYERS] in layer order
// ("cpu=8,vulkan:0=10,vulkan:1"). Throws std::invalid_argument naming what is wrong
// (an empty part, a layer count that is not a number of at least 1, two parts without
// a count). The backends are checked when the model is opened.
std::vector<SplitPart> parse_split(const std::string& text);
// The parts as --split writes them.
std::string split_text(const std::vector<SplitPart>& split);

struct OpenOptions {
  std::string path;                        // the GGUF file
  BackendSpec backend;                     // which backend, device and threads
  int32_t n_ctx = 0;                       // 0: the model's context length, at most 4096
  KvCacheType kv_type = KvCacheType::F32;  // what the KV cache stores
  // Sliding-window layers hold the whole context instead of a ring of their window and
  // a step's tokens (SequenceOptions::ring_step 0; --swa-full).
  bool swa_full = false;
  // Layers on `backend`; the others (the first ones) run on the cpu backend, each layer's
  // weights and KV cache on its device (fafo/model_weights.h, a layer split). -1: every
  // layer on `backend` (a model that does not fit fails with the sizes); at least the
  // model's layer count: the same. kGpuLayersAuto (the default): every layer where the
  // model fits, else as many as the backend's free memory holds
  // (BackendMemory::memory_free, device_bytes_for_layers) and the rest on the cpu
  // backend, with a placement_note saying so.
  static constexpr int32_t kGpuLayersAuto = -2;
  int32_t gpu_layers = kGpuLayersAuto;
  // Not empty: the layers split over these devices in order, each with its count
  // (`backend`'s name and device, and gpu_layers, are then not used; its threads are
  // every host part's, its memory limit every part's but the cpu backend's).
  std::vector<SplitPart> split;
  // Sequences whose KV caches kGpuLayersAuto counts on the device (a server's --parallel).
  int32_t sequences = 1;
  std::string chat_template;               // see resolve_chat_template(); "" = the model's own
  // --strategy auto's step-cost curve is kept in this folder between runs
  // (fafo/step_cost_cache.h); "" = default_cache_dir(), "off" = not kept.
  std::string cache_dir;
};

// A chat template and, when it is not the one asked for, why (empty otherwise).
struct ResolvedChatTemplate {
  ChatTemplate chat_template;
  std::string note;
};

struct OpenedModel {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Sequence> model;
  std::unique_ptr<Tokenizer> tokenizer;
  ResolvedChatTemplate chat;  // options.chat_template resolved against this file
  // What --strategy auto keeps between this model's generations (its step-cost curve
  // in options.cache_dir's cache); pass it as GenerationOptions::auto_state.
  std::unique_ptr<AutoState> auto_state;
  // With OpenOptions::kGpuLayersAuto: what it measured and chose, for the user ("" when
  // every layer went to the backend without a choice to make).
  std::string placement_note;
};

// Opens options.path, creates the backend with make_backend(options.backend) (and the
// cpu backend for the layers options.gpu_layers leaves it; or options.split's), builds
// the model and the tokenizer and resolves the chat template. Throws
// std::runtime_error "PATH: no such file" for a missing file, GgufError naming the
// file for a bad one (including a vocabulary whose size differs from token_embd's
// rows), make_backend's error naming the backend or device, std::invalid_argument or
// ChatTemplateError for a chat template choice that cannot be used.
OpenedModel open_model(const OpenOptions& options);

// `options` with the placement `opened` got fixed: kGpuLayersAuto replaced by the layer
// count it chose, so that opening again (a server after a lost device, while the old
// load still holds its memory) places the layers as before. Anything else unchanged.
OpenOptions same_placement(const OpenOptions& options, const OpenedModel& opened);

// What the last `layers` layers of `file` take on a device, with the output head, one
// sequence's KV cache of n_ctx entries (a sliding-window layer's ring where it holds fewer) (0: the context open_model chooses) and one
// step's buffers, plus a margin (5% and 16 MiB) for what a backend adds: what
// OpenOptions::kGpuLayersAuto fits into a backend's free memory. 0 for no layer.
uint64_t device_bytes_for_layers(const GgufFile& file, int32_t layers, int32_t n_ctx, KvCacheType kv_type);

// Another sequence on `opened`'s weights: a Sequence with its own KV cache (the same
// context length and cache type) and context, its own AutoState on the same step-cost
// cache, beside the same file,
// a tokenizer of the same vocabulary and the same chat template. Nothing is loaded
// again. Throws std::runtime_error when the cache does not fit.
OpenedModel open_sequence(const OpenedModel& opened);

// What a decoding's options name, opened in one call: its corpus index (corpus_path,
// checked against target_vocab's tokenizer; open_corpus in fafo/corpus_index.h) and,
// for strategy draft or when `draft_also_needed` (SpecKV's lookahead or SpecPC use it:
// scoring_uses_draft_model, fafo/generator.h), its draft model (open_draft_model). What
// `kept` holds is reused where the options name the same: the index of the same file,
// the draft model of the same file, backend and device (kept.draft_key). Throws what
// those two throw.
DecodingResources open_decoding_resources(const DecodingOptions& decoding, const OpenOptions& target,
                                          const Sequence& target_model, const Vocab& target_vocab,
                                          bool draft_also_needed = false, const DecodingResources& kept = {});
// What names the draft model `decoding` opens for `target` (DecodingResources::draft_key):
// its file (for "self", the target's file, backend and device), backend and device.
std::string draft_model_key(const DecodingOptions& decoding, const OpenOptions& target);
// The draft model decoding.draft_model_path names ("self": a second sequence on the
// target's weights, with its own KV cache, unless another backend or device is asked
// for), on decoding.draft_backend / draft_device (empty: the target's), with the
// target's context length and cache type; null for an empty path. Throws
// std::runtime_error when its vocabulary differs from `target_vocab` (naming the first
// difference), and what open_model throws.
std::shared_ptr<Sequence> open_draft_model(const DecodingOptions& decoding, const OpenOptions& target,
                                        const Sequence& target_model, const Vocab& target_vocab);

// "" when the vocabularies are equal token for token (texts and kinds), else
// the first difference, in words.
std::string vocabulary_difference(const Vocab& target, const Vocab& draft);

// The chat template for `choice`, the one rule for `fafo chat` and fafo-studio:
//  - a built-in name (builtin_chat_template_names()): that format;
//  - the path of a Jinja file: that template (ChatTemplateError when it cannot be parsed);
//  - "": the model's tokenizer.chat_template. A model without one, or with one the
//    interpreter cannot parse, gets the built-in format its template looks like
//    (builtin_template_name_for), else chatml, and `note` says so and why.
// Throws std::invalid_argument for any other choice, naming it and the built-in names.
ResolvedChatTemplate resolve_chat_template(const GgufFile& file, const std::string& choice);

}  // namespace fafo
