// `fafo bench --attention`: the attention cost of COMPRESSED (fumble) rows against
// the context length, with the fixed region (flat) and without it (growing), and the
// cost of exchanging entries between the region and the rest. Runs on the backend
// directly with random keys and values, so long contexts need no prefill.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fafo/backend.h"

namespace fafo::cli {

struct AttentionBenchOptions {
  std::vector<int32_t> contexts = {1024, 2048, 4096, 8192, 16384, 32768};
  int32_t rows = 64;      // COMPRESSED rows per step (a FAFO window)
  int32_t budget = 256;   // region size
  int repetitions = 3;
};

nlohmann::json run_attention_bench(const std::string& model_path, const BackendSpec& backend,
                                   const AttentionBenchOptions& options);

}  // namespace fafo::cli
