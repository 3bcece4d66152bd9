// Opening a GGUF model for the CLI: file, backend, model and tokenizer together.
#pragma once

#include <memory>
#include <string>

#include "fafo/gguf.h"
#include "fafo/model.h"
#include "fafo/tokenizer.h"

namespace fafo::cli {

struct BackendChoice {
  std::string name = "auto";  // auto, cpu, vulkan (see fafo::make_backend)
  std::string device;         // vulkan: index or part of a name
  int threads = 0;            // cpu
  std::string cache_type = "f32";  // KV cache: f32 or f16
};

struct LoadedModel {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Throws with a message naming the file when it cannot be loaded.
LoadedModel load_model(const std::string& path, const BackendChoice& backend, int32_t n_ctx);

}  // namespace fafo::cli
