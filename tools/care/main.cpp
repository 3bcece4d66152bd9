// fafo-care: converts a llama GGUF model to multi-head latent attention (MLA), its K and
// V projections replaced by low-rank factors (conversion.h).
//   fafo-care -m model.gguf --calib text.txt --kv-ratio 0.5 -o model-mla.gguf
//   fafo-care -m model.gguf --method svd --rank 64 -o model-svd.gguf
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "conversion.h"

namespace {

using fafo::care::ConversionProgress;
using fafo::care::ConversionReport;

void print_progress(const ConversionProgress& p, bool terminal) {
  switch (p.stage) {
    case ConversionProgress::Stage::Calibration:
      // A line per eighth of the chunks when stderr is not a terminal.
      if (terminal) std::fprintf(stderr, "\rfafo-care: calibration chunk %d/%d", p.done, p.total);
      else if (p.done == p.total || p.done % std::max(1, p.total / 8) == 0)
        std::fprintf(stderr, "fafo-care: calibration chunk %d/%d\n", p.done, p.total);
      if (terminal && p.done == p.total) std::fprintf(stderr, "\n");
      break;
    case ConversionProgress::Stage::Factorization:
      std::fprintf(stderr, "fafo-care: factorized layer %d/%d\n", p.done, p.total);
      break;
    case ConversionProgress::Stage::Writing:
      if (terminal) std::fprintf(stderr, "\rfafo-care: writing tensor %d/%d%s", p.done, p.total, p.done == p.total ? "\n" : "");
      break;
  }
}

void print_summary(const fafo::care::ConversionOptions& o, const ConversionReport& r) {
  std::printf("fafo-care: %s -> %s\n", o.input.c_str(), o.output.c_str());
  if (r.method == "care")
    std::printf("method:       care (covariance-weighted SVD, shrinkage %g)\n", o.shrinkage);
  else
    std::printf("method:       svd (weight-space SVD)\n");
  if (r.calibration_tokens > 0)
    std::printf("calibration:  %lld tokens (%d chunks of %d)%s\n", static_cast<long long>(r.calibration_tokens),
                r.calibration_chunks, o.calibration.chunk_len, r.method == "care" ? "" : ", used only to measure the errors");
  std::printf("allocation:   %s, budget %lld ranks\n", r.allocation.c_str(), static_cast<long long>(r.budget));
  std::printf("KV per token: %lld floats -> %lld floats (ratio %.4f)\n", static_cast<long long>(r.kv_floats_before),
              static_cast<long long>(r.kv_floats_after), r.kv_ratio);
  std::printf("%s\n", r.activation_errors ? "errors:       relative activation error ||sqrtC (W - W^)||_F / ||sqrtC W||_F"
                                          : "errors:       relative weight error ||W - W^||_F / ||W||_F (no calibration)");
  std::printf("layer  rank K  rank V   error K   error V\n");
  for (size_t l = 0; l < r.layers.size(); ++l) {
    const auto& L = r.layers[l];
    std::printf("%5zu  %6d  %6d  %8.5f  %8.5f\n", l, L.rank_k, L.rank_v, L.error_k, L.error_v);
  }
  std::printf("time:         %.2f s (calibration %.2f s, factorization %.2f s)\n", r.seconds, r.calibration_seconds,
              r.factorization_seconds);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fafo-care: convert a llama GGUF model to multi-head latent attention (CARE or plain SVD)"};
  fafo::care::ConversionOptions o;
  std::optional<int32_t> rank;
  std::optional<double> kv_ratio;
  app.add_option("-m,--model", o.input, "The llama GGUF model to convert")->required();
  app.add_option("-o,--out", o.output, "The MLA GGUF file to write")->required();
  app.add_option("--calib", o.calibration.text_path, "Calibration text (UTF-8); required by --method care");
  app.add_option("--calib-len", o.calibration.chunk_len, "Tokens per calibration chunk (a BOS first when the model adds one)")
      ->capture_default_str();
  app.add_option("--calib-chunks", o.calibration.max_chunks, "Calibration chunks at most")->capture_default_str();
  auto* o_rank = app.add_option("--rank", rank, "Budget: R ranks per matrix on average (R_total = 2 * R * n_layer)");
  auto* o_ratio = app.add_option("--kv-ratio", kv_ratio,
                                 "Budget: this fraction of the KV cache, 0 < X <= 1 (R_total = X * 2 * kv_dim * n_layer; default 0.5)");
  o_rank->excludes(o_ratio);
  app.add_option("--method", o.method, "care (covariance-weighted SVD) or svd (weight-space SVD)")->capture_default_str();
  app.add_option("--allocation", o.allocation,
                 "Ranks per matrix: uniform (default), water-filling (the thesis: the largest next singular value "
                 "anywhere) or energy (water-filling over each matrix's share of its own energy)");
  app.add_option("--shrinkage", o.shrinkage, "Shrinkage alpha of the covariance root, in [0, 1]")->capture_default_str();
  app.add_option("-t,--threads", o.threads, "Threads (0 = every hardware thread)")->capture_default_str()->check(CLI::Range(0, 1024));
  CLI11_PARSE(app, argc, argv);
  o.rank = rank;
  o.kv_ratio = kv_ratio;

  const bool terminal = isatty(STDERR_FILENO);
  try {
    const ConversionReport report =
        fafo::care::convert_to_mla(o, [terminal](const ConversionProgress& p) { print_progress(p, terminal); });
    print_summary(o, report);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%sfafo-care: error: %s\n", terminal ? "\n" : "", e.what());
    return 1;
  }
  return 0;
}
