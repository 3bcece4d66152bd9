#include "shared_flags.h"

namespace fafo::cli {

void add_decoding_flags(CLI::App* cmd, DecodingOptions& d, KvPolicyOptions& kv) {
  cmd->add_option("--window", d.window, "W: 2D-window columns (jacobi: guesses per step)")->capture_default_str();
  cmd->add_option("--ngram", d.ngram, "N: n-gram size (window rows = N-1, candidate length = N-1)")->capture_default_str();
  cmd->add_option("--guesses", d.guesses, "G: candidates verified per step and kept per pool key")->capture_default_str();
  cmd->add_option("--lookback", d.lookback, "k: longest context key FAFO caches candidates under")->capture_default_str();
  cmd->add_flag("--pool-from-prompt", d.pool_from_prompt, "Seed the candidate pool with the prompt's n-grams");
  cmd->add_option("--kv-policy", kv.name, "FAFO: what the fumble rows' region keeps: stream, quest, snapkv, chunks")
      ->capture_default_str()->check(CLI::IsMember({"stream", "quest", "snapkv", "chunks"}));
  cmd->add_option("--kv-budget", kv.budget, "FAFO: region size in KV entries")->capture_default_str();
  cmd->add_option("--sinks", kv.sinks, "stream: first entries always in the region")->capture_default_str();
  cmd->add_option("--recent", kv.recent, "quest/snapkv/chunks: most recent entries always in the region")->capture_default_str();
  cmd->add_option("--update-interval", kv.update_interval, "quest: steps between page re-selections")->capture_default_str();
}

void add_sampling_flags(CLI::App* cmd, SamplerOptions& sampling, std::shared_ptr<bool> seed_given) {
  cmd->add_option("--temp", sampling.temperature, "Temperature; 0 = greedy (pure argmax)")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", sampling.top_k, "Top-k sampling (0 = off)")->capture_default_str()->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", sampling.top_p, "Top-p (nucleus) sampling, in (0, 1]; 1 = off")->capture_default_str();
  cmd->add_option("--min-p", sampling.min_p, "Min-p sampling, in [0, 1); 0 = off")->capture_default_str();
  cmd->add_option("--seed", sampling.seed, "Random seed (default: random)")->each([seed_given](const std::string&) {
    *seed_given = true;
  });
}

void add_backend_flags(CLI::App* cmd, BackendChoice& backend) {
  std::vector<std::string> names = {"auto"};
  for (const std::string& n : available_backends()) names.push_back(n);
  cmd->add_option("--backend", backend.name,
                  "Compute backend: auto (vulkan when a Vulkan GPU exists, else cpu; lavapipe only when asked), " +
                      [&] {
                        std::string list;
                        for (size_t i = 1; i < names.size(); ++i) list += (i > 1 ? ", " : "") + names[i];
                        return list;
                      }())
      ->capture_default_str()
      ->check(CLI::IsMember(names));
  cmd->add_option("--device", backend.device,
                  "Vulkan device: an index or part of a name from `fafo devices` (default: the first discrete GPU, "
                  "else integrated, else any)");
  cmd->add_option("-t,--threads", backend.threads, "CPU threads (0 = all cores)")->capture_default_str()
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--cache-type", backend.cache_type,
                  "KV cache type: f32, or f16 (half the memory and attention reads; keys and values rounded to fp16)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f16"}));
}

}  // namespace fafo::cli
