#include "model_flags.h"

#include <stdexcept>
#include <string>
#include <vector>

namespace fafo::app {

CLI::Option* add_model_flag(CLI::App* cmd, std::string& path) {
  return cmd->add_option("-m,--model", path, "GGUF model file (default: $FAFO_MODEL, else the shipped stories260K.gguf)");
}

void add_backend_flags(CLI::App* cmd, BackendSpec& backend, KvCacheType& kv_type) {
  std::vector<std::string> names = {"auto"};
  std::string built;
  for (const std::string& n : available_backends()) {
    names.push_back(n);
    built += (built.empty() ? "" : ", ") + n;
  }
  cmd->add_option("--backend", backend.name,
                  "Compute backend: auto (cuda when it finds an NVIDIA GPU it has kernels for, else vulkan when a "
                  "Vulkan GPU exists, else cpu; lavapipe only when asked), " + built)
      ->capture_default_str()
      ->check(CLI::IsMember(names));
  cmd->add_option("--device", backend.device,
                  "Device of the backend: an index or part of a name from `fafo devices` (vulkan's default: the "
                  "first discrete GPU, else integrated, else any; cuda's: GPU 0)");
  cmd->add_option("-t,--threads", backend.threads, "CPU threads (0 = all cores)")->capture_default_str()
      ->check(CLI::Range(0, 1024));
  cmd->add_flag(
      "--no-repack", [&backend](int64_t) { backend.repack = false; },
      "cpu backend: multiply the file's rows as they are (as llama.cpp's --no-repack), instead of a copy of the Q4_0, "
      "Q5_0, Q8_0, IQ4_NL, MXFP4, Q4_K, Q5_K and Q6_K matrices arranged in groups of 8 rows at load: the memory of "
      "the file alone, slower prompts");
  cmd->add_option_function<std::string>(
         "--memory-limit",
         [&backend](const std::string& text) {
           try {
             backend.memory_limit = parse_byte_size(text);
           } catch (const std::invalid_argument& e) {
             throw CLI::ValidationError("--memory-limit", e.what());
           }
         },
         "Most memory the backend may allocate for weights, activations and the KV cache: bytes, or with K, M, G "
         "(512M, 1.5G); --gpu-layers auto fits the layers under it, else a model or context past it fails with the "
         "sizes (default: the device's memory)");
  cmd->add_option_function<std::string>(
         "--cache-type", [&kv_type](const std::string& name) { kv_type = parse_kv_cache_type(name); },
         "KV cache type: f32; f16 (half the memory and attention reads; keys and values rounded to fp16); q8_0 or "
         "q4_0 (GGUF's 32-value blocks: 27% or 14% of f32's memory; not MLA models; Vulkan: KV width a multiple of 64)")
      ->default_str(kv_cache_type_name(kv_type))
      ->check(CLI::IsMember({"f32", "f16", "q8_0", "q4_0"}));
}

void add_context_flag(CLI::App* cmd, int32_t& n_ctx) {
  cmd->add_option("-c,--ctx-size", n_ctx, "Context length (0 = the model's, at most 4096)")->capture_default_str()
      ->check(CLI::Range(0, 1 << 22));
}

CLI::Option* add_open_flags(CLI::App* cmd, OpenOptions& open) {
  CLI::Option* model = add_model_flag(cmd, open.path);
  add_backend_flags(cmd, open.backend, open.kv_type);
  add_context_flag(cmd, open.n_ctx);
  cmd->add_flag("--swa-full", open.swa_full,
                "Sliding-window layers (Gemma 2 and 3) hold the whole context, as the other layers do; by default "
                "each holds a ring of its window + 511 entries (the same tokens, in less memory)");
  cmd->add_option_function<std::string>(
         "--gpu-layers",
         [&open](const std::string& text) {
           if (text == "auto") {
             open.gpu_layers = OpenOptions::kGpuLayersAuto;
             return;
           }
           try {
             size_t used = 0;
             const int n = std::stoi(text, &used);
             if (used != text.size() || n < -1) throw std::invalid_argument(text);
             open.gpu_layers = n;
           } catch (const std::exception&) {
             throw CLI::ValidationError("--gpu-layers", "'" + text + "' is not a layer count (0 or more), -1 or auto");
           }
         },
         "Layers on the --backend's device, the last ones; the rest run on the cpu backend, each layer's weights and "
         "KV cache on its device: N, -1 (all; a model that does not fit fails with the sizes) or auto (every layer "
         "where the model fits, else as many as the device's free memory holds after the output head, the KV cache "
         "for -c and the step's buffers, saying so on stderr)")
      ->default_str("auto");
  CLI::Option* split = cmd->add_option_function<std::string>(
      "--split",
      [&open](const std::string& text) {
        try {
          open.split = parse_split(text);
        } catch (const std::invalid_argument& e) {
          throw CLI::ValidationError("--split", e.what());
        }
      },
      "The layers over two or more devices in order, instead of --backend and --gpu-layers: "
      "BACKEND[:DEVICE][=LAYERS],... (cpu=8,vulkan:0=10,vulkan:1; one device without a count takes the rest); "
      "-t applies to the cpu parts, --memory-limit to every other");
  for (const char* other : {"--gpu-layers", "--backend", "--device"})
    if (CLI::Option* o = cmd->get_option_no_throw(other)) split->excludes(o);
  return model;
}

}  // namespace fafo::app
