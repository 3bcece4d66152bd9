// `fafo perplexity -m MODEL -f TEXT [-c N] [--chunks N] [lossy options]`: llama-perplexity's
// measurement (fafo/perplexity.h) and output: the running estimate after each chunk,
// then "Final estimate: PPL = X +/- Y". The lossy modes (--kv-drop, --prompt-compress)
// are measured on each chunk's first half as the prompt.
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "fafo/open_model.h"
#include "fafo/perplexity.h"
#include "fafo/read_file.h"
#include "generation_flags.h"
#include "default_model.h"
#include "input_files.h"
#include "model_flags.h"
#include "plural.h"
#include "training_context.h"

namespace fafo::cli {

namespace {

struct PerplexityArgs {
  OpenOptions open;
  std::string text_path;
  int32_t max_chunks = -1;
  bool json = false;
  DecodingOptions draft;  // only the draft model's fields are used
  KvPolicyOptions kv;
  bool kv_drop = false;
  PromptCompressOptions prompt_compress;
  std::string kl_base;  // --kl-base: the model the KL divergence is measured from
};

int run_perplexity(PerplexityArgs& a) {
  if (a.kv_drop) a.kv.validate();
  a.prompt_compress.validate();
  app::require_readable_file(a.open.path);
  app::require_readable_file(a.text_path);
  if (!a.kl_base.empty()) app::require_readable_file(a.kl_base);
  app::require_decoding_files(a.draft);
  const std::string text = read_whole_file(a.text_path, "the text");

  OpenedModel m = open_model(a.open);
  if (!m.placement_note.empty()) std::fprintf(stderr, "perplexity: %s\n", m.placement_note.c_str());
  app::warn_if_past_training_context(*m.model);
  const Tokenizer& tok = *m.tokenizer;
  const bool uses_draft = a.prompt_compress.enabled() || (a.kv_drop && a.kv.name == "speckv");
  if (uses_draft && a.draft.draft_model_path.empty())
    throw std::runtime_error("the speckv modes need a draft model: --draft-model FILE (or self)");
  const std::shared_ptr<Sequence> draft = uses_draft ? open_draft_model(a.draft, a.open, *m.model, tok.vocab()) : nullptr;
  std::optional<OpenedModel> base;
  if (!a.kl_base.empty()) {
    OpenOptions base_open = a.open;
    base_open.path = a.kl_base;
    base.emplace(open_model(base_open));
    if (!base->placement_note.empty()) std::fprintf(stderr, "perplexity: --kl-base: %s\n", base->placement_note.c_str());
  }

  std::fprintf(stderr, "perplexity: tokenizing the input ..\n");
  const auto t0 = std::chrono::steady_clock::now();
  const bool add_bos = tok.vocab().add_bos && tok.vocab().bos >= 0;
  const std::vector<int32_t> tokens = tok.encode(text, add_bos);
  std::fprintf(stderr, "perplexity: tokenization took %.1f ms (%s)\n",
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
               app::count_of(static_cast<int64_t>(tokens.size()), "token").c_str());

  PerplexityOptions o;
  o.max_chunks = a.max_chunks;
  o.bos = add_bos ? tok.vocab().bos : -1;
  o.kv = a.kv;
  o.kv_drop = a.kv_drop;
  o.prompt_compress = a.prompt_compress;
  o.draft = draft.get();
  o.base = base ? base->model.get() : nullptr;
  const int32_t n_ctx = m.model->n_ctx();
  const size_t n_chunks = a.max_chunks > 0 ? std::min<size_t>(static_cast<size_t>(a.max_chunks), tokens.size() / static_cast<size_t>(n_ctx))
                                           : tokens.size() / static_cast<size_t>(n_ctx);
  std::fprintf(stderr, "perplexity: calculating perplexity over %s, n_ctx=%d, backend %s (%s)\n",
               app::count_of(static_cast<int64_t>(n_chunks), "chunk").c_str(), n_ctx, m.model->backend().name().c_str(), m.model->backend().description().c_str());
  auto on_chunk = [&](const PerplexityChunk& c) {
    if (a.json) return;
    if (c.index == 0)
      std::fprintf(stderr, "perplexity: %.2f seconds per pass - ETA %.2f minutes\n", c.seconds,
                   c.seconds * c.n_chunks / 60.0);
    std::printf("[%d]%.4f,", c.index + 1, c.running);
    std::fflush(stdout);
  };
  const PerplexityResult r = perplexity(*m.model, tokens, o, on_chunk);
  if (a.json) {
    nlohmann::json j{{"model", a.open.path}, {"text", a.text_path}, {"n_ctx", r.n_ctx}, {"chunks", r.chunks},
                     {"scored_tokens", r.scored}, {"ppl", r.ppl}, {"error", r.error}, {"running", r.running},
                     {"seconds", r.seconds}, {"backend", m.model->backend().name()}, {"lossy", r.lossy}};
    if (o.base) j["kl_base"] = {{"model", a.kl_base}, {"kl", r.kl}, {"kl_error", r.kl_error}, {"top1_agreement", r.top1_agreement}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("\nFinal estimate: PPL = %.4f +/- %.5f\n", r.ppl, r.error);
    if (o.base)
      std::printf("KL divergence from %s: %.6f +/- %.6f nats per token, same top token %.2f%%\n", a.kl_base.c_str(), r.kl,
                  r.kl_error, 100.0 * r.top1_agreement);
  }
  std::fflush(stdout);
  for (const std::string& lossy : r.lossy) std::fprintf(stderr, "perplexity: LOSSY: %s\n", lossy.c_str());
  return 0;
}

}  // namespace

Command add_perplexity_command(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity",
      "Perplexity of a model on a text file, measured as llama-perplexity does (chunks of -c tokens, the second half "
      "of each scored); with --kv-drop or --prompt-compress, what those lossy modes cost");
  app::add_open_flags(cmd, a->open);
  cmd->add_option("-f,--file", a->text_path, "The text (UTF-8)")->required();
  cmd->add_option("--chunks", a->max_chunks, "Chunks scored at most (-1: all)")->capture_default_str()->check(CLI::Range(-1, 1 << 30));
  cmd->add_flag("--json", a->json, "Print one JSON object instead of the running values");
  cmd->add_option("--draft-model", a->draft.draft_model_path,
                  "The draft model of the speckv modes (a GGUF file with the model's vocabulary, or self)");
  cmd->add_option("--draft-backend", a->draft.draft_backend, "The draft model's backend (default: the model's)");
  cmd->add_option("--draft-device", a->draft.draft_device, "The draft model's device (default: the model's)");
  cmd->add_option("--kv-budget", a->kv.budget, "--kv-drop: KV entries kept")->capture_default_str();
  cmd->add_option("--sinks", a->kv.sinks, "--kv-drop stream: first entries always kept")->capture_default_str();
  cmd->add_option("--recent", a->kv.recent, "--kv-drop: most recent entries always kept")->capture_default_str();
  cmd->add_option("--kv-lookahead", a->kv.lookahead, "--kv-drop speckv: draft tokens whose queries score the prompt")
      ->capture_default_str()->check(CLI::Range(1, 256));
  app::add_lossy_flags(cmd, a->kv, a->kv_drop, a->prompt_compress);
  cmd->add_option("--kl-base", a->kl_base,
                  "Also measure the KL divergence from this model (e.g. the original of a converted or quantized one; same "
                  "vocabulary, opened on the same backend) and how often both pick the same top token");
  return [a] {
    app::use_default_model_if_unset(a->open.path);
    return run_perplexity(*a);
  };
}

}  // namespace fafo::cli
