// fafo-care's pipeline: a llama GGUF model to a multi-head latent attention (MLA) one.
//
// Each layer's K and V projections (attn_k.weight, attn_v.weight) are replaced by F32
// low-rank factors: attn_k_a.weight (rows r_k, cols n_embd) maps the attention input to
// the cached latent key, attn_k_b.weight (rows kv_dim, cols r_k) maps it back to the
// key (RoPE is applied to that key at run time); attn_v_a / attn_v_b likewise with r_v.
// Every other tensor and metadata key is copied byte for byte; fafo.mla.* keys say how
// the file was made (method, allocation, rank_k, rank_v, kv_ratio, calibration_tokens,
// shrinkage; calibration_tokens and shrinkage are 0 for svd).
//
// method "care": covariance-weighted SVD with the covariances of a calibration run
// (calibration.h). method "svd": plain weight-space SVD, no calibration needed (a
// calibration text given anyway only measures the activation errors of the summary).
// Ranks (rank_allocation.h): uniform (the default for both: on stories260K it kept the
// converted model closest to the original at ratios 0.5 and 0.75), water-filling as the
// thesis writes it, or energy (water-filling over each matrix's share of its own energy).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "calibration.h"

namespace fafo::care {

struct ConversionOptions {
  std::string input;   // a llama GGUF model
  std::string output;  // written as output + ".tmp", renamed when complete
  std::string method = "care";  // "care" or "svd"
  std::string allocation;       // "uniform", "water-filling" or "energy"; "": uniform
  // The total rank budget R_total (exclusive; neither: kv_ratio 0.5):
  std::optional<int32_t> rank;     // R per matrix on average: R_total = 2 * R * n_layer
  std::optional<double> kv_ratio;  // 0 < X <= 1: R_total = round(X * 2 * kv_dim * n_layer)
  double shrinkage = 0.01;         // alpha of the covariance root, in [0, 1] (care only)
  CalibrationOptions calibration;  // text_path empty: no calibration (svd only)
  int threads = 0;                 // calibration and factorization threads (0: every hardware thread)
};

struct LayerResult {
  int32_t rank_k = 0, rank_v = 0;
  // ||sqrt(C)(W - W^)||_F / ||sqrt(C) W||_F with the calibration covariance C (the
  // unshrunk one), or with C = I (weight space) when there was no calibration.
  double error_k = 0.0, error_v = 0.0;
};

struct ConversionReport {
  std::string method, allocation;
  std::vector<LayerResult> layers;
  int64_t budget = 0;                 // R_total
  int64_t kv_floats_before = 0;       // per token, all layers, K and V: 2 * kv_dim * n_layer
  int64_t kv_floats_after = 0;        // per token: the sum of the ranks
  double kv_ratio = 0.0;              // after / before
  int64_t calibration_tokens = 0;     // rows each covariance averages (0: no calibration)
  int32_t calibration_chunks = 0;
  bool activation_errors = false;     // errors measured with a calibration covariance
  double calibration_seconds = 0.0, factorization_seconds = 0.0, seconds = 0.0;
};

struct ConversionProgress {
  enum class Stage { Calibration, Factorization, Writing };
  Stage stage = Stage::Calibration;
  int32_t done = 0, total = 0;  // chunks, layers or tensors
};

// Converts options.input to options.output. Throws std::invalid_argument for bad
// options (method, allocation, shrinkage, budget, calibration settings) and
// std::runtime_error for a missing or unusable input (no such file, not llama, QKV
// biases, already MLA), a calibration text too short for one chunk, or a failed write;
// the output is then left absent.
ConversionReport convert_to_mla(const ConversionOptions& options,
                                const std::function<void(const ConversionProgress&)>& progress = {});

// The rank budget of `options` for a model of n_layer layers of kv_dim keys and values;
// throws std::invalid_argument for a ratio outside (0, 1], a rank below 1 or both given.
int64_t rank_budget(const ConversionOptions& options, int32_t n_layer, int32_t kv_dim);

}  // namespace fafo::care
