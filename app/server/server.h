// `fafo serve`: an OpenAI-compatible HTTP server (cpp-httplib) over a SlotPool.
//
// Routes: POST /v1/chat/completions (the model's chat template), POST /v1/completions,
// GET /v1/models, GET /health, GET /metrics (Prometheus text). `stream: true` answers
// with server-sent events ending in `data: [DONE]`. Every error is an OpenAI-style
// error object: 400 for a malformed body or field (named in "param"), 401 for a wrong
// or missing --api-key (every route but /health), 404 for an unknown model or route,
// 413 for a body over --max-body, 503 when every slot is busy and the queue is full.
// A request is cancelled when its client disconnects: streamed replies notice at the
// next piece of text, others at the next of the spaces written ahead of the JSON
// every 16 tokens (JSON allows leading whitespace).
//
// With ServerOptions::log set, each request, once answered, is one line to it: method,
// path, status, for a generation its prompt and completion tokens, and the time from
// the request's routing to the end of its answer (request_log_line()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "metrics.h"
#include "openai_api.h"
#include "slot_pool.h"

namespace fafo::server {

struct ServerOptions {
  std::string host = "127.0.0.1";  // loopback only unless asked
  int port = 8080;                 // 0: any free port (tests)
  std::string api_key;             // empty: no key
  size_t max_body_bytes = size_t{8} << 20;
  std::string model_name;          // what /v1/models lists and requests may name
  std::string chat_template;       // --chat-template ("" = the model's own, as fafo chat)
  RequestDefaults defaults;
  // Called once per request after its answer is written, with one line (no newline),
  // from the thread that answered it (so from several threads at once); empty: no log.
  std::function<void(const std::string&)> log;
};

// What one line of the request log says: "METHOD PATH STATUS, P prompt + C completion
// tokens, T ms" (tokens only for a generation, prompt_tokens < 0 otherwise), then
// ", OUTCOME" when a generation did not end as answered: "cancelled (the client went
// away)", or "failed: WHY" (its status line had said 200 already; the error object is
// the answer's body). Control characters and bytes past 127 in the method and path
// become '?', and a path past 200 bytes is cut ("...").
struct RequestLogEntry {
  std::string method, path;
  int status = 0;
  int64_t prompt_tokens = -1, completion_tokens = -1;
  double ms = 0;
  std::string outcome;
};
std::string request_log_line(const RequestLogEntry& e);

class Server {
 public:
  Server(ServerOptions options, SlotPool& pool);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds to options.host:options.port; returns the port (the one chosen for port 0).
  // Throws std::runtime_error when the address cannot be bound.
  int bind();
  // Serves until stop() (from any thread).
  void listen();
  void stop();
  const Metrics& metrics() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fafo::server
