// Fuzz target: a GGUF file, read, then its vocabulary and tokenizer built and the model
// loaded on the cpu backend and run for one step. Every rejection must be a clear error
// (GgufError, std::runtime_error, std::invalid_argument, std::length_error); anything
// else (a crash, a sanitizer report, another exception) is a finding.
#include <stdexcept>

#include "fafo/gguf.h"
#include "fafo/sequence.h"
#include "fafo/tokenizer.h"
#include "fafo/backend_registry.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fafo::fuzz::write_input(data, size, ".gguf");
  try {
    std::shared_ptr<const fafo::GgufFile> file = fafo::GgufFile::open(path);
    try {
      fafo::Tokenizer tok(fafo::Vocab::from_gguf(*file));
      tok.decode(tok.encode("Hello, world! <s> 123", true, true));
    } catch (const std::runtime_error&) {
    } catch (const std::invalid_argument&) {
    }
    fafo::SequenceOptions options;
    options.n_ctx = 8;
    fafo::Sequence model(file, fafo::make_backend(fafo::BackendSpec{"cpu", "", 1}), options);
    fafo::StepBatch step = fafo::StepBatch::causal({0, 1}, 0);
    if (model.config().n_vocab > 1) model.forward_argmax(step);
  } catch (const std::runtime_error&) {
  } catch (const std::invalid_argument&) {
  } catch (const std::length_error&) {
  }
  return 0;
}
