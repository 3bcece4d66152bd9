// fafo-studio's command line and how it starts: options parsed, rejected and reaching
// their fields, --help describing the shared flags as `fafo chat` does, and what a bare
// start, a picked strategy or a replayed trace opens and runs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "fafo/step_trace_json.h"
#include "studio_test_traces.h"
#include "test_support.h"
#include "app_options.h"
#include "settings.h"
#include "trace_io.h"

using namespace fafo;
using namespace fafo::studio;
using fafo::test::plain_step;

// The Debugger runs fafo until the user picks a strategy; the chat keeps auto; a picked
// strategy (even auto) is what both run.
TEST(StudioViews, TheDebuggerRunsFafoUntilAStrategyIsPicked) {
  const StudioSettings plain = settings_from_options(parse_app_options({"-m", "m"}));
  EXPECT_EQ(plain.generation.decoding.strategy, Strategy::Auto);
  EXPECT_EQ(debugger_generation(plain).decoding.strategy, Strategy::Fafo);
  EXPECT_EQ(debugger_generation(settings_from_options(parse_app_options({"-m", "m", "--strategy", "lookahead"})))
                .decoding.strategy,
            Strategy::Lookahead);
  EXPECT_EQ(debugger_generation(settings_from_options(parse_app_options({"-m", "m", "--strategy", "auto"})))
                .decoding.strategy,
            Strategy::Auto);
  // The shipped model opens when no -m is given; a replay's model is main's choice
  // (replay_model: the trace's, else the default).
  EXPECT_EQ(parse_app_options({}, "shipped.gguf").open.path, "shipped.gguf");
  EXPECT_EQ(parse_app_options({"-m", "mine.gguf"}, "shipped.gguf").open.path, "mine.gguf");
  EXPECT_TRUE(parse_app_options({"--replay", "t.jsonl"}, "shipped.gguf").open.path.empty());
}

TEST(StudioViews, OptionsParseAndReject) {
  const auto o = parse_app_options({"--model", "m.gguf", "--prompt", "p", "--steps", "12", "--strategy", "lookahead",
                                    "--screenshot", "x.png", "--backend", "cpu", "--kv-policy", "quest", "--temp", "0.5"});
  EXPECT_EQ(o.open.path, "m.gguf");
  EXPECT_EQ(o.steps, 12);
  EXPECT_EQ(o.decoding.strategy, Strategy::Lookahead);
  EXPECT_EQ(o.screenshot, "x.png");
  EXPECT_EQ(o.view, View::Debugger);  // a raw prompt opens the debugger
  EXPECT_EQ(o.open.backend.name, "cpu");
  EXPECT_EQ(o.kv.name, "quest");
  EXPECT_FLOAT_EQ(o.sampling.temperature, 0.5f);
  // No arguments: the chat view, no model yet.
  const auto empty = parse_app_options({});
  EXPECT_EQ(empty.view, View::Chat);
  EXPECT_EQ(empty.decoding.strategy, Strategy::Auto);
  const auto chat = parse_app_options({"-m", "m", "--chat", "hi", "--chat", "more", "--system", "s"});
  EXPECT_EQ(chat.chat, (std::vector<std::string>{"hi", "more"}));
  EXPECT_EQ(chat.view, View::Chat);
  EXPECT_EQ(parse_app_options({"--replay", "t.jsonl"}).view, View::Debugger);
  const auto steps = parse_app_options({"-m", "m", "--steps", "60"});  // the debugger on the default prompt
  EXPECT_EQ(steps.view, View::Debugger);
  EXPECT_EQ(steps.prompt, "Once upon a time");
  EXPECT_FALSE(steps.start_paused) << "--steps says how far to run";
  EXPECT_EQ(parse_app_options({"-m", "m"}).prompt, "Once upon a time");  // the first start: below
  EXPECT_EQ(parse_app_options({"--replay", "t.jsonl", "--view", "chat"}).view, View::Chat);
  EXPECT_THROW(parse_app_options({"--model", "m", "--bogus"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--model", "m", "--steps", "x"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--chat", "hi"}), std::invalid_argument);  // needs a model
  EXPECT_THROW(parse_app_options({"-m", "m", "--chat", "hi", "--prompt", "p"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--replay", "t", "--prompt", "p"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--view", "both"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--layout-json", "x.json"}), std::invalid_argument);  // needs --screenshot
  EXPECT_THROW(parse_app_options({"--kv-policy", "nosuch"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--temp", "warm"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--cache-type", "f8"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--steps", "-1"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"-c", "-5"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--width", "100"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--backend", "tpu"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--threads", "many"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"--strategy", "medusa"}), std::invalid_argument);
  EXPECT_THROW(parse_app_options({"-m", "m", "--chat", "hi", "there"}), std::invalid_argument);  // one message per --chat
  EXPECT_THROW(parse_app_options({"--model"}), std::invalid_argument);                          // missing value
  EXPECT_EQ(settings_from_options(parse_app_options({"-m", "m", "--cache-type", "f16"})).open.kv_type, KvCacheType::F16);

  const StudioSettings st = settings_from_options(chat);
  EXPECT_EQ(st.open.path, "m");
  EXPECT_EQ(st.open.backend.name, "auto");
  EXPECT_EQ(st.open.kv_type, KvCacheType::F32);
  EXPECT_EQ(chat_setup(st).system, "s");
  EXPECT_TRUE(settings_problem(st).empty());
  StudioSettings bad = st;
  bad.generation.decoding.ngram = 1;
  EXPECT_NE(settings_problem(bad).find("--ngram"), std::string::npos);
  bad = st;
  bad.generation.n_predict = 0;
  EXPECT_FALSE(settings_problem(bad).empty());
}

TEST(StudioViews, OptionsReachTheirFields) {
  const auto o = parse_app_options({"-m", "m.gguf", "--backend", "cpu", "--device", "1", "-t", "3", "-c", "128",
                                    "--cache-type", "f16", "--chat-template", "llama3", "--system", "s", "-n", "-1",
                                    "--seed", "5", "--top-k", "7", "--window", "6", "--sinks", "2", "--pool-from-prompt",
                                    "--chat", "a", "--chat", "b", "--width", "800", "--height", "600"});
  EXPECT_EQ(o.open.path, "m.gguf");
  EXPECT_EQ(o.open.backend.name, "cpu");
  EXPECT_EQ(o.open.backend.device, "1");
  EXPECT_EQ(o.open.backend.threads, 3);
  EXPECT_EQ(o.open.n_ctx, 128);
  EXPECT_EQ(o.open.kv_type, KvCacheType::F16);
  EXPECT_EQ(o.open.chat_template, "llama3");
  EXPECT_EQ(o.system, "s");
  EXPECT_EQ(o.n_predict, -1);
  EXPECT_EQ(o.sampling.seed, 5u);
  EXPECT_EQ(o.sampling.top_k, 7);
  EXPECT_EQ(o.decoding.window, 6);
  EXPECT_EQ(o.kv.sinks, 2);
  EXPECT_TRUE(o.decoding.pool_from_prompt);
  EXPECT_EQ(o.chat, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(o.width, 800);
  EXPECT_EQ(o.height, 600);
  // The studio's own defaults: greedy, a fixed seed, FAFO, 256 tokens per reply.
  const auto d = parse_app_options({});
  EXPECT_EQ(d.sampling.temperature, 0.0f);
  EXPECT_EQ(d.sampling.seed, 0xFAF0u);
  EXPECT_EQ(d.n_predict, 256);
  EXPECT_EQ(d.open.backend.name, "auto");
  EXPECT_EQ(d.open.kv_type, KvCacheType::F32);
  EXPECT_TRUE(parse_app_options({"--help"}).help);
  EXPECT_TRUE(parse_app_options({"-m", "m", "-h"}).help);
}

namespace {

// Each option of a CLI11 --help text, keyed by its long name, without its default
// ("=VALUE"), REQUIRED and the column layout.
std::map<std::string, std::string> help_entries(const std::string& help) {
  std::map<std::string, std::string> out;
  std::istringstream in(help);
  std::string current;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("  -", 0) == 0) {
      std::smatch m;
      const std::string names = line.substr(0, line.find(' ', 2));
      if (std::regex_search(names, m, std::regex("--([a-z-]+)"))) current = m[1];
    } else if (line.rfind("    ", 0) != 0) {
      current.clear();
    }
    if (!current.empty()) out[current] += " " + line;
  }
  for (auto& [name, text] : out) {
    text = std::regex_replace(text, std::regex("=\\S+"), "");
    text = std::regex_replace(text, std::regex(" REQUIRED"), "");
    text = std::regex_replace(text, std::regex("\\s+"), " ");
  }
  return out;
}

}  // namespace

TEST(StudioViews, HelpDescribesTheSharedFlagsAsFafoChatDoes) {
  const test::CommandResult chat = test::run_fafo("chat --help");
  if (chat.exit_code != 0) GTEST_SKIP() << "the fafo program is not built";
  const auto cli = help_entries(chat.out);
  const auto studio = help_entries(app_usage());
  for (const char* flag : {"model", "backend", "device", "threads", "cache-type", "ctx-size", "system", "chat-template",
                           "n-predict", "temp", "top-k", "top-p", "min-p", "strategy", "window", "ngram", "guesses",
                           "lookback", "pool-from-prompt", "kv-policy", "kv-budget", "sinks", "recent",
                           "update-interval"}) {
    ASSERT_TRUE(cli.count(flag)) << "fafo chat --help lacks --" << flag;
    ASSERT_TRUE(studio.count(flag)) << "fafo-studio --help lacks --" << flag;
    EXPECT_EQ(studio.at(flag), cli.at(flag)) << "--" << flag;
  }
  // Only the studio's defaults differ: a fixed seed, FAFO, greedy.
  EXPECT_NE(app_usage().find("--seed UINT=64240"), std::string::npos) << app_usage();
  EXPECT_NE(app_usage().find("fafo-studio --replay TRACE.jsonl"), std::string::npos);
  EXPECT_NE(app_usage().find("--screenshot"), std::string::npos);
  EXPECT_EQ(app_usage().find("--debug-empty-panel"), std::string::npos) << "a test-only flag";
}

// What a new user meets: `fafo-studio` with no flags opens the default model in the
// Debugger on a fafo run of "Once upon a time", held after its first step for Step or
// Resume. Only a view, prompt, trace, chat, bench or --browse of the user's own changes that.
TEST(StudioViews, ABareStartIsTheDebuggerPausedOnAFafoRun) {
  const auto bare = parse_app_options({}, "shipped.gguf");
  EXPECT_EQ(bare.view, View::Debugger);
  EXPECT_EQ(bare.open.path, "shipped.gguf");
  EXPECT_EQ(bare.prompt, "Once upon a time");
  EXPECT_TRUE(bare.start_paused);
  EXPECT_EQ(debugger_generation(settings_from_options(bare)).decoding.strategy, Strategy::Fafo);
  // -m alone, or --view debugger: the same start.
  for (const std::vector<std::string>& args : {std::vector<std::string>{"-m", "mine.gguf"},
                                               std::vector<std::string>{"--view", "debugger"},
                                               std::vector<std::string>{"--backend", "cpu", "--kv-policy", "quest"}}) {
    const auto o = parse_app_options(args, "shipped.gguf");
    EXPECT_EQ(o.view, View::Debugger) << args[0];
    EXPECT_EQ(o.prompt, "Once upon a time") << args[0];
    EXPECT_TRUE(o.start_paused) << args[0];
  }
  // A strategy picked is what the run uses.
  EXPECT_EQ(debugger_generation(settings_from_options(parse_app_options({"--strategy", "ar"}, "shipped.gguf")))
                .decoding.strategy,
            Strategy::Ar);
  // --steps K runs K steps without waiting; --prompt runs without waiting.
  const auto steps = parse_app_options({"--steps", "60"}, "shipped.gguf");
  EXPECT_EQ(steps.view, View::Debugger);
  EXPECT_EQ(steps.prompt, "Once upon a time");
  EXPECT_FALSE(steps.start_paused);
  const auto prompt = parse_app_options({"--prompt", "A cat"}, "shipped.gguf");
  EXPECT_EQ(prompt.prompt, "A cat");
  EXPECT_FALSE(prompt.start_paused);
  // The other views start without a run.
  for (const char* view : {"chat", "bench"}) {
    const auto o = parse_app_options({"--view", view}, "shipped.gguf");
    EXPECT_EQ(view_name(o.view), std::string(view));
    EXPECT_TRUE(o.prompt.empty()) << view;
    EXPECT_FALSE(o.start_paused) << view;
  }
  const auto chat = parse_app_options({"--chat", "hi"}, "shipped.gguf");
  EXPECT_EQ(chat.view, View::Chat);
  EXPECT_TRUE(chat.prompt.empty());
  const auto browse = parse_app_options({"--browse", "/models"}, "shipped.gguf");  // the Model panel's dialog
  EXPECT_EQ(browse.view, View::Chat);
  EXPECT_TRUE(browse.prompt.empty());
  const auto bench = parse_app_options({"-m", "m", "--bench", "cpu"}, "shipped.gguf");
  EXPECT_EQ(bench.view, View::Bench);
  EXPECT_TRUE(bench.prompt.empty());
  const auto replay = parse_app_options({"--replay", "t.jsonl"}, "shipped.gguf");
  EXPECT_EQ(replay.view, View::Debugger);
  EXPECT_TRUE(replay.prompt.empty());
  EXPECT_FALSE(replay.start_paused);
  // No model to open anywhere: the chat view, whose Model panel opens one.
  const auto none = parse_app_options({});
  EXPECT_EQ(none.view, View::Chat);
  EXPECT_TRUE(none.prompt.empty());
  // What a screenshot says it was taken with: the command line without its own outputs.
  EXPECT_EQ(parse_app_options({"--steps", "3", "--screenshot", "x.png", "--layout-json", "x.json", "--width", "800"}).args,
            (std::vector<std::string>{"--steps", "3", "--width", "800"}));
}

// `fafo-studio --replay TRACE` without -m opens the model the trace names (a "model"
// field, as given or beside the trace), else the default one, and says which and why.
TEST(StudioViews, ReplayOpensTheTracesModelElseTheDefault) {
  const auto dir = test::temp_dir("studio-replay-model");
  std::filesystem::create_directories(dir / "traces");
  std::ofstream(dir / "traces" / "beside.gguf") << "x";
  std::ofstream(dir / "mine.gguf") << "x";
  const std::string step = step_trace_to_json(plain_step(0, 7, 5)).dump();
  const auto write_trace = [&](const std::string& name, const std::string& model_field) {
    nlohmann::json first = nlohmann::json::parse(step);
    if (!model_field.empty()) first["model"] = model_field;
    std::ofstream out(dir / "traces" / name);
    out << first.dump() << "\n" << step << "\n";
    return (dir / "traces" / name).string();
  };

  // `fafo run --trace` names no model: the default one.
  const std::string plain = write_trace("plain.jsonl", "");
  const TraceFile plain_file = load_trace_file(plain);
  EXPECT_EQ(plain_file.steps.size(), 2u);
  EXPECT_EQ(plain_file.model, "");
  ReplayModel m = replay_model(plain, plain_file.model, "shipped.gguf");
  EXPECT_EQ(m.path, "shipped.gguf");
  EXPECT_EQ(m.why, "the default: the trace names no model; -m picks another");

  // A model named by an absolute path, or by one relative to the trace's folder.
  const std::string named = write_trace("named.jsonl", (dir / "mine.gguf").string());
  EXPECT_EQ(load_trace_file(named).model, (dir / "mine.gguf").string());
  m = replay_model(named, load_trace_file(named).model, "shipped.gguf");
  EXPECT_EQ(m.path, (dir / "mine.gguf").string());
  EXPECT_EQ(m.why, "named by the trace");
  const std::string beside = write_trace("beside.jsonl", "beside.gguf");
  m = replay_model(beside, load_trace_file(beside).model, "shipped.gguf");
  EXPECT_EQ(std::filesystem::path(m.path), dir / "traces" / "beside.gguf");

  // A model that is not there: the default one, saying so.
  const std::string gone = write_trace("gone.jsonl", "/nonexistent/big.gguf");
  m = replay_model(gone, load_trace_file(gone).model, "shipped.gguf");
  EXPECT_EQ(m.path, "shipped.gguf");
  EXPECT_EQ(m.why, "the default: the trace's model /nonexistent/big.gguf is not there; -m picks another");
  // And no default either: no model, token ids only.
  m = replay_model(gone, "/nonexistent/big.gguf", "");
  EXPECT_EQ(m.path, "");
  EXPECT_NE(m.why.find("token ids only"), std::string::npos) << m.why;
}
