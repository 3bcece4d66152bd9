// fafo-studio's engine: the one worker thread that opens models, runs chat turns and
// raw-prompt generations while the UI thread only queues jobs and reads a copy of the
// state. Errors (a missing file, a backend that cannot be made) end up in the view,
// never in a crash; a paused generator waits for the debugger and stop() ends it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "actions.h"
#include "app_options.h"
#include "chat_template_copy.h"
#include "engine.h"
#include "server_session.h"
#include "settings.h"
#include "studio_state.h"
#include "test_support.h"

using namespace fafo;
using namespace fafo::studio;

namespace {

using fafo::test::wait_for;

GenerationOptions engine_greedy(int32_t n, Strategy s = Strategy::Fafo) {
  GenerationOptions o;
  o.n_predict = n;
  o.sampling.temperature = 0;
  o.decoding.strategy = s;
  return o;
}

OpenOptions engine_on_cpu(const std::string& path) {
  OpenOptions o;
  o.path = path;
  o.backend.name = "cpu";
  o.backend.threads = 2;
  o.n_ctx = 512;
  return o;
}

// Waits, without a time limit, until the engine has nothing left to do or its generator
// waits in the gate for the debugger; returns whether it waits (a generation held paused).
bool held_or_idle(Engine& engine) {
  for (;;) {
    if (engine.gate().waiting()) return true;
    if (!engine.busy()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

TEST(StudioEngine, ListsBackendsAndReportsLoadErrors) {
  Engine engine;
  ASSERT_TRUE(engine.wait_idle(60));
  EngineView v = engine.view();
  EXPECT_TRUE(v.devices_known);
  ASSERT_FALSE(v.backends.empty());
  EXPECT_EQ(v.backends[0], "cpu");
  EXPECT_FALSE(v.default_backend.empty());

  engine.open_model(engine_on_cpu("/nonexistent/model.gguf"), "");
  ASSERT_TRUE(engine.wait_idle(60));
  v = engine.view();
  EXPECT_FALSE(v.has_model);
  EXPECT_NE(v.error.find("/nonexistent/model.gguf: no such file"), std::string::npos) << v.error;

  // A generation without a model is an error, not a crash.
  engine.send("hello", engine_greedy(5));
  ASSERT_TRUE(engine.wait_idle(60));
  EXPECT_NE(engine.view().error.find("open a model first"), std::string::npos) << engine.view().error;
}

TEST(StudioEngine, AnUnusableBackendIsAnErrorInTheView) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  Engine engine;
  OpenOptions r = engine_on_cpu(model_path.string());
  r.backend.name = "nosuch";
  engine.open_model(r, "");
  ASSERT_TRUE(engine.wait_idle(60));
  EXPECT_NE(engine.view().error.find("unknown backend 'nosuch'"), std::string::npos) << engine.view().error;
  // Vulkan with a device that does not exist (or without Vulkan at all): a clear error.
  r.backend.name = "vulkan";
  r.backend.device = "no such device 12345";
  engine.open_model(r, "");
  ASSERT_TRUE(engine.wait_idle(120));
  const EngineView v = engine.view();
  EXPECT_FALSE(v.has_model);
  EXPECT_FALSE(v.error.empty());
  std::printf("vulkan with a bogus device: %s\n", v.error.c_str());
}

TEST(StudioEngine, ChatsStreamsAndFeedsTheDebugger) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  Engine engine;
  engine.open_model(engine_on_cpu(model_path.string()), "You tell stories.");
  ASSERT_TRUE(engine.wait_idle(60));
  EngineView v = engine.view();
  ASSERT_TRUE(v.has_model) << v.error;
  EXPECT_EQ(v.model_serial, 1u);
  EXPECT_EQ(v.n_layer, 5);
  EXPECT_EQ(v.n_ctx, 512);
  EXPECT_EQ(v.template_name, "chatml");  // stories260K has no template of its own
  EXPECT_NE(v.note.find("no chat template"), std::string::npos);
  EXPECT_EQ(v.backend, "cpu");
  ASSERT_TRUE(v.text);
  ASSERT_EQ(v.conversation.size(), 1u);  // the system message

  // A turn, watched while it runs: the reply streams into the view.
  engine.send("Once upon a time", engine_greedy(40), true);  // held after its first step
  ASSERT_TRUE(wait_for([&] { return engine.gate().waiting(); }));
  v = engine.view();
  EXPECT_EQ(v.activity, EngineView::Activity::Generating);
  EXPECT_EQ(v.pending_user, "Once upon a time");
  EXPECT_TRUE(v.busy);
  std::vector<StepTrace> traces;
  EXPECT_TRUE(engine.gate().drain(traces));
  EXPECT_EQ(traces.size(), 1u);
  engine.gate().set_paused(false);
  ASSERT_TRUE(engine.wait_idle(60));
  v = engine.view();
  EXPECT_TRUE(v.error.empty()) << v.error;
  ASSERT_EQ(v.conversation.size(), 3u);
  EXPECT_EQ(v.conversation[1].content, "Once upon a time");
  EXPECT_FALSE(v.conversation[2].content.empty());
  EXPECT_TRUE(v.streaming.empty());
  ASSERT_TRUE(v.last.has_value());
  EXPECT_EQ(v.last->tokens, 40u);
  EXPECT_EQ(v.last->stop, "length");
  EXPECT_GT(v.last->tau, 1.0) << "FAFO accepted nothing in 40 tokens of a story";
  EXPECT_GT(v.n_past, 0);
  engine.gate().drain(traces);
  int64_t tokens = 0;
  for (const StepTrace& t : traces) tokens += static_cast<int64_t>(t.accepted.size());
  EXPECT_EQ(tokens, 40);
  const LiveStats live = engine.gate().stats();
  EXPECT_EQ(live.tokens, 40);
  EXPECT_NEAR(live.tau(), v.last->tau, 1e-9);

  // The second turn reuses the cache; a new chat empties it.
  engine.send("Tell me about the dog", engine_greedy(10));
  ASSERT_TRUE(engine.wait_idle(60));
  v = engine.view();
  ASSERT_EQ(v.conversation.size(), 5u);
  EXPECT_GT(v.last->reused, 0);
  EXPECT_TRUE(engine.gate().drain(traces)) << "a new generation replaces the debugger's steps";
  engine.new_chat({"llama3", ""});
  ASSERT_TRUE(engine.wait_idle(60));
  v = engine.view();
  EXPECT_TRUE(v.conversation.empty());
  EXPECT_EQ(v.template_name, "llama3");
  EXPECT_EQ(v.n_past, 0);
}

// The rule `fafo chat` follows too (fafo::resolve_chat_template): a template the
// interpreter cannot parse gives way to the built-in format it looks like, and the
// note says why; a chosen template applies at open and at New chat.
TEST(StudioEngine, TheChatTemplateFollowsTheSameRuleAsFafoChat) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  const auto file = test::with_chat_template(
      model_path, "{% for m in messages %}\n<|im_start|>{{ m.role }}\n{{ m.content | wordwrap(40) }}<|im_end|>\n{% endfor %}",
      "studio-wrap");
  const ResolvedChatTemplate expected = resolve_chat_template(*GgufFile::open(file.string()), "");
  Engine engine;
  engine.open_model(engine_on_cpu(file.string()), "");
  ASSERT_TRUE(engine.wait_idle(60));
  EngineView v = engine.view();
  ASSERT_TRUE(v.has_model) << v.error;
  EXPECT_EQ(v.template_name, "chatml");
  EXPECT_EQ(v.note, expected.note);
  EXPECT_NE(v.note.find("the filter 'wordwrap'"), std::string::npos) << v.note;

  OpenOptions chosen = engine_on_cpu(file.string());
  chosen.chat_template = "phi3";
  engine.open_model(chosen, "");
  ASSERT_TRUE(engine.wait_idle(60));
  v = engine.view();
  ASSERT_TRUE(v.has_model) << v.error;
  EXPECT_EQ(v.template_name, "phi3");
  EXPECT_TRUE(v.note.empty()) << v.note;

  chosen.chat_template = "nosuch";  // only a typed --chat-template can name one
  engine.open_model(chosen, "");
  ASSERT_TRUE(engine.wait_idle(60));
  v = engine.view();
  EXPECT_FALSE(v.has_model);
  EXPECT_NE(v.error.find("'nosuch'"), std::string::npos) << v.error;
}

TEST(StudioEngine, PromptRunsStopAtMaxStepsAndOnStop) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  Engine engine;
  engine.open_model(engine_on_cpu(model_path.string()), "");
  engine.run_prompt("Once upon a time", engine_greedy(200), 12);
  ASSERT_TRUE(engine.wait_idle(60));
  EngineView v = engine.view();
  ASSERT_TRUE(v.error.empty()) << v.error;
  std::vector<StepTrace> traces;
  engine.gate().drain(traces);
  EXPECT_GE(traces.size(), 12u);
  EXPECT_LE(traces.size(), 13u);  // the step in flight when the limit was reached may finish
  EXPECT_EQ(traces[0].step, 0);
  EXPECT_EQ(v.last->stop, "cancelled");

  // Stopped while paused: must not hang.
  engine.run_prompt("Once upon a time", engine_greedy(200), 0, true);
  ASSERT_TRUE(wait_for([&] { return engine.gate().waiting(); }));
  engine.gate().allow_one_step();
  ASSERT_TRUE(wait_for([&] {
    engine.gate().drain(traces);
    return traces.size() == 2 && engine.gate().waiting();
  }));
  engine.stop();
  ASSERT_TRUE(engine.wait_idle(60));
  engine.gate().drain(traces);
  EXPECT_GE(traces.size(), 2u);
  EXPECT_LE(traces.size(), 3u);  // the step after the stop request ends the generation and reports itself
  engine.gate().set_paused(false);

  // Destroying the engine while it generates stops the generation.
  engine.run_prompt("Once upon a time", engine_greedy(-1));
}

// The first start leaves a Debugger run held paused after its first step, and the engine
// busy with it until Step, Resume or Stop. Every control that queues a job stays usable
// (actions.h): it ends the held run first, so its job runs instead of waiting behind a
// run nobody resumes: File > Open model, Recent models and the Model panel's Open; New
// chat (Chat, Decoding); Send; the Debugger's Run, which starts paused while the
// playback is.
TEST(StudioEngine, EveryControlThatQueuesAJobEndsAHeldDebuggerRun) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  Engine engine;
  StudioState s;
  s.engine = &engine;
  s.settings = settings_from_options(
      parse_app_options({"-m", model_path.string(), "--backend", "cpu", "-t", "2", "-c", "512", "-n", "40"}));
  // As `fafo-studio` starts (main.cpp): the model, then the default prompt held after its first step.
  engine.open_model(s.settings.open, s.settings.system);
  s.playback.step_once(0);
  engine.run_prompt(kDefaultPrompt, debugger_generation(s.settings), 0, true);
  const auto held = [&] {
    const bool waits = held_or_idle(engine);
    s.ev = engine.view();
    return waits;
  };
  ASSERT_TRUE(held());
  EXPECT_TRUE(s.ev.busy);
  EXPECT_TRUE(debugger_run_held(s));
  EXPECT_TRUE(engine_free(s)) << "the controls that queue a job are disabled while the first run waits";

  queue_open_model(s);  // File > Open model, Recent models, the Model panel's Open
  EXPECT_FALSE(held()) << "the model is not opened: its job waits behind the held run";
  EXPECT_TRUE(s.ev.error.empty()) << s.ev.error;
  EXPECT_EQ(s.ev.model_serial, 2u);
  EXPECT_TRUE(s.ev.has_model);
  EXPECT_FALSE(engine.gate().paused());

  ASSERT_TRUE(s.playback.paused());
  queue_debugger_run(s);  // Run while the playback is paused: held after its first step
  ASSERT_TRUE(held());
  EXPECT_TRUE(debugger_run_held(s));
  std::vector<StepTrace> traces;
  EXPECT_TRUE(engine.gate().drain(traces));
  EXPECT_EQ(traces.size(), 1u);
  queue_new_chat(s);  // Chat's New chat, Decoding's New chat with these
  EXPECT_FALSE(held()) << "the new chat waits behind the held run";
  EXPECT_TRUE(s.ev.error.empty()) << s.ev.error;
  EXPECT_EQ(s.ev.n_past, 0) << "the new conversation starts with an empty cache";

  queue_debugger_run(s);
  ASSERT_TRUE(held());
  s.input = "Tell me a story.";
  queue_message(s);  // Send: the reply runs to its end, the Debugger's playback follows it
  EXPECT_FALSE(held()) << "the message waits behind the held run, or its reply waits for a Resume";
  EXPECT_TRUE(s.ev.error.empty()) << s.ev.error;
  EXPECT_TRUE(s.input.empty());
  ASSERT_EQ(s.ev.conversation.size(), 2u);
  EXPECT_EQ(s.ev.conversation[0].content, "Tell me a story.");
  EXPECT_FALSE(s.ev.conversation[1].content.empty());
  EXPECT_FALSE(s.playback.paused());

  s.playback.pause();
  queue_debugger_run(s);
  ASSERT_TRUE(held());
  engine.gate().drain(traces);
  queue_debugger_run(s);  // Run again while the last run waits: that run ends, this one waits
  ASSERT_TRUE(held());
  EXPECT_TRUE(engine.gate().drain(traces)) << "a new run";
  EXPECT_EQ(traces.size(), 1u);
  engine.gate().set_paused(false);  // Resume
  EXPECT_FALSE(held());
  ASSERT_TRUE(s.ev.last.has_value());
  EXPECT_EQ(s.ev.last->stop, "length");
  engine.gate().drain(traces);
  int64_t tokens = 0;
  for (const StepTrace& t : traces) tokens += static_cast<int64_t>(t.accepted.size());
  EXPECT_EQ(tokens, 40);
  EXPECT_TRUE(engine_free(s));
}

// A pause belongs to its run. After a Debugger run held paused is stopped, or stepped
// to its end, a chat reply runs to its end: it does not wait after its first step for a
// Resume the Chat view does not have.
TEST(StudioEngine, APauseEndsWithItsRun) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  Engine engine;
  engine.open_model(engine_on_cpu(model_path.string()), "");
  engine.run_prompt("Once upon a time", engine_greedy(200), 0, true);
  ASSERT_TRUE(held_or_idle(engine));
  EXPECT_TRUE(engine.gate().paused());
  engine.stop();  // the Debugger's Stop
  EXPECT_FALSE(held_or_idle(engine));
  EXPECT_FALSE(engine.gate().paused());
  engine.send("Hello", engine_greedy(8));
  EXPECT_FALSE(held_or_idle(engine)) << "the reply waits after its first step";
  EngineView v = engine.view();
  EXPECT_TRUE(v.error.empty()) << v.error;
  ASSERT_EQ(v.conversation.size(), 2u);

  engine.run_prompt("Once upon a time", engine_greedy(6, Strategy::Ar), 0, true);
  int steps = 0;
  while (held_or_idle(engine)) {  // Step until the run ends
    engine.gate().allow_one_step();
    ++steps;
  }
  EXPECT_EQ(steps, 6) << "one press per step: ar's 6 steps, the prefill's included, each wait";
  EXPECT_FALSE(engine.gate().paused());
  engine.send("Hello again", engine_greedy(8));
  EXPECT_FALSE(held_or_idle(engine)) << "the reply waits after its first step";
  v = engine.view();
  EXPECT_TRUE(v.error.empty()) << v.error;
  ASSERT_EQ(v.conversation.size(), 2u);  // the prompt run ended the conversation before

  // Destroyed while a run waits paused: the destructor stops it.
  engine.run_prompt("Once upon a time", engine_greedy(200), 0, true);
  ASSERT_TRUE(held_or_idle(engine));
}

// A studio pointed at hostile model files: each is an error in the view, never a crash,
// and the engine goes on to open the real model and chat.
TEST(StudioEngine, HostileModelFilesAreErrorsInTheView) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  std::ifstream in(model_path, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(good.size(), 4096u);
  std::vector<std::string> files;
  for (size_t cut : {size_t{0}, size_t{3}, size_t{8}, size_t{24}, size_t{100}, size_t{1000}, good.size() / 2, good.size() - 1})
    files.push_back(good.substr(0, cut));  // truncated in the header, the metadata, the tensors
  uint64_t state = 7;  // damaged bytes in the header and metadata, from a fixed seed
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
  for (int i = 0; i < 24; ++i) {
    std::string f = good;
    for (int e = 0; e < 4; ++e) f[(next() >> 33) % 2048] = static_cast<char>(next() >> 56);
    files.push_back(f);
  }
  std::string huge = good;  // a tensor count of 2^63
  for (int b = 0; b < 8; ++b) huge[8 + b] = b == 7 ? '\x7f' : '\xff';
  files.push_back(huge);
  files.push_back(std::string(5000, '\0'));

  const auto dir = fafo::test::temp_dir("studio-hostile-gguf");
  Engine engine;
  size_t refused = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    const auto path = dir / ("hostile" + std::to_string(i) + ".gguf");
    {
      std::ofstream out(path, std::ios::binary);
      out << files[i];
    }
    engine.open_model(engine_on_cpu(path.string()), "");
    ASSERT_TRUE(engine.wait_idle(120)) << path;
    const EngineView v = engine.view();
    if (!v.has_model) {
      EXPECT_FALSE(v.error.empty()) << path;
      ++refused;
      continue;
    }
    // Damage that left a loadable model (a changed value): chatting is a reply or an error.
    engine.send("Hello", engine_greedy(4, Strategy::Ar));
    ASSERT_TRUE(engine.wait_idle(120)) << path;
  }
  EXPECT_GE(refused, 10u);
  engine.open_model(engine_on_cpu(model_path.string()), "");
  engine.send("Hello", engine_greedy(4, Strategy::Ar));
  ASSERT_TRUE(engine.wait_idle(120));
  const EngineView v = engine.view();
  EXPECT_TRUE(v.has_model) << v.error;
  EXPECT_TRUE(v.error.empty()) << v.error;
  ASSERT_EQ(v.conversation.size(), 2u);
}

// A device lost in the middle of a reply (FAFO_INJECT_FAULT): the view says what
// happened, the model is open again with the conversation, and the next message works.
TEST(StudioEngine, ALostDeviceOpensTheModelAgainAndKeepsTheConversation) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  // Steps of this process's first backend: the first reply's prefill and 3 decoding
  // steps, then the second reply's prefill and decoding steps: the 6th fails.
  ::setenv("FAFO_INJECT_FAULT", "lost:6", 1);
  Engine engine;
  engine.open_model(engine_on_cpu(model_path.string()), "");
  engine.send("Hello", engine_greedy(4, Strategy::Ar));
  ASSERT_TRUE(engine.wait_idle(120));
  ::unsetenv("FAFO_INJECT_FAULT");
  EngineView v = engine.view();
  ASSERT_TRUE(v.error.empty()) << v.error;
  ASSERT_EQ(v.conversation.size(), 2u);
  const uint64_t serial = v.model_serial;

  engine.send("Tell me more", engine_greedy(4, Strategy::Ar));
  ASSERT_TRUE(engine.wait_idle(120));
  v = engine.view();
  EXPECT_NE(v.error.find("was lost"), std::string::npos) << v.error;
  EXPECT_NE(v.error.find("the model was opened again and the conversation is kept"), std::string::npos) << v.error;
  EXPECT_TRUE(v.has_model);
  EXPECT_GT(v.model_serial, serial);
  ASSERT_EQ(v.conversation.size(), 2u);
  EXPECT_EQ(v.conversation[0].content, "Hello");

  engine.send("Tell me more", engine_greedy(4, Strategy::Ar));
  ASSERT_TRUE(engine.wait_idle(120));
  v = engine.view();
  EXPECT_TRUE(v.error.empty()) << v.error;
  ASSERT_EQ(v.conversation.size(), 4u);
  EXPECT_EQ(v.conversation[2].content, "Tell me more");
  EXPECT_FALSE(v.conversation[3].content.empty());
}

// The Server menu's session: starts an OpenAI-compatible server on the model's file,
// answers on loopback, and stops.
TEST(StudioServer, StartsAnswersAndStops) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  ServerSession server;
  server.start(engine_on_cpu(model_path.string()), "127.0.0.1", 0);
  ASSERT_TRUE(wait_for([&] { return server.status().state != ServerSession::Status::State::Starting; }, 60));
  const ServerSession::Status st = server.status();
  ASSERT_EQ(st.state, ServerSession::Status::State::Running) << st.error;
  ASSERT_GT(st.port, 0);
  EXPECT_EQ(st.url, "http://127.0.0.1:" + std::to_string(st.port) + "/v1");
  const fafo::test::CommandResult r = fafo::test::run_command(
      "curl -s -m 30 http://127.0.0.1:" + std::to_string(st.port) +
      "/v1/completions -d '{\"prompt\": \"Once\", \"max_tokens\": 3, \"temperature\": 0}'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"completion_tokens\":3"), std::string::npos) << r.out;
  server.stop();
  EXPECT_EQ(server.status().state, ServerSession::Status::State::Stopped);
  // A port that cannot be bound is an error in the status, not a crash.
  ServerSession second;
  second.start(engine_on_cpu(model_path.string()), "203.0.113.7", 1);
  ASSERT_TRUE(wait_for([&] { return second.status().state == ServerSession::Status::State::Stopped; }, 60));
  EXPECT_NE(second.status().error.find("cannot listen on 203.0.113.7:1"), std::string::npos) << second.status().error;
}

// With the chat's model open on the same settings, the server's slot is a sequence on
// its weights (no second load); other settings load the file.
TEST(StudioServer, SharesTheChatsWeightsWhenTheSettingsMatch) {
  FAFO_REQUIRE_SHARED(model_path, "models/stories260K.gguf");
  Engine engine;
  const OpenOptions options = engine_on_cpu(model_path.string());
  engine.open_model(options, "");
  ASSERT_TRUE(engine.wait_idle(60));
  const std::shared_ptr<const OpenedModel> loaded = engine.loaded_model(options);
  ASSERT_TRUE(loaded);
  OpenOptions other = options;
  other.n_ctx = options.n_ctx + 64;
  EXPECT_FALSE(engine.loaded_model(other));
  const long before = loaded->model->runner().use_count();
  ServerSession server;
  server.start(options, "127.0.0.1", 0, loaded);
  ASSERT_TRUE(wait_for([&] { return server.status().state != ServerSession::Status::State::Starting; }, 60));
  ASSERT_EQ(server.status().state, ServerSession::Status::State::Running) << server.status().error;
  EXPECT_EQ(loaded->model->runner().use_count(), before + 1);  // the slot's sequence
  const fafo::test::CommandResult r = fafo::test::run_command(
      "curl -s -m 30 http://127.0.0.1:" + std::to_string(server.status().port) +
      "/v1/completions -d '{\"prompt\": \"Once\", \"max_tokens\": 3, \"temperature\": 0}'");
  EXPECT_NE(r.out.find("\"completion_tokens\":3"), std::string::npos) << r.out;
  server.stop();
}
