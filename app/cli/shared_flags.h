// Command-line flags several subcommands share: sampling, backend, multi-token
// decoding and the KV policy.
#pragma once

#include <memory>

#include <CLI/CLI.hpp>

#include "fafo/decoding.h"
#include "fafo/kv_policy.h"
#include "fafo/sampler.h"
#include "loaded_model.h"

namespace fafo::cli {

void add_decoding_flags(CLI::App* cmd, DecodingOptions& decoding, KvPolicyOptions& kv);
// --temp --top-k --top-p --min-p --seed; `seed_given` becomes true when --seed is used.
void add_sampling_flags(CLI::App* cmd, SamplerOptions& sampling, std::shared_ptr<bool> seed_given);
// --backend, --device, --threads and --cache-type (the KV cache type).
void add_backend_flags(CLI::App* cmd, BackendChoice& backend);

}  // namespace fafo::cli
