// The multi-token decoding and KV-policy flags shared by `fafo run` and `fafo bench`.
#pragma once

#include <CLI/CLI.hpp>

#include "fafo/decoding.h"
#include "fafo/kv_policy.h"

namespace fafo::cli {

void add_decoding_flags(CLI::App* cmd, DecodingOptions& decoding, KvPolicyOptions& kv);

}  // namespace fafo::cli
