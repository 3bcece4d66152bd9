// fafo-studio's command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fafo/decoding.h"

namespace fafo::studio {

struct AppOptions {
  std::string replay;       // --replay TRACE.jsonl
  std::string model;        // --model M (live generation, or token text for a replay)
  std::string prompt = "Once upon a time";
  int32_t steps = 0;        // --steps K: steps to generate / show (0: all)
  int32_t n_predict = 256;  // -n
  float temperature = 0.0f;
  int threads = 0;
  DecodingOptions decoding;  // --strategy, --window, --ngram, --guesses, --lookback
  std::string screenshot;   // --screenshot OUT.png: render headless and exit
  int width = 1600, height = 1000;
  bool help = false;
};

// Throws std::invalid_argument with a message for unknown flags or bad values.
AppOptions parse_app_options(const std::vector<std::string>& args);
const char* app_usage();

}  // namespace fafo::studio
