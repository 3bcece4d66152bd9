#include "server.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include <httplib.h>
#include <sys/socket.h>

#include "fafo/chat_session.h"
#include "fafo/device_error.h"
#include "fafo/generator.h"
#include "fafo/gguf.h"
#include "fafo/model_weights.h"
#include "fafo/utf8_stream.h"

namespace fafo::server {

using nlohmann::json;

namespace {

// Text from a model may hold bytes that are not UTF-8 (a token that is half a
// character, cut off by max_tokens): replaced, never a throw.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse(const json& data) { return "data: " + dump(data) + "\n\n"; }

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), e.body()); }

// The route a metrics line names: the known ones, else "other" (a client's path is
// not a label: every distinct one would stay in /metrics for good).
std::string route_label(const std::string& path) {
  for (const char* known : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics"})
    if (path == known) return known;
  return "other";
}

// The request this thread is answering, for its log line: cpp-httplib answers a request
// on one thread, from the pre-routing handler through the handler and a content
// provider (a generation) to the logger, which runs once the answer is written.
struct RequestInFlight {
  std::chrono::steady_clock::time_point start{};
  bool started = false;  // false: the request was refused before routing (its time is 0)
  int64_t prompt_tokens = -1, completion_tokens = -1;
  std::string outcome;  // RequestLogEntry::outcome
};
thread_local RequestInFlight t_request;

// A client's bytes made safe for a terminal: printable ASCII, the rest '?', cut at `limit`.
std::string printable(const std::string& s, size_t limit) {
  std::string out;
  for (char c : s.substr(0, limit)) out += c >= 0x20 && c < 0x7f ? c : '?';
  if (s.size() > limit) out += "...";
  return out;
}

// A request's prompt, ready to generate: the text's tokens and what ends its reply.
struct Prepared {
  std::vector<int32_t> ids;
  std::vector<std::string> stops;  // the request's, and a chat template's turn-end text
};

}  // namespace

std::string request_log_line(const RequestLogEntry& e) {
  std::string line = printable(e.method, 16) + " " + printable(e.path, 200) + " " + std::to_string(e.status);
  if (e.prompt_tokens >= 0)
    line += ", " + std::to_string(e.prompt_tokens) + " prompt + " + std::to_string(std::max<int64_t>(e.completion_tokens, 0)) +
            " completion tokens";
  char ms[32];
  std::snprintf(ms, sizeof ms, ", %.1f ms", e.ms);
  line += ms;
  if (!e.outcome.empty()) line += ", " + e.outcome;
  return line;
}

struct Server::Impl {
  ServerOptions options;
  SlotPool& pool;
  Metrics metrics;
  httplib::Server http;
  std::mutex prepare_mutex;  // the first slot's tokenizer and template, for requests not yet in a slot
  std::atomic<uint64_t> next_id{1};
  std::atomic<bool> stopping{false};   // stop() was called: generations end, listen() returns
  std::atomic<bool> listening{false};  // listen() runs (or is about to)
  int port = 0;
  int listen_socket = -1;  // the server's socket, once bound

  Impl(ServerOptions o, SlotPool& p) : options(std::move(o)), pool(p) {}

  void routes();
  void completion(const httplib::Request& req, httplib::Response& res, bool chat);
  Prepared prepare(const CompletionRequest& r);
};

Prepared Server::Impl::prepare(const CompletionRequest& r) {
  std::lock_guard<std::mutex> lock(prepare_mutex);
  const std::shared_ptr<const OpenedModel> held = pool.model();
  const OpenedModel& m = *held;
  const Tokenizer& tok = *m.tokenizer;
  Prepared p;
  p.stops = r.stop;
  if (r.chat) {
    const ChatTemplateContext ctx = chat_template_context(tok);
    std::string text;
    try {
      text = m.chat.chat_template.render_json(r.messages, true, ctx, chat_rendering_cap(m.model->n_ctx()));
    } catch (const ChatTemplateError& e) {
      throw ApiError(400, chat_template_refusal(m.chat.chat_template, e, m.model->n_ctx(), "these messages"), "messages");
    }
    p.ids = tok.encode(text, false, true);
    if (chat_needs_bos(tok, ctx, text)) p.ids.insert(p.ids.begin(), tok.vocab().bos);
    const std::string turn_end = m.chat.chat_template.assistant_turn_end(ctx);
    if (!turn_end.empty()) p.stops.push_back(turn_end);
  } else {
    p.ids = tok.encode(r.prompt, true, false);
  }
  if (p.ids.empty()) throw ApiError(400, "the prompt has no tokens", r.chat ? "messages" : "prompt");
  const int64_t n_ctx = m.model->n_ctx();
  const int64_t n = static_cast<int64_t>(p.ids.size());
  if (n >= n_ctx)
    throw ApiError(400,
                   "the prompt has " + std::to_string(n) + " tokens but the context holds " + std::to_string(n_ctx) +
                       " (and the reply needs at least one)",
                   r.chat ? "messages" : "prompt", "invalid_request_error", "context_length_exceeded");
  if (r.max_tokens > 0 && n + r.max_tokens > n_ctx)
    throw ApiError(400,
                   "the prompt has " + std::to_string(n) + " tokens and max_tokens is " + std::to_string(r.max_tokens) +
                       ": more than the " + std::to_string(n_ctx) + " the context holds",
                   "max_tokens", "invalid_request_error", "context_length_exceeded");
  return p;
}

void Server::Impl::completion(const httplib::Request& req, httplib::Response& res, bool chat) {
  CompletionRequest r;
  Prepared p;
  try {
    r = parse_completion_request(req.body, chat, options.defaults);
    if (!r.seed_given && options.defaults.random_seed) r.sampling.seed = std::random_device{}();
    if (!r.model.empty() && r.model != options.model_name)
      throw ApiError(404, "the model '" + r.model + "' does not exist; this server has '" + options.model_name + "'",
                     "model", "invalid_request_error", "model_not_found");
    p = prepare(r);
  } catch (const ApiError& e) {
    send_error(res, e);
    return;
  }
  SlotPool::Lease lease = pool.acquire(p.ids);
  if (!lease) {
    send_error(res, ApiError(503,
                             "the server is busy: " + std::to_string(pool.size()) +
                                 " requests are running and the queue is full; try again later",
                             "", "server_error", "queue_full"));
    return;
  }
  struct Job {
    SlotPool::Lease lease;
    CompletionRequest request;
    Prepared prepared;
    std::string id;
    int64_t created = 0;
  };
  auto job = std::make_shared<Job>();
  job->lease = std::move(lease);
  job->request = std::move(r);
  job->prepared = std::move(p);
  job->id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id.fetch_add(1));
  job->created = static_cast<int64_t>(std::time(nullptr));

  auto generate_into = [this, job](httplib::DataSink& sink) {
    const CompletionRequest& rq = job->request;
    Slot& slot = *job->lease;
    Sequence& model = *slot.model->model;
    const Tokenizer& tok = *slot.model->tokenizer;
    const std::vector<int32_t>& ids = job->prepared.ids;
    const std::string& name = options.model_name;
    bool gone = false;  // the client disconnected
    auto write = [&](const std::string& s) {
      if (gone) return false;
      if (!sink.write(s.data(), s.size())) gone = true;
      return !gone;
    };

    // What the slot's cache shares with this prompt stays; at least one token is fed.
    size_t keep = std::min(common_prefix(slot.cached, ids), static_cast<size_t>(model.n_past()));
    if (keep >= ids.size()) keep = ids.size() - 1;
    keep = static_cast<size_t>(model.reusable(static_cast<int32_t>(keep)));  // 0 where the window rings moved on
    GenerationOptions g;
    g.keep_context = true;
    g.n_predict = rq.max_tokens;
    g.sampling = rq.sampling;
    g.decoding = rq.decoding;
    g.kv = options.defaults.kv;
    g.auto_state = slot.model->auto_state.get();
    g.resources.corpus = options.defaults.corpus;
    if (rq.decoding.strategy == Strategy::Draft || scoring_uses_draft_model(g)) g.resources.draft_model = slot.draft;
    g.should_stop = [&] { return gone || stopping.load(); };
    g.stop_at_end_of_generation = !rq.ignore_eos;
    StopText stop(job->prepared.stops);
    Utf8Stream utf8;
    std::string text;
    bool first_chunk = true;
    int64_t tokens = 0;
    auto emit = [&](const std::string& piece) {
      text += piece;
      if (!rq.stream || piece.empty()) return;
      write(sse(completion_chunk(rq.chat, job->id, job->created, name, piece, nullptr, first_chunk)));
      first_chunk = false;
    };
    auto on_token = [&](int32_t id) {
      ++tokens;
      if (!rq.stream && tokens % 16 == 0) write(" ");  // notices a client that is gone
      if ((tok.is_end_of_generation(id) && !rq.ignore_eos) || tok.is_control(id)) return !gone;
      emit(stop.push(utf8.push(tok.token_to_piece(id))));
      return !gone && !stop.stopped();
    };
    GenerationResult result;
    t_request.prompt_tokens = static_cast<int64_t>(ids.size());
    try {
      model.truncate(static_cast<int32_t>(keep));
      g.context_ids.assign(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep));
      result = generate(model, tok, std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end()), g,
                        on_token);
    } catch (const std::exception& e) {
      slot.cached.clear();  // the next request on this slot feeds everything again
      try {
        model.truncate(0);
      } catch (...) {
      }
      t_request.outcome = std::string("failed: ") + e.what();
      const DeviceError* de = dynamic_cast<const DeviceError*>(&e);
      const ApiError err(500, std::string("the generation failed: ") + e.what(), "", "server_error",
                         de ? (de->kind() == DeviceError::Kind::Lost ? "device_lost" : "out_of_memory") : "");
      if (de ? de->kind() == DeviceError::Kind::Lost : dynamic_cast<const GgufError*>(&e) != nullptr)
        pool.reopen(slot);  // a lost device or a changed file: the slot gets a fresh model
      write(rq.stream ? sse(err.body()) + "data: [DONE]\n\n" : dump(err.body()));
      sink.done();
      return true;
    }
    emit(stop.push(utf8.flush()));
    emit(stop.finish());
    // The cache holds the prompt and every generated token but the last.
    slot.cached = ids;
    if (!result.ids.empty()) slot.cached.insert(slot.cached.end(), result.ids.begin(), result.ids.end() - 1);
    if (static_cast<int64_t>(slot.cached.size()) != model.n_past()) slot.cached.resize(std::min(slot.cached.size(), static_cast<size_t>(model.n_past())));
    t_request.completion_tokens = static_cast<int64_t>(result.ids.size());
    if (gone) {
      t_request.outcome = "cancelled (the client went away)";
      metrics.count_cancelled();
      return false;
    }

    Usage u;
    u.prompt_tokens = static_cast<int32_t>(ids.size());
    u.completion_tokens = static_cast<int32_t>(result.ids.size());
    u.reused_tokens = static_cast<int32_t>(keep);
    u.steps = result.n_steps;
    u.strategy = strategy_name(rq.decoding.strategy);
    metrics.count_generation(u.prompt_tokens, u.completion_tokens, u.steps, result.decode_seconds);
    const std::string finish = stop.stopped() || result.stop == StopReason::EndOfGeneration ? "stop" : "length";
    if (rq.stream) {
      write(sse(completion_chunk(rq.chat, job->id, job->created, name, "", &finish, first_chunk)));
      if (rq.include_usage) write(sse(usage_chunk(rq.chat, job->id, job->created, name, u)));
      write("data: [DONE]\n\n");
    } else {
      write(dump(completion_response(rq.chat, job->id, job->created, name, text, finish, u)));
    }
    sink.done();
    return true;
  };
  // cpp-httplib does not catch what a content provider throws: nothing may escape.
  auto provider = [generate_into](size_t, httplib::DataSink& sink) {
    try {
      return generate_into(sink);
    } catch (...) {
      sink.done();
      return false;
    }
  };
  res.status = 200;
  if (job->request.stream) res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(job->request.stream ? "text/event-stream" : "application/json", provider,
                                   [job](bool) { job->lease.release(); });
}

void Server::Impl::routes() {
  http.set_payload_max_length(options.max_body_bytes);
  http.set_socket_options([this](socket_t sock) {
    // SO_REUSEADDR, not cpp-httplib's SO_REUSEPORT (which lets a second server bind the
    // same port and take half the connections).
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_socket = sock;
  });
  http.set_keep_alive_timeout(2);  // an idle connection holds a thread no longer
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    t_request = RequestInFlight{};
    t_request.start = std::chrono::steady_clock::now();
    t_request.started = true;
    if (options.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    if (auth == "Bearer " + options.api_key) return httplib::Server::HandlerResponse::Unhandled;
    send_error(res, ApiError(401, auth.empty() ? "an API key is required (Authorization: Bearer KEY)" : "the API key is wrong",
                             "", "invalid_request_error", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404)
      send_error(res, ApiError(404, "no route " + req.method + " " + req.path, "", "invalid_request_error", "not_found"));
    else if (res.status == 413)
      send_error(res, ApiError(413, "the request body is larger than " + std::to_string(options.max_body_bytes) +
                                        " bytes (--max-body)"));
    else
      send_error(res, ApiError(res.status, "HTTP error " + std::to_string(res.status)));
  });
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, "internal error: " + what, "", "server_error"));
  });
  // Counted just before the response goes out (cpp-httplib's logger runs after it is
  // written, so a client's next request could read /metrics before the count).
  http.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    metrics.count_request(route_label(req.path), res.status);
  });
  // One line per request, once its answer is written (a generation's too: its content
  // provider has run by then, on this thread).
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const RequestInFlight r = t_request;
    t_request = RequestInFlight{};
    if (!options.log) return;
    RequestLogEntry e;
    e.method = req.method;
    e.path = req.path;
    e.status = res.status;
    e.prompt_tokens = r.prompt_tokens;
    e.completion_tokens = r.completion_tokens;
    e.outcome = r.outcome;
    if (r.started) e.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r.start).count();
    options.log(request_log_line(e));
  });
  http.Post("/v1/chat/completions",
            [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, true); });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) { completion(req, res, false); });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200,
              json{{"object", "list"},
                   {"data", json::array({{{"id", options.model_name},
                                          {"object", "model"},
                                          {"created", 0},
                                          {"owned_by", "fafo"},
                                          {"meta", {{"n_ctx", pool.model()->model->n_ctx()},
                                                    {"backend", pool.model()->model->backend().name()}}}}})}});
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, json{{"status", "ok"}, {"slots", pool.size()}, {"slots_busy", pool.busy()}, {"queue", pool.waiting()}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    const StepJoiner::Stats joined = pool.joiner() ? pool.joiner()->stats() : StepJoiner::Stats{};
    res.set_content(metrics.render(PoolGauges{pool.size(), pool.busy(), pool.waiting(), joined.steps, joined.parts,
                                              ModelWeights::loads_alive()}),
                    "text/plain; version=0.0.4");
  });
}

Server::Server(ServerOptions options, SlotPool& pool) : impl_(std::make_unique<Impl>(std::move(options), pool)) {
  // Threads: one per slot and per queued request, and a few for /health and /metrics.
  const size_t threads = static_cast<size_t>(pool.size()) + static_cast<size_t>(std::max(0, pool.max_queue())) + 16;
  impl_->http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl_->routes();
}

Server::~Server() { stop(); }

int Server::bind() {
  const ServerOptions& o = impl_->options;
  if (o.port == 0) {
    impl_->port = impl_->http.bind_to_any_port(o.host);
  } else {
    impl_->port = impl_->http.bind_to_port(o.host, o.port) ? o.port : -1;
  }
  if (impl_->port < 0)
    throw std::runtime_error("cannot listen on " + o.host + ":" + std::to_string(o.port) +
                             " (in use, or not an address of this machine)");
  // cpp-httplib listens with a backlog of 5: a burst of clients would wait a second for
  // the SYN to be sent again. Listening again sets a deeper one.
  if (impl_->listen_socket >= 0) ::listen(impl_->listen_socket, 1024);
  return impl_->port;
}

void Server::listen() {
  impl_->listening = true;
  if (!impl_->stopping) impl_->http.listen_after_bind();
  impl_->listening = false;
}

// cpp-httplib's stop() does nothing before its listen loop runs: a stop that comes
// while listen() is starting waits for the loop, then stops it.
void Server::stop() {
  if (!impl_) return;
  impl_->stopping = true;
  for (int i = 0; i < 5000; ++i) {
    if (impl_->http.is_running()) {
      impl_->http.stop();
      return;
    }
    if (!impl_->listening) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

const Metrics& Server::metrics() const { return impl_->metrics; }

}  // namespace fafo::server
