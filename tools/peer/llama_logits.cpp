// llama-logits: the logits llama.cpp computes at every position of given token
// sequences (teacher-forced), for comparing fafo's forward pass with llama.cpp's on the
// same GGUF. Built outside this repository against a llama.cpp checkout (it is not part
// of fafo's build):
//   c++ -O2 -std=c++17 tools/peer/llama_logits.cpp -I$LLAMA/include -I$LLAMA/ggml/include \
//       $LLAMA/build/src/libllama.a $LLAMA/build/ggml/src/libggml*.a -lpthread -o llama-logits
//   llama-logits model.gguf prompts.txt out.f32 [threads] [n_ctx]
// prompts.txt: one sequence per line, token ids separated by spaces. out.f32: for each
// sequence, for each position, n_vocab float32 logits (little-endian), in order. The
// KV cache is F32 and flash attention off, so only llama.cpp's products differ from
// plain float arithmetic. n_ctx (default: 256, or the longest sequence) matters where a
// model's RoPE depends on it (Phi-3's LongRoPE factors).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: llama-logits model.gguf prompts.txt out.f32 [threads] [n_ctx]\n");
    return 2;
  }
  const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
  std::vector<std::vector<llama_token>> prompts;
  std::ifstream in(argv[2]);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ids(line);
    std::vector<llama_token> p;
    for (long id; ids >> id;) p.push_back(static_cast<llama_token>(id));
    if (!p.empty()) prompts.push_back(p);
  }
  size_t longest = 0;
  for (const auto& p : prompts) longest = p.size() > longest ? p.size() : longest;
  if (prompts.empty()) {
    std::fprintf(stderr, "llama-logits: no sequences in %s\n", argv[2]);
    return 1;
  }
  llama_log_set([](ggml_log_level level, const char* text, void*) {
    if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr);
  }, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = argc > 5 ? static_cast<uint32_t>(std::atoi(argv[5])) : static_cast<uint32_t>(longest < 256 ? 256 : longest);
  cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(longest);
  cp.n_threads = cp.n_threads_batch = threads;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  std::FILE* out = std::fopen(argv[3], "wb");
  if (!out) return 1;
  for (const auto& p : prompts) {
    llama_memory_clear(llama_get_memory(ctx), true);
    llama_batch batch = llama_batch_init(static_cast<int32_t>(p.size()), 0, 1);
    for (size_t i = 0; i < p.size(); ++i) {
      batch.token[i] = p[i];
      batch.pos[i] = static_cast<llama_pos>(i);
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = 1;
    }
    batch.n_tokens = static_cast<int32_t>(p.size());
    if (llama_decode(ctx, batch) != 0) {
      std::fprintf(stderr, "llama-logits: llama_decode failed\n");
      return 1;
    }
    for (size_t i = 0; i < p.size(); ++i)
      std::fwrite(llama_get_logits_ith(ctx, static_cast<int32_t>(i)), sizeof(float), static_cast<size_t>(n_vocab), out);
    llama_batch_free(batch);
  }
  std::fclose(out);
  std::fprintf(stderr, "llama-logits: %zu sequences, %d logits per position\n", prompts.size(), n_vocab);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
