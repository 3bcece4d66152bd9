// fafo-convert-tokenizer: writes a vocab-only GGUF (no tensors) from a tokenizer.
//   fafo-convert-tokenizer ../shared/tokenizers/qwen3-from-npm/tokenizer.json -o qwen3-vocab.gguf
//   fafo-convert-tokenizer --tiktoken ../shared/tokenizers/llama3/tokenizer.model -o llama3-vocab.gguf
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "convert_tokenizer.h"

int main(int argc, char** argv) {
  using namespace fafo::convert;
  CLI::App app{"fafo-convert-tokenizer: write a vocab-only GGUF from a Hugging Face tokenizer.json (byte-level BPE) "
               "or a tiktoken rank file (Llama 3)"};
  std::string input, out, tiktoken, config, pre, arch, name;
  int32_t vocab_size = 0;
  bool quiet = false;
  app.add_option("tokenizer_json", input, "Hugging Face tokenizer.json (tokenizer_config.json and config.json "
                                          "beside it are read when present)");
  app.add_option("--tiktoken", tiktoken, "A tiktoken rank file (base64 token and rank per line) with Llama 3's "
                                         "special tokens, instead of a tokenizer.json");
  app.add_option("-o,--out", out, "Output GGUF path")->required();
  app.add_option("--config", config, "tokenizer_config.json to use (default: the one beside tokenizer.json)");
  app.add_option("--pre", pre, "tokenizer.ggml.pre (default: recognised from the pre-tokenizer: llama-bpe, qwen2, "
                               "gpt-2, starcoder)");
  app.add_option("--arch", arch, "general.architecture (default: config.json's model_type, else qwen2 for a qwen2 "
                                 "pre-tokenizer, else llama)");
  app.add_option("--name", name, "general.name (default: the tokenizer's folder name; llama-3 for --tiktoken)");
  app.add_option("--vocab-size", vocab_size, "Pad the vocabulary with unused [PAD<id>] tokens up to this size "
                                             "(default: config.json's vocab_size)");
  app.add_flag("-q,--quiet", quiet, "Print nothing on success");
  CLI11_PARSE(app, argc, argv);
  try {
    if (input.empty() == tiktoken.empty()) throw ConvertError("give either a tokenizer.json or --tiktoken FILE");
    VocabFile v;
    if (!tiktoken.empty()) {
      TiktokenOptions o;
      if (!name.empty()) o.name = name;
      if (!arch.empty()) o.architecture = arch;
      v = from_tiktoken(tiktoken, o);
      if (!pre.empty()) v.pre = pre;
      if (vocab_size > static_cast<int32_t>(v.tokens.size()))
        throw ConvertError("--vocab-size applies to a tokenizer.json only");
    } else {
      HfOptions o;
      o.pre = pre;
      o.architecture = arch;
      o.name = name;
      o.vocab_size = vocab_size;
      o.config = config;
      v = from_hf_tokenizer(input, o);
    }
    write_vocab_gguf(v, out);
    if (!quiet)
      std::printf("%s: %zu tokens, %zu merges, pre '%s', architecture '%s', BOS %d, EOS %d\n", out.c_str(),
                  v.tokens.size(), v.merges.size(), v.pre.c_str(), v.architecture.c_str(), v.bos, v.eos);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fafo-convert-tokenizer: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
