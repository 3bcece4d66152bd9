// Opening a GGUF model for the studio: file, backend, model and tokenizer together,
// and the chat template to talk to it with.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "fafo/backend.h"
#include "fafo/chat_template.h"
#include "fafo/gguf.h"
#include "fafo/model.h"
#include "fafo/tokenizer.h"

namespace fafo::studio {

struct ModelRequest {
  std::string path;
  BackendSpec backend;  // name "auto" | "cpu" | "vulkan", device, threads
  int32_t n_ctx = 0;    // 0: the model's, at most 4096
  KvCacheType kv_type = KvCacheType::F32;
};

struct StudioModel {
  std::string path;
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Throws std::runtime_error (or GgufError) naming the file, the backend or the device.
StudioModel load_studio_model(const ModelRequest& request);

// The chat template for `choice`: a built-in name, or "" for the model's own
// (tokenizer.chat_template). A model without one, or with one the interpreter cannot
// parse, gets the built-in format it looks like, else chatml; `note` then says so.
// Throws std::invalid_argument for an unknown built-in name.
ChatTemplate studio_chat_template(const GgufFile& file, const std::string& choice, std::string* note);

// One line for the UI: name, architecture, layers, dim, vocab, context and backend.
std::string model_summary(const StudioModel& m);

}  // namespace fafo::studio
