// CARE's calibration run (thesis section 3.3.1): a text through the model, each layer's
// attention inputs (after the attention RMSNorm) summed into its covariance.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "fafo/gguf.h"

namespace fafo::care {

struct CalibrationOptions {
  std::string text_path;    // UTF-8 text
  int32_t chunk_len = 128;  // tokens per chunk, the BOS included when the tokenizer adds one
  int32_t max_chunks = 64;  // chunks at most
  int threads = 0;          // the reference backend's threads (0: every hardware thread)
};

struct Calibration {
  std::vector<Eigen::MatrixXd> covariance;  // per layer: (1/N) sum x x^T, n_embd x n_embd
  int64_t tokens = 0;                       // N: the rows every layer saw
  int32_t chunks = 0;
};

// Tokenizes the text with the model's tokenizer, cuts it into up to max_chunks chunks of
// chunk_len tokens (a BOS first when the tokenizer adds one) and runs each, from an
// empty context, through the model on the reference backend. `on_chunk(done, total)`
// is called after each chunk. Throws std::invalid_argument for a chunk length below 2 or
// a chunk count below 1, std::runtime_error when the text cannot be read or is too short
// for one chunk, and what loading the model throws.
Calibration calibrate(const std::shared_ptr<const GgufFile>& file, const CalibrationOptions& options,
                      const std::function<void(int32_t done, int32_t total)>& on_chunk = {});

}  // namespace fafo::care
