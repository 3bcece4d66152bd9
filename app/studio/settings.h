// What the chat view's Model and Decoding panels edit: which model to open and how,
// how a conversation starts, and how each reply is generated. Plain C++.
#pragma once

#include <cstdint>
#include <string>

#include "app_options.h"
#include "engine.h"
#include "fafo/generator.h"
#include "studio_model.h"

namespace fafo::studio {

struct StudioSettings {
  // The model to open.
  std::string model_path;
  std::string backend = "auto";  // "auto", "cpu", "vulkan"
  std::string device;            // vulkan: index or name part; "" = the best
  int threads = 0;               // cpu: 0 = every hardware thread
  int32_t n_ctx = 0;             // 0: the model's, at most 4096
  KvCacheType kv_type = KvCacheType::F32;
  // How a conversation starts (applied by New chat and when a model opens).
  std::string chat_template;     // "" = the model's own
  std::string system;
  // Each reply: n_predict, sampling, strategy and parameters, KV policy.
  GenerationOptions generation;
};

StudioSettings settings_from_options(const AppOptions& o);
ModelRequest model_request(const StudioSettings& s);
ChatSetup chat_setup(const StudioSettings& s);
// Why the generation settings cannot be used ("" when they can).
std::string settings_problem(const StudioSettings& s);

}  // namespace fafo::studio
