// `fafo bench`: speed measured side by side in one run, llama-bench style.
//   - pp512 / tg128: prompt processing and plain generation, tokens/s, mean ± sd
//   - the step-cost curve t(T): one forward pass of T tokens after a 128-token context
//   - with --profile: per-kernel device time of a one-token step and a T-token step
//     (backends with a device timer: Vulkan's timestamp queries)
//   - with --strategies or --prompts: every strategy over the same prompts (without
//     --prompts the shipped assets/prompts/mt_bench_20.jsonl), tau (tokens per step),
//     tokens/s and the speedup over plain decoding in this run, and a check that every
//     strategy emitted exactly the plain-decoding ids
//   - with --devices: the same on several backends and devices, then one comparison
//     table; --report writes it as Markdown, CSV, JSON and a PNG chart
// A flag that cannot act on what runs (-n without strategies, --rows without
// --attention, ...) is an error, and so is a run that would measure nothing.
// The measurements live in app/bench (shared with fafo-studio's Bench view).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention_bench.h"
#include "bench_report.h"
#include "bench_runner.h"
#include "commands.h"
#include "generation_flags.h"
#include "default_model.h"
#include "input_files.h"
#include "model_flags.h"

namespace fafo::cli {

namespace {

struct BenchArgs {
  OpenOptions open;
  bench::BenchConfig config;
  std::string prompts_file;
  int32_t n_prompts = 20;
  std::string devices;  // --devices: empty = the one --backend/--device
  std::vector<bench::BenchTarget> targets;  // --devices resolved
  std::string report;   // --report PREFIX
  bool json = false;
  bool attention = false;
  AttentionBenchOptions attention_options;
};

void print_stdout(const std::string& s) {
  std::fputs(s.c_str(), stdout);
  std::fflush(stdout);
}

// The device's JSON object, with the model's name (what --json prints for one device).
nlohmann::json single_device_json(const bench::BenchReport& report) {
  nlohmann::json j = bench::report_json(report)["devices"][0];
  j["model"] = report.model;
  return j;
}

int run_bench(BenchArgs& args) {
  if (args.attention) {
    const auto j = run_attention_bench(args.open.path, args.open.backend, args.attention_options);
    if (args.json) std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  if (!args.prompts_file.empty()) {
    app::require_readable_file(args.prompts_file);
    args.config.prompts = bench::read_bench_prompts(args.prompts_file, args.n_prompts);
  }
  bench::BenchReport report;
  report.model = std::filesystem::path(args.open.path).filename().string();
  const bench::BenchObserver observer{print_stdout, {}};
  if (args.devices.empty()) {
    report.devices.push_back(bench::run_device_bench(args.open, args.config, observer));
  } else {
    const std::vector<bench::BenchTarget>& targets = args.targets;
    for (size_t i = 0; i < targets.size(); ++i) {
      const bench::BenchTarget& t = targets[i];
      std::printf("\n=== [%zu/%zu] %s: %s ===\n", i + 1, targets.size(), t.label.c_str(), t.device_name.c_str());
      std::fflush(stdout);
      // One device failing (out of memory, a driver error) leaves the others' figures.
      bench::DeviceResult r = bench::run_target_bench(args.open, t, args.config, observer);
      if (!r.error.empty()) std::fprintf(stderr, "fafo bench: %s: %s\n", t.label.c_str(), r.error.c_str());
      report.devices.push_back(std::move(r));
    }
    std::printf("\n%s", bench::report_markdown(report).c_str());
  }
  if (args.json) {
    const nlohmann::json j = args.devices.empty() ? single_device_json(report) : bench::report_json(report);
    std::printf("%s\n", j.dump(2).c_str());
    std::fflush(stdout);
  }
  if (!args.report.empty())
    for (const std::string& path : bench::write_bench_report(report, args.report))
      std::fprintf(stderr, "fafo bench: wrote %s\n", path.c_str());
  for (const bench::DeviceResult& d : report.devices)
    if (d.error.empty()) return 0;
  return 1;  // no device could be measured
}

// The options a run used that cannot act on it, and a run with nothing to measure,
// as one error (empty: none). `given(name)` says whether an option was on the command
// line; `decoding` are the decoding flags' names (they act only on the strategies).
std::string bench_flags_problem(const BenchArgs& a, const std::function<bool(const std::string&)>& given,
                                const std::vector<std::string>& decoding, bool strategies) {
  if (a.attention) {
    for (const char* flag : {"--pp", "--tg", "--depth", "--curve", "--no-warmup", "--prompts", "--n-prompts", "-n", "--strategies",
                             "--profile", "--profile-tokens", "--peak-gbps"})
      if (given(flag))
        return std::string(flag) + " does not act on --attention, which measures only attention (--contexts, --rows, "
               "--kv-budget, -r)";
    for (const std::string& flag : decoding)
      if (flag != "--kv-budget" && given(flag))
        return flag + " does not act on --attention, which measures only attention (--contexts, --rows, --kv-budget, -r)";
    return "";
  }
  for (const char* flag : {"--contexts", "--rows"})
    if (given(flag)) return std::string(flag) + " acts only with --attention";
  if (given("--profile-tokens") && !a.config.profile) return "--profile-tokens acts only with --profile";
  if (given("--depth") && a.config.pp == 0 && a.config.tg == 0) return "--depth acts on pp and tg, and both are 0";
  if (!strategies) {
    for (const char* flag : {"-n", "--n-prompts"})
      if (given(flag))
        return std::string(flag) + " acts only on the strategies side by side: give --strategies (e.g. ar,fafo; the "
               "shipped MT-Bench prompts) or --prompts FILE; --tg N measures plain generation";
    for (const std::string& flag : decoding)
      if (given(flag))
        return flag + " acts only on the strategies side by side: give --strategies (e.g. ar,fafo) or --prompts FILE";
  }
  if (given("--peak-gbps") && a.config.tg == 0) return "--peak-gbps rates tg's bandwidth: it needs --tg N above 0";
  if (given("--no-warmup") && a.config.pp == 0 && a.config.tg == 0) return "--no-warmup acts on pp and tg, which are both 0";
  if (a.config.pp == 0 && a.config.tg == 0 && a.config.curve.empty() && !a.config.profile && !strategies)
    return "nothing to measure: --pp 0 --tg 0 with no curve leaves no test; ask for --pp N, --tg N, --curve 1,2,4,8, "
           "--profile or --strategies ar,fafo";
  return "";
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure speed: pp/tg rows, the step-cost curve t(T), strategies side by side");
  app::add_open_flags(cmd, args->open);
  cmd->add_option("-r,--repetitions", args->config.repetitions, "Repetitions per measurement")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("--pp", args->config.pp, "Prompt-processing test length (0 = skip)")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--tg", args->config.tg, "Generation test length (0 = skip)")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-d,--depth", args->config.depth,
                  "Tokens already in the KV cache when pp and tg are measured (llama-bench's -d: tg at a long "
                  "context); without --ctx-size the context grows to hold them")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 22));
  cmd->add_flag_function(
      "--no-warmup", [args](std::int64_t) { args->config.warmup = false; },
      "Measure pp and tg without first running one unmeasured prompt step and token (which reads the weights in)");
  cmd->add_option_function<std::string>(
         "--curve",
         [args](const std::string& text) {
           args->config.curve.clear();
           if (text == "none" || text.empty()) return;
           std::stringstream list(text);
           for (std::string item; std::getline(list, item, ',');) {
             try {
               size_t used = 0;
               const int value = std::stoi(item, &used);
               if (used != item.size() || value < 1 || value > 1024) throw std::invalid_argument(item);
               args->config.curve.push_back(value);
             } catch (const std::exception&) {
               throw CLI::ValidationError("--curve", "'" + item + "' is not a step size in 1..1024");
             }
           }
         },
         "Step sizes T for t(T), comma-separated (default 1,2,4,8,16,32,64,128,256); none, an empty value or "
         "--curve alone skips the curve")
      ->expected(0, 1);
  cmd->add_option("--prompts", args->prompts_file,
                  "JSONL prompts for the strategies side by side (MT-Bench question.jsonl, GSM8K test.jsonl, or "
                  "{\"prompt\": ...}); default with --strategies: the shipped assets/prompts/mt_bench_20.jsonl");
  cmd->add_option("--n-prompts", args->n_prompts, "Prompts to use from the file")->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("-n,--n-predict", args->config.n_generate, "New tokens per prompt")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--strategies", args->config.strategies,
                  "Strategies to compare side by side over the prompts (ar first: it is the reference); given alone, "
                  "over the shipped MT-Bench prompts")
      ->delimiter(',')->capture_default_str()->check(CLI::IsMember(app::strategy_choices()));
  const size_t before_decoding = cmd->get_options().size();
  app::add_decoding_flags(cmd, args->config.decoding, args->config.kv);
  std::vector<std::string> decoding_flags;
  for (size_t i = before_decoding; i < cmd->get_options().size(); ++i)
    decoding_flags.push_back(cmd->get_options()[i]->get_name());
  cmd->add_flag("--attention", args->attention,
                "Instead: attention cost of COMPRESSED rows vs context length, with and without the region, and swap cost");
  cmd->add_option("--contexts", args->attention_options.contexts, "--attention: context lengths")->delimiter(',')->capture_default_str();
  cmd->add_option("--rows", args->attention_options.rows, "--attention: COMPRESSED rows per step")->capture_default_str()
      ->check(CLI::Range(1, 512));
  cmd->add_option("--peak-gbps", args->config.peak_gbps,
                  "The device's memory bandwidth in GB/s: tg then reports its efficiency as a fraction of it")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_flag("--profile", args->config.profile,
                "Also time every kernel on the device (Vulkan timestamp queries) in a one-token step and a step of "
                "--profile-tokens tokens: calls, us, GB/s of weights read, share of the step; dispatches and barriers "
                "per step");
  cmd->add_option("--profile-tokens", args->config.profile_tokens, "--profile: tokens in the larger step")->capture_default_str()
      ->check(CLI::Range(2, 512));
  cmd->add_option("--devices", args->devices,
                  "Run the same tests on several backends and devices, then print one comparison table: all (every "
                  "device of every backend in `fafo devices`), or BACKEND[:DEVICE],... (e.g. cpu,vulkan:0,reference); "
                  "replaces --backend and --device");
  cmd->add_option("--report", args->report,
                  "Also write the results as PREFIX.md (comparison table), PREFIX.csv, PREFIX.json and PREFIX.png "
                  "(chart: t(T) per device, tokens/s per strategy or pp/tg per device)");
  cmd->add_flag("--json", args->json,
                "Also print the results as JSON (with --devices: {model, devices: [...]}, else the one device's object)");
  return [args, cmd, decoding_flags] {
    app::use_default_model_if_unset(args->open.path);
    // --depth: a context that holds the depth and the longer of pp and tg.
    if (args->config.depth > 0 && args->open.n_ctx == 0)
      args->open.n_ctx = std::max(args->config.depth + std::max(args->config.pp, args->config.tg + 2), 512);
    args->config.decoding.validate();
    args->config.kv.validate();
    args->attention_options.budget = args->config.kv.budget;
    args->attention_options.repetitions = args->config.repetitions;
    for (int32_t n : args->attention_options.contexts)
      if (n < 1 || n > (1 << 22)) throw std::runtime_error("--contexts must be in 1..4194304");
    if (args->attention && (!args->devices.empty() || !args->report.empty()))
      throw std::runtime_error("--attention measures one backend and prints its own table: it takes no --devices or --report");
    if (!args->report.empty()) {  // fail now, not after hours of measuring
      const std::filesystem::path parent = std::filesystem::path(args->report).parent_path();
      if (!parent.empty() && !std::filesystem::is_directory(parent))
        throw std::runtime_error("--report " + args->report + ": no folder " + parent.string());
    }
    if (!args->devices.empty() && (args->open.backend.name != "auto" || !args->open.backend.device.empty()))
      throw std::runtime_error("--devices replaces --backend and --device: give one or the other");
    if (!args->devices.empty() && !args->open.split.empty())
      throw std::runtime_error("--devices measures each device alone, --split one model over several: give one or the other");
    if (!args->devices.empty()) args->targets = bench::resolve_bench_targets(args->devices, args->open.backend.threads);
    auto given = [cmd](const std::string& name) { return cmd->count(name) > 0; };
    const bool strategies = given("--strategies") || given("--prompts");
    if (const std::string problem = bench_flags_problem(*args, given, decoding_flags, strategies); !problem.empty())
      throw std::runtime_error(problem);
    if (strategies && !args->attention) {
      app::require_decoding_files(args->config.decoding);
      if (args->prompts_file.empty()) {
        args->prompts_file = app::default_prompts_path();
        std::fprintf(stderr, "prompts: %s (the shipped MT-Bench questions; --prompts picks others)\n",
                     args->prompts_file.c_str());
      }
    }
    if (const std::string problem = bench::strategies_problem(args->config.strategies, strategies); !problem.empty())
      throw std::runtime_error("--strategies: " + problem);
    app::require_readable_file(args->open.path);
    return run_bench(*args);
  };
}

}  // namespace fafo::cli
