#include "generation_flags.h"

#include <string>

namespace fafo::app {

void add_sampling_flags(CLI::App* cmd, SamplerOptions& sampling, std::shared_ptr<bool> seed_given) {
  cmd->add_option("--temp", sampling.temperature, "Temperature; 0 = greedy (pure argmax)")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", sampling.top_k, "Top-k sampling (0 = off)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", sampling.top_p, "Top-p (nucleus) sampling, in (0, 1]; 1 = off")->capture_default_str();
  cmd->add_option("--min-p", sampling.min_p, "Min-p sampling, in [0, 1); 0 = off")->capture_default_str();
  if (seed_given) {
    cmd->add_option("--seed", sampling.seed, "Random seed (default: random)")->each([seed_given](const std::string&) {
      *seed_given = true;
    });
  } else {
    cmd->add_option("--seed", sampling.seed, "Random seed")->capture_default_str();
  }
}

std::vector<std::string> strategy_choices() {
  const std::span<const char* const> names = strategy_names();
  return {names.begin(), names.end()};
}

void add_strategy_flag(CLI::App* cmd, Strategy& strategy) {
  cmd->add_option_function<std::string>(
         "--strategy", [&strategy](const std::string& name) { strategy = parse_strategy(name); },
         "Decoding strategy: ar (plain), jacobi, lookahead, fafo, corpus (continuations from --corpus), draft "
         "(speculative decoding with --draft-model), or auto (plain decoding or lookahead/fafo/corpus at some W, N, "
         "G, chosen step by step from this device's measured step costs and what each yields); all emit the same "
         "tokens as ar")
      ->default_str(strategy_name(strategy))
      ->check(CLI::IsMember(strategy_choices()));
}

void add_decoding_flags(CLI::App* cmd, DecodingOptions& d, KvPolicyOptions& kv) {
  cmd->add_option("--window", d.window, "W: 2D-window columns (jacobi: guesses per step)")->capture_default_str();
  cmd->add_option("--ngram", d.ngram, "N: n-gram size (window rows = N-1, candidate length = N-1)")->capture_default_str();
  cmd->add_option("--guesses", d.guesses, "G: candidates verified per step and kept per pool key")->capture_default_str();
  cmd->add_option("--lookback", d.lookback, "k: longest context key FAFO caches candidates under")->capture_default_str();
  cmd->add_flag("--pool-from-prompt", d.pool_from_prompt, "Seed the candidate pool with the prompt's n-grams");
  cmd->add_option("--corpus", d.corpus_path,
                  "A corpus index (fafo index build) built with this model's tokenizer: --strategy corpus drafts from "
                  "it; lookahead, fafo and auto add its continuations to the pool's candidates");
  cmd->add_option("--corpus-max-suffix", d.corpus_max_suffix, "Longest suffix of the text looked up in the corpus")
      ->capture_default_str();
  cmd->add_option("--draft-model", d.draft_model_path,
                  "--strategy draft: the draft model (a GGUF file with the target's vocabulary, token for token), or "
                  "self (the target itself: a second sequence on its loaded weights, with a KV cache of its own)");
  cmd->add_option("--draft-n", d.draft_n, "--strategy draft: tokens drafted per step")->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--draft-alternatives", d.draft_alternatives,
                  "--strategy draft: a small tree: this many of the draft model's next most likely first tokens are "
                  "verified beside its chain, one token each")
      ->capture_default_str()->check(CLI::Range(0, 15));
  cmd->add_option("--draft-backend", d.draft_backend, "--strategy draft: the draft model's backend (default: the target's)");
  cmd->add_option("--draft-device", d.draft_device, "--strategy draft: the draft model's device (default: the target's)");
  cmd->add_option("--draft-kv-policy", d.draft_kv_policy,
                  "--strategy draft: a sparse draft KV cache: after the prompt the drafter attends only what this policy "
                  "keeps (full, stream, quest, snapkv, chunks: BudgetDraft's)")
      ->check(CLI::IsMember([] {
        std::vector<std::string> names = {"full"};
        for (const std::string& p : kv_policy_names(/*with_draft=*/false)) names.push_back(p);
        return names;
      }()));
  cmd->add_option("--draft-kv-budget", d.draft_kv_budget, "--strategy draft: entries the sparse draft cache keeps")
      ->capture_default_str()->check(CLI::Range(1, 1 << 22));
  cmd->add_option("--kv-policy", kv.name,
                  "FAFO: what the fumble rows' region keeps: stream, quest, snapkv, chunks, speckv (SnapKV scored with "
                  "the target's queries of --kv-lookahead tokens a --draft-model predicts)")
      ->capture_default_str()->check(CLI::IsMember(kv_policy_names()));
  cmd->add_option("--kv-budget", kv.budget, "FAFO: region size in KV entries")->capture_default_str();
  cmd->add_option("--sinks", kv.sinks, "stream: first entries always in the region")->capture_default_str();
  cmd->add_option("--recent", kv.recent, "quest/snapkv/chunks: most recent entries always in the region")->capture_default_str();
  cmd->add_option("--update-interval", kv.update_interval, "quest: steps between page re-selections")->capture_default_str();
  cmd->add_option("--kv-lookahead", kv.lookahead, "speckv: draft tokens whose queries score the prompt")
      ->capture_default_str()->check(CLI::Range(1, 256));
}

void add_lossy_flags(CLI::App* cmd, KvPolicyOptions& kv, bool& kv_drop, PromptCompressOptions& pc) {
  CLI::Option* drop = cmd->add_option_function<std::string>(
         "--kv-drop",
         [&kv, &kv_drop](const std::string& name) {
           kv.name = name;
           kv_drop = true;
         },
         "LOSSY: after the prompt the model reads only the --kv-budget entries this policy keeps (speckv: SpecKV, "
         "with --draft-model; snapkv, chunks, stream, quest), as if the rest were evicted; plain decoding only")
      ->check(CLI::IsMember(kv_policy_names()));
  if (CLI::Option* policy = cmd->get_option_no_throw("--kv-policy")) drop->excludes(policy);
  cmd->add_option("--prompt-compress", pc.method,
                  "LOSSY: SpecPC: the --draft-model's attention picks the --prompt-budget prompt tokens the model reads "
                  "(speckv)")
      ->check(CLI::IsMember({"speckv"}));
  cmd->add_option("--prompt-budget", pc.budget, "--prompt-compress: prompt tokens kept")->capture_default_str()
      ->check(CLI::Range(2, 1 << 22));
}

void add_reply_length_flag(CLI::App* cmd, int32_t& n_predict) {
  // 0 is refused: the generator makes no token for it, so every reply would end before
  // it began.
  const CLI::Validator not_zero(
      [](std::string& text) -> std::string {
        int64_t value = 1;
        if (CLI::detail::lexical_cast(text, value) && value == 0)
          return "0 would end every reply before its first token: give 1 or more, or -1 for no limit";
        return "";
      },
      "", "not 0");
  cmd->add_option("-n,--n-predict", n_predict,
                  "Tokens per reply at most (1 or more; a chat reply also stops at half the context); -1 = until the "
                  "reply ends or the context is full")
      ->capture_default_str()->check(CLI::Range(-1, 1 << 30))->check(not_zero);
}

}  // namespace fafo::app
