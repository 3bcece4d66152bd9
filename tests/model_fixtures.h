// Loading models for tests: the shared stories260K model and synthetic ones.
#pragma once

#include <memory>
#include <string>

#include "fafo/gguf.h"
#include "fafo/model.h"
#include "fafo/tokenizer.h"
#include "synthetic_model.h"

namespace fafo::test {

struct TestModel {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

inline TestModel load_test_model(const std::string& path, int32_t n_ctx = 0, int threads = 2) {
  TestModel m;
  m.file = GgufFile::open(path);
  ModelOptions options;
  options.n_ctx = n_ctx;
  m.model = std::make_unique<Model>(m.file, make_cpu_backend(threads), options);
  m.tokenizer = std::make_unique<Tokenizer>(Vocab::from_gguf(*m.file));
  return m;
}

}  // namespace fafo::test
