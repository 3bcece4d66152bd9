#include "engine.h"


#include <chrono>
#include <exception>
#include <filesystem>
#include <utility>

#include "fafo/backend.h"
#include "fafo/corpus_index.h"

namespace fafo::studio {

namespace {

TurnSummary summarize(const GenerationResult& g, const std::string& stop) {
  TurnSummary s;
  s.tokens = g.ids.size();
  s.steps = g.n_steps;
  s.tau = g.tokens_per_step();
  s.tokens_per_second = g.tokens_per_second();
  s.prefill_seconds = g.prefill_seconds;
  s.new_tokens = g.prompt_ids.size();
  s.stop = stop;
  return s;
}

// One line for the UI: name, architecture, layers, dim, vocab, context and backend.
std::string model_summary(const OpenedModel& m) {
  const ModelConfig& c = m.model->config();
  const std::string name = c.name.empty() ? std::filesystem::path(m.file->path()).stem().string() : c.name;
  const std::string placement = m.model->runner()->weights().placement();
  return name + ": " + c.arch + ", " + std::to_string(c.n_layer) + " layers, dim " + std::to_string(c.n_embd) +
         ", vocab " + std::to_string(c.n_vocab) + ", context " + std::to_string(m.model->n_ctx()) + "; " +
         m.model->backend().description() + (placement.empty() ? "" : "; " + placement) +
         (m.placement_note.empty() ? "" : " (" + m.placement_note + ")");
}

// Ends the gate's generation when the job's generation ends, however it ends.
struct GateScope {
  StepGate& gate;
  explicit GateScope(StepGate& g) : gate(g) {}
  ~GateScope() { gate.end(); }
  GateScope(const GateScope&) = delete;
  GateScope& operator=(const GateScope&) = delete;
};

}  // namespace

Engine::Engine() : thread_([this] { loop(); }) {
  submit([this] { find_devices(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    quit_ = true;
    jobs_.clear();
  }
  quitting_.store(true);
  // Closed, not only stopped: a job the worker took just before quit_ was set begins a
  // generation after this, and begin() clears a stop request but not this.
  gate_.close();
  changed_.notify_all();
  thread_.join();
}

void Engine::submit(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    view_.busy = true;
  }
  changed_.notify_all();
}

void Engine::loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return quit_ || !jobs_.empty(); });
      if (quit_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      running_ = true;
      view_.error.clear();
    }
    std::string error;
    try {
      job();
    } catch (const std::exception& e) {
      error = e.what();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_ = false;
      if (!error.empty()) {
        view_.error = error;
        jobs_.clear();  // what was queued after it relied on it (a chat message after opening a model)
      }
      view_.busy = !jobs_.empty();
      view_.activity = EngineView::Activity::Idle;
      view_.pending_user.clear();
      view_.streaming.clear();
      view_.conversation = chat_ ? chat_->history() : kept_conversation_;
      if (model_) view_.n_past = model_->model->n_past();
    }
    changed_.notify_all();
  }
}

void Engine::open_model(const OpenOptions& options, const std::string& system) {
  submit([this, options, system] { load(options, system); });
}

void Engine::new_chat(const ChatSetup& setup) {
  submit([this, setup] { start_chat(setup); });
}

void Engine::send(const std::string& text, const GenerationOptions& options, bool paused) {
  submit([this, text, options, paused] { chat_turn(text, options, paused); });
}

void Engine::run_prompt(const std::string& prompt, const GenerationOptions& options, int32_t max_steps, bool paused) {
  submit([this, prompt, options, max_steps, paused] { prompt_run(prompt, options, max_steps, paused); });
}

void Engine::stop() { gate_.stop(); }

void Engine::set_model(std::shared_ptr<OpenedModel> m, const OpenOptions* options) {
  std::lock_guard<std::mutex> lock(mutex_);
  model_ = std::move(m);
  if (options) open_options_ = *options;
}

std::shared_ptr<const OpenedModel> Engine::loaded_model(const OpenOptions& o) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const OpenOptions& mine = open_options_;
  const bool same = model_ && o.path == mine.path && o.backend.name == mine.backend.name &&
                    o.backend.device == mine.backend.device && o.backend.threads == mine.backend.threads &&
                    o.backend.memory_limit == mine.backend.memory_limit && o.backend.repack == mine.backend.repack &&
                    o.n_ctx == mine.n_ctx &&
                    o.kv_type == mine.kv_type && o.chat_template == mine.chat_template &&
                    o.gpu_layers == mine.gpu_layers && o.split == mine.split;
  return same ? model_ : nullptr;
}

EngineView Engine::view() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return view_;
}

bool Engine::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return running_ || !jobs_.empty();
}

bool Engine::wait_idle(double seconds) const {
  std::unique_lock<std::mutex> lock(mutex_);
  return changed_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return !running_ && jobs_.empty(); });
}

// ---- jobs (worker thread) ------------------------------------------------------------------

void Engine::find_devices() {
  std::map<std::string, std::vector<BackendDevice>> devices;
  for (const BackendInfo& b : backend_registry()) devices[b.name] = b.devices();
  std::vector<std::string> backends = available_backends();
  std::string fallback = default_backend_name();
  update([&](EngineView& v) {
    v.devices = std::move(devices);
    v.backends = std::move(backends);
    v.default_backend = std::move(fallback);
    v.devices_known = true;
  });
}

void Engine::load(const OpenOptions& options, const std::string& system) {
  update([&](EngineView& v) {
    v.activity = EngineView::Activity::Loading;
    v.has_model = false;
    v.text = {};
    v.note.clear();
    v.last.reset();
    v.model_path = options.path;
  });
  chat_.reset();
  set_model(nullptr);  // free the old model before loading the next
  resources_.draft_model.reset();  // (the corpus index is kept: it is checked against each model)
  resources_.draft_key.clear();
  auto m = std::make_shared<OpenedModel>(fafo::open_model(options));
  TokenText text = make_token_text(*m->tokenizer);
  const std::string summary = model_summary(*m);
  set_model(std::move(m), &options);
  update([&](EngineView& v) {
    v.has_model = true;
    ++v.model_serial;
    v.model_summary = summary;
    v.backend = model_->model->backend().name();
    v.n_ctx = model_->model->n_ctx();
    v.n_layer = model_->model->config().n_layer;
    v.n_vocab = model_->model->config().n_vocab;
    v.text = std::move(text);
  });
  begin_chat(model_->chat, system);
  if (!kept_conversation_.empty()) {  // a conversation whose model could not be opened again
    chat_->restore(std::move(kept_conversation_));
    kept_conversation_.clear();
  }
}

void Engine::start_chat(const ChatSetup& setup) {
  if (!model_) throw std::runtime_error("open a model first");
  begin_chat(resolve_chat_template(*model_->file, setup.chat_template), setup.system);
}

void Engine::begin_chat(const ResolvedChatTemplate& chat_template, const std::string& system) {
  chat_.reset();
  chat_template_ = chat_template;
  system_ = system;
  chat_ = std::make_unique<ChatSession>(*model_->model, *model_->tokenizer, chat_template.chat_template,
                                        chat_template_context(*model_->tokenizer), system);
  update([&](EngineView& v) {
    v.note = chat_template.note;
    v.template_name = chat_->template_name() == "gguf" ? "the model's" : chat_->template_name();
    v.turn_end = chat_->turn_end();
    v.last.reset();
  });
  try {
    chat_->check_template();
  } catch (const ChatTemplateError& e) {
    throw std::runtime_error(std::string("the chat template cannot render a first message") +
                             (system.empty() ? "" : " after the system text") + ": " + e.what() +
                             "; choose another template");
  }
}

void Engine::attach_sources(GenerationOptions& options) {
  options.auto_state = model_->auto_state.get();
  // The index and the draft model opened for an earlier run are kept while the options
  // name the same files (opening an index checks every entry; a draft model loads). A
  // draft model that another replaces goes first: two may not fit on the device.
  if (resources_.draft_key != fafo::draft_model_key(options.decoding, open_options_)) {
    resources_.draft_model.reset();
    resources_.draft_key.clear();
  }
  resources_ = fafo::open_decoding_resources(options.decoding, open_options_, *model_->model,
                                             model_->tokenizer->vocab(), scoring_uses_draft_model(options), resources_);
  options.resources = resources_;
}

void Engine::chat_turn(const std::string& text, GenerationOptions options, bool paused) {
  if (!chat_) throw std::runtime_error("open a model first");
  update([&](EngineView& v) {
    v.activity = EngineView::Activity::Generating;
    v.pending_user = text;
    v.streaming.clear();
  });
  gate_.begin(0, paused);
  const GateScope scope(gate_);
  options.on_step = [this](const StepTrace& t) { gate_.on_step(t); };
  attach_sources(options);
  ChatTurnResult r;
  try {
    r = chat_->turn(
        text, options, [this](const std::string& piece) { update([&](EngineView& v) { v.streaming += piece; }); },
        [this] { return should_stop(); });
  } catch (const DeviceError& e) {
    // Out of memory: the session is as it was before the message (ChatSession::turn).
    if (e.kind() != DeviceError::Kind::Lost) throw;
    reopen_keeping_conversation(e.what());
  } catch (const GgufError& e) {  // the model file changed while open
    reopen_keeping_conversation(e.what());
  }
  TurnSummary s = summarize(r.generation, chat_stop_text(r.stop));
  if (r.shifted_turns > 0)  // ChatSession made room: said under the reply, as `fafo chat` says it
    s.stop += "; context shift: the oldest " + std::to_string(r.shifted_turns) + " turn" +
              (r.shifted_turns == 1 ? "" : "s") + " left the conversation";
  s.new_tokens = r.new_tokens;
  s.reused = r.reused;
  update([&](EngineView& v) { v.last = s; });
}

void Engine::reopen_keeping_conversation(const std::string& what) {
  std::vector<ChatMessage> history = chat_->history();
  chat_.reset();
  resources_.draft_model.reset();  // (the corpus index is kept: it is checked against each model)
  resources_.draft_key.clear();
  set_model(nullptr);  // the device's memory first
  update([&](EngineView& v) {
    v.activity = EngineView::Activity::Loading;
    v.has_model = false;
    v.text = {};
  });
  try {
    auto m = std::make_shared<OpenedModel>(fafo::open_model(open_options_));
    TokenText text = make_token_text(*m->tokenizer);
    set_model(std::move(m));
    update([&](EngineView& v) {
      v.has_model = true;
      ++v.model_serial;
      v.backend = model_->model->backend().name();
      v.text = std::move(text);
    });
  } catch (const std::exception& e) {
    kept_conversation_ = std::move(history);
    throw std::runtime_error(what + "; opening the model again failed (" + e.what() +
                             "); the conversation is kept: open a model to go on");
  }
  begin_chat(*chat_template_, system_);
  chat_->restore(std::move(history));
  throw std::runtime_error(what + "; the model was opened again and the conversation is kept: send the message again");
}

void Engine::prompt_run(const std::string& prompt, GenerationOptions options, int32_t max_steps, bool paused) {
  if (!model_) throw std::runtime_error("open a model first");
  update([&](EngineView& v) { v.activity = EngineView::Activity::Generating; });
  if (chat_) chat_->reset();  // the prompt replaces what the KV cache holds
  gate_.begin(max_steps, paused);
  const GateScope scope(gate_);
  options.on_step = [this](const StepTrace& t) { gate_.on_step(t); };
  options.keep_context = false;
  attach_sources(options);
  const std::vector<int32_t> ids = model_->tokenizer->encode(prompt, true);
  const GenerationResult r =
      generate(*model_->model, *model_->tokenizer, ids, options, [this](int32_t) { return !should_stop(); });
  const TurnSummary s = summarize(r, stop_reason_name(r.stop));
  update([&](EngineView& v) { v.last = s; });
}

}  // namespace fafo::studio
