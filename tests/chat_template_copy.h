// A copy of a GGUF model with a tokenizer.chat_template of the test's choice.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "fafo/gguf.h"
#include "test_support.h"

namespace fafo::test {

// Writes `model` with tokenizer.chat_template = `source` to a fresh temporary folder
// named after `name`; returns the copy's path.
inline std::filesystem::path with_chat_template(const std::filesystem::path& model, const std::string& source,
                                                const std::string& name) {
  const auto in = GgufFile::open(model.string());
  GgufWriter w(in->alignment());
  for (const auto& [key, value] : in->metadata()) w.set(key, value);
  w.set_string("tokenizer.chat_template", source);
  for (const GgufTensor& t : in->tensors())
    w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  const auto out = temp_dir("chat-gguf-" + name) / "model.gguf";
  w.write(out.string());
  return out;
}

}  // namespace fafo::test
