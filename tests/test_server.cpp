// `fafo serve`'s server on loopback, called as clients call it (cpp-httplib's client):
// every route, every error the issue names, streaming, cancellation when a client goes
// away, parallel slots giving the greedy text of plain generation, and a bounded load.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "chat_template_copy.h"
#include "fafo/chat_session.h"
#include "fafo/generator.h"
#include "fafo/open_model.h"
#include "server.h"
#include "test_support.h"

namespace fafo::server {
namespace {

using nlohmann::json;

std::filesystem::path stories() { return test::shared_path("models/stories260K.gguf"); }

OpenOptions stories_options() {
  OpenOptions o;
  o.path = stories().string();
  o.backend = BackendSpec{"cpu", "", 1};
  o.n_ctx = 512;
  o.chat_template = "chatml";
  return o;
}

// A server on a free loopback port, serving until the fixture ends.
class ServerOnLoopback {
 public:
  explicit ServerOnLoopback(int parallel = 2, int queue = 8, const std::string& api_key = "",
                            const OpenOptions& open = stories_options()) {
    pool_ = std::make_unique<SlotPool>(parallel, queue, [open] { return open_model(open); });
    ServerOptions o;
    o.port = 0;
    o.model_name = "stories";
    o.api_key = api_key;
    o.max_body_bytes = 64 * 1024;
    o.defaults.sampling = SamplerOptions{0.0f, 40, 0.95f, 0.05f, 7};
    o.defaults.decoding.strategy = Strategy::Ar;
    server_ = std::make_unique<Server>(o, *pool_);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->listen(); });
  }
  ~ServerOnLoopback() {
    server_->stop();
    thread_.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  SlotPool& pool() { return *pool_; }
  int port() const { return port_; }

 private:
  std::unique_ptr<SlotPool> pool_;
  std::unique_ptr<Server> server_;
  int port_ = 0;
  std::thread thread_;
};

#define REQUIRE_STORIES() \
  if (!std::filesystem::exists(stories())) GTEST_SKIP() << "shared data not found: " << stories()

json post(httplib::Client& c, const std::string& path, const json& body, int expect_status) {
  const httplib::Result r = c.Post(path, body.dump(), "application/json");
  EXPECT_TRUE(r) << path << ": no response";
  if (!r) return json();
  EXPECT_EQ(r->status, expect_status) << r->body;
  json j = json::parse(r->body, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r->body;
  return j;
}

// What fafo run prints for `prompt` (greedy, `n` tokens, BOS first), as text.
std::string plain_completion(const std::string& prompt, int n) {
  OpenedModel m = open_model(stories_options());
  GenerationOptions g;
  g.n_predict = n;
  g.sampling.temperature = 0;
  const GenerationResult r = generate(*m.model, *m.tokenizer, m.tokenizer->encode(prompt, true), g);
  std::string text;
  for (int32_t id : r.ids)
    if (!m.tokenizer->is_end_of_generation(id)) text += m.tokenizer->token_to_piece(id);
  return text;
}

// fafo chat's first reply to `user` (greedy, `n` tokens at most).
std::string plain_chat(const std::string& user, int n) {
  OpenedModel m = open_model(stories_options());
  ChatSession chat(*m.model, *m.tokenizer, m.chat.chat_template, chat_template_context(*m.tokenizer));
  GenerationOptions g;
  g.n_predict = n;
  g.sampling.temperature = 0;
  return chat.turn(user, g).reply;
}

void expect_error(const json& j, const std::string& param, const std::string& text) {
  ASSERT_TRUE(j.contains("error")) << j.dump();
  EXPECT_EQ(j["error"]["param"], param.empty() ? json(nullptr) : json(param)) << j.dump();
  EXPECT_NE(j["error"]["message"].get<std::string>().find(text), std::string::npos) << j.dump();
  EXPECT_TRUE(j["error"].contains("type")) << j.dump();
}

TEST(Server, RoutesAnswer) {
  REQUIRE_STORIES();
  ServerOnLoopback s;
  httplib::Client c = s.client();
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  const json m = json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "stories");
  post(c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 4}}, 200);
  auto missing = c.Get("/v1/nothing");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  expect_error(json::parse(missing->body), "", "no route GET /v1/nothing");
  auto metrics = c.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("fafo_requests_total{route=\"/v1/completions\",status=\"200\"} 1"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("fafo_generated_tokens_total 4"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("fafo_queue_depth 0"), std::string::npos) << metrics->body;
}

TEST(Server, GreedyRepliesEqualPlainGenerationOnEverySlot) {
  REQUIRE_STORIES();
  const std::string want_completion = plain_completion("Once upon a time", 24);
  const std::string want_chat = plain_chat("Tell me a story.", 24);
  ServerOnLoopback s(2, 8);
  std::vector<std::string> got(6);
  std::vector<std::thread> clients;
  for (size_t i = 0; i < got.size(); ++i)
    clients.emplace_back([&, i] {
      httplib::Client c = s.client();
      if (i % 2 == 0) {
        const json j = post(c, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"temperature", 0}}, 200);
        got[i] = j["choices"][0]["text"];
        EXPECT_EQ(j["usage"]["completion_tokens"], 24);
      } else {
        const json j = post(c, "/v1/chat/completions",
                            {{"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}},
                             {"max_tokens", 24},
                             {"temperature", 0},
                             {"strategy", i == 3 ? "fafo" : "lookahead"}},
                            200);
        got[i] = j["choices"][0]["message"]["content"];
        EXPECT_EQ(j["object"], "chat.completion");
        EXPECT_GT(j["fafo"]["steps"].get<int>(), 0);
        EXPECT_EQ(j["fafo"]["strategy"], i == 3 ? "fafo" : "lookahead");
      }
    });
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], i % 2 == 0 ? want_completion : want_chat) << i;
  // The slots' steps went through the joiner (how many met in one pass depends on timing).
  const std::string metrics = s.client().Get("/metrics")->body;
  const auto counter = [&](const std::string& name) {
    const size_t at = metrics.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(metrics.substr(at + name.size() + 2));
  };
  EXPECT_GT(counter("fafo_joined_steps_total"), 0) << metrics;
  EXPECT_GE(counter("fafo_joined_step_parts_total"), counter("fafo_joined_steps_total")) << metrics;

  // The same conversation again: its prompt is found in a slot's cache.
  httplib::Client c = s.client();
  const json again = post(c, "/v1/chat/completions",
                          {{"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}}, {"max_tokens", 24}}, 200);
  EXPECT_GT(again["fafo"]["reused_prompt_tokens"].get<int>(), 0) << again.dump();
  EXPECT_EQ(again["choices"][0]["message"]["content"], want_chat);
}

TEST(Server, StreamedChunksAddUpToTheReplyAndEndWithDone) {
  REQUIRE_STORIES();
  const std::string want = plain_chat("Tell me a story.", 32);
  ServerOnLoopback s;
  httplib::Client c = s.client();
  const json body = {{"messages", {{{"role", "user"}, {"content", "Tell me a story."}}}},
                     {"max_tokens", 32},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  const httplib::Result r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  std::string text;
  std::vector<json> events;
  bool done = false;
  size_t at = 0;
  while ((at = r->body.find("data: ", at)) != std::string::npos) {
    const size_t end = r->body.find("\n\n", at);
    ASSERT_NE(end, std::string::npos);
    const std::string data = r->body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      done = true;
      break;
    }
    events.push_back(json::parse(data));
  }
  ASSERT_TRUE(done) << r->body;
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["choices"][0]["delta"]["role"], "assistant");
  for (const json& e : events)
    if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content")) text += e["choices"][0]["delta"]["content"];
  EXPECT_EQ(text, want);
  EXPECT_FALSE(events[events.size() - 2]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 32);
}

TEST(Server, BadRequestsAreErrorObjectsNamingTheField) {
  REQUIRE_STORIES();
  ServerOnLoopback s;
  httplib::Client c = s.client();
  auto raw = c.Post("/v1/chat/completions", "{not json", "application/json");
  ASSERT_TRUE(raw);
  EXPECT_EQ(raw->status, 400);
  expect_error(json::parse(raw->body), "", "not valid JSON");
  expect_error(post(c, "/v1/chat/completions", json::object(), 400), "messages", "'messages' is required");
  expect_error(post(c, "/v1/chat/completions", {{"messages", "hi"}}, 400), "messages", "list of messages");
  expect_error(post(c, "/v1/chat/completions", {{"messages", {{{"content", "hi"}}}}}, 400), "messages[0].role", "string");
  const json user = {{{"role", "user"}, {"content", "hi"}}};
  expect_error(post(c, "/v1/chat/completions", {{"messages", user}, {"temperature", "hot"}}, 400), "temperature", "number");
  expect_error(post(c, "/v1/chat/completions", {{"messages", user}, {"temperature", 3}}, 400), "temperature", "between");
  expect_error(post(c, "/v1/chat/completions", {{"messages", user}, {"max_tokens", 0}}, 400), "max_tokens", "between");
  expect_error(post(c, "/v1/chat/completions", {{"messages", user}, {"n", 2}}, 400), "n", "'n' must be 1");
  expect_error(post(c, "/v1/chat/completions", {{"messages", user}, {"stop", {1}}}, 400), "stop", "strings");
  expect_error(post(c, "/v1/chat/completions", {{"messages", user}, {"strategy", "magic"}}, 400), "strategy", "magic");
  expect_error(post(c, "/v1/chat/completions", {{"messages", user}, {"strategy", "draft"}}, 400), "strategy", "--draft-model");
  expect_error(post(c, "/v1/chat/completions", {{"messages", user}, {"strategy", "corpus"}}, 400), "strategy", "--corpus");
  expect_error(post(c, "/v1/completions", {{"prompt", 5}}, 400), "prompt", "string");
  expect_error(post(c, "/v1/chat/completions", {{"messages", user}, {"min_p", 1}}, 400), "min_p", "less than 1");
  std::string deep = "{\"messages\": ";
  for (int i = 0; i < 5000; ++i) deep += "[";
  auto nested = c.Post("/v1/chat/completions", deep, "application/json");  // not even complete: refused on the way in
  ASSERT_TRUE(nested);
  EXPECT_EQ(nested->status, 400);
  expect_error(json::parse(nested->body), "", "nests deeper than 64 levels");
  const json unknown = post(c, "/v1/chat/completions", {{"messages", user}, {"model", "gpt-4"}}, 404);
  expect_error(unknown, "model", "'gpt-4' does not exist");
  EXPECT_EQ(unknown["error"]["code"], "model_not_found");
  // Longer than the context: the numbers.
  std::string long_prompt;
  for (int i = 0; i < 400; ++i) long_prompt += "Once upon a time ";
  const json too_long = post(c, "/v1/completions", {{"prompt", long_prompt}}, 400);
  expect_error(too_long, "prompt", "but the context holds 512");
  EXPECT_EQ(too_long["error"]["code"], "context_length_exceeded");
  expect_error(post(c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 600}}, 400), "max_tokens",
               "max_tokens is 600: more than the 512 the context holds");
  // A body over --max-body (64 KiB here).
  auto big = c.Post("/v1/completions", json{{"prompt", std::string(100000, 'a')}}.dump(), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  expect_error(json::parse(big->body), "", "larger than 65536 bytes");
  // Still serving.
  post(c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}}, 200);
}

// A model whose chat template amplifies (a megabyte of output per message) costs a
// request milliseconds: a 400 naming the cap the context gives, and the server goes on.
TEST(Server, AHostileChatTemplateIsA400Quickly) {
  REQUIRE_STORIES();
  OpenOptions o = stories_options();
  o.path = test::with_chat_template(stories(),
                                    "{% for m in messages %}{% for i in range(1000) %}{% for j in range(1000) %}"
                                    "{{ 'abcdefgh' * 128 }}{% endfor %}{% endfor %}{% endfor %}",
                                    "server-hostile")
               .string();
  o.chat_template = "";  // the file's own
  ServerOnLoopback s(1, 8, "", o);
  httplib::Client c = s.client();
  const json user = {{{"role", "user"}, {"content", "hi"}}};
  const auto start = std::chrono::steady_clock::now();
  const json j = post(c, "/v1/chat/completions", {{"messages", user}, {"max_tokens", 4}}, 400);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  expect_error(j, "messages", "costs too much to render these messages");
  expect_error(j, "messages", "caps a rendering at 1048576 bytes");
  EXPECT_LT(seconds, 5.0);
  EXPECT_EQ(post(c, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 4}}, 200)["object"], "text_completion");
}

TEST(Server, TheApiKeyIsCheckedOnEveryRouteButHealth) {
  REQUIRE_STORIES();
  ServerOnLoopback s(1, 4, "secret");
  httplib::Client c = s.client();
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  for (const char* path : {"/v1/models", "/metrics"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << path;
    expect_error(json::parse(r->body), "", "an API key is required");
  }
  expect_error(post(c, "/v1/completions", {{"prompt", "Once"}}, 401), "", "an API key is required");
  c.set_bearer_token_auth("wrong");
  expect_error(post(c, "/v1/completions", {{"prompt", "Once"}}, 401), "", "the API key is wrong");
  c.set_bearer_token_auth("secret");
  post(c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}}, 200);
  auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
}

TEST(Server, AFullQueueIsAnswered503) {
  REQUIRE_STORIES();
  ServerOnLoopback s(1, 0);
  httplib::Client c = s.client();
  {
    SlotPool::Lease busy = s.pool().acquire({});  // the one slot is taken, and no request may wait
    ASSERT_TRUE(busy);
    const json j = post(c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}}, 503);
    expect_error(j, "", "the server is busy");
    EXPECT_EQ(j["error"]["code"], "queue_full");
  }
  post(c, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}}, 200);
}

TEST(Server, AClientThatDisconnectsCancelsItsGeneration) {
  REQUIRE_STORIES();
  ServerOnLoopback s(1, 4);
  httplib::Client c = s.client();
  for (bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    // Until the context is full (ignore_eos): far longer than the client waits.
    const json body = {{"prompt", "Once upon a time"}, {"stream", stream}, {"ignore_eos", true}};
    size_t received = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t n, uint64_t, uint64_t) {
      received += n;
      return received < 8;  // hang up after the first bytes
    };
    c.send(req);
    EXPECT_GT(received, 0u);
  }
  // Both generations stop, cancelled: the slot is free and metrics count them.
  httplib::Client m = s.client();
  std::string metrics;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    metrics = m.Get("/metrics")->body;
    if (metrics.find("fafo_cancelled_total 2") != std::string::npos && metrics.find("fafo_slots_busy 0") != std::string::npos)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(metrics.find("fafo_cancelled_total 2"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("fafo_generations_total 0"), std::string::npos) << metrics;
  post(m, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}}, 200);
}

// The official openai client from npm (tests/node, installed by tools/setup.sh) gets
// plain greedy generation's text, streamed or not, and a 404 for an unknown model.
TEST(Server, TheOfficialOpenAiClientGetsPlainGenerationsText) {
  REQUIRE_STORIES();
  const std::filesystem::path script = fafo::test::source_path("tests/node/openai_client.mjs");
  const std::filesystem::path module = fafo::test::source_path("tests/node/node_modules/openai");
  ASSERT_TRUE(std::filesystem::exists(module)) << "the openai npm package is not installed: run tools/setup.sh";
  ASSERT_EQ(test::run_command("node --version").exit_code, 0) << "node is not installed: run tools/setup.sh";
  ServerOnLoopback s(2, 8, "key");
  const test::CommandResult r = test::run_command("timeout 120 node " + test::shell_quote(script) + " http://127.0.0.1:" +
                                                  std::to_string(s.port()) + "/v1 key stories");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  const std::string chat = plain_chat("Tell me a story.", 24);
  EXPECT_EQ(j["chat"], chat);
  EXPECT_EQ(j["streamed"], chat);
  EXPECT_GT(j["chunks"].get<int>(), 2);
  EXPECT_EQ(j["chat_usage"]["completion_tokens"], 24);
  EXPECT_EQ(j["completion"], plain_completion("Once upon a time", 24));
  EXPECT_EQ(j["missing"], "404 model_not_found");
}

// More slots than the memory holds: refused at start, naming how many fit.
TEST(Server, MoreSlotsThanTheMemoryHoldsAreRefusedNamingWhatFits) {
  REQUIRE_STORIES();
  OpenOptions options = stories_options();
  options.backend.memory_limit = 20ull << 20;
  try {
    SlotPool pool(50, 0, [&] { return open_model(options); });
    FAIL() << "50 slots fit in 20 MiB";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--parallel 50 does not fit"), std::string::npos) << what;
    EXPECT_NE(what.find("out of memory"), std::string::npos) << what;
    EXPECT_NE(what.find("use --parallel "), std::string::npos) << what;
  }
}

// The slots are sequences on one load of the weights; a slot whose weights fail is
// given freshly loaded ones, and every other slot moves to them: at once when idle,
// else when given back, so the old load is freed.
TEST(Server, SlotsShareOneLoadOfTheWeights) {
  REQUIRE_STORIES();
  int loads = 0;
  SlotPool pool(3, 0, [&] {
    ++loads;
    return open_model(stories_options());
  });
  EXPECT_EQ(loads, 1);
  std::vector<SlotPool::Lease> leases;
  for (int i = 0; i < 3; ++i) leases.push_back(pool.acquire({}));
  std::shared_ptr<StepRunner> first = leases[0]->model->model->runner();
  for (const auto& l : leases) EXPECT_EQ(l->model->model->runner(), first);
  EXPECT_NE(&leases[0]->model->model->kv_cache(), &leases[1]->model->model->kv_cache());
  pool.reopen(*leases[1]);  // as after a lost device: loads again
  EXPECT_EQ(loads, 2);
  std::shared_ptr<StepRunner> second = leases[1]->model->model->runner();
  EXPECT_NE(second, first);
  EXPECT_EQ(leases[0]->model->model->runner(), first);  // leased: moves when given back
  pool.reopen(*leases[0]);  // on the old weights: a sequence on the new ones, no load
  EXPECT_EQ(loads, 2);
  EXPECT_EQ(leases[0]->model->model->runner(), second);
  EXPECT_EQ(leases[2]->model->model->runner(), first);  // leased: moves when given back
  std::weak_ptr<StepRunner> old_first = first;
  first.reset();
  leases.clear();
  EXPECT_TRUE(old_first.expired());  // no slot is on the first load any more
  for (int i = 0; i < 3; ++i) leases.push_back(pool.acquire({}));
  for (const auto& l : leases) EXPECT_EQ(l->model->model->runner(), second);
  EXPECT_EQ(pool.model()->model->runner(), second);
  leases.clear();
  // A reload with the other slots idle moves them at once: the old load is freed.
  std::weak_ptr<StepRunner> old = second;
  first.reset();
  second.reset();
  const int64_t alive = ModelWeights::loads_alive();
  {
    SlotPool::Lease lease = pool.acquire({});
    pool.reopen(*lease);
    EXPECT_EQ(loads, 3);
  }
  EXPECT_TRUE(old.expired());
  EXPECT_EQ(ModelWeights::loads_alive(), alive);
}

// A server with a draft model (here the model drafting for itself): loaded once, each
// slot drafts on its own sequence, and strategy draft gives plain decoding's text.
TEST(Server, ADraftModelIsLoadedOnceAndEverySlotDraftsWithItsOwnSequence) {
  REQUIRE_STORIES();
  const std::string want = plain_completion("Lily and Tom went to the park. Lily and Tom", 24);
  int draft_loads = 0;
  SlotPool pool(2, 8, [] { return open_model(stories_options()); }, [&](const OpenedModel& target) {
    ++draft_loads;
    DecodingOptions d;
    d.strategy = Strategy::Draft;
    d.draft_model_path = "self";
    std::shared_ptr<Sequence> d_draft = open_draft_model(d, stories_options(), *target.model, target.tokenizer->vocab());
    return d_draft;
  });
  EXPECT_EQ(draft_loads, 1);
  {
    SlotPool::Lease a = pool.acquire({}), b = pool.acquire({});
    ASSERT_TRUE(a->draft && b->draft);
    EXPECT_NE(a->draft.get(), b->draft.get());
    EXPECT_EQ(a->draft->runner(), b->draft->runner());
  }
  ServerOptions o;
  o.port = 0;
  o.model_name = "stories";
  o.defaults.sampling = SamplerOptions{0.0f, 40, 0.95f, 0.05f, 7};
  o.defaults.decoding.strategy = Strategy::Ar;
  o.defaults.decoding.draft_model_path = "self";
  Server server(o, pool);
  const int port = server.bind();
  std::thread t([&] { server.listen(); });
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  std::vector<std::thread> clients;
  std::vector<json> got(4);
  for (size_t i = 0; i < got.size(); ++i)
    clients.emplace_back([&, i] {
      httplib::Client ci("127.0.0.1", port);
      ci.set_read_timeout(60, 0);
      got[i] = post(ci, "/v1/completions",
                    {{"prompt", "Lily and Tom went to the park. Lily and Tom"}, {"max_tokens", 24}, {"temperature", 0},
                     {"strategy", "draft"}},
                    200);
    });
  for (auto& th : clients) th.join();
  for (const json& j : got) {
    EXPECT_EQ(j["choices"][0]["text"], want);
    EXPECT_EQ(j["fafo"]["strategy"], "draft");
  }
  server.stop();
  t.join();
}

// Stopped before it listens (Ctrl-C while the model loads), or while it starts: the
// server ends instead of serving on.
TEST(Server, AStopBeforeOrWhileListeningEndsIt) {
  REQUIRE_STORIES();
  SlotPool pool(1, 0, [] { return open_model(stories_options()); });
  for (int delay_ms : {-1, 0, 1, 5}) {
    ServerOptions o;
    o.port = 0;
    o.model_name = "stories";
    Server server(o, pool);
    server.bind();
    if (delay_ms < 0) server.stop();  // before listen()
    std::thread t([&] { server.listen(); });
    if (delay_ms >= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
      server.stop();
    }
    t.join();  // a hang here is the failure (ctest's timeout)
  }
}

// 16 clients x 20 requests on 4 slots (8 each under AddressSanitizer, where a request
// costs ten times as much): no errors; the latency percentiles are printed.
#if defined(__SANITIZE_ADDRESS__)
constexpr int kLoadRequests = 8;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr int kLoadRequests = 8;
#else
constexpr int kLoadRequests = 20;
#endif
#else
constexpr int kLoadRequests = 20;
#endif
TEST(Server, BoundedLoadHasNoErrors) {
  REQUIRE_STORIES();
  ServerOnLoopback s(4, 64);
  constexpr int kClients = 16, kRequests = kLoadRequests;
  std::atomic<int> errors{0};
  std::vector<double> latencies;
  std::mutex mutex;
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&, i] {
      httplib::Client c = s.client();
      for (int k = 0; k < kRequests; ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        const json body = {{"messages", {{{"role", "user"}, {"content", "Story " + std::to_string(i * 100 + k)}}}},
                           {"max_tokens", 16},
                           {"stream", k % 2 == 0}};
        const httplib::Result r = c.Post("/v1/chat/completions", body.dump(), "application/json");
        // A reply, not only a status: a JSON body with a choice, or a stream ending in [DONE].
        bool ok = r && r->status == 200;
        if (ok && k % 2 == 0) {
          ok = r->body.find("data: [DONE]") != std::string::npos && r->body.find("\"error\"") == std::string::npos;
        } else if (ok) {
          const json j = json::parse(r->body, nullptr, false);
          ok = !j.is_discarded() && j.contains("choices") && j["choices"].size() == 1;
        }
        if (!ok) ++errors;
        std::lock_guard<std::mutex> lock(mutex);
        latencies.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
    });
  for (std::thread& t : clients) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(errors.load(), 0);
  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double p) { return latencies[static_cast<size_t>(p * static_cast<double>(latencies.size() - 1))]; };
  std::printf("load: %d requests in %.2f s (%.1f requests/s); latency ms p50 %.1f p90 %.1f p99 %.1f max %.1f\n",
              kClients * kRequests, seconds, kClients * kRequests / seconds, pct(0.5), pct(0.9), pct(0.99), latencies.back());
}

// With ServerOptions::log, each request is one line once it is answered: method, path,
// status, a generation's prompt and completion tokens (streamed or not), milliseconds.
TEST(Server, EachRequestIsOneLogLine) {
  REQUIRE_STORIES();
  SlotPool pool(1, 4, [] { return open_model(stories_options()); });
  std::mutex mutex;
  std::vector<std::string> lines;
  ServerOptions o;
  o.port = 0;
  o.model_name = "stories";
  o.defaults.sampling = SamplerOptions{0.0f, 40, 0.95f, 0.05f, 7};
  o.defaults.decoding.strategy = Strategy::Ar;
  o.log = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mutex);
    lines.push_back(line);
  };
  Server server(o, pool);
  const int port = server.bind();
  std::thread t([&] { server.listen(); });
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60, 0);
  EXPECT_TRUE(c.Get("/health"));
  post(c, "/v1/completions", {{"prompt", "Once upon a time"}, {"max_tokens", 5}, {"ignore_eos", true}}, 200);
  const json chat = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 3}, {"stream", true}};
  const httplib::Result streamed = c.Post("/v1/chat/completions", chat.dump(), "application/json");
  EXPECT_TRUE(streamed && streamed->status == 200);
  EXPECT_TRUE(c.Get("/v1/nothing"));
  post(c, "/v1/completions", {{"prompt", 7}}, 400);
  const bool all = test::wait_for([&] {
    std::lock_guard<std::mutex> lock(mutex);
    return lines.size() >= 5;
  });
  server.stop();
  t.join();
  ASSERT_TRUE(all) << lines.size() << " lines";
  const std::vector<std::string> expected = {
      R"(GET /health 200, [0-9]+\.[0-9] ms)",
      R"(POST /v1/completions 200, 5 prompt \+ 5 completion tokens, [0-9]+\.[0-9] ms)",
      R"(POST /v1/chat/completions 200, [0-9]+ prompt \+ [0-3] completion tokens, [0-9]+\.[0-9] ms)",
      R"(GET /v1/nothing 404, [0-9]+\.[0-9] ms)",
      R"(POST /v1/completions 400, [0-9]+\.[0-9] ms)",
  };
  ASSERT_EQ(lines.size(), expected.size());
  for (const std::string& pattern : expected)
    EXPECT_EQ(std::count_if(lines.begin(), lines.end(), [&](const std::string& l) { return std::regex_match(l, std::regex(pattern)); }), 1)
        << pattern << " in:\n" << ::testing::PrintToString(lines);
}

// A log line shows a client's bytes safely and says how a generation ended.
TEST(Server, ALogLineIsSafeToPrint) {
  RequestLogEntry e;
  e.method = "GET";
  e.path = "/v1/\x1b[31mred\n" + std::string(300, 'x');
  e.status = 404;
  e.ms = 1.5;
  EXPECT_EQ(request_log_line(e), "GET /v1/?[31mred?" + std::string(187, 'x') + "... 404, 1.5 ms");
  e.path = "/v1/completions";
  e.method = "POST";
  e.status = 200;
  e.prompt_tokens = 12;
  e.completion_tokens = 3;
  e.outcome = "cancelled (the client went away)";
  EXPECT_EQ(request_log_line(e), "POST /v1/completions 200, 12 prompt + 3 completion tokens, 1.5 ms, cancelled (the client went away)");
}

// `fafo serve` logs each request on stderr; --quiet logs none.
TEST(Server, FafoServeLogsEachRequestUnlessQuiet) {
  REQUIRE_STORIES();
  for (const bool quiet : {false, true}) {
    const auto dir = test::temp_dir(quiet ? "serve-quiet" : "serve-log");
    const auto err = dir / "stderr.txt";
    const std::string command = "exec " + test::shell_quote(test::binary_path("app/cli/fafo")) + " serve -m " +
                                test::shell_quote(stories()) + " --backend cpu -t 1 -c 256 --port 0" +
                                (quiet ? " --quiet" : "") + " 2>" + test::shell_quote(err);
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    ASSERT_GT(pid, 0);
    const std::string listening = "on http://127.0.0.1:";
    int port = 0;
    const bool up = test::wait_for([&] {
      const std::string text = test::read_text(err);
      const size_t at = text.find(listening);
      if (at != std::string::npos) port = std::atoi(text.c_str() + at + listening.size());
      return port > 0;
    });
    if (up) {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(60, 0);
      const httplib::Result health = c.Get("/health");
      EXPECT_TRUE(health && health->status == 200);
    }
    ::kill(pid, SIGTERM);  // the server answers SIGTERM by stopping, after its lines are written
    int status = 0;
    ::waitpid(pid, &status, 0);
    const std::string text = test::read_text(err);
    ASSERT_TRUE(up) << text;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << text;
    EXPECT_EQ(text.find("fafo serve: GET /health 200, ") != std::string::npos, !quiet) << text;
    EXPECT_EQ(text.find("one line per request follows (--quiet: none)") != std::string::npos, !quiet) << text;
  }
}

}  // namespace
}  // namespace fafo::server
