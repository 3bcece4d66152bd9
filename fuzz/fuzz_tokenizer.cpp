// Fuzz target: text encoded and decoded by every tokenizer family (SentencePiece, byte-
// level BPE with several pre-tokenizers, WordPiece), with and without special-token
// parsing. The first byte picks the vocabulary and the flags; the rest is the text.
#include <memory>
#include <stdexcept>
#include <vector>

#include "fafo/gguf.h"
#include "fafo/tokenizer.h"
#include "fuzz_support.h"

namespace {

std::vector<std::unique_ptr<fafo::Tokenizer>> load() {
  std::vector<std::unique_ptr<fafo::Tokenizer>> out;
  for (const char* name : {"llama-spm", "gpt-2", "bert-bge", "phi-3", "falcon", "deepseek-llm", "deepseek-coder",
                           "qwen2", "starcoder", "mpt", "refact"}) {
    const std::string path = fafo::fuzz::shared_dir() + "/vocab/ggml-vocab-" + name + ".gguf";
    try {
      out.push_back(std::make_unique<fafo::Tokenizer>(fafo::Vocab::from_gguf(*fafo::GgufFile::open(path))));
    } catch (const std::exception&) {
      // not in this checkout of the shared folder
    }
  }
  if (out.empty()) {
    std::fprintf(stderr, "fuzz_tokenizer: no vocabularies under %s/vocab (set FAFO_SHARED_DIR)\n", fafo::fuzz::shared_dir().c_str());
    std::abort();
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::unique_ptr<fafo::Tokenizer>> tokenizers = load();
  if (size == 0) return 0;
  const fafo::Tokenizer& tok = *tokenizers[data[0] % tokenizers.size()];
  const bool add_special = data[0] & 0x40, parse_special = data[0] & 0x80;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, add_special, parse_special);
  } catch (const std::runtime_error&) {
    return 0;  // a character with no token and no unk token
  }
  std::string pieces;
  for (int32_t id : ids) pieces += tok.token_to_piece(id, true);
  (void)tok.decode(ids);
  return 0;
}
