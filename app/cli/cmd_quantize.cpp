// `fafo quantize IN.gguf OUT.gguf TYPE`: a model's weights in another type or one of
// llama.cpp's mixes (fafo/quant_mix.h), every other tensor and all metadata as they are
// (general.file_type set to the new type). Rows are dequantized to f32 and quantized
// again on every core; tensors streamed, so the output never sits in memory.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "plural.h"
#include "input_files.h"
#include "fafo/gguf.h"
#include "fafo/model_config.h"
#include "fafo/quant_mix.h"
#include "fafo/tensor_type.h"

namespace fafo::cli {

namespace {

struct QuantizeArgs {
  std::string input, output, type;
  int threads = 0;
};

// Rows [0, rows) of `t` converted to `to`, on `threads` threads.
void convert(const GgufTensor& t, TensorType to, int threads, std::vector<uint8_t>& out) {
  const int64_t cols = t.shape[0], rows = t.n_rows();
  const size_t in_row = tensor_row_bytes(t.type, cols), out_row = tensor_row_bytes(to, cols);
  out.resize(out_row * static_cast<size_t>(rows));
  std::atomic<int64_t> next{0};
  std::exception_ptr failure;
  std::atomic<bool> failed{false};
  auto work = [&] {
    try {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r; !failed && (r = next.fetch_add(64)) < rows;)
        for (int64_t i = r; i < std::min(rows, r + 64); ++i) {
          dequantize_row(t.type, t.data + static_cast<size_t>(i) * in_row, row.data(), cols);
          quantize_row(to, row.data(), out.data() + static_cast<size_t>(i) * out_row, cols);
        }
    } catch (...) {
      if (!failed.exchange(true)) failure = std::current_exception();
    }
  };
  {
    std::vector<std::jthread> pool;
    for (int i = 1; i < threads; ++i) pool.emplace_back(work);
    work();
  }  // joined
  if (failure) std::rethrow_exception(failure);
}

int run_quantize(const QuantizeArgs& a) {
  // An unknown type is refused before anything is read.
  quant_type_for(a.type, "blk.0.attn_q.weight", 256, 1, false);
  quant_file_type(a.type);
  app::require_readable_file(a.input);
  if (tensor_type_from_name(a.type) == TensorType::IQ3_XXS)
    std::fprintf(stderr,
                 "fafo: note: IQ3_XXS without an importance matrix, which llama-quantize requires for it: fafo writes "
                 "ggml's own quantization without one (as llama.cpp's quantize_iq3_xxs with no weights), which keeps "
                 "less of the model; IQ3_S needs none\n");
  std::error_code ec;
  if (std::filesystem::equivalent(a.input, a.output, ec))
    throw std::runtime_error("the output would overwrite the input (" + a.output + ")");
  const std::shared_ptr<const GgufFile> file = GgufFile::open(a.input);
  const ModelConfig config = ModelConfig::from_gguf(*file);
  GgufWriter w;
  for (const auto& [key, value] : file->metadata())
    if (key != "general.file_type" && key != "general.alignment") w.set(key, value);
  w.set_u32("general.file_type", quant_file_type(a.type));
  std::vector<TensorType> types;
  for (const GgufTensor& t : file->tensors()) {
    const bool matrix = t.shape.size() >= 2;
    const TensorType to =
        matrix ? quant_type_for(a.type, t.name, t.shape[0], config.n_layer, config.tied_embeddings, config.n_expert) : t.type;
    types.push_back(to);
    w.add_tensor_info(t.name, to, t.shape);
  }
  const int threads = a.threads > 0 ? a.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const auto& tensors = file->tensors();
  const bool terminal = isatty(STDERR_FILENO);
  uint64_t in_bytes = 0, out_bytes = 0;
  const std::string temporary = a.output + ".tmp" + std::to_string(::getpid());
  try {
    w.write(temporary, [&](size_t i, std::vector<uint8_t>& out) {
      const GgufTensor& t = tensors[i];
      if (types[i] == t.type) {
        out.assign(t.data, t.data + t.n_bytes);
      } else {
        convert(t, types[i], threads, out);
      }
      in_bytes += t.n_bytes;
      out_bytes += out.size();
      if (terminal)
        std::fprintf(stderr, "\r[%zu/%zu] %-28s %-6s -> %-6s", i + 1, tensors.size(), t.name.c_str(),
                     std::string(tensor_type_info(t.type).name).c_str(), std::string(tensor_type_info(types[i]).name).c_str());
    });
    std::filesystem::rename(temporary, a.output);
  } catch (...) {
    std::filesystem::remove(temporary, ec);
    throw;
  }
  if (terminal) std::fprintf(stderr, "\n");
  std::fprintf(stderr, "fafo: %s: %s, %.2f MB of weights -> %.2f MB (%s)\n", a.output.c_str(),
               app::count_of(static_cast<int64_t>(tensors.size()), "tensor").c_str(),
               static_cast<double>(in_bytes) / 1e6, static_cast<double>(out_bytes) / 1e6, a.type.c_str());
  return 0;
}

}  // namespace

Command add_quantize_command(CLI::App& app) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "quantize", std::string("Write a model's weights in another type or llama.cpp mix (") + quant_mix_names() + ")");
  cmd->add_option("input", a->input, "The GGUF model to read")->required();
  cmd->add_option("output", a->output, "The GGUF file to write")->required();
  cmd->add_option("type", a->type, std::string("The weight type or mix: ") + quant_mix_names())->required();
  cmd->add_option("-t,--threads", a->threads, "Threads (0 = every hardware thread)")->capture_default_str()
      ->check(CLI::Range(0, 1024));
  return [a] { return run_quantize(*a); };
}

}  // namespace fafo::cli
