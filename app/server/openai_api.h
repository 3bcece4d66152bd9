// The OpenAI-compatible request and response bodies of `fafo serve`: parsing a
// /v1/chat/completions or /v1/completions request into a CompletionRequest (with the
// field named in every error), and building the responses, their streamed chunks and
// the error objects. No HTTP and no model here (server.cpp has both).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fafo/decoding.h"
#include "fafo/kv_policy.h"
#include "fafo/sampler.h"

namespace fafo::server {

// An error answered with an OpenAI-style error object:
// {"error": {"message", "type", "param", "code"}}.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string type = "invalid_request_error",
           std::string code = "")
      : std::runtime_error(message), status_(status), param_(std::move(param)), type_(std::move(type)),
        code_(std::move(code)) {}
  int status() const { return status_; }
  nlohmann::json body() const;

 private:
  int status_;
  std::string param_, type_, code_;
};

// The server's defaults for what a request does not say.
struct RequestDefaults {
  SamplerOptions sampling;       // temperature, top_k, top_p, min_p, seed
  DecodingOptions decoding;      // the strategy and its parameters
  std::shared_ptr<const CorpusIndex> corpus;  // decoding.corpus_path's index, opened once, read by every request
  KvPolicyOptions kv;            // the KV compression policy (--kv-policy)
  int32_t max_tokens = -1;       // -1: until the context is full
  bool random_seed = false;      // a request without a seed gets a random one (else sampling.seed)
};

struct CompletionRequest {
  bool chat = true;                       // /v1/chat/completions (messages) or /v1/completions (prompt)
  nlohmann::ordered_json messages;        // chat: the messages, as given
  std::string prompt;                     // completions
  std::string model;                      // as given ("" when absent)
  bool stream = false;
  bool include_usage = false;             // stream_options.include_usage
  int32_t max_tokens = -1;                // -1: until the context is full
  std::vector<std::string> stop;          // at most 4
  SamplerOptions sampling;
  bool seed_given = false;
  DecodingOptions decoding;               // fafo's extension fields: strategy, window, ngram, guesses, lookback
  bool ignore_eos = false;                // fafo's (and llama-server's) extension: generate past end-of-text
};

// Parses and checks a body; throws ApiError (400) naming the field.
CompletionRequest parse_completion_request(const std::string& body, bool chat, const RequestDefaults& defaults);

// Why a reply ended, as the API says it: "stop" (end of generation or a stop string),
// "length" (max_tokens or the context).
struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t reused_tokens = 0;     // prompt tokens already in the slot's KV cache
  int32_t steps = 0;             // forward passes that produced the reply
  std::string strategy;
};
nlohmann::json usage_json(const Usage& u);
// fafo's own fields: steps, tau (tokens per step), strategy, reused prompt tokens.
nlohmann::json fafo_json(const Usage& u);

// The whole response of a non-streamed request.
nlohmann::json completion_response(bool chat, const std::string& id, int64_t created, const std::string& model,
                                   const std::string& text, const std::string& finish_reason, const Usage& usage);
// One streamed chunk: `text` (the first chat chunk also carries the role), or the
// last one with its finish_reason (text empty), or the usage chunk (choices empty).
nlohmann::json completion_chunk(bool chat, const std::string& id, int64_t created, const std::string& model,
                                const std::string& text, const std::string* finish_reason, bool first);
nlohmann::json usage_chunk(bool chat, const std::string& id, int64_t created, const std::string& model,
                           const Usage& usage);

// Holds back streamed text that may be the start of a stop string; cuts at the first
// stop string found. push() returns what can be sent now; finish() the rest.
class StopText {
 public:
  explicit StopText(std::vector<std::string> stops);
  std::string push(const std::string& piece);
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace fafo::server
