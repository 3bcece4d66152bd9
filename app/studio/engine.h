// Everything fafo-studio does with a model runs here, on one worker thread, one job
// at a time: opening a model, chat turns, raw-prompt generations for the debugger.
// The UI thread only queues jobs, asks to stop, and copies an EngineView each frame;
// it never waits on the model. StepTraces of every generation flow through the
// StepGate, where the debugger drains them and pauses / single-steps the generator.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fafo/chat_session.h"
#include "fafo/generator.h"
#include "fafo/open_model.h"
#include "fafo/backend_registry.h"
#include "step_gate.h"
#include "view_models.h"

namespace fafo::studio {

// How a conversation starts: the chat template ("" = the model's own) and system text.
struct ChatSetup {
  std::string chat_template;
  std::string system;
};

// The last finished generation (a reply or a prompt run).
struct TurnSummary {
  size_t tokens = 0;
  int32_t steps = 0;
  double tau = 0.0;               // tokens per step
  double tokens_per_second = 0.0; // decoding speed
  double prefill_seconds = 0.0;
  size_t new_tokens = 0;          // prompt tokens prefilled
  int32_t reused = 0;             // prompt tokens already in the KV cache
  std::string stop;               // why it ended
};

// A copy of the engine's state for one frame of the UI.
struct EngineView {
  enum class Activity { Idle, Loading, Generating } activity = Activity::Idle;
  bool busy = false;              // a job runs or is queued
  std::string error;              // why the last job failed (until the next job starts)
  std::string note;               // e.g. which chat template is used instead of the model's
  // The open model.
  bool has_model = false;
  uint64_t model_serial = 0;      // changes whenever a model is opened
  std::string model_path, model_summary, template_name, turn_end, backend;
  int32_t n_ctx = 0, n_past = 0, n_layer = 0, n_vocab = 0;
  TokenText text;                 // the model's token pieces (empty without a model)
  // The conversation.
  std::vector<ChatMessage> conversation;  // finished messages (the system message first, when set)
  std::string pending_user;       // the message being answered
  std::string streaming;          // the reply so far
  std::optional<TurnSummary> last;
  // Devices (found once, on the worker, when the engine starts).
  bool devices_known = false;
  std::map<std::string, std::vector<BackendDevice>> devices;  // per backend, from the registry
  std::vector<std::string> backends;  // available_backends()
  std::string default_backend;        // what "auto" picks
};

class Engine {
 public:
  Engine();   // starts the worker; its first job lists every backend's devices
  ~Engine();  // stops the running generation, drops queued jobs, joins
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queue a job (they run in order; a job that fails drops the jobs queued after it).
  // A generation refuses to start without a model.
  // Opening a model (fafo::open_model) replaces the current one and starts a
  // conversation with the options' chat template and `system` text.
  void open_model(const OpenOptions& options, const std::string& system);
  // A new conversation (empty KV cache), with a possibly different template / system text.
  void new_chat(const ChatSetup& setup);
  // One chat turn: `text` as the user's message, the reply generated with `options`.
  // With `paused` the reply waits after its first step for the debugger (tests; the
  // studio's replies start running, and the Debugger's Pause holds one that runs).
  void send(const std::string& text, const GenerationOptions& options, bool paused = false);
  // A generation from raw `prompt` text (BOS first) for the debugger, stopping after
  // max_steps steps (0: at n_predict); with `paused` it waits after its first step for
  // Step or Resume (StepGate). It uses the KV cache, so it ends the conversation.
  void run_prompt(const std::string& prompt, const GenerationOptions& options, int32_t max_steps = 0,
                  bool paused = false);
  // Stops the generation in progress (its reply keeps what it has). Returns at once.
  void stop();

  EngineView view() const;
  bool busy() const;
  // The open model when it was opened with `options` (same file, backend, device,
  // threads, context, cache type and template), else null: the studio's server makes
  // its slot a sequence on these weights instead of loading them again. Any thread.
  std::shared_ptr<const OpenedModel> loaded_model(const OpenOptions& options) const;
  // Waits until no job runs or is queued (tests and headless runs); false on timeout.
  bool wait_idle(double seconds) const;
  StepGate& gate() { return gate_; }

 private:
  void submit(std::function<void()> job);
  void loop();
  // Jobs (worker thread only).
  void find_devices();
  void load(const OpenOptions& options, const std::string& system);
  void start_chat(const ChatSetup& setup);
  void begin_chat(const ResolvedChatTemplate& chat_template, const std::string& system);
  // Opens decoding.corpus_path and, for strategy draft or SpecKV/SpecPC, the draft model
  // (each kept from an earlier run while it is the same).
  void attach_sources(GenerationOptions& options);
  void chat_turn(const std::string& text, GenerationOptions options, bool paused);
  // After a lost device or a changed model file: opens the model again with the same
  // options and continues the conversation on it, then throws `what` with what happened
  // (when the model cannot be opened, the conversation waits for the next model opened).
  [[noreturn]] void reopen_keeping_conversation(const std::string& what);
  void prompt_run(const std::string& prompt, GenerationOptions options, int32_t max_steps, bool paused);
  // Replaces model_ (and open_options_) where loaded_model() reads them.
  void set_model(std::shared_ptr<OpenedModel> m, const OpenOptions* options = nullptr);
  bool should_stop() const { return quitting_.load() || gate_.should_stop(); }
  template <class F>
  void update(F&& f) {
    std::lock_guard<std::mutex> lock(mutex_);
    f(view_);
  }

  mutable std::mutex mutex_;
  mutable std::condition_variable changed_;
  std::deque<std::function<void()>> jobs_;
  bool running_ = false;
  bool quit_ = false;
  std::atomic<bool> quitting_{false};
  EngineView view_;
  StepGate gate_;
  // Worker-thread state.
  std::shared_ptr<OpenedModel> model_;         // written by the worker under mutex_ (set_model)
  OpenOptions open_options_;                   // how model_ was opened
  DecodingResources resources_;                // the --corpus index and draft model, once opened
  std::unique_ptr<ChatSession> chat_;
  std::optional<ResolvedChatTemplate> chat_template_;  // chat_'s template...
  std::string system_;                         // ...and system text
  std::vector<ChatMessage> kept_conversation_;  // while no model is open after a failure
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace fafo::studio
