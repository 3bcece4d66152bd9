// The `fafo` command line as a user runs it: streaming and --json output on
// stories260K, `info`, and clear errors with a non-zero exit for bad input.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace {

using Outcome = fafo::test::CommandResult;
using fafo::test::run_fafo;


}  // namespace

TEST(Cli, GreedyStreamFromBosEqualsGoldenText) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  FAFO_REQUIRE_SHARED(golden, "golden/stories260K.greedy_256steps.golden.txt");
  const Outcome o = run_fafo("run -m " + fafo::test::shell_quote(model) + " -n 256 --temp 0");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  std::ifstream in(golden);
  const std::string expected((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(o.out, expected);
  EXPECT_HAS(o.err, "backend cpu");
}

TEST(Cli, JsonOutputHasTheDocumentedFields) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const Outcome o = run_fafo("run -m " + fafo::test::shell_quote(model) + " -p 'Once upon a time' -n 12 --temp 0 --json --strategy ar");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["prompt_ids"], (std::vector<int>{1, 403, 407, 261, 378}));
  EXPECT_EQ(j["ids"], (std::vector<int>{432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338}));
  EXPECT_EQ(j["text"], ", there was a little girl named Lily. She");
  EXPECT_EQ(j["n_steps"], 12);
  EXPECT_DOUBLE_EQ(j["tau"].get<double>(), 1.0);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["strategy"], "ar");
}

// Speculative decoding from the command line: the target drafting for itself, and a
// drafter on another backend; plain decoding's text, and a clear error without a drafter.
TEST(Cli, DraftModelStrategy) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::string run = "run -m " + fafo::test::shell_quote(model) + " -p 'Once upon a time' -n 40 --temp 0 --json";
  const auto plain = nlohmann::json::parse(run_fafo(run + " --strategy ar").out);
  for (const std::string& extra :
       std::vector<std::string>{"--draft-model self --draft-n 5", "--draft-model " + fafo::test::shell_quote(model) + " --draft-backend reference"}) {
    const auto r = run_fafo(run + " --strategy draft " + extra);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["ids"], plain["ids"]) << extra;
    EXPECT_GT(j["tau"].get<double>(), 3.0) << extra;
    EXPECT_EQ(j["sources"][0]["source"], "draft");
  }
  const auto none = run_fafo(run + " --strategy draft");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_HAS(none.err, "--strategy draft needs a draft model");
  const auto missing = run_fafo(run + " --strategy draft --draft-model /nonexistent.gguf");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_HAS(missing.err, "cannot open /nonexistent.gguf: No such file or directory");
}

// auto is the default strategy; its step-cost curve is measured once and kept in the
// cache folder, where the next run finds it (and a damaged file is measured again).
TEST(Cli, AutoIsTheDefaultAndKeepsItsStepCosts) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("cli-auto-cache");
  const std::string command = "FAFO_CACHE_DIR=" + fafo::test::shell_quote(dir) + " " + fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo")) +
                              " run -m " + fafo::test::shell_quote(model) + " -p 'Once upon a time' -n 12 --temp 0";
  const auto first = fafo::test::run_command(command + " --json");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto j = nlohmann::json::parse(first.out);
  EXPECT_EQ(j["strategy"], "auto");
  EXPECT_EQ(j["ids"], (std::vector<int>{432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338}));
  const std::string source = j["auto"]["step_costs"]["source"];
  EXPECT_EQ(j["auto"]["step_costs"]["spread"].size(), j["auto"]["step_costs"]["T"].size());
  EXPECT_TRUE(j["auto"]["step_costs"]["bounded"].is_number_integer());
  EXPECT_HAS(source, "measured, kept in " + dir.string());
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  // The next run reads it, and says so on stderr.
  const auto second = fafo::test::run_command(command);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_HAS(second.err, "fafo: auto: ");
  EXPECT_HAS(second.err, "(" + files[0].string() + ")");
  // A damaged file: measured again and rewritten.
  std::ofstream(files[0], std::ios::trunc) << "fafo step costs 1\nkey something else\n1 0.5\n";
  const auto third = fafo::test::run_command(command + " --json");
  ASSERT_EQ(third.exit_code, 0) << third.err;
  EXPECT_HAS(nlohmann::json::parse(third.out)["auto"]["step_costs"]["source"].get<std::string>(), "measured, kept in");
}

TEST(Cli, SamplingIsReproducibleWithASeedAndVariesAcrossSeeds) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::string base = "run -m " + fafo::test::shell_quote(model) + " -p 'The dog' -n 40 --temp 1.0 --top-k 0 --top-p 1 --min-p 0 --json";
  const auto a = nlohmann::json::parse(run_fafo(base + " --seed 1").out);
  const auto b = nlohmann::json::parse(run_fafo(base + " --seed 1").out);
  const auto c = nlohmann::json::parse(run_fafo(base + " --seed 2").out);
  EXPECT_EQ(a["ids"], b["ids"]);
  EXPECT_NE(a["ids"], c["ids"]);
}

TEST(Cli, PromptFromFile) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("cli-file");
  std::ofstream(dir / "p.txt") << "Once upon a time";
  const Outcome o = run_fafo("run -m " + fafo::test::shell_quote(model) + " -f " + fafo::test::shell_quote(dir / "p.txt") + " -n 3 --temp 0 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(nlohmann::json::parse(o.out)["ids"], (std::vector<int>{432, 383, 286}));
}

// `fafo tune` measures the Vulkan products of a model's steps (here one-token steps),
// keeps the choices in the cache folder, and `fafo devices` shows them; --keep measures
// nothing kept already; another backend has nothing to tune.
TEST(Cli, TuneKeepsTheVulkanChoicesAndDevicesShowsThem) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("cli-tune-cache");
  const std::string fafo = "FAFO_CACHE_DIR=" + fafo::test::shell_quote(dir) + " " +
                           fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo"));
  const std::string tune = fafo + " tune -m " + fafo::test::shell_quote(model) + " --sizes 1";
  const auto first = fafo::test::run_command(tune);
#if !FAFO_HAVE_VULKAN
  EXPECT_EQ(first.exit_code, 2);
  EXPECT_HAS(first.err, "this build has no Vulkan backend");
  return;
#endif
  if (first.exit_code != 0 && first.err.find("Vulkan") != std::string::npos &&
      first.err.find("device") != std::string::npos)
    GTEST_SKIP() << "no Vulkan device: " << first.err;
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_HAS(first.out, "rows per workgroup (default");
  EXPECT_HAS(first.out, "kept in " + dir.string());
  const auto devices = fafo::test::run_command(fafo + " devices");
  EXPECT_HAS(devices.out, "tuned products:");
  EXPECT_HAS(devices.out, "product shape");
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  const auto written = std::filesystem::last_write_time(files[0]);
  const auto again = fafo::test::run_command(tune + " --keep");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_HAS(again.out, "rows per workgroup (default");
  EXPECT_EQ(std::filesystem::last_write_time(files[0]), written);  // nothing left to measure, nothing rewritten
  const auto cpu = fafo::test::run_command(tune + " --backend cpu");
  EXPECT_EQ(cpu.exit_code, 2);
  EXPECT_HAS(cpu.err, "it tunes the Vulkan backend");
}

TEST(Cli, InfoShowsArchitectureTokenizerAndTensors) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const Outcome o = run_fafo("info -m " + fafo::test::shell_quote(model));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_HAS(o.out, "architecture:  llama");
  EXPECT_HAS(o.out, "layers:        5");
  EXPECT_HAS(o.out, "heads:         8 (KV heads 4, head size 8, GQA)");
  EXPECT_HAS(o.out, "tokens:        512");
  EXPECT_HAS(o.out, "blk.0.attn_q.weight");
  EXPECT_HAS(o.out, "[64, 64]");
  EXPECT_HAS(o.out, "parameters:");
  // 5 layers x (32 keys + 32 values) x 4 bytes a token; 2048 of them at the trained context.
  EXPECT_HAS(o.out, "KV cache:      1.25 KiB per token in f32 (640 B in f16, 340 B in q8_0, 180 B in q4_0)");
  EXPECT_HAS(o.out, "2.50 MiB in f32 (1.25 MiB in f16) for a context of 2048");
}

TEST(Cli, MissingModelFileIsAClearError) {
  const Outcome o = run_fafo("run -m /nonexistent/model.gguf -p hi");
  EXPECT_NE(o.exit_code, 0);
  EXPECT_HAS(o.err, "cannot open /nonexistent/model.gguf: No such file or directory");
}

TEST(Cli, NotAGgufFileIsAClearError) {
  const auto dir = fafo::test::temp_dir("cli-bad");
  std::ofstream(dir / "bad.gguf") << "this is not a model";
  const Outcome o = run_fafo("info -m " + fafo::test::shell_quote(dir / "bad.gguf"));
  EXPECT_NE(o.exit_code, 0);
  EXPECT_HAS(o.err, "bad magic");
}

TEST(Cli, BadFlagsAreRejected) {
  EXPECT_NE(run_fafo("run --no-such-flag").exit_code, 0);
  EXPECT_NE(run_fafo("run -m x.gguf --temp -1").exit_code, 0);
  EXPECT_NE(run_fafo("run -m x.gguf --backend tpu").exit_code, 0);
  EXPECT_NE(run_fafo("").exit_code, 0);
  const Outcome help = run_fafo("run --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_HAS(help.out, "--temp");
  EXPECT_HAS(help.out, "--json");
}

TEST(Cli, PromptLongerThanTheContextIsAClearError) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const Outcome o = run_fafo("run -m " + fafo::test::shell_quote(model) + " -c 8 -p 'Once upon a time there was a little girl named Lily'");
  EXPECT_NE(o.exit_code, 0);
  EXPECT_HAS(o.err, "but the context holds 8");
}

TEST(Cli, CacheTypeF16RunsAndSaysSo) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const Outcome o = run_fafo("run -m " + fafo::test::shell_quote(model) + " --backend cpu --cache-type f16 -p 'Once upon a time' -n 8 --temp 0");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_HAS(o.err, "(f16 KV cache)");
  EXPECT_HAS(o.out, "Once upon a time");
  const Outcome bad = run_fafo("run -m " + fafo::test::shell_quote(model) + " --cache-type q5_1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_HAS(bad.err, "--cache-type");
}

TEST(Cli, JsonTextKeepsTheSpaceBeforeTheFirstGeneratedWord) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const Outcome o = run_fafo("run -m " + fafo::test::shell_quote(model) + " -p 'Once upon a time,' -n 4 --temp 0 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const std::string text = nlohmann::json::parse(o.out)["text"];
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text[0], ' ') << text;
}

TEST(Cli, ParseErrorsAreOneClearLine) {
  const Outcome o = run_fafo("run -m x.gguf --bogus");
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_EQ(o.err.rfind("fafo: error: ", 0), 0u) << o.err;
  EXPECT_HAS(o.err, "--bogus");
  const Outcome p = run_fafo("run -m x.gguf --top-p 0");
  EXPECT_NE(p.exit_code, 0);
  EXPECT_HAS(p.err, "top-p");
  EXPECT_EQ(p.err.find("cannot open"), std::string::npos) << "options must be checked before the model is opened";
}

TEST(Cli, StrategiesGiveTheSameIdsAndATraceFile) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("cli-strategy");
  const std::string base = "run -m " + fafo::test::shell_quote(model) + " -p 'Once upon a time' -n 60 --temp 0 --json";
  const auto ar = nlohmann::json::parse(run_fafo(base).out);
  for (const char* s : {"jacobi", "lookahead", "fafo"}) {
    const auto trace = dir / (std::string(s) + ".jsonl");
    const Outcome o = run_fafo(base + " --strategy " + s + " --trace " + fafo::test::shell_quote(trace));
    ASSERT_EQ(o.exit_code, 0) << o.err;
    const auto j = nlohmann::json::parse(o.out);
    EXPECT_EQ(j["ids"], ar["ids"]) << s;
    EXPECT_EQ(j["strategy"], s);
    EXPECT_GE(j["tau"].get<double>(), 1.0);
    EXPECT_TRUE(j.contains("accepted_histogram"));
    EXPECT_TRUE(j["pool"].contains("hit_rate"));
    std::ifstream in(trace);
    int lines = 0;
    std::vector<int> joined;
    for (std::string line; std::getline(in, line); ++lines) {
      const auto step = nlohmann::json::parse(line);
      for (int t : step["accepted"]) joined.push_back(t);
      // The first line names the model, absolute, for `fafo-studio --replay`; the others do not.
      if (lines == 0) {
        ASSERT_TRUE(step.contains("model")) << line;
        EXPECT_EQ(std::filesystem::path(step["model"].get<std::string>()), std::filesystem::absolute(model).lexically_normal());
      } else {
        EXPECT_FALSE(step.contains("model"));
      }
    }
    EXPECT_EQ(lines, j["n_steps"].get<int>()) << s;
    EXPECT_EQ(nlohmann::json(joined), j["ids"]) << s;
  }
  EXPECT_NE(run_fafo(base + " --strategy medusa").exit_code, 0);
  EXPECT_NE(run_fafo(base + " --strategy fafo --ngram 1").exit_code, 0);
}

TEST(Cli, BenchProfileSaysWhereABackendHasNoDeviceTimer) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const Outcome o = run_fafo("bench -m " + fafo::test::shell_quote(model) +
                             " --backend cpu -r 1 --pp 0 --tg 0 --curve '' --profile --profile-tokens 4 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_HAS(o.out, "profile: not available (backend cpu has no per-kernel device timer)");
  const auto j = nlohmann::json::parse(o.out.substr(o.out.find("\n{") + 1));
  ASSERT_EQ(j["profile"].size(), 2u);
  EXPECT_EQ(j["profile"][0]["T"], 1);
  EXPECT_EQ(j["profile"][1]["T"], 4);
  EXPECT_TRUE(j["profile"][1].contains("unavailable"));
  EXPECT_NE(run_fafo("bench -m " + fafo::test::shell_quote(model) + " --profile --profile-tokens 1").exit_code, 0);
}

TEST(Cli, BenchProfileOnVulkanTimesEachKernel) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const Outcome o = run_fafo("bench -m " + fafo::test::shell_quote(model) +
                             " --backend vulkan -r 1 --pp 0 --tg 0 --curve '' --profile --profile-tokens 4 --json");
  if (o.exit_code != 0 && (o.err.find("Vulkan") != std::string::npos || o.err.find("vulkan") != std::string::npos))
    GTEST_SKIP() << "no Vulkan backend here: " << o.err;
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_HAS(o.out, "| kernel | calls / step | us / step | GB/s | share |");
  EXPECT_HAS(o.out, "dispatches");
  const auto j = nlohmann::json::parse(o.out.substr(o.out.find("\n{") + 1));
  ASSERT_EQ(j["profile"].size(), 2u);
  for (const auto& p : j["profile"]) {
    ASSERT_FALSE(p.contains("unavailable")) << p.dump();
    EXPECT_GT(p["dispatches_per_step"].get<double>(), 0.0);
    EXPECT_GT(p["device_us_per_step"].get<double>(), 0.0);
    double share = 0;
    for (const auto& k : p["kernels"]) share += k["share"].get<double>();
    EXPECT_NEAR(share, 1.0, 1e-6);
  }
}

TEST(Cli, BenchComparesStrategiesSideBySide) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("cli-bench");
  std::ofstream(dir / "p.jsonl") << "{\"prompt\": \"Once upon a time\"}\n{\"question\": \"The little dog\"}\n";
  const Outcome o = run_fafo("bench -m " + fafo::test::shell_quote(model) + " -r 1 --pp 16 --tg 16 --curve 1,4 --prompts " +
                             fafo::test::shell_quote(dir / "p.jsonl") + " -n 40 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_HAS(o.out, "| pp16 |");
  EXPECT_HAS(o.out, "| tg16 |");
  const auto j = nlohmann::json::parse(o.out.substr(o.out.find("\n{") + 1));
  EXPECT_EQ(j["warmup"], true);  // an unmeasured prompt step and token first, as llama-bench
  ASSERT_EQ(j["step_cost"].size(), 2u);
  ASSERT_EQ(j["strategies"].size(), 5u);  // ar, auto, jacobi, lookahead, fafo
  for (const auto& row : j["strategies"]) {
    EXPECT_EQ(row["ids_equal_ar"], 2) << row["strategy"];
    EXPECT_EQ(row["tokens"], 2 * 39) << row["strategy"];
    EXPECT_GE(row["tau"].get<double>(), 1.0);
  }
  EXPECT_DOUBLE_EQ(j["strategies"][0]["tau"].get<double>(), 1.0);
  EXPECT_EQ(j["strategies"][1]["strategy"], "auto");
  EXPECT_GT(j["strategies"][3]["tau"].get<double>(), 1.0);  // lookahead accepted guesses
  // The most tokens a step holds (what the GPU run's projections take t(T) at): auto's vary.
  EXPECT_EQ(j["strategies"][0]["step_tokens"], 1);
  EXPECT_EQ(j["strategies"][1]["step_tokens"], 0);
  for (size_t i = 2; i < 5; ++i) EXPECT_GT(j["strategies"][i]["step_tokens"].get<int>(), 8) << j["strategies"][i]["strategy"];
  // A draft column opens the draft model.
  const Outcome d = run_fafo("bench -m " + fafo::test::shell_quote(model) + " --pp 0 --tg 0 --curve '' --prompts " + fafo::test::shell_quote(dir / "p.jsonl") +
                             " -n 40 --strategies ar,draft --draft-model self --json");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  const auto dj = nlohmann::json::parse(d.out.substr(d.out.find("\n{") + 1));
  ASSERT_EQ(dj["strategies"].size(), 2u);
  EXPECT_EQ(dj["strategies"][1]["ids_equal_ar"], 2);
  EXPECT_GT(dj["strategies"][1]["tau"].get<double>(), 4.0);
  EXPECT_EQ(dj["strategies"][1]["step_tokens"], dj["strategies"][1]["ngram"]);  // the input and the drafted tokens
  EXPECT_EQ(dj["warmup"], false);  // nothing to warm up for: no pp or tg
  const Outcome cold = run_fafo("bench -m " + fafo::test::shell_quote(model) + " -r 1 --pp 8 --tg 4 --curve '' --no-warmup --json");
  ASSERT_EQ(cold.exit_code, 0) << cold.err;
  EXPECT_EQ(nlohmann::json::parse(cold.out.substr(cold.out.find("\n{") + 1))["warmup"], false);
}

// --depth measures pp and tg after that many tokens (llama-bench's -d), growing the
// context to hold them; the report names the KV cache and its bytes per token; a depth
// the context cannot hold is an error naming --ctx-size.
TEST(Cli, BenchAtADepthAfterTheContextsTokens) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::string bench = "bench -m " + fafo::test::shell_quote(model) + " -r 1 --curve '' ";
  const Outcome o = run_fafo(bench + "--pp 8 --tg 4 --depth 600 --cache-type q8_0 --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_HAS(o.out, "| tg4 @ d600 |");
  EXPECT_HAS(o.out, "KV cache: q8_0, 0.3 KiB per token");  // 5 layers x 2 x one 34-byte block
  const nlohmann::json j = nlohmann::json::parse(o.out.substr(o.out.find("\n{") + 1));
  EXPECT_EQ(j["depth"], 600);
  EXPECT_EQ(j["kv_cache"]["type"], "q8_0");
  EXPECT_EQ(j["kv_cache"]["bytes_per_token"], 5 * 2 * 34);
  EXPECT_GT(j["tg"]["tokens_per_s"].get<double>(), 0.0);
  const Outcome full = run_fafo(bench + "--pp 8 --tg 4 --depth 600 -c 512");
  EXPECT_EQ(full.exit_code, 1);
  EXPECT_HAS(full.err, "--depth 600 leaves no room in a context of 512 tokens: use a larger --ctx-size");
  const Outcome idle = run_fafo("bench -m " + fafo::test::shell_quote(model) + " -r 1 --pp 0 --tg 0 --depth 8 --curve 1");
  EXPECT_EQ(idle.exit_code, 1);
  EXPECT_HAS(idle.err, "--depth acts on pp and tg, and both are 0");
}

TEST(Cli, BenchDevicesPutsBackendsSideBySideAndWritesTheReport) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const auto dir = fafo::test::temp_dir("cli-bench-devices");
  const Outcome o = run_fafo("bench -m " + fafo::test::shell_quote(model) + " --devices cpu,reference -t 1 -r 1 --pp 16 --tg 8 --curve 1,4 "
                             "--report " + fafo::test::shell_quote(dir / "run") + " --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_HAS(o.out, "=== [1/2] cpu: ");
  EXPECT_HAS(o.out, "=== [2/2] reference: ");
  EXPECT_HAS(o.out, "| test | unit | cpu | reference |");
  EXPECT_HAS(o.out, "| t(4) / t(1) | ratio |");
  const auto j = nlohmann::json::parse(o.out.substr(o.out.find("\n{") + 1));
  ASSERT_EQ(j["devices"].size(), 2u);
  for (const auto& d : j["devices"]) {
    EXPECT_EQ(d["error"], "") << d["label"];
    EXPECT_EQ(d["step_cost"].size(), 2u) << d["label"];
    EXPECT_GT(d["tg"]["tokens_per_s"].get<double>(), 0.0) << d["label"];
  }
  for (const char* ext : {".md", ".csv", ".json", ".png"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / (std::string("run") + ext))) << ext;
    EXPECT_HAS(o.err, (dir / (std::string("run") + ext)).string());
  }
  EXPECT_NE(run_fafo("bench -m " + fafo::test::shell_quote(model) + " --devices cpu --backend reference --pp 0 --tg 0 --curve ''").exit_code, 0);
  // Something to measure (--pp 1): the unknown backend is then the only problem, whichever
  // of the command's checks runs first, and it stops the run before anything is measured.
  const Outcome bad = run_fafo("bench -m " + fafo::test::shell_quote(model) + " --devices cpu,nope --pp 1 --tg 0 --curve ''");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_HAS(bad.err, "no backend 'nope'");
}

// Without -m, the commands open the shipped model (assets/models/, copied beside the
// build's programs), even from a folder with no ../shared, and say which file it is;
// $FAFO_MODEL names another, and one that does not exist is a clear error.
TEST(Cli, RunWithoutAModelUsesTheShippedModel) {
  const auto dir = fafo::test::temp_dir("cli-default-model");
  const std::string fafo = fafo::test::shell_quote(fafo::test::binary_path("app/cli/fafo"));
  const Outcome o = fafo::test::run_command("cd " + fafo::test::shell_quote(dir) + " && env -u FAFO_MODEL FAFO_SHARED_DIR=/nonexistent " + fafo +
                                            " run -p 'Once upon a time' -n 12 --temp 0 --strategy ar");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "Once upon a time, there was a little girl named Lily. She\n");
  EXPECT_HAS(o.err, "assets/models/stories260K.gguf (the default; -m picks another)");
  const Outcome missing = fafo::test::run_command("FAFO_MODEL=/nonexistent/m.gguf " + fafo + " run -p hi -n 2");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_HAS(missing.err, "cannot open /nonexistent/m.gguf: No such file or directory ($FAFO_MODEL)");
  // -m still wins, and says nothing about a default.
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const Outcome given = run_fafo("run -m " + fafo::test::shell_quote(model) + " -p hi -n 2 --temp 0");
  ASSERT_EQ(given.exit_code, 0) << given.err;
  EXPECT_EQ(given.err.find("the default"), std::string::npos) << given.err;
}

// The text to tokenize may be given positionally; `--curve` alone, empty or `none` skips
// the step-cost curve, and a bad step size is named.
TEST(Cli, TokenizeTakesTheTextPositionallyAndCurveCanBeEmpty) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const Outcome positional = run_fafo("tokenize -m " + fafo::test::shell_quote(model) + " 'Hello world'");
  const Outcome flag = run_fafo("tokenize -m " + fafo::test::shell_quote(model) + " --text 'Hello world'");
  ASSERT_EQ(positional.exit_code, 0) << positional.err;
  EXPECT_EQ(positional.out, flag.out);
  EXPECT_FALSE(positional.out.empty());
  const Outcome both = run_fafo("tokenize -m " + fafo::test::shell_quote(model) + " --text a b");
  EXPECT_EQ(both.exit_code, 1);
  EXPECT_HAS(both.err, "give the text once");
  for (const char* curve : {"--curve", "--curve none", "--curve ''"}) {
    const Outcome o = run_fafo("bench -m " + fafo::test::shell_quote(model) + " -r 1 --pp 4 --tg 4 --json " + curve);
    ASSERT_EQ(o.exit_code, 0) << curve << ": " << o.err;
    const auto j = nlohmann::json::parse(o.out.substr(o.out.rfind("\n{") + 1));
    EXPECT_TRUE(j["step_cost"].empty()) << curve;
  }
  const Outcome bad = run_fafo("bench -m " + fafo::test::shell_quote(model) + " --curve 1,x");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_HAS(bad.err, "'x' is not a step size");
}

// `fafo bench --strategies` alone runs the strategies side by side over the MT-Bench
// prompts that ship in assets/prompts/ (found beside the build's programs), and says so.
TEST(Cli, BenchStrategiesRunOverTheShippedPromptsWithoutPrompts) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const Outcome o = run_fafo("bench -m " + fafo::test::shell_quote(model) +
                             " --strategies ar,fafo -n 16 --n-prompts 2 --pp 0 --tg 0 --curve none --json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_HAS(o.err, "assets/prompts/mt_bench_20.jsonl (the shipped MT-Bench questions; --prompts picks others)");
  EXPECT_HAS(o.out, "2 prompts, 16 new tokens each (greedy):");
  EXPECT_EQ(o.out.find("| test | t/s |"), std::string::npos) << "no pp/tg table when neither runs: " << o.out;
  const auto j = nlohmann::json::parse(o.out.substr(o.out.find("\n{") + 1));
  ASSERT_EQ(j["strategies"].size(), 2u);
  EXPECT_EQ(j["strategies"][0]["strategy"], "ar");
  EXPECT_EQ(j["strategies"][1]["strategy"], "fafo");
  EXPECT_EQ(j["strategies"][1]["ids_equal_ar"], 2);
  // The shipped file holds MT-Bench's first 20 questions.
  std::ifstream in(fafo::test::source_path("assets/prompts/mt_bench_20.jsonl"));
  int lines = 0;
  for (std::string line; std::getline(in, line); ++lines) EXPECT_EQ(nlohmann::json::parse(line)["turns"].size(), 1u);
  EXPECT_EQ(lines, 20);
}

// A bench flag that cannot act on what runs is an error naming it, and so is a run that
// would measure nothing; --pp 0 --tg 0 with the curve prints no empty pp/tg table.
TEST(Cli, BenchFlagsThatCannotActAreErrors) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::string bench = "bench -m " + fafo::test::shell_quote(model) + " -r 1 ";
  const Outcome nothing = run_fafo(bench + "--pp 0 --tg 0 --curve none");
  EXPECT_EQ(nothing.exit_code, 1);
  EXPECT_HAS(nothing.err, "fafo: error: nothing to measure: --pp 0 --tg 0 with no curve leaves no test; ask for --pp N, "
                          "--tg N, --curve 1,2,4,8, --profile or --strategies ar,fafo");
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"--curve none -n 16", "-n acts only on the strategies side by side: give --strategies"},
      {"--curve none --n-prompts 2", "--n-prompts acts only on the strategies side by side"},
      {"--curve none --window 4", "--window acts only on the strategies side by side"},
      {"--curve none --rows 8", "--rows acts only with --attention"},
      {"--curve none --profile-tokens 4", "--profile-tokens acts only with --profile"},
      {"--curve none --tg 0 --peak-gbps 100", "--peak-gbps rates tg's bandwidth: it needs --tg N above 0"},
      {"--attention --strategies ar,fafo", "--strategies does not act on --attention"},
  };
  for (const auto& [flags, message] : refused) {
    const Outcome o = run_fafo(bench + flags);
    EXPECT_EQ(o.exit_code, 1) << flags;
    EXPECT_HAS(o.err, message);
  }
  const Outcome curve_only = run_fafo(bench + "--pp 0 --tg 0 --curve 1,2");
  ASSERT_EQ(curve_only.exit_code, 0) << curve_only.err;
  EXPECT_HAS(curve_only.out, "step cost t(T)");
  EXPECT_EQ(curve_only.out.find("| test | t/s |"), std::string::npos) << curve_only.out;
}

// A file that cannot be opened reads the same whichever flag or command names it.
TEST(Cli, MissingFilesAreOneWording) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::string m = fafo::test::shell_quote(model);
  const std::string gone = "/nonexistent/fafo-test-file";
  const std::vector<std::string> commands = {
      "run -m " + gone + " -p hi",
      "run -m " + m + " -f " + gone,
      "run -m " + m + " -p hi --strategy corpus --corpus " + gone,
      "run -m " + m + " -p hi --strategy draft --draft-model " + gone,
      "run -m " + m + " -p hi -n 1 --trace " + gone,
      "chat -m " + m + " --chat-template " + gone,
      "bench -m " + m + " --prompts " + gone,
      "bench -m " + gone,
      "serve -m " + gone,
      "perplexity -m " + m + " -f " + gone,
      "perplexity -m " + m + " -f " + m + " --kl-base " + gone,
      "info -m " + gone,
      "tokenize -m " + m + " -f " + gone,
      "tokenize -m " + m + " --vectors " + gone,
      "tokenize -m " + gone + " hi",
      "quantize " + gone + " /nonexistent/out.gguf Q8_0",
      "index build -m " + m + " --corpus " + gone + " -o /nonexistent/out.fidx",
      "index info " + gone,
  };
  for (const std::string& c : commands) {
    const Outcome o = run_fafo(c + " </dev/null");
    EXPECT_EQ(o.exit_code, 1) << c;
    EXPECT_EQ(o.err, "fafo: error: cannot open " + gone + ": No such file or directory\n") << c;
  }
  const Outcome folder = run_fafo("run -m " + m + " -f /tmp");
  EXPECT_EQ(folder.err, "fafo: error: cannot open /tmp: Is a directory\n");
}

// -c past the context the model was trained on (stories260K: 2048) runs, with one warning.
TEST(Cli, AContextPastTheTrainedOneWarnsOnce) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const std::string run = "run -m " + fafo::test::shell_quote(model) + " --backend cpu -p 'Once upon a time' -n 4 --temp 0";
  const Outcome past = run_fafo(run + " -c 4096");
  ASSERT_EQ(past.exit_code, 0) << past.err;
  const std::string warning = "fafo: warning: the context (-c 4096) is longer than the 2048 tokens this model was trained "
                              "on (n_ctx_train); its output may degrade past that\n";
  EXPECT_HAS(past.err, warning);
  EXPECT_EQ(past.err.find(warning), past.err.rfind(warning)) << "once: " << past.err;
  const Outcome within = run_fafo(run + " -c 2048");
  ASSERT_EQ(within.exit_code, 0) << within.err;
  EXPECT_EQ(within.err.find("n_ctx_train"), std::string::npos) << within.err;
}

// Counts read as words: one thread, one token, one step.
TEST(Cli, CountsOfOneAreSingular) {
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const Outcome o = run_fafo("run -m " + fafo::test::shell_quote(model) + " --backend cpu -t 1 -n 1 --temp 0 --strategy ar");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_HAS(o.err, ", 1 thread)");
  EXPECT_HAS(o.err, "prompt 1 token\n");
  EXPECT_HAS(o.err, "fafo: 1 token in ");
  EXPECT_HAS(o.err, ", 1 step (");
  EXPECT_EQ(o.err.find("1 threads"), std::string::npos) << o.err;
  const Outcome two = run_fafo("run -m " + fafo::test::shell_quote(model) + " --backend cpu -t 2 -n 2 --temp 0 --strategy ar");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_HAS(two.err, ", 2 threads)");
  EXPECT_HAS(two.err, "fafo: 2 tokens in ");
}

// `fafo devices --help` lists no option it would refuse, and --backend cuda on a machine
// without an NVIDIA GPU or driver says that, with the driver's own words after it.
TEST(Cli, DevicesHelpAndCudaWithoutAGpuTellTheTruth) {
  const Outcome help = run_fafo("devices --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out.find("--backend NAME --device N"), std::string::npos) << help.out;
  EXPECT_HAS(help.out, "it takes no options");
  FAFO_REQUIRE_SHARED(model, "models/stories260K.gguf");
  const Outcome cuda = run_fafo("run -m " + fafo::test::shell_quote(model) + " --backend cuda -p hi -n 1");
  if (cuda.exit_code == 0) GTEST_SKIP() << "this machine has a CUDA GPU";
  if (cuda.exit_code == 2) GTEST_SKIP() << "this build has no CUDA backend: " << cuda.err;
  EXPECT_HAS(cuda.err, "fafo: error: no CUDA GPU or driver was found (");
}
