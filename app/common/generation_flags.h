// Flags that say how text is generated: sampling, the decoding strategy and its
// parameters, the KV policy, and the reply length of a chat. Shared by the `fafo`
// subcommands and fafo-studio so both describe them the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "fafo/decoding.h"
#include "fafo/kv_policy.h"
#include "fafo/prompt_compression.h"
#include "fafo/sampler.h"

namespace fafo::app {

// The strategy names (fafo::strategy_names) as a list CLI11's IsMember takes.
std::vector<std::string> strategy_choices();

// --temp --top-k --top-p --min-p --seed. With `seed_given`, the seed is random unless
// --seed is used (it then becomes true); without it, the seed in `sampling` is the default.
void add_sampling_flags(CLI::App* cmd, SamplerOptions& sampling, std::shared_ptr<bool> seed_given = nullptr);
// --strategy auto|ar|jacobi|lookahead|fafo|corpus|draft; the default shown is strategy's value.
void add_strategy_flag(CLI::App* cmd, Strategy& strategy);
// --window --ngram --guesses --lookback --pool-from-prompt --corpus --corpus-max-suffix
// --draft-model --draft-n --draft-backend --draft-device (the caller opens the corpus
// and the draft model with open_decoding_resources once the model is open)
// and the KV policy's
// --kv-policy --kv-budget --sinks --recent --update-interval --kv-lookahead.
void add_decoding_flags(CLI::App* cmd, DecodingOptions& decoding, KvPolicyOptions& kv);
// The lossy modes, each only by its own flag: --kv-drop NAME (the target keeps only what
// policy NAME chooses, --kv-budget entries; sets kv.name, so not with --kv-policy) and
// --prompt-compress speckv --prompt-budget B (SpecPC).
void add_lossy_flags(CLI::App* cmd, KvPolicyOptions& kv, bool& kv_drop, PromptCompressOptions& prompt_compress);
// -n,--n-predict as the most tokens of one chat reply (-1: no limit; 0, which would end
// every reply before its first token, is refused).
void add_reply_length_flag(CLI::App* cmd, int32_t& n_predict);

}  // namespace fafo::app
