// `fafo bench`: speed measured side by side in one run, llama-bench style.
//   - pp512 / tg128: prompt processing and plain generation, tokens/s, mean ± sd
//   - the step-cost curve t(T): one forward pass of T tokens after a 128-token context
//   - with --profile: per-kernel device time of a one-token step and a T-token step
//     (backends with a device timer: Vulkan's timestamp queries)
//   - with --prompts: every strategy over the same prompts, tau (tokens per step),
//     tokens/s and the speedup over plain decoding in this run, and a check that every
//     strategy emitted exactly the plain-decoding ids
#include <chrono>
#include <cmath>
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "fafo/decoding.h"
#include "fafo/generator.h"
#include "attention_bench.h"
#include "fafo/open_model.h"
#include "generation_flags.h"
#include "model_flags.h"

namespace fafo::cli {

namespace {

struct BenchArgs {
  OpenOptions open;
  int repetitions = 3;
  int32_t pp = 512;
  int32_t tg = 128;
  std::vector<int32_t> curve = {1, 2, 4, 8, 16, 32, 64, 128, 256};
  std::string prompts_file;
  int32_t n_prompts = 20;
  int32_t n_generate = 256;
  std::vector<std::string> strategies = {"ar", "jacobi", "lookahead", "fafo"};
  DecodingOptions decoding;
  KvPolicyOptions kv;
  bool json = false;
  double peak_gbps = 0;
  bool attention = false;
  bool profile = false;
  int32_t profile_tokens = 64;
  AttentionBenchOptions attention_options;
};

struct Stats {
  double mean = 0, sd = 0;
};
Stats stats(const std::vector<double>& xs) {
  Stats s;
  if (xs.empty()) return s;
  s.mean = std::accumulate(xs.begin(), xs.end(), 0.0) / static_cast<double>(xs.size());
  double v = 0;
  for (double x : xs) v += (x - s.mean) * (x - s.mean);
  s.sd = xs.size() > 1 ? std::sqrt(v / static_cast<double>(xs.size() - 1)) : 0.0;
  return s;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Per-kernel device time of steps of T tokens after the model's current context
// (--profile): a table and its JSON.
nlohmann::json profile_steps(Model& model, int32_t T, int repetitions, const std::function<std::vector<int32_t>(int32_t)>& tokens) {
  Backend& backend = model.backend();
  const std::string why = backend.start_profile();
  if (!why.empty()) {
    std::printf("\nprofile: not available (%s)\n", why.c_str());
    return {{"T", T}, {"unavailable", why}};
  }
  double host_seconds = 0;
  const int n = std::max(3, repetitions);
  for (int r = 0; r < n; ++r) {
    StepBatch b = StepBatch::causal(tokens(T), model.n_past(), /*logits_for_all=*/true);
    const auto t0 = std::chrono::steady_clock::now();
    model.forward_argmax(b);
    host_seconds += seconds_since(t0);
  }
  const KernelProfile p = backend.take_profile();
  const double steps = static_cast<double>(std::max<uint64_t>(1, p.steps));
  std::printf("\nprofile of a %d-token step (%s backend, %llu steps, device time per step):\n", T, backend.name().c_str(),
              static_cast<unsigned long long>(p.steps));
  std::printf("| kernel | calls / step | us / step | GB/s | share |\n|---|---:|---:|---:|---:|\n");
  std::vector<size_t> order(p.kernels.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p.kernels[a].seconds > p.kernels[b].seconds; });
  nlohmann::json kernels = nlohmann::json::array();
  for (size_t i : order) {
    const KernelProfile::Kernel& k = p.kernels[i];
    const double us = k.seconds / steps * 1e6;
    const double gbps = k.seconds > 0 && k.bytes > 0 ? k.bytes / k.seconds / 1e9 : 0.0;
    const double share = p.step_seconds > 0 ? k.seconds / p.step_seconds : 0.0;
    char gb[32] = "-";
    if (gbps > 0) std::snprintf(gb, sizeof gb, "%.1f", gbps);
    std::printf("| %s | %.1f | %.1f | %s | %.1f%% |\n", k.name.c_str(), static_cast<double>(k.calls) / steps, us, gb,
                100 * share);
    kernels.push_back({{"kernel", k.name}, {"calls_per_step", static_cast<double>(k.calls) / steps}, {"us_per_step", us},
                       {"gb_per_s", gbps}, {"share", share}});
  }
  const double device_us = p.step_seconds / steps * 1e6, host_us = host_seconds / n * 1e6;
  std::printf("per step: %.0f dispatches, %.0f barriers, %.1f us on the device, %.1f us measured on the host\n",
              static_cast<double>(p.dispatches) / steps, static_cast<double>(p.barriers) / steps, device_us, host_us);
  return {{"T", T},
          {"steps", p.steps},
          {"kernels", kernels},
          {"dispatches_per_step", static_cast<double>(p.dispatches) / steps},
          {"barriers_per_step", static_cast<double>(p.barriers) / steps},
          {"device_us_per_step", device_us},
          {"host_us_per_step", host_us}};
}

// Prompts from a JSONL file: MT-Bench ("turns"[0]), GSM8K ("question"), or "prompt"/"text".
std::vector<std::string> read_prompts(const std::string& path, int32_t limit) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read the prompts file");
  std::vector<std::string> out;
  int line_no = 0;
  for (std::string line; std::getline(in, line) && static_cast<int32_t>(out.size()) < limit;) {
    ++line_no;
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) throw std::runtime_error(path + ":" + std::to_string(line_no) + ": not valid JSON");
    if (j.contains("turns")) out.push_back(j["turns"][0].get<std::string>());
    else if (j.contains("question")) out.push_back(j["question"].get<std::string>());
    else if (j.contains("prompt")) out.push_back(j["prompt"].get<std::string>());
    else if (j.contains("text")) out.push_back(j["text"].get<std::string>());
    else throw std::runtime_error(path + ":" + std::to_string(line_no) + ": no turns/question/prompt/text field");
  }
  return out;
}

int run_bench(const BenchArgs& args) {
  if (args.attention) {
    const auto j = run_attention_bench(args.open.path, args.open.backend, args.attention_options);
    if (args.json) std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  OpenedModel m = open_model(args.open);
  Model& model = *m.model;
  const ModelConfig& c = model.config();
  const std::string name = std::filesystem::path(args.open.path).filename().string();
  std::printf("model: %s (%s, %d layers, dim %d, vocab %d), backend: %s (%s), context %d\n", name.c_str(), c.arch.c_str(),
              c.n_layer, c.n_embd, c.n_vocab, model.backend().name().c_str(), model.backend().description().c_str(),
              model.n_ctx());
  nlohmann::json report = {{"model", name}, {"backend", model.backend().name()}, {"device", model.backend().description()}};
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any_token(3, c.n_vocab - 1);
  auto random_tokens = [&](int32_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = any_token(rng);
    return t;
  };

  std::printf("\n| test | t/s | \n|---|---:|\n");
  // pp: prompt processing.
  const int32_t pp = std::min(args.pp, model.n_ctx() - 1);
  if (pp > 0) {
    std::vector<double> tps;
    for (int r = 0; r < args.repetitions; ++r) {
      model.truncate(0);
      const auto tokens = random_tokens(pp);
      const auto t0 = std::chrono::steady_clock::now();
      prefill(model, tokens, 512);
      tps.push_back(pp / seconds_since(t0));
    }
    const Stats s = stats(tps);
    std::printf("| pp%d | %.2f ± %.2f |\n", pp, s.mean, s.sd);
    report["pp"] = {{"tokens", pp}, {"tokens_per_s", s.mean}, {"sd", s.sd}};
  }
  // tg: plain generation, one token per step.
  const int32_t tg = std::min(args.tg, model.n_ctx() - 2);
  if (tg > 0) {
    std::vector<double> tps;
    for (int r = 0; r < args.repetitions; ++r) {
      GenerationOptions o;
      o.n_predict = tg + 1;  // the first token comes from the prefill step
      o.sampling.temperature = 0;
      o.stop_at_end_of_generation = false;
      const auto res = generate(model, *m.tokenizer, {any_token(rng)}, o);
      tps.push_back(res.tokens_per_second());
    }
    const Stats s = stats(tps);
    std::printf("| tg%d | %.2f ± %.2f |\n", tg, s.mean, s.sd);
    report["tg"] = {{"tokens", tg}, {"tokens_per_s", s.mean}, {"sd", s.sd}};
    // Memory-bandwidth efficiency: every weight matrix is read once per generated
    // token (the embedding table only for its one row, unless the output shares it).
    double bytes = 0;
    for (const GgufTensor& t : m.file->tensors())
      if (t.name != "token_embd.weight" || c.tied_embeddings) bytes += static_cast<double>(t.n_bytes);
    const double gbps = bytes * s.mean / 1e9;
    std::printf("\ntg: %.3f GB of weights read per token -> %.1f GB/s", bytes / 1e9, gbps);
    if (args.peak_gbps > 0) std::printf(", %.1f%% of the %.0f GB/s peak", 100.0 * gbps / args.peak_gbps, args.peak_gbps);
    std::printf("\n");
    report["tg"]["weight_bytes_per_token"] = bytes;
    report["tg"]["effective_gb_per_s"] = gbps;
    if (args.peak_gbps > 0) report["tg"]["bandwidth_efficiency"] = gbps / args.peak_gbps;
  }
  // t(T): cost of one step of T tokens after a 128-token context.
  if (!args.curve.empty()) {
    std::printf("\nstep cost t(T) after a 128-token context:\n| T | ms / step | ms / token | t(T) / t(1) |\n|---:|---:|---:|---:|\n");
    const int32_t context = std::min(128, model.n_ctx() / 2);
    model.truncate(0);
    prefill(model, random_tokens(context), 512);
    double t1 = 0;
    nlohmann::json curve = nlohmann::json::array();
    for (int32_t T : args.curve) {
      if (T <= 0) continue;
      if (T > 512 || context + T > model.n_ctx()) break;
      if (T > model.max_logit_rows()) {
        std::printf("(T > %d: the device cannot hold logits for more rows of this vocabulary)\n", model.max_logit_rows());
        break;
      }
      std::vector<double> ms;
      for (int r = 0; r < std::max(3, args.repetitions); ++r) {
        // Every row wants logits, as in a lookahead/FAFO step; like greedy decoding, the
        // step reads back only each row's argmax.
        StepBatch b = StepBatch::causal(random_tokens(T), model.n_past(), /*logits_for_all=*/true);
        const auto t0 = std::chrono::steady_clock::now();
        model.forward_argmax(b);
        ms.push_back(seconds_since(t0) * 1e3);
      }
      const Stats s = stats(ms);
      if (T == args.curve.front()) t1 = s.mean;
      std::printf("| %d | %.3f ± %.3f | %.4f | %.2f |\n", T, s.mean, s.sd, s.mean / T, t1 > 0 ? s.mean / t1 : 0.0);
      curve.push_back({{"T", T}, {"ms", s.mean}, {"sd", s.sd}});
    }
    report["step_cost"] = curve;
  }
  if (args.profile) {
    const int32_t context = std::min(128, model.n_ctx() / 2);
    model.truncate(0);
    prefill(model, random_tokens(context), 512);
    const int32_t big = std::min({args.profile_tokens, model.max_logit_rows(), model.n_ctx() - context - 1, 512});
    nlohmann::json profiles = nlohmann::json::array();
    profiles.push_back(profile_steps(model, 1, args.repetitions, random_tokens));
    if (big > 1) profiles.push_back(profile_steps(model, big, args.repetitions, random_tokens));
    report["profile"] = profiles;
  }
  // Strategies side by side over the same prompts.
  if (!args.prompts_file.empty()) {
    const auto prompts = read_prompts(args.prompts_file, args.n_prompts);
    std::printf("\n%zu prompts from %s, %d new tokens each (greedy):\n", prompts.size(), args.prompts_file.c_str(),
                args.n_generate);
    std::printf("| strategy | W | N | G | k | tokens | steps | tau | tokens/s | speedup vs ar | ids equal ar |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    std::vector<std::vector<int32_t>> reference;
    double ar_tps = 0;
    nlohmann::json rows = nlohmann::json::array();
    for (const std::string& sname : args.strategies) {
      DecodingOptions d = args.decoding;
      d.strategy = parse_strategy(sname);
      int64_t tokens = 0, steps = 0;
      double seconds = 0;
      int equal = 0;
      for (size_t p = 0; p < prompts.size(); ++p) {
        GenerationOptions o;
        o.n_predict = args.n_generate;
        o.sampling.temperature = 0;
        o.stop_at_end_of_generation = false;
        o.decoding = d;
        o.kv = args.kv;
        const auto ids = m.tokenizer->encode(prompts[p], m.tokenizer->vocab().add_bos);
        const auto res = generate(model, *m.tokenizer, ids, o);
        tokens += static_cast<int64_t>(res.ids.size()) - 1;  // the prefill's token is not a decoding step's
        steps += res.n_steps - 1;
        seconds += res.decode_seconds;
        if (d.strategy == Strategy::Ar) reference.push_back(res.ids);
        equal += p < reference.size() && reference[p] == res.ids;
      }
      const double tps = seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0;
      if (d.strategy == Strategy::Ar) ar_tps = tps;
      const double tau = steps ? static_cast<double>(tokens) / static_cast<double>(steps) : 0.0;
      const bool multi = d.strategy != Strategy::Ar;
      std::printf("| %s | %s | %s | %s | %s | %lld | %lld | %.3f | %.1f | %s | %d/%zu |\n", sname.c_str(),
                  multi ? std::to_string(d.window).c_str() : "-", multi ? std::to_string(d.ngram).c_str() : "-",
                  multi ? std::to_string(d.guesses).c_str() : "-",
                  d.strategy == Strategy::Fafo ? std::to_string(d.lookback).c_str() : "-", static_cast<long long>(tokens),
                  static_cast<long long>(steps), tau, tps, ar_tps > 0 ? (std::to_string(tps / ar_tps).substr(0, 5) + "x").c_str() : "n/a",
                  equal, prompts.size());
      rows.push_back({{"strategy", sname}, {"window", d.window}, {"ngram", d.ngram}, {"guesses", d.guesses},
                      {"lookback", d.lookback}, {"tokens", tokens}, {"steps", steps}, {"tau", tau}, {"tokens_per_s", tps},
                      {"speedup", ar_tps > 0 ? tps / ar_tps : 0.0}, {"ids_equal_ar", equal}, {"prompts", prompts.size()}});
    }
    report["strategies"] = rows;
  }
  if (args.json) std::printf("%s\n", report.dump(2).c_str());
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure speed: pp/tg rows, the step-cost curve t(T), strategies side by side");
  app::add_open_flags(cmd, args->open)->required();
  cmd->add_option("-r,--repetitions", args->repetitions, "Repetitions per measurement")->capture_default_str()->check(CLI::Range(1, 1000));
  cmd->add_option("--pp", args->pp, "Prompt-processing test length (0 = skip)")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--tg", args->tg, "Generation test length (0 = skip)")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--curve", args->curve, "Step sizes T for t(T) (empty list = skip)")->delimiter(',')->capture_default_str();
  cmd->add_option("--prompts", args->prompts_file, "JSONL prompts (MT-Bench question.jsonl, GSM8K test.jsonl, or {\"prompt\": ...})");
  cmd->add_option("--n-prompts", args->n_prompts, "Prompts to use from the file")->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("-n,--n-predict", args->n_generate, "New tokens per prompt")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--strategies", args->strategies, "Strategies to compare (ar first: it is the reference)")
      ->delimiter(',')->capture_default_str()->check(CLI::IsMember({"ar", "jacobi", "lookahead", "fafo"}));
  app::add_decoding_flags(cmd, args->decoding, args->kv);
  cmd->add_flag("--attention", args->attention,
                "Instead: attention cost of COMPRESSED rows vs context length, with and without the region, and swap cost");
  cmd->add_option("--contexts", args->attention_options.contexts, "--attention: context lengths")->delimiter(',')->capture_default_str();
  cmd->add_option("--rows", args->attention_options.rows, "--attention: COMPRESSED rows per step")->capture_default_str()
      ->check(CLI::Range(1, 512));
  cmd->add_option("--peak-gbps", args->peak_gbps,
                  "The device's memory bandwidth in GB/s: tg then reports its efficiency as a fraction of it")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_flag("--profile", args->profile,
                "Also time every kernel on the device (Vulkan timestamp queries) in a one-token step and a step of "
                "--profile-tokens tokens: calls, us, GB/s of weights read, share of the step; dispatches and barriers "
                "per step");
  cmd->add_option("--profile-tokens", args->profile_tokens, "--profile: tokens in the larger step")->capture_default_str()
      ->check(CLI::Range(2, 512));
  cmd->add_flag("--json", args->json, "Also print the results as JSON");
  return [args] {
    args->decoding.validate();
    args->kv.validate();
    args->attention_options.budget = args->kv.budget;
    args->attention_options.repetitions = args->repetitions;
    for (int32_t n : args->attention_options.contexts)
      if (n < 1 || n > (1 << 22)) throw std::runtime_error("--contexts must be in 1..4194304");
    if (!args->strategies.empty() && args->strategies.front() != "ar" && !args->prompts_file.empty())
      throw std::runtime_error("--strategies must start with ar (the reference the others are compared with)");
    return run_bench(*args);
  };
}

}  // namespace fafo::cli
