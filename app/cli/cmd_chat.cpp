// `fafo chat`: interactive multi-turn chat in the terminal.
//
// Each turn renders the whole conversation with the model's chat template (or a
// built-in one), matches the rendering against the text of what the KV cache
// already holds, keeps the longest matching part and prefills only the rest, so a
// turn normally costs only its new tokens. Replies stream as they are generated and
// end at an end-of-generation token, at the template's turn-end text, at -n tokens,
// at a full context, or at Ctrl-C (which stops the reply, not the program).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "fafo/chat_template.h"
#include "fafo/generator.h"
#include "fafo/sampler.h"
#include "fafo/utf8_stream.h"
#include "loaded_model.h"
#include "shared_flags.h"

namespace fafo::cli {

namespace {

struct ChatArgs {
  std::string model;
  std::string system;
  std::string chat_template;
  int32_t n_predict = -1;
  int32_t n_ctx = 0;
  SamplerOptions sampling{0.8f, 40, 0.95f, 0.05f, 0};
  std::shared_ptr<bool> seed_given = std::make_shared<bool>(false);
  BackendChoice backend;
  std::string strategy = "ar";
  DecodingOptions decoding;
  KvPolicyOptions kv;
};

// ---- Ctrl-C -------------------------------------------------------------------------

std::atomic<bool> g_interrupted{false};

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

// ---- stopping at the template's turn-end text -----------------------------------------

// Collects a reply's text and finds the turn-end text in it (a model that writes
// "<|im_end|>" as plain text has finished). Text that might be the start of that
// marker is held back from the screen until the next pieces decide.
class TurnEndWatcher {
 public:
  explicit TurnEndWatcher(std::string marker) : marker_(std::move(marker)) {}

  // Adds generated text; returns what can be shown now.
  std::string push(const std::string& piece) {
    if (found_) return "";
    text_ += piece;
    size_t safe = text_.size();
    if (!marker_.empty()) {
      const size_t at = text_.find(marker_, shown_ > marker_.size() ? shown_ - marker_.size() : 0);
      if (at != std::string::npos) {
        found_ = true;
        text_.resize(at);
        safe = at;
      } else {
        // Hold back a tail that is a prefix of the marker.
        for (size_t n = std::min(marker_.size() - 1, text_.size()); n > 0; --n) {
          if (text_.compare(text_.size() - n, n, marker_, 0, n) == 0) {
            safe = text_.size() - n;
            break;
          }
        }
      }
    }
    std::string out = safe > shown_ ? text_.substr(shown_, safe - shown_) : "";
    shown_ = std::max(shown_, safe);
    return out;
  }
  // The held-back rest, at the end of the reply.
  std::string finish() {
    std::string out = text_.size() > shown_ ? text_.substr(shown_) : "";
    shown_ = text_.size();
    return out;
  }
  bool found() const { return found_; }
  // The reply: everything before the turn-end text.
  const std::string& text() const { return text_; }

 private:
  std::string marker_;
  std::string text_;
  size_t shown_ = 0;
  bool found_ = false;
};

// ---- the KV cache as text -------------------------------------------------------------

// Token ids the conversation has fed or produced, each group with the text it stands
// for, in order. All but possibly the last group are in the KV cache: the last token
// of a reply is sampled but not fed back (see generate()).
struct CachedPiece {
  std::string text;
  std::vector<int32_t> ids;
  bool in_cache = true;
};

// What a turn feeds: the cached pieces it keeps, then `ids`.
struct Prefill {
  size_t kept_pieces = 0;    // pieces_[0, kept_pieces) start the new rendering
  int32_t reused = 0;        // KV entries they hold (the rest of the cache is dropped)
  std::vector<int32_t> ids;  // to feed after them: a kept piece not yet in the cache, then `rest`
  CachedPiece rest;          // the new text of the rendering and its tokens
};

class ChatSession {
 public:
  ChatSession(Model& model, const Tokenizer& tok, ChatTemplate tmpl, ChatTemplateContext ctx, const ChatArgs& args)
      : model_(model), tok_(tok), template_(std::move(tmpl)), ctx_(std::move(ctx)), args_(args),
        turn_end_(template_.assistant_turn_end(ctx_)) {
    reset();
  }

  const std::string& turn_end() const { return turn_end_; }
  const std::string& template_name() const { return template_.name(); }

  void reset() {
    history_.clear();
    if (!args_.system.empty()) history_.push_back({"system", args_.system});
    pieces_.clear();
    model_.truncate(0);
  }

  // Checks that the template renders a first turn (fails early, before any typing).
  void check_template() const {
    std::vector<ChatMessage> probe = history_;
    probe.push_back({"user", "Hello"});
    template_.render(probe, true, ctx_);
  }

  // One exchange: renders the conversation with `user_text`, prefills what the cache
  // lacks, streams the reply. Returns false when the turn could not run (the message
  // is then not part of the conversation).
  bool turn(const std::string& user_text) {
    std::vector<ChatMessage> messages = history_;
    messages.push_back({"user", user_text});
    std::string prompt;
    try {
      prompt = template_.render(messages, true, ctx_);
    } catch (const ChatTemplateError& e) {
      std::fprintf(stderr, "fafo: the chat template (%s) refuses this conversation: %s\n", template_.name().c_str(), e.what());
      return false;
    }
    const Prefill prefill = plan_prefill(prompt);
    if (static_cast<int64_t>(prefill.reused) + static_cast<int64_t>(prefill.ids.size()) >= model_.n_ctx()) {
      std::fprintf(stderr, "fafo: the context is full (this turn needs %zu tokens, %d of %d are in use); /reset starts a new conversation\n",
                   prefill.ids.size(), prefill.reused, model_.n_ctx());
      return false;
    }
    apply(prefill);

    GenerationOptions options;
    options.n_predict = args_.n_predict;
    options.sampling = args_.sampling;
    options.keep_context = true;
    options.decoding = args_.decoding;
    options.kv = args_.kv;
    TurnEndWatcher watcher(turn_end_);
    Utf8Stream stream;
    bool at_start = true;  // drop the space SentencePiece puts before the first word
    auto show = [&](std::string text) {
      if (at_start) {
        const size_t begin = text.find_first_not_of(' ');
        text = begin == std::string::npos ? "" : text.substr(begin);
        if (!text.empty()) at_start = false;
      }
      std::fputs(stream.push(text).c_str(), stdout);
      std::fflush(stdout);
    };
    g_interrupted.store(false);
    auto on_token = [&](int32_t id) {
      if (g_interrupted.load()) return false;
      if (tok_.is_end_of_generation(id) || tok_.is_control(id)) return true;
      show(watcher.push(tok_.token_to_piece(id)));
      return !watcher.found();
    };
    const GenerationResult r = generate(model_, tok_, prefill.ids, options, on_token);
    show(watcher.finish());
    std::fputs(stream.flush().c_str(), stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);

    for (size_t i = 0; i < r.ids.size(); ++i) {
      const int32_t id = r.ids[i];
      pieces_.push_back({tok_.token_to_piece(id, tok_.is_control(id)), {id}, i + 1 < r.ids.size()});
    }
    history_.push_back({"user", user_text});
    history_.push_back({"assistant", watcher.text()});

    const char* stop = g_interrupted.load() ? "interrupted (Ctrl-C)"
                       : watcher.found()   ? "end of turn"
                                           : r.stop == StopReason::EndOfGeneration ? "end of generation"
                                           : r.stop == StopReason::ContextFull     ? "context full"
                                                                                   : "length";
    std::fprintf(stderr,
                 "fafo: %zu tokens in %.3f s (%.1f tokens/s); prompt %zu tokens in %.3f s: %zu new, %d reused from the "
                 "cache; context %d/%d; stop: %s\n",
                 r.ids.size(), r.decode_seconds, r.tokens_per_second(), prefill.ids.size() + static_cast<size_t>(prefill.reused),
                 r.prefill_seconds, prefill.ids.size(), prefill.reused, model_.n_past(), model_.n_ctx(), stop);
    if (r.stop == StopReason::ContextFull)
      std::fprintf(stderr, "fafo: the context is full; /reset starts a new conversation\n");
    g_interrupted.store(false);
    return true;
  }

 private:
  // Finds the cached pieces whose texts, in order, start `prompt`, and tokenizes the
  // rest of it. Changes nothing: apply() does.
  Prefill plan_prefill(const std::string& prompt) const {
    Prefill p;
    size_t matched_text = 0;
    while (p.kept_pieces < pieces_.size() &&
           prompt.compare(matched_text, pieces_[p.kept_pieces].text.size(), pieces_[p.kept_pieces].text) == 0) {
      const CachedPiece& piece = pieces_[p.kept_pieces++];
      matched_text += piece.text.size();
      if (piece.in_cache) {
        p.reused += static_cast<int32_t>(piece.ids.size());
      } else {
        p.ids.insert(p.ids.end(), piece.ids.begin(), piece.ids.end());  // a reply's last token, fed now
      }
    }
    p.rest.text = prompt.substr(matched_text);
    p.rest.ids = tok_.encode(p.rest.text, false, true);
    // A conversation starts with BOS unless the template wrote it already.
    const Vocab& vocab = tok_.vocab();
    if (p.kept_pieces == 0 && vocab.add_bos && vocab.bos >= 0 && !(!ctx_.bos_token.empty() && prompt.starts_with(ctx_.bos_token)))
      p.rest.ids.insert(p.rest.ids.begin(), vocab.bos);
    p.ids.insert(p.ids.end(), p.rest.ids.begin(), p.rest.ids.end());
    if (p.ids.empty() && p.kept_pieces > 0) {
      // Everything is cached already: feed the last piece again so that there are
      // logits to sample the reply's first token from.
      const CachedPiece& last = pieces_[p.kept_pieces - 1];
      p.reused -= static_cast<int32_t>(last.ids.size());
      p.ids = last.ids;
    }
    return p;
  }

  // Truncates the KV cache to the kept pieces and records what the prefill adds.
  void apply(const Prefill& p) {
    pieces_.resize(p.kept_pieces);
    for (CachedPiece& piece : pieces_) piece.in_cache = true;
    if (!p.rest.text.empty() || !p.rest.ids.empty()) pieces_.push_back(p.rest);
    model_.truncate(p.reused);
  }

  Model& model_;
  const Tokenizer& tok_;
  ChatTemplate template_;
  ChatTemplateContext ctx_;
  const ChatArgs& args_;
  std::string turn_end_;
  std::vector<ChatMessage> history_;
  std::vector<CachedPiece> pieces_;
};

// ---- choosing the template ---------------------------------------------------------------

std::string builtin_names() {
  std::string names;
  for (const std::string& n : builtin_chat_template_names()) names += (names.empty() ? "" : ", ") + n;
  return names;
}

ChatTemplate choose_template(const ChatArgs& args, const GgufFile& file) {
  const auto& names = builtin_chat_template_names();
  if (!args.chat_template.empty()) {
    if (std::find(names.begin(), names.end(), args.chat_template) != names.end()) return ChatTemplate::builtin(args.chat_template);
    if (std::filesystem::is_regular_file(args.chat_template)) {
      std::ifstream in(args.chat_template, std::ios::binary);
      std::ostringstream s;
      s << in.rdbuf();
      return ChatTemplate::from_source(s.str(), args.chat_template);
    }
    throw std::runtime_error("--chat-template '" + args.chat_template + "' is neither a built-in format (" + builtin_names() +
                             ") nor a Jinja template file");
  }
  const GgufValue* v = file.find("tokenizer.chat_template");
  if (!v || v->type != GgufType::STRING) {
    std::fprintf(stderr,
                 "fafo: warning: %s has no chat template (tokenizer.chat_template); using chatml. Choose the model's "
                 "format with --chat-template NAME (%s)\n",
                 file.path().c_str(), builtin_names().c_str());
    return ChatTemplate::builtin("chatml");
  }
  try {
    return ChatTemplate::from_source(v->as_string(), "gguf");
  } catch (const ChatTemplateError& e) {
    const std::optional<std::string> like = builtin_template_name_for(v->as_string());
    throw std::runtime_error(std::string("the model's chat template (tokenizer.chat_template) cannot be used: ") + e.what() +
                             (like ? "; it looks like the '" + *like + "' format: try --chat-template " + *like
                                   : "; choose a built-in format with --chat-template NAME (" + builtin_names() + ")"));
  }
}

ChatTemplateContext template_context(const Tokenizer& tok) {
  ChatTemplateContext ctx;
  const Vocab& v = tok.vocab();
  if (v.bos >= 0) ctx.bos_token = v.tokens[static_cast<size_t>(v.bos)];
  if (v.eos >= 0) ctx.eos_token = v.tokens[static_cast<size_t>(v.eos)];
  return ctx;
}

int run_chat(ChatArgs& args) {
  if (!*args.seed_given) args.sampling.seed = std::random_device{}();
  Sampler check_options(args.sampling);  // reject bad options before loading anything

  LoadedModel m = load_model(args.model, args.backend, args.n_ctx);
  ChatSession session(*m.model, *m.tokenizer, choose_template(args, *m.file), template_context(*m.tokenizer), args);
  try {
    session.check_template();
  } catch (const ChatTemplateError& e) {
    throw std::runtime_error(std::string("the chat template cannot render a first message") +
                             (args.system.empty() ? "" : " after the --system text") + ": " + e.what() +
                             "; choose another format with --chat-template NAME (" + builtin_names() + ")");
  }
  const std::string& template_name = session.template_name();
  std::fprintf(stderr, "fafo chat: %s (%s), backend %s, context %d tokens, chat template %s%s\n", args.model.c_str(),
               m.model->config().arch.c_str(), m.model->backend().name().c_str(), m.model->n_ctx(),
               template_name == "gguf" ? "from the model (tokenizer.chat_template)" : template_name.c_str(),
               session.turn_end().empty() ? "" : (", turn end " + session.turn_end()).c_str());
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
      session.reset();
      std::fprintf(stderr, "fafo: new conversation\n");
      continue;
    }
    if (text == "/help" || (text[0] == '/' && text.find(' ') == std::string::npos)) {
      std::fprintf(stderr, "fafo: commands: /reset (new conversation), /exit (quit; also Ctrl-D); Ctrl-C stops a reply\n");
      continue;
    }
    session.turn(text);
  }
}

}  // namespace

Command add_chat_command(CLI::App& app) {
  auto args = std::make_shared<ChatArgs>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a model in the terminal (multi-turn, keeps the KV cache across turns)");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->required();
  cmd->add_option("--system", args->system, "System message at the start of the conversation");
  cmd->add_option("--chat-template", args->chat_template,
                  "Chat format: a built-in name (chatml, llama2, llama3, mistral, phi3, gemma, deepseek-r1) or a Jinja "
                  "file (default: the model's tokenizer.chat_template; chatml when it has none)");
  cmd->add_option("-n,--n-predict", args->n_predict, "Tokens per reply at most; -1 = until the reply ends or the context is full")
      ->capture_default_str()->check(CLI::Range(-1, 1 << 30));
  cmd->add_option("-c,--ctx-size", args->n_ctx, "Context length (0 = the model's, at most 4096)")->capture_default_str()
      ->check(CLI::Range(0, 1 << 22));
  add_sampling_flags(cmd, args->sampling, args->seed_given);
  add_backend_flags(cmd, args->backend);
  cmd->add_option("--strategy", args->strategy, "Decoding strategy: ar, jacobi, lookahead, fafo (same replies as ar)")
      ->capture_default_str()->check(CLI::IsMember({"ar", "jacobi", "lookahead", "fafo"}));
  add_decoding_flags(cmd, args->decoding, args->kv);
  return [args] {
    args->decoding.strategy = parse_strategy(args->strategy);
    args->decoding.validate();
    args->kv.validate();
    return run_chat(*args);
  };
}

}  // namespace fafo::cli
