// Fuzz target: the body of a POST /v1/chat/completions or /v1/completions request, as
// `fafo serve` parses it (the first byte chooses the route). Every failure must be an
// ApiError (the server's 400/404 answers).
#include "openai_api.h"
#include <nlohmann/json.hpp>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  fafo::server::RequestDefaults defaults;
  try {
    const fafo::server::CompletionRequest r = fafo::server::parse_completion_request(body, chat, defaults);
    (void)r;
  } catch (const fafo::server::ApiError& e) {
    (void)e.body().dump();
  }
  return 0;
}
