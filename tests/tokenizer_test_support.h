// Shared by the tokenizer tests: a GGUF file's tokenizer, a token's id, ids as text.
#pragma once

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "fafo/gguf.h"
#include "fafo/tokenizer.h"

namespace fafo::test {

// The tokenizer of the GGUF file at `path`.
inline Tokenizer load_tokenizer(const std::filesystem::path& path) {
  const std::unique_ptr<GgufFile> file = GgufFile::open(path.string());
  return Tokenizer(Vocab::from_gguf(*file));
}

// The id of the token whose text is `text`; std::logic_error when there is none.
inline int32_t id_of(const Tokenizer& tok, const std::string& text) {
  const auto& t = tok.vocab().tokens;
  const auto it = std::find(t.begin(), t.end(), text);
  if (it == t.end()) throw std::logic_error("no token " + text);
  return static_cast<int32_t>(it - t.begin());
}

// Ids as "[1 2 3]", for failure messages.
inline std::string show(const std::vector<int32_t>& ids) {
  std::ostringstream s;
  s << '[';
  for (size_t k = 0; k < ids.size(); ++k) s << (k ? " " : "") << ids[k];
  s << ']';
  return s.str();
}

}  // namespace fafo::test
