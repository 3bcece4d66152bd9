#include "bench_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>

#include "fafo/auto_strategy.h"
#include "fafo/backend_registry.h"
#include "fafo/corpus_index.h"
#include "fafo/generator.h"
#include "plural.h"
#include "training_context.h"

namespace fafo::bench {

namespace {

Measure measure(const std::vector<double>& xs) {
  Measure s;
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

// printf into the observer's print (nothing when it has none).
class Printer {
 public:
  explicit Printer(const BenchObserver& o) : o_(o) {}
  __attribute__((format(printf, 2, 3))) void operator()(const char* format, ...) const {
    if (!o_.print) return;
    va_list args;
    va_start(args, format);
    va_list copy;
    va_copy(copy, args);
    const int n = std::vsnprintf(nullptr, 0, format, copy);
    va_end(copy);
    std::string s(static_cast<size_t>(std::max(0, n)) + 1, '\0');
    std::vsnprintf(s.data(), s.size(), format, args);
    va_end(args);
    s.resize(static_cast<size_t>(std::max(0, n)));
    o_.print(s);
  }
  void check_cancel() const {
    if (o_.cancelled && o_.cancelled()) throw BenchCancelled();
  }
  // For generate(): stops generating as soon as the run is cancelled (check_cancel
  // after it then throws), so a long tg or prompt does not hold a Cancel up.
  TokenCallback until_cancelled() const {
    if (!o_.cancelled) return {};
    return [this](int32_t) { return !o_.cancelled(); };
  }

 private:
  const BenchObserver& o_;
};

// One device's --profile table of steps of T tokens: printed, and as JSON.
nlohmann::json profile_table(const KernelProfile& p, int32_t T, const std::string& where, double host_seconds, int n,
                             const Printer& out) {
  const double steps = static_cast<double>(std::max<uint64_t>(1, p.steps));
  out("\nprofile of a %d-token step (%s, %llu steps, device time per step):\n", T, where.c_str(),
      static_cast<unsigned long long>(p.steps));
  out("| kernel | calls / step | us / step | GB/s | share |\n|---|---:|---:|---:|---:|\n");
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
    out("| %s | %.1f | %.1f | %s | %.1f%% |\n", k.name.c_str(), static_cast<double>(k.calls) / steps, us, gb, 100 * share);
    kernels.push_back({{"kernel", k.name}, {"calls_per_step", static_cast<double>(k.calls) / steps}, {"us_per_step", us},
                       {"gb_per_s", gbps}, {"share", share}});
  }
  const double device_us = p.step_seconds / steps * 1e6, host_us = host_seconds / n * 1e6;
  out("per step: %.0f dispatches, %.0f barriers, %.1f us on the device, %.1f us measured on the host\n",
      static_cast<double>(p.dispatches) / steps, static_cast<double>(p.barriers) / steps, device_us, host_us);
  return {{"T", T},
          {"steps", p.steps},
          {"kernels", kernels},
          {"dispatches_per_step", static_cast<double>(p.dispatches) / steps},
          {"barriers_per_step", static_cast<double>(p.barriers) / steps},
          {"device_us_per_step", device_us},
          {"host_us_per_step", host_us}};
}

// Per-kernel device time of steps of T tokens after the model's current context
// (--profile): a table and its JSON per device (a layer split's each get a "device").
std::vector<nlohmann::json> profile_steps(Sequence& model, int32_t T, int repetitions,
                                          const std::function<std::vector<int32_t>(int32_t)>& tokens, const Printer& out) {
  const ModelWeights& w = model.runner()->weights();
  std::vector<BackendProfiler*> profilers(static_cast<size_t>(w.n_devices()), nullptr);
  std::vector<nlohmann::json> results;
  for (int32_t d = 0; d < w.n_devices(); ++d) {
    Backend& backend = w.backend(d);
    BackendProfiler* profiler = backend.profiler();
    const std::string why =
        profiler != nullptr ? profiler->start_profile() : "backend " + backend.name() + " has no per-kernel device timer";
    if (why.empty()) {
      profilers[static_cast<size_t>(d)] = profiler;
      continue;
    }
    out("\nprofile%s: not available (%s)\n", w.n_devices() > 1 ? (" on " + w.device_label(d)).c_str() : "", why.c_str());
    results.push_back({{"T", T}, {"unavailable", why}});
    if (w.n_devices() > 1) results.back()["device"] = w.device_label(d);
  }
  if (std::all_of(profilers.begin(), profilers.end(), [](BackendProfiler* p) { return p == nullptr; })) return results;
  double host_seconds = 0;
  const int n = std::max(3, repetitions);
  for (int r = 0; r < n; ++r) {
    StepBatch b = StepBatch::causal(tokens(T), model.n_past(), /*logits_for_all=*/true);
    const auto t0 = std::chrono::steady_clock::now();
    model.forward_argmax(b);
    host_seconds += seconds_since(t0);
  }
  for (int32_t d = 0; d < w.n_devices(); ++d) {
    BackendProfiler* profiler = profilers[static_cast<size_t>(d)];
    if (!profiler) continue;
    const std::string where = w.n_devices() == 1 ? w.backend(d).name() + " backend"
                                                 : w.device_label(d) + ", layers " + std::to_string(w.first_layer(d)) +
                                                       "-" + std::to_string(w.first_layer(d) + w.layer_count(d) - 1) +
                                                       " of the split";
    results.push_back(profile_table(profiler->take_profile(), T, where, host_seconds, n, out));
    if (w.n_devices() > 1) results.back()["device"] = w.device_label(d);
  }
  return results;
}

// Every strategy of config over the same prompts, greedy; rows in config's order.
std::vector<StrategyRow> run_strategies(Sequence& model, const Tokenizer& tokenizer, AutoState& auto_state,
                                        const BenchConfig& config, const DecodingResources& resources,
                                        const Printer& out) {
  out("\n%s, %s each (greedy):\n", app::count_of(static_cast<int64_t>(config.prompts.size()), "prompt").c_str(),
      app::count_of(config.n_generate, "new token").c_str());
  out("| strategy | W | N | G | k | tokens | steps | tau | tokens/s | speedup vs ar | ids equal ar |\n");
  out("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  // Untimed steps of every size a strategy may take (every row wanting logits), so that
  // what a first step of a size sets up (a Vulkan device's tuning of new product shapes)
  // is not in any strategy's time.
  for (int32_t T = 1; T <= 64 && T < model.n_ctx() && T <= model.max_logit_rows(); T *= 2) {
    out.check_cancel();
    model.truncate(0);
    std::vector<int32_t> tokens(static_cast<size_t>(T), tokenizer.vocab().add_bos ? 1 : 0);
    StepBatch b = StepBatch::causal(tokens, 0, /*logits_for_all=*/true);
    model.forward_argmax(b);
  }
  model.truncate(0);
  std::vector<std::vector<int32_t>> reference;
  double ar_tps = 0;
  std::vector<StrategyRow> rows;
  for (const std::string& sname : config.strategies) {
    DecodingOptions d = config.decoding;
    d.strategy = parse_strategy(sname);
    StrategyRow row;
    row.strategy = sname;
    row.window = d.window;
    row.ngram = d.strategy == Strategy::Draft ? d.draft_n + 1 : d.ngram;
    row.guesses = d.guesses;
    row.lookback = d.lookback;
    row.step_tokens = d.strategy == Strategy::Auto ? 0 : max_step_tokens(d);
    double seconds = 0;
    for (size_t p = 0; p < config.prompts.size(); ++p) {
      out.check_cancel();
      GenerationOptions o;
      o.n_predict = config.n_generate;
      o.sampling.temperature = 0;
      o.stop_at_end_of_generation = false;
      o.decoding = d;
      o.resources = resources;
      o.kv = config.kv;
      o.auto_state = &auto_state;
      const auto ids = tokenizer.encode(config.prompts[p], tokenizer.vocab().add_bos);
      const auto res = generate(model, tokenizer, ids, o, out.until_cancelled());
      out.check_cancel();
      row.tokens += static_cast<int64_t>(res.ids.size()) - 1;  // the prefill's token is not a decoding step's
      row.steps += res.n_steps - 1;
      seconds += res.decode_seconds;
      if (d.strategy == Strategy::Ar) reference.push_back(res.ids);
      row.ids_equal_ar += p < reference.size() && reference[p] == res.ids;
    }
    row.prompts = static_cast<int32_t>(config.prompts.size());
    row.tokens_per_s = seconds > 0 ? static_cast<double>(row.tokens) / seconds : 0.0;
    if (d.strategy == Strategy::Ar) ar_tps = row.tokens_per_s;
    row.speedup = ar_tps > 0 ? row.tokens_per_s / ar_tps : 0.0;
    row.tau = row.steps ? static_cast<double>(row.tokens) / static_cast<double>(row.steps) : 0.0;
    // The parameters a strategy uses (auto picks its own; draft: N is the tokens drafted + 1).
    const bool window = d.strategy == Strategy::Jacobi || d.strategy == Strategy::Lookahead || d.strategy == Strategy::Fafo;
    const bool chains = window || d.strategy == Strategy::Corpus;
    const int32_t n = d.strategy == Strategy::Draft ? d.draft_n + 1 : d.ngram;
    char speedup[32] = "n/a";
    if (ar_tps > 0) std::snprintf(speedup, sizeof speedup, "%.3fx", row.speedup);
    out("| %s | %s | %s | %s | %s | %lld | %lld | %.3f | %.1f | %s | %d/%d |\n", sname.c_str(),
        window ? std::to_string(d.window).c_str() : "-",
        chains || d.strategy == Strategy::Draft ? std::to_string(n).c_str() : "-",
        chains ? std::to_string(d.guesses).c_str() : "-",
        d.strategy == Strategy::Fafo ? std::to_string(d.lookback).c_str() : "-", static_cast<long long>(row.tokens),
        static_cast<long long>(row.steps), row.tau, row.tokens_per_s, speedup, row.ids_equal_ar, row.prompts);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

std::string strategies_problem(const std::vector<std::string>& strategies, bool with_prompts) {
  if (!with_prompts || (!strategies.empty() && strategies.front() == "ar")) return "";
  return "the strategies must start with ar (the reference the others are compared with)";
}

DeviceResult run_target_bench(OpenOptions open, const BenchTarget& target, const BenchConfig& config,
                              const BenchObserver& observer) {
  // The target's backend, device and threads; the rest as given (--no-repack, --memory-limit).
  open.backend.name = target.spec.name;
  open.backend.device = target.spec.device;
  open.backend.threads = target.spec.threads;
  DeviceResult r;
  try {
    r = run_device_bench(open, config, observer);
  } catch (const BenchCancelled&) {
    throw;
  } catch (const std::exception& e) {
    r = DeviceResult{};
    r.backend = target.spec.name;
    r.threads = target.spec.threads;
    r.error = *e.what() ? e.what() : "unknown error";
  }
  r.label = target.label;
  r.device = target.device_name;
  return r;
}

DeviceResult run_device_bench(const OpenOptions& open, const BenchConfig& config_in, const BenchObserver& observer) {
  const Printer out(observer);
  if (const std::string problem = strategies_problem(config_in.strategies, !config_in.prompts.empty()); !problem.empty())
    throw std::runtime_error(problem);
  OpenedModel m = open_model(open);
  Sequence& model = *m.model;
  app::warn_if_past_training_context(model);
  const ModelConfig& c = model.config();
  BenchConfig config = config_in;
  // A column of strategy draft, or speckv's lookahead in a fafo or auto column (each
  // column sets its own strategy), needs the draft model.
  bool needs_draft = false;
  for (const std::string& name : config.strategies) {
    DecodingOptions column = config.decoding;
    column.strategy = parse_strategy(name);
    needs_draft |= column.strategy == Strategy::Draft || scoring_uses_draft_model(column, config.kv);
  }
  const DecodingResources resources =
      open_decoding_resources(config.decoding, open, model, m.tokenizer->vocab(), needs_draft);
  DeviceResult result;
  result.backend = model.backend().name();
  result.description = model.backend().description();
  if (const std::string placement = model.runner()->weights().placement(); !placement.empty())
    result.description += " (" + placement + ")";
  result.label = result.backend;
  result.device = result.description;  // a --devices run names the device instead
  result.threads = open.backend.threads;
  const std::string name = std::filesystem::path(open.path).filename().string();
  out("model: %s (%s, %d layers, dim %d, vocab %d), backend: %s (%s), context %d\n", name.c_str(), c.arch.c_str(),
      c.n_layer, c.n_embd, c.n_vocab, result.backend.c_str(), result.description.c_str(), model.n_ctx());
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any_token(3, c.n_vocab - 1);
  auto random_tokens = [&](int32_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = any_token(rng);
    return t;
  };

  result.kv_type = kv_cache_type_name(model.kv_type());
  result.kv_bytes_per_token = static_cast<double>(model.kv_bytes_per_token());
  result.kv_ring_bytes = static_cast<double>(model.kv_ring_bytes());
  out("KV cache: %s, %.1f KiB per token%s\n", result.kv_type.c_str(), result.kv_bytes_per_token / 1024.0,
      result.kv_ring_bytes > 0 ? (", and " + std::to_string(static_cast<int64_t>(result.kv_ring_bytes / 1024)) +
                                  " KiB for the sliding-window layers' rings")
                                     .c_str()
                               : "");
  const int32_t depth = config.depth;
  if ((config.pp > 0 || config.tg > 0) && depth + 2 > model.n_ctx())
    throw std::runtime_error("--depth " + std::to_string(depth) + " leaves no room in a context of " +
                             std::to_string(model.n_ctx()) + " tokens: use a larger --ctx-size");
  const int32_t pp = std::min(config.pp, model.n_ctx() - depth - 1);
  const int32_t tg = std::min(config.tg, model.n_ctx() - depth - 2);
  const std::string at_depth = depth > 0 ? " @ d" + std::to_string(depth) : "";
  // The context pp and tg start from: depth random tokens, prefilled once (unmeasured).
  bool depth_filled = false;
  const auto fill_context = [&] {
    if (depth == 0) return model.truncate(0);
    // (Again where a prompt step past the depth turned the window layers' rings over.)
    if (!depth_filled || model.reusable(depth) < depth) {
      model.truncate(0);
      prefill(model, random_tokens(depth), 512);
      depth_filled = true;
    }
    model.truncate(depth);
  };
  result.depth = depth;
  if (pp > 0 || tg > 0) out("\n| test | t/s | \n|---|---:|\n");
  if (config.warmup && (pp > 0 || tg > 0)) {  // unmeasured: a prompt step of pp tokens (1 when none) and one more
    out.check_cancel();
    model.truncate(0);
    prefill(model, random_tokens(std::max(pp, 1)), 512);
    if (model.n_past() < model.n_ctx()) {
      StepBatch one = StepBatch::causal({any_token(rng)}, model.n_past(), true);
      model.forward_argmax(one);
    }
    model.truncate(0);
    result.warmup = true;
  }
  // pp: prompt processing.
  if (pp > 0) {
    std::vector<double> tps;
    for (int r = 0; r < config.repetitions; ++r) {
      out.check_cancel();
      fill_context();
      const auto tokens = random_tokens(pp);
      const auto t0 = std::chrono::steady_clock::now();
      prefill(model, tokens, 512);
      tps.push_back(pp / seconds_since(t0));
    }
    result.pp_tokens = pp;
    result.pp = measure(tps);
    out("| pp%d%s | %.2f ± %.2f |\n", pp, at_depth.c_str(), result.pp.mean, result.pp.sd);
  }
  // tg: plain generation, one token per step.
  if (tg > 0) {
    std::vector<double> tps;
    for (int r = 0; r < config.repetitions; ++r) {
      out.check_cancel();
      GenerationOptions o;
      o.n_predict = tg + 1;  // the first token comes from the prefill step
      o.sampling.temperature = 0;
      o.stop_at_end_of_generation = false;
      o.keep_context = depth > 0;  // after the depth's tokens
      fill_context();
      const auto res = generate(model, *m.tokenizer, {any_token(rng)}, o, out.until_cancelled());
      out.check_cancel();
      tps.push_back(res.tokens_per_second());
    }
    result.tg_tokens = tg;
    result.tg = measure(tps);
    out("| tg%d%s | %.2f ± %.2f |\n", tg, at_depth.c_str(), result.tg.mean, result.tg.sd);
    // Memory-bandwidth efficiency: every weight matrix is read once per generated
    // token (the embedding table only for its one row, unless the output shares it; a
    // mixture of experts' tensors for the n_expert_used experts a token runs).
    double bytes = 0;
    for (const GgufTensor& t : m.file->tensors()) {
      if (t.name == "token_embd.weight" && !c.tied_embeddings) continue;
      const bool experts = c.moe() && t.name.find("_exps.") != std::string::npos;
      bytes += static_cast<double>(t.n_bytes) * (experts ? static_cast<double>(c.n_expert_used) / c.n_expert : 1.0);
    }
    result.weight_bytes_per_token = bytes;
    result.effective_gb_per_s = bytes * result.tg.mean / 1e9;
    out("\ntg: %.3f GB of weights read per token -> %.1f GB/s", bytes / 1e9, result.effective_gb_per_s);
    if (config.peak_gbps > 0)
      out(", %.1f%% of the %.0f GB/s peak", 100.0 * result.effective_gb_per_s / config.peak_gbps, config.peak_gbps);
    out("\n");
  }
  // t(T): cost of one step of T tokens after a 128-token context.
  const ModelWeights& weights = model.runner()->weights();
  for (int32_t d = 0; weights.n_devices() > 1 && d < weights.n_devices(); ++d)
    result.split_devices.push_back(weights.device_label(d));
  if (!config.curve.empty()) {
    std::string columns = "| T | ms / step | ms / token | t(T) / t(1) |", rule = "|---:|---:|---:|---:|";
    const bool moe = model.config().moe();  // the experts a step runs, per layer
    if (moe) {
      columns += " experts / layer |";
      rule += "---:|";
    }
    for (const std::string& label : result.split_devices) {  // a split: each device's part of the step
      columns += " ms on " + label + " |";
      rule += "---:|";
    }
    out("\nstep cost t(T) after a 128-token context:\n%s\n%s\n", columns.c_str(), rule.c_str());
    const int32_t context = std::min(128, model.n_ctx() / 2);
    model.truncate(0);
    prefill(model, random_tokens(context), 512);
    double t1 = 0;
    for (int32_t T : config.curve) {
      if (T <= 0) continue;
      if (T > 512 || context + T > model.n_ctx()) break;
      if (T > model.max_logit_rows()) {
        out("(T > %d: the device cannot hold logits for more rows of this vocabulary)\n", model.max_logit_rows());
        break;
      }
      {
        // Untimed, as the first step of a size sets up what later ones reuse (pipelines,
        // descriptor sets, a Vulkan device's tuning of the new product shapes).
        StepBatch warm = StepBatch::causal(random_tokens(T), model.n_past(), /*logits_for_all=*/true);
        model.forward_argmax(warm);
      }
      std::vector<double> ms, device_ms(result.split_devices.size(), 0.0);
      const int repetitions = std::max(3, config.repetitions);
      double experts = 0;
      for (int r = 0; r < repetitions; ++r) {
        out.check_cancel();
        // Every row wants logits, as in a lookahead/FAFO step; like greedy decoding, the
        // step reads back only each row's argmax.
        StepBatch b = StepBatch::causal(random_tokens(T), model.n_past(), /*logits_for_all=*/true);
        const auto t0 = std::chrono::steady_clock::now();
        model.forward_argmax(b);
        ms.push_back(seconds_since(t0) * 1e3);
        experts += static_cast<double>(model.runner()->experts_run()) / model.config().n_layer / repetitions;
        double before_last = 0;  // the last device's part: the step less the others'
        const std::vector<double>& parts = model.runner()->split_seconds();
        for (size_t d = 0; d < parts.size() && d + 1 < device_ms.size(); ++d) {
          device_ms[d] += parts[d] * 1e3 / repetitions;
          before_last += parts[d] * 1e3;
        }
        if (!device_ms.empty()) device_ms.back() += std::max(0.0, ms.back() - before_last) / repetitions;
      }
      const Measure s = measure(ms);
      if (T == config.curve.front()) t1 = s.mean;
      std::string parts;
      if (moe) {
        char cell[32];
        std::snprintf(cell, sizeof cell, " %.1f |", experts);
        parts += cell;
      }
      for (double d : device_ms) {
        char cell[32];
        std::snprintf(cell, sizeof cell, " %.3f |", d);
        parts += cell;
      }
      out("| %d | %.3f ± %.3f | %.4f | %.2f |%s\n", T, s.mean, s.sd, s.mean / T, t1 > 0 ? s.mean / t1 : 0.0, parts.c_str());
      result.step_cost.push_back({T, s, device_ms, moe ? experts : 0.0});
    }
  }
  if (config.profile) {
    const int32_t context = std::min(128, model.n_ctx() / 2);
    model.truncate(0);
    prefill(model, random_tokens(context), 512);
    const int32_t big = std::min({config.profile_tokens, model.max_logit_rows(), model.n_ctx() - context - 1, 512});
    result.profile = nlohmann::json::array();
    std::vector<int32_t> sizes = {1};
    if (big > 1) sizes.push_back(big);
    for (const int32_t T : sizes)
      for (nlohmann::json& table : profile_steps(model, T, config.repetitions, random_tokens, out))
        result.profile.push_back(std::move(table));
  }
  // Strategies side by side over the same prompts.
  if (!config.prompts.empty()) result.strategies = run_strategies(model, *m.tokenizer, *m.auto_state, config, resources, out);
  return result;
}

std::vector<BenchTarget> resolve_bench_targets(const std::string& devices, int threads) {
  std::vector<BenchTarget> targets;
  auto add = [&](const BackendInfo& info, const BackendDevice& d, bool named) {
    BenchTarget t;
    t.spec.name = info.name;
    t.spec.device = std::to_string(d.index);
    t.spec.threads = threads;
    t.device_name = d.name;
    // A backend with one device: its name alone says which.
    t.label = info.devices().size() == 1 ? info.name : info.name + ":" + std::to_string(d.index);
    for (const BenchTarget& other : targets)
      if (other.label == t.label) {
        if (named) throw std::runtime_error("--devices: " + t.label + " is named twice");
        return;
      }
    targets.push_back(std::move(t));
  };
  if (devices == "all") {
    for (const BackendInfo& info : backend_registry())
      for (const BackendDevice& d : info.devices()) add(info, d, false);
    if (targets.empty()) throw std::runtime_error("--devices all: this build finds no device");
    return targets;
  }
  size_t start = 0;
  while (start <= devices.size()) {
    const size_t comma = std::min(devices.find(',', start), devices.size());
    std::string item = devices.substr(start, comma - start);
    start = comma + 1;
    const size_t first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
    if (first == std::string::npos) continue;
    item = item.substr(first, last - first + 1);
    const size_t colon = item.find(':');
    const std::string backend = item.substr(0, colon);
    const std::string device = colon == std::string::npos ? "" : item.substr(colon + 1);
    const BackendInfo* info = find_backend(backend);
    if (info == nullptr) {
      std::string names;
      for (const BackendInfo& i : backend_registry()) names += (names.empty() ? "" : ", ") + i.name;
      throw std::runtime_error("--devices: no backend '" + backend + "' in this build (backends: " + names + ", or all)");
    }
    const std::vector<BackendDevice> found = info->devices();
    if (found.empty()) throw std::runtime_error("--devices: backend " + backend + " finds no device on this machine");
    if (device.empty()) {  // the device --backend alone would pick
      BenchTarget t;
      t.spec.name = info->name;
      t.spec.threads = threads;
      t.label = info->name;
      t.device_name = found.size() == 1 ? found.front().name : "the default device";
      for (const BenchTarget& other : targets)
        if (other.label == t.label) throw std::runtime_error("--devices: " + t.label + " is named twice");
      targets.push_back(std::move(t));
      continue;
    }
    // As --device: a number is an index, anything else part of a name.
    const bool number = device.find_first_not_of("0123456789") == std::string::npos;
    const BackendDevice* pick = nullptr;
    std::string lower = device;
    for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (const BackendDevice& d : found) {
      std::string n = d.name;
      for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (number ? std::to_string(d.index) == device : n.find(lower) != std::string::npos) {
        pick = &d;
        break;
      }
    }
    if (pick == nullptr) {
      std::string names;
      for (const BackendDevice& d : found) names += (names.empty() ? "" : ", ") + std::to_string(d.index) + " " + d.name;
      throw std::runtime_error("--devices: backend " + backend + " has no device '" + device + "' (devices: " + names + ")");
    }
    add(*info, *pick, true);
  }
  if (targets.empty()) throw std::runtime_error("--devices: empty list (give all, or BACKEND[:DEVICE],...)");
  return targets;
}

std::vector<std::string> read_bench_prompts(const std::string& path, int32_t limit) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read the prompts file");
  std::vector<std::string> out;
  int line_no = 0;
  for (std::string line; std::getline(in, line) && static_cast<int32_t>(out.size()) < limit;) {
    ++line_no;
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    auto text = [&](const nlohmann::json& v) {
      if (!v.is_string()) throw std::runtime_error(path + ":" + std::to_string(line_no) + ": the prompt is not a string");
      return v.get<std::string>();
    };
    if (j.is_discarded()) throw std::runtime_error(path + ":" + std::to_string(line_no) + ": not valid JSON");
    if (!j.is_object()) throw std::runtime_error(path + ":" + std::to_string(line_no) + ": not a JSON object");
    if (j.contains("turns")) {
      if (!j["turns"].is_array() || j["turns"].empty())
        throw std::runtime_error(path + ":" + std::to_string(line_no) + ": turns is not a non-empty array");
      out.push_back(text(j["turns"][0]));
    } else if (j.contains("question")) out.push_back(text(j["question"]));
    else if (j.contains("prompt")) out.push_back(text(j["prompt"]));
    else if (j.contains("text")) out.push_back(text(j["text"]));
    else throw std::runtime_error(path + ":" + std::to_string(line_no) + ": no turns/question/prompt/text field");
  }
  if (out.empty()) throw std::runtime_error(path + ": no prompts in the file");
  return out;
}

}  // namespace fafo::bench
