// `fafo chat`: interactive multi-turn chat in the terminal.
//
// The conversation is a fafo::ChatSession (fafo/chat_session.h): each turn renders
// the whole conversation with the model's chat template (or a built-in one) and
// prefills only the tokens the KV cache lacks. Replies stream as they are generated
// and end at an end-of-generation token, at the template's turn-end text, at -n
// tokens, at a full context, or at Ctrl-C (which stops the reply, not the program).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <random>
#include <map>
#include <string>
#include <vector>

#include "commands.h"
#include "fafo/chat_session.h"
#include "fafo/chat_template.h"
#include "fafo/generator.h"
#include "fafo/corpus_index.h"
#include "fafo/open_model.h"
#include "fafo/sampler.h"
#include "chat_flags.h"
#include "generation_flags.h"
#include "default_model.h"
#include "input_files.h"
#include "model_flags.h"
#include "plural.h"
#include "training_context.h"

namespace fafo::cli {

namespace {

struct ChatArgs {
  OpenOptions open;  // with the chat template
  std::string system;
  int32_t n_predict = 512;  // a reply's length at most, as chat apps limit it
  bool context_shift = true;
  SamplerOptions sampling{0.8f, 40, 0.95f, 0.05f, 0};
  std::shared_ptr<bool> seed_given = std::make_shared<bool>(false);
  DecodingOptions decoding = [] {  // --strategy: auto by default
    DecodingOptions d;
    d.strategy = Strategy::Auto;
    return d;
  }();
  KvPolicyOptions kv;
};

// ---- Ctrl-C -------------------------------------------------------------------------

std::atomic<bool> g_interrupted{false};

// What auto chose, and its step costs, on stderr: after the first reply, then only when
// a reply's choice (the candidate that ran most of its steps) or its costs' source (a
// curve measured again) changed, not after every reply.
void print_auto_line(const GenerationResult& g) {
  static std::string last_choice, last_source;
  if (g.auto_summary.empty()) return;
  // auto_choices: the steps at which the choice changed, and to what.
  std::map<int32_t, int64_t> steps_of;
  for (size_t i = 0; i < g.auto_choices.size(); ++i) {
    const int64_t until = i + 1 < g.auto_choices.size() ? g.auto_choices[i + 1].first : g.n_steps;
    steps_of[g.auto_choices[i].second] += until - g.auto_choices[i].first;
  }
  int32_t most = 0;
  int64_t most_steps = -1;
  for (const auto& [c, n] : steps_of)
    if (n > most_steps) {
      most = c;
      most_steps = n;
    }
  const std::string choice = most >= 0 && static_cast<size_t>(most) < g.auto_labels.size() ? g.auto_labels[static_cast<size_t>(most)] : "";
  const bool costs_changed = g.step_costs.source != last_source;
  if (choice == last_choice && !costs_changed) return;
  if (costs_changed)
    std::fprintf(stderr, "fafo: auto: %s; step costs %s\n", g.auto_summary.c_str(), g.step_costs.describe().c_str());
  else
    std::fprintf(stderr, "fafo: auto: %s\n", g.auto_summary.c_str());
  last_choice = choice;
  last_source = g.step_costs.source;
}

void on_interrupt(int) { g_interrupted.store(true); }

// Routes SIGINT to g_interrupted while a chat runs. Without SA_RESTART a blocking
// read() returns EINTR, so Ctrl-C at the prompt is seen at once.
class InterruptHandler {
 public:
  InterruptHandler() {
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGINT, &sa, &previous_);
  }
  ~InterruptHandler() { sigaction(SIGINT, &previous_, nullptr); }
  InterruptHandler(const InterruptHandler&) = delete;
  InterruptHandler& operator=(const InterruptHandler&) = delete;

 private:
  struct sigaction previous_ {};
};

enum class Input { Line, EndOfInput, Interrupted };

// One line from stdin, without its newline. Reads byte by byte from the file
// descriptor so nothing is buffered past the line and EINTR is visible.
Input read_line(std::string& line) {
  line.clear();
  for (;;) {
    char c;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n == 1) {
      if (c == '\n') return Input::Line;
      line += c;
      continue;
    }
    if (n < 0 && errno == EINTR) {
      if (g_interrupted.load()) return Input::Interrupted;
      continue;
    }
    return line.empty() ? Input::EndOfInput : Input::Line;  // EOF (or an error) ends the input
  }
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

// ---- one turn ----------------------------------------------------------------------------

// What would let a turn refused for a full context run, after its numbers: the flags to
// restart with (-n for a shorter reply when the turn alone fits; a larger -c unless the
// context is already as long as the one the model was trained on, that length named
// when the file gives it), else a shorter message, and, without the context shift, /reset.
std::string context_full_advice(ChatSession& session, const ChatTurnError::Need& need) {
  const Sequence& model = session.model();
  std::vector<std::string> flags;
  if (need.turn_tokens < need.n_ctx) flags.push_back("-n " + std::to_string(need.n_ctx - need.turn_tokens) + " (a shorter reply)");
  if (app::larger_context_may_help(model))
    flags.push_back(model.config().n_ctx_train_in_file
                        ? "a larger -c (this model was trained on " + std::to_string(model.config().n_ctx_train) + " tokens)"
                        : "a larger -c");
  std::string advice = "; ";
  if (!session.context_shift()) advice += "/reset starts a new conversation, or ";
  for (size_t i = 0; i < flags.size(); ++i) advice += (i == 0 ? "restart with " : " or ") + flags[i];
  if (need.turn_tokens >= need.n_ctx) advice += flags.empty() ? "send a shorter message" : ", or send a shorter message";
  return advice;
}

// How a turn ended for the loop: done (replied, stopped or refused), or the model must
// be opened again (its device was lost, or its file changed).
enum class TurnOutcome { Done, Reopen };

// Sends `text` as the user's message, streams the reply to stdout and prints the turn's
// statistics to stderr. A turn that cannot run or fails is reported and left out of the
// conversation, which goes on as it was.
TurnOutcome run_turn(ChatSession& session, AutoState* auto_state, const DecodingResources& resources,
                     const ChatArgs& args, const std::string& text) {
  GenerationOptions options;
  options.auto_state = auto_state;
  options.n_predict = args.n_predict;
  options.sampling = args.sampling;
  options.decoding = args.decoding;
  options.resources = resources;
  options.kv = args.kv;
  g_interrupted.store(false);
  ChatTurnResult r;
  try {
    r = session.turn(
        text, options,
        [](const std::string& piece) {
          std::fputs(piece.c_str(), stdout);
          std::fflush(stdout);
        },
        [] { return g_interrupted.load(); });
  } catch (const ChatTurnError& e) {
    std::fprintf(stderr, "fafo: %s%s\n", e.what(),
                 e.kind() == ChatTurnError::Kind::ContextFull ? context_full_advice(session, e.need()).c_str() : "");
    return TurnOutcome::Done;
  } catch (const DeviceError& e) {
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (e.kind() == DeviceError::Kind::Lost) {
      std::fprintf(stderr, "fafo: error: %s; the conversation is kept (without this message): opening the model again\n",
                   e.what());
      return TurnOutcome::Reopen;
    }
    std::fprintf(stderr,
                 "fafo: error: %s; the conversation is kept (without this message): send it again, /reset to start "
                 "over, or restart with a smaller --ctx-size\n",
                 e.what());
    return TurnOutcome::Done;
  } catch (const GgufError& e) {  // the model file changed under us
    std::fputs("\n", stdout);
    std::fflush(stdout);
    std::fprintf(stderr, "fafo: error: %s; the conversation is kept (without this message)\n", e.what());
    return TurnOutcome::Reopen;
  } catch (const std::exception& e) {
    std::fputs("\n", stdout);
    std::fflush(stdout);
    std::fprintf(stderr, "fafo: error: %s; the conversation is kept (without this message)\n", e.what());
    return TurnOutcome::Done;
  }
  std::fputs("\n", stdout);
  std::fflush(stdout);
  if (!r.in_history) {
    std::fprintf(stderr, "fafo: stopped (Ctrl-C) before the reply began; the message is not part of the conversation\n");
    g_interrupted.store(false);
    return TurnOutcome::Done;
  }
  const Sequence& model = session.model();
  const GenerationResult& g = r.generation;
  if (r.shifted_turns > 0)
    std::fprintf(stderr,
                 "fafo: context shift: the oldest %d turn%s left the conversation (%zu tokens -> %zu of %d); "
                 "--no-context-shift keeps them and refuses instead\n",
                 r.shifted_turns, r.shifted_turns == 1 ? "" : "s", r.shift_tokens_before, r.shift_tokens_after,
                 model.n_ctx());
  const char* stop = r.stop == ChatStop::Stopped ? "interrupted (Ctrl-C)" : chat_stop_text(r.stop);
  std::fprintf(stderr,
               "fafo: %s in %.3f s (%.1f tokens/s); prompt %s in %.3f s: %zu new, %d reused from the cache; context "
               "%d/%d; stop: %s\n",
               app::count_of(static_cast<int64_t>(g.ids.size()), "token").c_str(), g.decode_seconds,
               g.tokens_per_second(), app::count_of(static_cast<int64_t>(r.prompt_tokens), "token").c_str(),
               g.prefill_seconds, r.new_tokens, r.reused, model.n_past(), model.n_ctx(), stop);
  print_auto_line(g);
  if (g.stop == StopReason::ContextFull)
    std::fprintf(stderr, "fafo: the context is full; %s\n",
                 session.context_shift() ? "the next message lets the oldest turns leave, /reset starts a new conversation"
                                         : "/reset starts a new conversation");
  g_interrupted.store(false);
  return TurnOutcome::Done;
}

// The open model and the conversation on it.
struct Chat {
  std::unique_ptr<OpenedModel> model;
  std::unique_ptr<ChatSession> session;
  std::vector<ChatMessage> kept;  // the conversation while no model is open
  DecodingResources resources;    // the draft model and corpus index the options name
};

// Opens the model (and the draft model and corpus index the options use; `corpus`: the
// index opened before, kept) and starts a conversation on it.
Chat open_chat(ChatArgs& args, const std::shared_ptr<const CorpusIndex>& corpus = nullptr) {
  Chat c;
  c.model = std::make_unique<OpenedModel>(open_model(args.open));
  OpenedModel& m = *c.model;
  DecodingResources kept;
  kept.corpus = corpus;
  c.resources = open_decoding_resources(args.decoding, args.open, *m.model, m.tokenizer->vocab(),
                                        scoring_uses_draft_model(args.decoding, args.kv), kept);
  c.session = std::make_unique<ChatSession>(*m.model, *m.tokenizer, m.chat.chat_template, chat_template_context(*m.tokenizer),
                                            args.system);
  c.session->set_context_shift(args.context_shift);
  return c;
}

// Opens the model again after its device was lost or its file changed, keeping the
// conversation. false (reported) when it cannot be opened: the next message tries again.
bool reopen_chat(Chat& chat, ChatArgs& args) {
  const std::vector<ChatMessage> history = chat.session ? chat.session->history() : chat.kept;
  chat.session.reset();
  const std::shared_ptr<const CorpusIndex> corpus = chat.resources.corpus;  // no device memory: kept
  chat.resources = {};
  chat.model.reset();  // the device's memory first
  try {
    chat = open_chat(args, corpus);
  } catch (const std::exception& e) {
    chat = Chat{};
    chat.kept = history;
    std::fprintf(stderr, "fafo: error: cannot open the model again: %s; the conversation is kept: the next message tries "
                 "again, /exit quits\n", e.what());
    return false;
  }
  if (!history.empty()) chat.session->restore(history);
  std::fprintf(stderr, "fafo: the model is open again on %s; the conversation goes on (%s)\n",
               chat.model->model->backend().name().c_str(),
               app::count_of(static_cast<int64_t>(history.size()), "message").c_str());
  return true;
}

int run_chat(ChatArgs& args) {
  if (!*args.seed_given) args.sampling.seed = std::random_device{}();
  Sampler check_options(args.sampling);  // reject bad options before loading anything
  app::require_readable_file(args.open.path);
  app::require_decoding_files(args.decoding);
  app::require_chat_template_file(args.open.chat_template);

  Chat chat = open_chat(args);
  app::warn_if_past_training_context(*chat.model->model);
  const OpenedModel& m = *chat.model;
  if (!m.chat.note.empty())
    std::fprintf(stderr, "fafo: warning: %s: %s. Choose the model's format with --chat-template NAME (%s)\n",
                 args.open.path.c_str(), m.chat.note.c_str(), builtin_chat_template_list().c_str());
  try {
    chat.session->check_template();
  } catch (const ChatTemplateError& e) {
    throw std::runtime_error(std::string("the chat template cannot render a first message") +
                             (args.system.empty() ? "" : " after the --system text") + ": " + e.what() +
                             "; choose another format with --chat-template NAME (" + builtin_chat_template_list() + ")");
  }
  const std::string template_name = chat.session->template_name();
  if (!m.placement_note.empty()) std::fprintf(stderr, "fafo chat: %s\n", m.placement_note.c_str());
  const std::string placement = m.model->runner()->weights().placement();
  std::fprintf(stderr, "fafo chat: %s (%s), backend %s%s, context %d tokens, chat template %s%s\n", args.open.path.c_str(),
               m.model->config().arch.c_str(), m.model->backend().name().c_str(),
               placement.empty() ? "" : (" (" + placement + ")").c_str(), m.model->n_ctx(),
               template_name == "gguf" ? "from the model (tokenizer.chat_template)" : template_name.c_str(),
               chat.session->turn_end().empty() ? "" : (", turn end " + chat.session->turn_end()).c_str());
  if (const int32_t limit = chat.session->reply_limit(args.n_predict); limit < args.n_predict)
    std::fprintf(stderr, "fafo chat: a reply stops at %d tokens, half of the %d-token context, not at -n %d%s\n", limit,
                 m.model->n_ctx(), args.n_predict,
                 app::larger_context_may_help(*m.model) ? "; a larger -c gives replies more room" : "");
  std::fprintf(stderr, "Type a message and press Enter. /reset starts over, /exit or Ctrl-D quits, Ctrl-C stops a reply.\n");

  InterruptHandler interrupts;
  std::string line;
  for (;;) {
    g_interrupted.store(false);
    std::fputs("> ", stdout);
    std::fflush(stdout);
    const Input in = read_line(line);
    if (in == Input::Interrupted) {
      std::fputs("\n", stdout);
      return 130;  // as a shell reports a program ended by SIGINT
    }
    if (in == Input::EndOfInput) {
      std::fputs("\n", stdout);
      return 0;
    }
    const std::string text = trim(line);
    if (text.empty()) continue;
    if (text == "/exit" || text == "/quit") return 0;
    if (text == "/reset") {
      if (chat.session) chat.session->reset();
      chat.kept.clear();
      std::fprintf(stderr, "fafo: new conversation\n");
      continue;
    }
    if (text == "/help" || (text[0] == '/' && text.find(' ') == std::string::npos)) {
      std::fprintf(stderr, "fafo: commands: /reset (new conversation), /exit (quit; also Ctrl-D); Ctrl-C stops a reply\n");
      continue;
    }
    if (!chat.session && !reopen_chat(chat, args)) continue;
    if (run_turn(*chat.session, chat.model->auto_state.get(), chat.resources, args, text) == TurnOutcome::Reopen) reopen_chat(chat, args);
  }
}

}  // namespace

Command add_chat_command(CLI::App& app) {
  auto args = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a model in the terminal (multi-turn, keeps the KV cache across turns)");
  app::add_open_flags(cmd, args->open);
  app::add_chat_flags(cmd, args->system, args->open.chat_template);
  app::add_reply_length_flag(cmd, args->n_predict);
  cmd->add_flag("!--no-context-shift", args->context_shift,
                "When a turn and its reply would not fit, refuse it instead of letting the oldest turns after the "
                "system message leave the conversation");
  app::add_sampling_flags(cmd, args->sampling, args->seed_given);
  app::add_strategy_flag(cmd, args->decoding.strategy);
  app::add_decoding_flags(cmd, args->decoding, args->kv);
  return [args] {
    app::use_default_model_if_unset(args->open.path);
    args->decoding.validate();
    args->kv.validate();
    return run_chat(*args);
  };
}

}  // namespace fafo::cli
