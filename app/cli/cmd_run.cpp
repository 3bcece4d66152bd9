// `fafo run`: generate text from a prompt, streaming it as it is produced, or
// print one JSON object at the end with --json.
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "fafo/decoding.h"
#include "fafo/generator.h"
#include "fafo/step_trace_json.h"
#include "fafo/sampler.h"
#include "fafo/utf8_stream.h"
#include "fafo/corpus_index.h"
#include "fafo/open_model.h"
#include "fafo/read_file.h"
#include "generation_flags.h"
#include "default_model.h"
#include "input_files.h"
#include "model_flags.h"
#include "plural.h"
#include "training_context.h"

namespace fafo::cli {

namespace {

struct RunArgs {
  OpenOptions open;
  std::string prompt;
  std::string prompt_file;
  int32_t n_predict = 128;
  SamplerOptions sampling{0.8f, 40, 0.95f, 0.05f, 0};
  std::shared_ptr<bool> seed_given = std::make_shared<bool>(false);
  bool json = false;
  bool no_bos = false;
  bool ignore_eos = false;
  DecodingOptions decoding = [] {  // --strategy: auto by default
    DecodingOptions d;
    d.strategy = Strategy::Auto;
    return d;
  }();
  KvPolicyOptions kv;
  bool kv_drop = false;
  PromptCompressOptions prompt_compress;
  std::string trace_path;
};

int run_generate(RunArgs& args) {
  if (!args.prompt.empty() && !args.prompt_file.empty())
    throw std::runtime_error("give the prompt with -p or -f, not both");
  if (!*args.seed_given) args.sampling.seed = std::random_device{}();
  Sampler check_options(args.sampling);  // reject bad options before loading anything
  args.decoding.validate();
  args.kv.validate();
  args.prompt_compress.validate();
  // Then the files, in one wording whichever flag names them.
  app::require_readable_file(args.open.path);
  if (!args.prompt_file.empty()) app::require_readable_file(args.prompt_file);
  app::require_decoding_files(args.decoding);
  const std::string prompt = args.prompt_file.empty() ? args.prompt : read_whole_file(args.prompt_file, "the prompt file");
  std::ofstream trace_file;
  if (!args.trace_path.empty()) {
    trace_file.open(args.trace_path, std::ios::trunc);
    if (!trace_file) throw std::runtime_error(app::cannot_open_message(args.trace_path, errno));
  }

  OpenedModel m = open_model(args.open);
  app::warn_if_past_training_context(*m.model);
  const Tokenizer& tok = *m.tokenizer;
  GenerationOptions options;
  options.n_predict = args.n_predict;
  options.sampling = args.sampling;
  options.stop_at_end_of_generation = !args.ignore_eos;
  options.kv = args.kv;
  options.kv_drop = args.kv_drop;
  options.prompt_compress = args.prompt_compress;
  options.decoding = args.decoding;
  options.auto_state = m.auto_state.get();
  options.resources = open_decoding_resources(options.decoding, args.open, *m.model, tok.vocab(),
                                              scoring_uses_draft_model(options));
  const bool add_bos = !args.no_bos && tok.vocab().add_bos;
  const std::vector<int32_t> prompt_ids = tok.encode(prompt, add_bos);
  if (prompt_ids.empty()) throw std::runtime_error("the prompt is empty and the model adds no BOS token; give a prompt");

  if (!args.json) {
    if (!m.placement_note.empty()) std::fprintf(stderr, "fafo: %s\n", m.placement_note.c_str());
    const std::string placement = m.model->runner()->weights().placement();
    std::fprintf(stderr, "fafo: %s%s, %s, backend %s (%s)%s, context %d (%s%s KV cache), prompt %s\n",
                 m.model->config().arch.c_str(), m.model->config().mla() ? " MLA" : "", args.open.path.c_str(),
                 m.model->backend().name().c_str(), m.model->backend().description().c_str(),
                 placement.empty() ? "" : (", " + placement).c_str(), m.model->n_ctx(),
                 m.model->config().mla() ? "latent " : "", kv_cache_type_name(args.open.kv_type),
                 app::count_of(static_cast<int64_t>(prompt_ids.size()), "token").c_str());
    // The prompt is echoed once what comes before its prefill is done: auto's step-cost
    // measurement may draw a progress line on the terminal, which would overwrite it.
    options.on_prefill = [&prompt] {
      std::fputs(prompt.c_str(), stdout);
      std::fflush(stdout);
    };
  }

  // The first line also names the model (absolute), so that `fafo-studio --replay` opens it.
  const std::string trace_model = std::filesystem::absolute(args.open.path).lexically_normal().string();
  bool trace_named_model = false;
  if (trace_file.is_open())
    options.on_step = [&](const StepTrace& t) {
      nlohmann::json j = step_trace_to_json(t);
      if (!trace_named_model) j["model"] = trace_model;
      trace_named_model = true;
      trace_file << j.dump() << '\n';
    };
  Utf8Stream stream;
  bool first = true;
  auto on_token = [&](int32_t id) {
    if (args.json) return true;
    std::string piece = tok.token_to_piece(id);
    // With an empty prompt, drop the space SentencePiece puts before the first word.
    if (first && prompt.empty() && !piece.empty() && piece[0] == ' ') piece.erase(0, 1);
    first = false;
    std::fputs(stream.push(piece).c_str(), stdout);
    std::fflush(stdout);
    return true;
  };
  const GenerationResult r = generate(*m.model, tok, prompt_ids, options, on_token);
  // What ran: auto under --kv-drop is plain decoding.
  const Strategy ran = args.kv_drop && args.decoding.strategy == Strategy::Auto ? Strategy::Ar : args.decoding.strategy;

  if (args.json) {
    nlohmann::json j;
    j["prompt_ids"] = r.prompt_ids;
    j["ids"] = r.ids;
    // The generated text as it reads after the prompt: decode prompt + output and cut
    // the prompt off, so a leading space of the first generated word is kept.
    std::vector<int32_t> all = r.prompt_ids;
    all.insert(all.end(), r.ids.begin(), r.ids.end());
    const std::string prompt_text = tok.decode(r.prompt_ids), full_text = tok.decode(all);
    j["text"] = full_text.compare(0, prompt_text.size(), prompt_text) == 0 ? full_text.substr(prompt_text.size()) : tok.decode(r.ids);
    j["n_steps"] = r.n_steps;
    j["tau"] = r.tokens_per_step();
    j["tokens_per_s"] = r.tokens_per_second();
    j["prefill_s"] = r.prefill_seconds;
    j["decode_s"] = r.decode_seconds;
    j["stop"] = stop_reason_name(r.stop);
    j["backend"] = m.model->backend().name();
    j["strategy"] = strategy_name(ran);
    j["accepted_histogram"] = r.accepted_histogram;
    j["pool"] = {{"keys", r.pool_keys}, {"ngrams", r.pool_ngrams}, {"lookups", r.pool_lookups}, {"hits", r.pool_hits},
                 {"hit_rate", r.pool_lookups ? static_cast<double>(r.pool_hits) / static_cast<double>(r.pool_lookups) : 0.0}};
    nlohmann::json sources = nlohmann::json::array();
    for (const SourceYield& y : r.source_yields)
      sources.push_back({{"source", y.source}, {"key_length", y.key_length}, {"verified", y.verified}, {"won", y.won},
                         {"accepted", y.accepted}});
    j["sources"] = sources;
    if (ran != Strategy::Ar)
      j["params"] = {{"window", args.decoding.window}, {"ngram", args.decoding.ngram}, {"guesses", args.decoding.guesses},
                     {"lookback", args.decoding.lookback}};
    if (args.decoding.strategy == Strategy::Fafo)
      j["kv"] = {{"policy", args.kv.name}, {"budget", args.kv.budget}, {"swaps", m.model->kv_swaps()}};
    if (ran == Strategy::Auto) {
      nlohmann::json changes = nlohmann::json::array();
      for (const auto& [step, c] : r.auto_choices) changes.push_back({{"step", step}, {"candidate", r.auto_labels[static_cast<size_t>(c)]}});
      j["auto"] = {{"choices", changes}, {"summary", r.auto_summary},
                   {"step_costs", {{"T", r.step_costs.sizes}, {"seconds", r.step_costs.seconds}, {"spread", r.step_costs.spread},
                                   {"bounded", r.step_costs.bounded}, {"source", r.step_costs.source}}}};
    }
    j["lossy"] = r.lossy;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::fputs(stream.flush().c_str(), stdout);
    std::printf("\n");
    std::fprintf(stderr,
                 "\nfafo: %s in %.3f s (%.1f tokens/s), prompt %s in %.3f s, %s (%.2f tokens/step, %s), stop: %s\n",
                 app::count_of(static_cast<int64_t>(r.ids.size()), "token").c_str(), r.decode_seconds,
                 r.tokens_per_second(), app::count_of(static_cast<int64_t>(r.prompt_ids.size()), "token").c_str(),
                 r.prefill_seconds, app::count_of(r.n_steps, "step").c_str(), r.tokens_per_step(), strategy_name(ran),
                 stop_reason_name(r.stop));
    if (ran == Strategy::Auto)
      std::fprintf(stderr, "fafo: auto: %s; step costs %s\n", r.auto_summary.c_str(), r.step_costs.describe().c_str());
  }
  for (const std::string& lossy : r.lossy)
    std::fprintf(stderr, "fafo: LOSSY: %s (the output may differ from plain decoding's)\n", lossy.c_str());
  return 0;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt (streams it; --json prints one object at the end)");
  app::add_open_flags(cmd, args->open);
  cmd->add_option("-p,--prompt", args->prompt, "Prompt text (default: empty, i.e. BOS only)");
  cmd->add_option("-f,--file", args->prompt_file, "Read the prompt from a file");
  cmd->add_option("-n,--n-predict", args->n_predict, "Tokens to generate; -1 = until end of text or a full context")
      ->capture_default_str()->check(CLI::Range(-1, 1 << 30));
  app::add_sampling_flags(cmd, args->sampling, args->seed_given);
  app::add_strategy_flag(cmd, args->decoding.strategy);
  app::add_decoding_flags(cmd, args->decoding, args->kv);
  app::add_lossy_flags(cmd, args->kv, args->kv_drop, args->prompt_compress);
  cmd->footer(
      "Multi-token decoding: the defaults (W=8, N=5, G=8, k=4; FAFO region: stream, 4 sinks + 64 recent) were tuned\n"
      "on stories260K over\n"
      "MT-Bench prompts: tau 1.65 tokens per step at 64 tokens per step; larger windows raise tau (W=16, N=7, G=16:\n"
      "tau 1.91) at three times the step size. On the cpu backend a step of 8 tokens costs 3.1-5.8 one-token steps\n"
      "at 1.1B on 2 cores (fafo bench --curve), so multi-token strategies are slower there; they pay off where a\n"
      "step is memory-bound (GPUs).");
  cmd->add_option("--trace", args->trace_path, "Write one JSON line per decoding step (StepTrace) to this file");
  cmd->add_flag("--json", args->json, "Print one JSON object at the end instead of streaming text");
  cmd->add_flag("--no-bos", args->no_bos, "Do not add the BOS token before the prompt");
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating past end-of-text tokens");
  return [args] {
    app::use_default_model_if_unset(args->open.path);
    return run_generate(*args);
  };
}

}  // namespace fafo::cli
