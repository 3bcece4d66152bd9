// `fafo chat` driven as a user drives it: in a terminal (a tmux pane), typing
// messages, reading the streamed replies, /reset, Ctrl-C and /exit; plus piped input
// and bad options. The model is stories260K (no chat template of its own: the
// conversations use the built-in chatml format), so replies are story text.
//
// Every wait has a deadline; a test that runs out of time fails (or skips, when the
// machine lacks tmux) and its tmux server is killed.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <thread>

#include "fafo/chat_template.h"
#include "fafo/gguf.h"
#include "fafo/tokenizer.h"
#include "chat_template_copy.h"
#include "test_support.h"

namespace {

using Clock = std::chrono::steady_clock;

// Runs a shell command; returns its exit code and stdout.
std::pair<int, std::string> shell(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return {-1, out};
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

bool wait_until(const std::function<bool()>& done, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return done();
}

bool have_tmux() { return shell("command -v tmux >/dev/null 2>&1").first == 0; }

// One statistics line fafo chat prints to stderr after a reply.
struct TurnStats {
  int generated = 0;
  int prompt = 0;
  int fresh = 0;   // prompt tokens prefilled in this turn
  int reused = 0;  // prompt tokens already in the KV cache
  std::string stop;
};

std::vector<TurnStats> parse_stats(const std::string& err) {
  static const std::regex line(
      R"(fafo: (\d+) tokens? in [0-9.]+ s \([0-9.]+ tokens/s\); prompt (\d+) tokens? in [0-9.]+ s: (\d+) new, (\d+) reused from the cache; context \d+/\d+; stop: ([^\n]+))");
  std::vector<TurnStats> out;
  for (auto it = std::sregex_iterator(err.begin(), err.end(), line); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    out.push_back({std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3]), std::stoi(m[4]), m[5]});
  }
  return out;
}

// A detached tmux session on a private server socket, running fafo chat with stderr
// and the exit code captured in files.
class ChatInTmux {
 public:
  explicit ChatInTmux(const std::string& chat_args) : dir_(fafo::test::temp_dir("chat-tmux")) {
    static std::atomic<int> counter{0};
    socket_ = "fafo-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    // Ctrl-C reaches the whole foreground process group: the wrapping shell traps it
    // so that it lives on to record fafo's exit code.
    const std::string command = "trap : INT; " + fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo").string()) + " chat " + chat_args + " 2>" +
                                fafo::test::shell_quote((dir_ / "stderr.txt").string()) + "; echo $? >" + fafo::test::shell_quote((dir_ / "exit.txt").string());
    started_ = tmux("new-session -d -s chat -x 220 -y 60 " + fafo::test::shell_quote(command)).first == 0;
  }
  ~ChatInTmux() { tmux("kill-server"); }
  ChatInTmux(const ChatInTmux&) = delete;
  ChatInTmux& operator=(const ChatInTmux&) = delete;

  bool started() const { return started_; }
  void type(const std::string& text) { tmux("send-keys -t chat -l " + fafo::test::shell_quote(text)); }
  void key(const std::string& name) { tmux("send-keys -t chat " + name); }
  void send_line(const std::string& text) {
    type(text);
    key("Enter");
  }
  // The pane's whole history, wrapped lines joined.
  std::string screen() { return tmux("capture-pane -p -J -S -1000 -t chat").second; }
  std::string err() const { return fafo::test::read_text(dir_ / "stderr.txt"); }
  std::vector<TurnStats> stats() const { return parse_stats(err()); }
  bool wait_for_replies(size_t n, double seconds) {
    return wait_until([&] { return stats().size() >= n; }, seconds);
  }
  // Waits for the prompt "> " at the start of the last non-empty screen line.
  bool wait_for_prompt(double seconds) {
    return wait_until(
        [&] {
          std::string s = screen();
          while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
          const size_t nl = s.rfind('\n');
          const std::string last = s.substr(nl == std::string::npos ? 0 : nl + 1);
          return last == ">";
        },
        seconds);
  }
  // The exit code once the program has ended, or -1 at the deadline.
  int wait_for_exit(double seconds) {
    const auto file = dir_ / "exit.txt";
    if (!wait_until([&] { return std::filesystem::exists(file) && !fafo::test::read_text(file).empty(); }, seconds)) return -1;
    return std::stoi(fafo::test::read_text(file));
  }

 private:
  std::pair<int, std::string> tmux(const std::string& args) {
    // SHELL: tmux runs the command with it; the command is sh syntax.
    return shell("SHELL=/bin/sh timeout 20 tmux -L " + socket_ + " -f /dev/null " + args + " 2>/dev/null");
  }
  std::filesystem::path dir_;
  std::string socket_;
  bool started_ = false;
};

// The reply printed after the screen line "> <message>": the lines up to the next prompt.
std::string reply_after(const std::string& screen, const std::string& message) {
  const std::string marker = "> " + message + "\n";
  const size_t at = screen.find(marker);
  if (at == std::string::npos) return "";
  const size_t begin = at + marker.size();
  const size_t end = screen.find("\n>", begin);
  return screen.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

bool has_words(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); }) >= 3;
}

#define REQUIRE_TMUX()                                                                          \
  if (!have_tmux()) GTEST_SKIP() << "tmux is not installed (tools/setup.sh installs it); the terminal tests need it"

std::string model_args(const std::filesystem::path& model, const std::string& more) {
  return "-m " + fafo::test::shell_quote(model.string()) + " --chat-template chatml --temp 0 " + more;
}

TEST(CliChat, TwoTurnsInATerminalPrefillOnlyTheNewTokens) {
  REQUIRE_TMUX();
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  ChatInTmux chat(model_args(model, "-n 24 -c 512"));
  ASSERT_TRUE(chat.started()) << "tmux could not start a session";
  ASSERT_TRUE(chat.wait_for_prompt(60)) << chat.screen() << chat.err();

  chat.send_line("Once upon a time");
  ASSERT_TRUE(chat.wait_for_replies(1, 60)) << chat.screen() << chat.err();
  ASSERT_TRUE(chat.wait_for_prompt(30)) << chat.screen();
  chat.send_line("Tell me about the dog");
  ASSERT_TRUE(chat.wait_for_replies(2, 60)) << chat.screen() << chat.err();
  ASSERT_TRUE(chat.wait_for_prompt(30)) << chat.screen();

  const std::string screen = chat.screen();
  EXPECT_TRUE(has_words(reply_after(screen, "Once upon a time"))) << screen;
  EXPECT_TRUE(has_words(reply_after(screen, "Tell me about the dog"))) << screen;

  const std::vector<TurnStats> s = chat.stats();
  ASSERT_EQ(s.size(), 2u) << chat.err();
  EXPECT_EQ(s[0].generated, 24);
  EXPECT_EQ(s[0].reused, 0);
  EXPECT_EQ(s[0].fresh, s[0].prompt);
  // The second turn reuses everything the first one left in the KV cache (its prompt
  // and all generated tokens but the last, which was never fed back) and prefills only
  // that last token and the new turn's text.
  EXPECT_EQ(s[1].reused, s[0].prompt + s[0].generated - 1) << chat.err();
  EXPECT_EQ(s[1].fresh, s[1].prompt - s[1].reused);
  // Exactly: that token, then the text chatml puts after a reply and around the new
  // message, tokenized with its special tokens.
  const fafo::ChatTemplate chatml = fafo::ChatTemplate::builtin("chatml");
  const std::string reply = "REPLY";
  const std::string before = chatml.render({{"user", "Once upon a time"}}, true) + reply;
  const std::string after = chatml.render({{"user", "Once upon a time"}, {"assistant", reply}, {"user", "Tell me about the dog"}}, true);
  ASSERT_EQ(after.compare(0, before.size(), before), 0);
  const fafo::Tokenizer tok(fafo::Vocab::from_gguf(*fafo::GgufFile::open(model.string())));
  EXPECT_EQ(s[1].fresh, 1 + static_cast<int>(tok.encode(after.substr(before.size()), false, true).size())) << chat.err();

  chat.send_line("/exit");
  EXPECT_EQ(chat.wait_for_exit(30), 0) << chat.screen() << chat.err();
}

TEST(CliChat, CtrlCStopsTheReplyButNotTheChatAndAtThePromptExits) {
  REQUIRE_TMUX();
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  // An unbounded reply in a 4096-token context takes seconds on this tiny model.
  ChatInTmux chat(model_args(model, "-n -1 -c 4096"));
  ASSERT_TRUE(chat.started());
  ASSERT_TRUE(chat.wait_for_prompt(60)) << chat.screen() << chat.err();
  chat.send_line("Once upon a time");
  ASSERT_TRUE(wait_until([&] { return has_words(reply_after(chat.screen(), "Once upon a time")); }, 60)) << chat.screen();
  chat.key("C-c");
  ASSERT_TRUE(chat.wait_for_replies(1, 60)) << chat.screen() << chat.err();
  const TurnStats first = chat.stats()[0];
  if (first.stop.find("interrupted") == std::string::npos)
    GTEST_SKIP() << "the reply ended (" << first.stop << ") before Ctrl-C arrived; this machine is too fast for the test";
  EXPECT_LT(first.generated, 4000);

  // Still chatting: the next turn runs and keeps the interrupted reply in the cache.
  ASSERT_TRUE(chat.wait_for_prompt(30)) << chat.screen();
  chat.send_line("The end");
  ASSERT_TRUE(chat.wait_for_replies(2, 60)) << chat.screen() << chat.err();
  EXPECT_EQ(chat.stats()[1].reused, first.prompt + first.generated - 1);
  if (chat.stats()[1].stop.find("interrupted") == std::string::npos) {
    ASSERT_TRUE(chat.wait_for_prompt(30)) << chat.screen();
    chat.key("C-c");
    EXPECT_EQ(chat.wait_for_exit(30), 130) << chat.screen() << chat.err();
  }
}

TEST(CliChat, ResetStartsOverAndCtrlDQuits) {
  REQUIRE_TMUX();
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  ChatInTmux chat(model_args(model, "-n 16 -c 512 --system 'You tell stories.'"));
  ASSERT_TRUE(chat.started());
  ASSERT_TRUE(chat.wait_for_prompt(60)) << chat.screen() << chat.err();
  chat.send_line("A cat");
  ASSERT_TRUE(chat.wait_for_replies(1, 60)) << chat.err();
  ASSERT_TRUE(chat.wait_for_prompt(30));
  chat.send_line("/reset");
  ASSERT_TRUE(wait_until([&] { return chat.err().find("new conversation") != std::string::npos; }, 30)) << chat.err();
  ASSERT_TRUE(chat.wait_for_prompt(30));
  chat.send_line("A cat");
  ASSERT_TRUE(chat.wait_for_replies(2, 60)) << chat.err();
  const std::vector<TurnStats> s = chat.stats();
  // The same first turn again, from an empty cache, gives the same greedy reply.
  EXPECT_EQ(s[1].reused, 0);
  EXPECT_EQ(s[1].prompt, s[0].prompt);
  EXPECT_EQ(s[1].generated, s[0].generated);
  const std::string screen = chat.screen();
  const size_t second = screen.rfind("> A cat\n");
  ASSERT_NE(second, std::string::npos);
  EXPECT_EQ(reply_after(screen, "A cat"), reply_after(screen.substr(second), "A cat"));

  ASSERT_TRUE(chat.wait_for_prompt(30));
  chat.key("C-d");
  EXPECT_EQ(chat.wait_for_exit(30), 0) << chat.screen() << chat.err();
}

// Without a terminal: messages on stdin, one per line; the end of input quits.
TEST(CliChat, PipedInputRunsEveryTurn) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("chat-pipe");
  const std::string err_path = (dir / "stderr.txt").string();
  const auto [code, out] = shell("printf 'Hello\\nOnce upon a time\\n' | timeout 120 " +
                                 fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo").string()) + " chat " +
                                 model_args(model, "-n 12 -c 256") + " 2>" + fafo::test::shell_quote(err_path));
  const std::string err = fafo::test::read_text(err_path);
  EXPECT_EQ(code, 0) << err;
  const std::vector<TurnStats> s = parse_stats(err);
  ASSERT_EQ(s.size(), 2u) << err;
  EXPECT_EQ(s[1].reused, s[0].prompt + s[0].generated - 1);
  EXPECT_NE(err.find("chat template chatml"), std::string::npos) << err;
  EXPECT_NE(out.find("> "), std::string::npos);
  // What auto chose, once: the second reply chose the same on the same costs.
  size_t auto_lines = 0;
  for (size_t at = err.find("fafo: auto: "); at != std::string::npos; at = err.find("fafo: auto: ", at + 1)) ++auto_lines;
  EXPECT_EQ(auto_lines, 1u) << err;
}

// Twenty turns on the shipped model (no -m) in a small context: every turn is answered,
// the oldest turns leave when the context fills, and one line says so. With
// --no-context-shift a turn that does not fit is refused instead.
TEST(CliChat, TwentyTurnsKeepGoingPastAFullContext) {
  const auto dir = fafo::test::temp_dir("chat-shift");
  const std::string err_path = (dir / "stderr.txt").string();
  const std::string fafo = fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo").string());
  std::string input;
  for (int i = 1; i <= 20; ++i) input += "Tell me story number " + std::to_string(i) + "\\n";
  const auto [code, out] = shell("printf '" + input + "' | timeout 300 env -u FAFO_MODEL " + fafo +
                                 " chat -c 512 -n 100 --temp 0 2>" + fafo::test::shell_quote(err_path));
  const std::string err = fafo::test::read_text(err_path);
  EXPECT_EQ(code, 0) << err;
  EXPECT_EQ(parse_stats(err).size(), 20u) << err;
  EXPECT_NE(err.find("fafo: context shift: the oldest"), std::string::npos) << err;
  EXPECT_EQ(err.find("the context is full"), std::string::npos) << err;
  EXPECT_NE(err.find("(the default; -m picks another)"), std::string::npos) << err;

  const auto [strict_code, strict_out] = shell("printf '" + input + "' | timeout 300 env -u FAFO_MODEL " + fafo +
                                               " chat -c 512 -n 100 --temp 0 --no-context-shift 2>" + fafo::test::shell_quote(err_path));
  const std::string strict_err = fafo::test::read_text(err_path);
  EXPECT_EQ(strict_code, 0) << strict_err;
  EXPECT_NE(strict_err.find("the context is full"), std::string::npos) << strict_err;
  EXPECT_EQ(strict_err.find("context shift: the oldest"), std::string::npos) << strict_err;
}

// In a small context the default reply length (512) does not refuse every turn: a reply
// gets at most half the context, and one line says so. A turn that cannot fit names the
// flags that would let it (-n, -c), not /reset, which cannot help it.
TEST(CliChat, ASmallContextAnswersAndARefusalNamesTheFlags) {
  const auto dir = fafo::test::temp_dir("chat-small");
  const std::string err_path = (dir / "stderr.txt").string();
  const std::string fafo = fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo").string());
  const auto [code, out] = shell("printf 'Hello\\nOnce upon a time\\n' | timeout 120 env -u FAFO_MODEL " + fafo +
                                 " chat -c 256 --temp 0 2>" + fafo::test::shell_quote(err_path));
  const std::string err = fafo::test::read_text(err_path);
  EXPECT_EQ(code, 0) << err;
  const std::vector<TurnStats> stats = parse_stats(err);
  ASSERT_EQ(stats.size(), 2u) << err;
  for (const TurnStats& s : stats) EXPECT_LE(s.generated, 128) << err;
  EXPECT_NE(err.find("fafo chat: a reply stops at 128 tokens, half of the 256-token context, not at -n 512; a larger -c "
                     "gives replies more room\n"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("the context is full"), std::string::npos) << err;

  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  // "Hello" in chatml is 44 tokens: with 32 for the reply it does not fit in 64.
  const auto [refused_code, refused_out] = shell("printf 'Hello\\n' | timeout 120 " + fafo + " chat " +
                                                 model_args(model, "-c 64 -n 32") + " 2>" + fafo::test::shell_quote(err_path));
  const std::string refused = fafo::test::read_text(err_path);
  EXPECT_EQ(refused_code, 0) << refused;
  EXPECT_NE(refused.find("fafo: the context is full: this turn needs 44 tokens even with every earlier turn left out, and "
                         "32 for the reply; the context holds 64; restart with -n 20 (a shorter reply) or a larger -c "
                         "(this model was trained on 2048 tokens)\n"),
            std::string::npos)
      << refused;
  EXPECT_EQ(refused.rfind("/reset"), refused.find("/reset starts over")) << "only the banner names /reset: " << refused;
}

// -n 0 would end every reply before its first token (the generator makes none for 0):
// it is refused with a usage error before the model opens, and --help says what -n takes.
TEST(CliChat, NZeroIsRefusedNotEveryMessageDropped) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("chat-n0");
  const std::string err_path = (dir / "stderr.txt").string();
  const std::string fafo = fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo").string());
  const auto [code, out] = shell("printf 'Hello\\n' | " + fafo + " chat " + model_args(model, "-c 256 -n 0") + " 2>" +
                                 fafo::test::shell_quote(err_path));
  const std::string err = fafo::test::read_text(err_path);
  EXPECT_EQ(code, 2) << err;
  EXPECT_NE(err.find("fafo: error: --n-predict: 0 would end every reply before its first token: give 1 or more, or -1 "
                     "for no limit\n"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.find("before the reply began"), std::string::npos) << err;
  const auto [help_code, help] = shell(fafo + " chat --help 2>&1");
  EXPECT_EQ(help_code, 0) << help;
  EXPECT_NE(help.find("Tokens per reply at most (1 or more; a chat reply also stops at half the context); -1 = until"),
            std::string::npos)
      << help;
}

// A copy of `model` whose llama.context_length is `context_length`, or without the key
// when it is 0.
std::filesystem::path with_context_length(const std::filesystem::path& model, uint32_t context_length,
                                          const std::string& name) {
  const auto in = fafo::GgufFile::open(model.string());
  fafo::GgufWriter w(in->alignment());
  for (const auto& [key, value] : in->metadata())
    if (key != "llama.context_length") w.set(key, value);
  if (context_length > 0) w.set_u32("llama.context_length", context_length);
  for (const fafo::GgufTensor& t : in->tensors())
    w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  const auto out = fafo::test::temp_dir("chat-ctx-" + name) / "model.gguf";
  w.write(out.string());
  return out;
}

// What chat says of the context the model was trained on comes from the file: without a
// context_length key it names no training length (and gives no warning past one), and
// it advises a larger -c only while the context is shorter than the training one.
TEST(CliChat, TheTrainingContextIsNamedOnlyWhenTheFileGivesIt) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::string fafo = fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo").string());
  const auto dir = fafo::test::temp_dir("chat-trained");
  const std::string err_path = (dir / "stderr.txt").string();
  auto chat = [&](const std::filesystem::path& file, const std::string& more) {
    const auto [code, out] = shell("printf 'Hello\\n' | " + fafo + " chat " + model_args(file, more) + " 2>" +
                                   fafo::test::shell_quote(err_path));
    const std::string err = fafo::test::read_text(err_path);
    EXPECT_EQ(code, 0) << err;
    return err;
  };

  // No context_length: the refusal ("Hello" in chatml is 44 tokens, a reply gets 32 of
  // the 64) and the first line advise a larger -c without a number; no warning at 4096.
  const auto unknown = with_context_length(model, 0, "none");
  std::string err = chat(unknown, "-c 64");
  EXPECT_NE(err.find("fafo chat: a reply stops at 32 tokens, half of the 64-token context, not at -n 512; a larger -c "
                     "gives replies more room\n"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("the context holds 64; restart with -n 20 (a shorter reply) or a larger -c\n"), std::string::npos)
      << err;
  EXPECT_EQ(err.find("trained"), std::string::npos) << err;
  err = chat(unknown, "-c 4096 -n 4");
  EXPECT_EQ(parse_stats(err).size(), 1u) << err;
  EXPECT_EQ(err.find("n_ctx_train"), std::string::npos) << err;
  EXPECT_EQ(err.find("trained"), std::string::npos) << err;
  // fafo info says the file has none, and what is assumed.
  const auto [info_code, info] = shell(fafo + " info -m " + fafo::test::shell_quote(unknown.string()));
  EXPECT_EQ(info_code, 0);
  EXPECT_NE(info.find("context:       not in the file (context_length); 2048 assumed"), std::string::npos) << info;

  // Trained on 64 tokens, run at 64: no larger -c is advised, at the start or in the refusal.
  err = chat(with_context_length(model, 64, "64"), "-c 64");
  EXPECT_NE(err.find("fafo chat: a reply stops at 32 tokens, half of the 64-token context, not at -n 512\n"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("the context holds 64; restart with -n 20 (a shorter reply)\n"), std::string::npos) << err;
  EXPECT_EQ(err.find("larger -c"), std::string::npos) << err;
  EXPECT_EQ(err.find("n_ctx_train"), std::string::npos) << err;
}

TEST(CliChat, WithoutATemplateItWarnsAndUsesChatml) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("chat-default");
  const std::string err_path = (dir / "stderr.txt").string();
  const auto [code, out] = shell("printf 'Hi\\n' | timeout 120 " + fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo").string()) +
                                 " chat -m " + fafo::test::shell_quote(model.string()) + " -n 4 --temp 0 -c 128 2>" + fafo::test::shell_quote(err_path));
  const std::string err = fafo::test::read_text(err_path);
  EXPECT_EQ(code, 0) << err;
  EXPECT_NE(err.find("warning"), std::string::npos) << err;
  EXPECT_NE(err.find("no chat template"), std::string::npos) << err;
  EXPECT_EQ(parse_stats(err).size(), 1u) << err;
}

using fafo::test::with_chat_template;

TEST(CliChat, UsesTheTemplateInTheModelFile) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  FAFO_REQUIRE_SHARED(phi, "templates/microsoft-Phi-3.5-mini-instruct.jinja");
  const auto file = with_chat_template(model, fafo::test::read_text(phi), "phi");
  const auto dir = fafo::test::temp_dir("chat-gguf-run");
  const std::string err_path = (dir / "stderr.txt").string();
  const auto [code, out] = shell("printf 'Hi\\nMore\\n' | timeout 120 " + fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo").string()) +
                                 " chat -m " + fafo::test::shell_quote(file.string()) + " -n 8 --temp 0 -c 256 2>" + fafo::test::shell_quote(err_path));
  const std::string err = fafo::test::read_text(err_path);
  EXPECT_EQ(code, 0) << err;
  EXPECT_NE(err.find("chat template from the model"), std::string::npos) << err;
  EXPECT_NE(err.find("turn end <|end|>"), std::string::npos) << err;
  EXPECT_EQ(err.find("warning"), std::string::npos) << err;
  const std::vector<TurnStats> s = parse_stats(err);
  ASSERT_EQ(s.size(), 2u) << err;
  EXPECT_EQ(s[1].reused, s[0].prompt + s[0].generated - 1) << err;
}

// The rule fafo-studio follows too (fafo::resolve_chat_template): the built-in format the
// template looks like, with a warning naming the construct and the way to choose another.
TEST(CliChat, AnUnsupportedTemplateInTheModelFileFallsBackToTheFormatItLooksLike) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto file = with_chat_template(
      model, "{% for m in messages %}\n<|im_start|>{{ m.role }}\n{{ m.content | wordwrap(40) }}<|im_end|>\n{% endfor %}", "wrap");
  const auto [code, out] = shell("printf 'Hi\\n' | timeout 60 " + fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo").string()) +
                                 " chat -m " + fafo::test::shell_quote(file.string()) + " -n 4 --temp 0 -c 128 2>&1");
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("warning"), std::string::npos) << out;
  EXPECT_NE(out.find("the filter 'wordwrap'"), std::string::npos) << out;
  EXPECT_NE(out.find("line 3"), std::string::npos) << out;
  EXPECT_NE(out.find("using chatml, the built-in format it looks like"), std::string::npos) << out;
  EXPECT_NE(out.find("--chat-template NAME"), std::string::npos) << out;
  EXPECT_NE(out.find("chat template chatml"), std::string::npos) << out;
  EXPECT_EQ(parse_stats(out).size(), 1u) << out;
}

// A device lost in the middle of the second reply (FAFO_INJECT_FAULT): fafo chat says
// so, opens the model again and the conversation goes on with the third message.
TEST(CliChat, ALostDeviceOpensTheModelAgainAndTheConversationGoesOn) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("chat-lost");
  const std::string err_path = (dir / "stderr.txt").string();
  // Steps: the first turn's prefill and 11 decoding steps (-n 12), then the second
  // turn's prefill (13) and decoding steps: the 15th fails.
  const auto [code, out] = shell("printf 'Hello\\nTell me about the dog\\nAnd then?\\n' | FAFO_INJECT_FAULT=lost:15 timeout 120 " +
                                 fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo").string()) + " chat " +
                                 model_args(model, "-n 12 -c 256 --backend cpu --strategy ar") + " 2>" + fafo::test::shell_quote(err_path));
  const std::string err = fafo::test::read_text(err_path);
  EXPECT_EQ(code, 0) << err;
  EXPECT_NE(err.find("device was lost (injected by FAFO_INJECT_FAULT); the conversation is kept (without this message): "
                     "opening the model again"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("the model is open again on cpu; the conversation goes on (2 messages)"), std::string::npos) << err;
  const std::vector<TurnStats> s = parse_stats(err);
  ASSERT_EQ(s.size(), 2u) << err;  // the first and the third message
  EXPECT_EQ(s[0].generated, 12);
  EXPECT_EQ(s[1].generated, 12);
  EXPECT_EQ(s[1].reused, 0);  // the new model's cache starts empty: the whole conversation is fed
  EXPECT_GT(s[1].fresh, s[0].prompt + 1);
}

// --memory-limit: a model that does not fit is a clear error; a bad size is a usage error.
TEST(CliChat, AMemoryLimitTooSmallForTheModelIsAClearError) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::string fafo = fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo").string());
  const auto dir = fafo::test::temp_dir("chat-limit");
  const std::string err_path = (dir / "stderr.txt").string();
  const auto small = shell("printf 'Hello\\n' | timeout 60 " + fafo + " chat " +
                           model_args(model, "--backend cpu --memory-limit 300K") + " 2>" + fafo::test::shell_quote(err_path));
  std::string err = fafo::test::read_text(err_path);
  EXPECT_NE(small.first, 0) << err;
  EXPECT_NE(err.find("out of memory on the cpu backend"), std::string::npos) << err;
  EXPECT_NE(err.find("of the 300 KiB --memory-limit allows"), std::string::npos) << err;
  const std::string run = " run -m " + fafo::test::shell_quote(model.string()) + " --temp 0 ";
  const auto bad = shell("timeout 60 " + fafo + run + "--memory-limit lots -p Hi 2>" +
                         fafo::test::shell_quote(err_path));
  err = fafo::test::read_text(err_path);
  EXPECT_NE(bad.first, 0) << err;
  EXPECT_NE(err.find("'lots' is not a size"), std::string::npos) << err;
  const auto fits = shell("timeout 60 " + fafo + run + "--backend cpu --memory-limit 64M -n 4 -p Hi 2>" + fafo::test::shell_quote(err_path));
  EXPECT_EQ(fits.first, 0) << fafo::test::read_text(err_path);
}

TEST(CliChat, BadTemplatesAreClearErrors) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::string fafo = fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo").string());
  const std::string m = " chat -m " + fafo::test::shell_quote(model.string());
  {
    const auto [code, out] = shell("timeout 60 " + fafo + m + " --chat-template nosuch </dev/null 2>&1");
    EXPECT_EQ(code, 1) << out;
    EXPECT_NE(out.find("'nosuch'"), std::string::npos) << out;
    EXPECT_NE(out.find("chatml"), std::string::npos) << out;
  }
  const auto dir = fafo::test::temp_dir("chat-bad-template");
  {
    const auto file = dir / "include.jinja";
    std::ofstream(file) << "{{ bos_token }}\n{% include 'header.jinja' %}";
    const auto [code, out] = shell("timeout 60 " + fafo + m + " --chat-template " + fafo::test::shell_quote(file.string()) + " </dev/null 2>&1");
    EXPECT_EQ(code, 1) << out;
    EXPECT_NE(out.find("line 2"), std::string::npos) << out;
    EXPECT_NE(out.find("include"), std::string::npos) << out;
  }
  {
    // Gemma's own template refuses a system message: say so before the chat starts.
    FAFO_REQUIRE_SHARED(gemma, "templates/google-gemma-2-2b-it.jinja");
    const auto [code, out] = shell("timeout 60 " + fafo + m + " --chat-template " + fafo::test::shell_quote(gemma.string()) +
                                   " --system 'Be brief.' </dev/null 2>&1");
    EXPECT_EQ(code, 1) << out;
    EXPECT_NE(out.find("System role not supported"), std::string::npos) << out;
  }
}

}  // namespace

TEST(CliChatStrategies, MultiTokenStrategiesGiveTheSameReplies) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::string base = "printf 'Hello there\\nTell me a story\\n/exit\\n' | " +
                           fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo")) + " chat -m " +
                           fafo::test::shell_quote(model) + " --temp 0 -n 40";
  const auto ar = fafo::test::run_command(base);
  ASSERT_EQ(ar.exit_code, 0) << ar.err;
  ASSERT_GT(ar.out.size(), 20u);
  for (const char* s : {"lookahead", "fafo"}) {
    const auto r = fafo::test::run_command(base + " --strategy " + s);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, ar.out) << s;
  }
}
