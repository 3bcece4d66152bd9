#include "conversion.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <Eigen/Core>

#include "factorize.h"
#include "fafo/gguf.h"
#include "fafo/model_config.h"
#include "fafo/tensor_type.h"
#include "rank_allocation.h"
#include "util/thread_pool.h"

namespace fafo::care {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int thread_count(int threads) {
  return threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void validate(const ConversionOptions& o) {
  if (o.method != "care" && o.method != "svd")
    throw std::invalid_argument("--method must be care or svd, not '" + o.method + "'");
  if (!o.allocation.empty() && o.allocation != "water-filling" && o.allocation != "energy" && o.allocation != "uniform")
    throw std::invalid_argument("--allocation must be uniform, water-filling or energy, not '" + o.allocation + "'");
  if (!(o.shrinkage >= 0.0 && o.shrinkage <= 1.0))
    throw std::invalid_argument("--shrinkage must be in [0, 1], not " + std::to_string(o.shrinkage));
  if (o.rank && o.kv_ratio) throw std::invalid_argument("give --rank or --kv-ratio, not both");
  if (o.rank && *o.rank < 1) throw std::invalid_argument("--rank must be at least 1, not " + std::to_string(*o.rank));
  if (o.kv_ratio && !(*o.kv_ratio > 0.0 && *o.kv_ratio <= 1.0))
    throw std::invalid_argument("--kv-ratio must be in (0, 1], not " + std::to_string(*o.kv_ratio));
  if (o.method == "care" && o.calibration.text_path.empty())
    throw std::invalid_argument("--method care needs a calibration text (--calib TEXT)");
  if (o.output.empty()) throw std::invalid_argument("no output file given (-o OUT.gguf)");
  if (!std::filesystem::exists(o.input)) throw std::runtime_error(o.input + ": no such file");
  if (!o.calibration.text_path.empty() && !std::filesystem::exists(o.calibration.text_path))
    throw std::runtime_error(o.calibration.text_path + ": no such file");
  std::error_code ec;
  if (std::filesystem::equivalent(o.input, o.output, ec))
    throw std::runtime_error("the output would overwrite the input (" + o.output + ")");
}

// Refuses what fafo-care cannot convert: other architectures, attention biases, and
// files that are MLA already.
void check_convertible(const GgufFile& file) {
  const std::string arch = file.get_string("general.architecture", "");
  if (arch != "llama")
    throw std::runtime_error(file.path() + ": architecture '" + arch +
                             "' is not supported (fafo-care converts llama models without attention biases)");
  for (const char* bias : {"blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.0.attn_v.bias"})
    if (file.find_tensor(bias))
      throw std::runtime_error(file.path() + ": the attention projections have biases (" + bias +
                               "); fafo-care converts llama models without them");
  if (file.find("fafo.mla.rank_k") || file.find("fafo.mla.rank_v"))
    throw std::runtime_error(file.path() + " is already an MLA model (it has fafo.mla.rank_k)");
}

// The file's projection in the thesis's orientation: W = weight^T (n_embd x kv_dim),
// column i being the weight's row i, dequantized.
Eigen::MatrixXd projection(const GgufTensor& t, int64_t n_embd, int64_t kv_dim) {
  if (t.shape.size() != 2 || t.shape[0] != n_embd || t.shape[1] != kv_dim)
    throw std::runtime_error("tensor '" + t.name + "' does not have the shape [" + std::to_string(n_embd) + ", " +
                             std::to_string(kv_dim) + "]");
  const size_t row_bytes = tensor_row_bytes(t.type, n_embd);
  std::vector<float> row(static_cast<size_t>(n_embd));
  Eigen::MatrixXd w(n_embd, kv_dim);
  for (int64_t i = 0; i < kv_dim; ++i) {
    dequantize_row(t.type, t.data + static_cast<size_t>(i) * row_bytes, row.data(), n_embd);
    for (int64_t c = 0; c < n_embd; ++c) w(c, i) = row[static_cast<size_t>(c)];
  }
  return w;
}

// The F32 bytes of a tensor with rows m.rows() and cols m.cols() (GGUF shape [cols, rows]).
std::vector<uint8_t> f32_bytes(const Eigen::MatrixXd& m) {
  std::vector<uint8_t> bytes(static_cast<size_t>(m.size()) * sizeof(float));
  size_t at = 0;
  for (Eigen::Index i = 0; i < m.rows(); ++i)
    for (Eigen::Index j = 0; j < m.cols(); ++j, at += sizeof(float)) {
      const float v = static_cast<float>(m(i, j));
      std::memcpy(bytes.data() + at, &v, sizeof v);
    }
  return bytes;
}

// Runs fn(0) .. fn(count - 1) on the pool, one index per chunk (a layer's factorization
// is seconds of work); rethrows the first failure.
void for_each_layer(ThreadPool& pool, int32_t count, const std::function<void(int32_t)>& fn) {
  pool.parallel_for(count, 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) fn(static_cast<int32_t>(i));
  });
}

// One projection of one layer: the weight and its full-rank factorization.
struct Projection {
  Eigen::MatrixXd w;
  Factorization f;
};

// The factors of one layer at their allocated ranks.
struct LayerFactors {
  LowRank k, v;
};

std::string layer_tensor(int32_t layer, const char* name) { return "blk." + std::to_string(layer) + "." + name; }

}  // namespace

int64_t rank_budget(const ConversionOptions& o, int32_t n_layer, int32_t kv_dim) {
  if (o.rank && o.kv_ratio) throw std::invalid_argument("give --rank or --kv-ratio, not both");
  if (o.rank) {
    if (*o.rank < 1) throw std::invalid_argument("--rank must be at least 1, not " + std::to_string(*o.rank));
    return int64_t{2} * *o.rank * n_layer;
  }
  const double ratio = o.kv_ratio.value_or(0.5);
  if (!(ratio > 0.0 && ratio <= 1.0)) throw std::invalid_argument("--kv-ratio must be in (0, 1], not " + std::to_string(ratio));
  return std::llround(ratio * 2.0 * kv_dim * n_layer);
}

ConversionReport convert_to_mla(const ConversionOptions& o, const std::function<void(const ConversionProgress&)>& progress) {
  const auto t0 = Clock::now();
  validate(o);
  const bool care = o.method == "care";
  const std::string allocation = !o.allocation.empty() ? o.allocation : "uniform";
  const int threads = thread_count(o.threads);
  std::mutex progress_mutex;
  auto report_progress = [&](ConversionProgress::Stage stage, int32_t done, int32_t total) {
    if (!progress) return;
    const std::lock_guard lock(progress_mutex);
    progress({stage, done, total});
  };

  const std::shared_ptr<const GgufFile> file = GgufFile::open(o.input);
  check_convertible(*file);
  const ModelConfig config = ModelConfig::from_gguf(*file);
  const int32_t n_layer = config.n_layer, n_embd = config.n_embd, kv_dim = config.kv_dim();
  const int32_t cap = std::min(n_embd, kv_dim);
  const int64_t budget = rank_budget(o, n_layer, kv_dim);
  if (o.rank && *o.rank > cap)
    throw std::invalid_argument("--rank " + std::to_string(*o.rank) + " exceeds the largest rank of a projection, " +
                                std::to_string(cap) + " (min(n_embd, kv_dim))");
  if (budget < int64_t{2} * n_layer)
    throw std::invalid_argument("the rank budget " + std::to_string(budget) + " is below 2 * n_layer = " +
                                std::to_string(2 * n_layer) + " (every K and V keeps at least rank 1): raise --kv-ratio or --rank");
  for (int32_t l = 0; l < n_layer; ++l) {
    file->require_tensor(layer_tensor(l, "attn_k.weight"));
    file->require_tensor(layer_tensor(l, "attn_v.weight"));
  }
  // A directory that cannot take the output fails now, not after the calibration.
  const std::string temporary = o.output + ".tmp";
  {
    std::ofstream probe(temporary, std::ios::binary | std::ios::trunc);
    if (!probe) throw std::runtime_error(temporary + ": cannot open for writing");
  }
  std::error_code ec;
  std::filesystem::remove(temporary, ec);

  ConversionReport report;
  report.method = o.method;
  report.allocation = allocation;
  report.budget = budget;
  report.kv_floats_before = int64_t{2} * kv_dim * n_layer;

  // Stage 1-2: the covariance of every layer's attention input.
  Calibration calibration;
  if (!o.calibration.text_path.empty()) {
    const auto tc = Clock::now();
    CalibrationOptions co = o.calibration;
    co.threads = threads;
    calibration = calibrate(file, co, [&](int32_t done, int32_t total) {
      report_progress(ConversionProgress::Stage::Calibration, done, total);
    });
    report.calibration_tokens = calibration.tokens;
    report.calibration_chunks = calibration.chunks;
    report.activation_errors = true;
    report.calibration_seconds = seconds_since(tc);
  }

  // Stage 3: the full-rank (covariance-weighted) SVD of every K and V, a layer per thread.
  const auto tf = Clock::now();
  ThreadPool pool(std::min(threads, n_layer));
  std::vector<Projection> projections(static_cast<size_t>(2 * n_layer));
  int32_t factorized = 0;  // layers done, counted under progress_mutex
  for_each_layer(pool, n_layer, [&](int32_t l) {
    try {
      const Whitening whitening = care ? shrunk_sqrt(calibration.covariance[static_cast<size_t>(l)], o.shrinkage)
                                       : identity_whitening(n_embd);
      for (int32_t kv = 0; kv < 2; ++kv) {
        Projection& p = projections[static_cast<size_t>(2 * l + kv)];
        p.w = projection(file->require_tensor(layer_tensor(l, kv == 0 ? "attn_k.weight" : "attn_v.weight")), n_embd, kv_dim);
        p.f = factorize(whitening, p.w);
      }
    } catch (const std::exception& e) {
      throw std::runtime_error("layer " + std::to_string(l) + ": " + e.what());
    }
    const std::lock_guard lock(progress_mutex);
    ++factorized;
    if (progress) progress({ConversionProgress::Stage::Factorization, factorized, n_layer});
  });

  // Stage 4: ranks.
  std::vector<int32_t> ranks;
  if (allocation == "water-filling" || allocation == "energy") {
    std::vector<std::vector<double>> spectra;
    for (const Projection& p : projections) spectra.emplace_back(p.f.sigma.data(), p.f.sigma.data() + p.f.sigma.size());
    ranks = allocation == "energy" ? allocate_energy_share(spectra, budget) : allocate_water_filling(spectra, budget);
  } else {
    std::vector<int32_t> caps;
    for (const Projection& p : projections) caps.push_back(static_cast<int32_t>(p.f.max_rank()));
    ranks = allocate_uniform(caps, budget);
  }

  // Stage 5: the factors at those ranks, and their errors.
  std::vector<LayerFactors> factors(static_cast<size_t>(n_layer));
  report.layers.resize(static_cast<size_t>(n_layer));
  for_each_layer(pool, n_layer, [&](int32_t l) {
    LayerResult& r = report.layers[static_cast<size_t>(l)];
    r.rank_k = ranks[static_cast<size_t>(2 * l)];
    r.rank_v = ranks[static_cast<size_t>(2 * l + 1)];
    LayerFactors& lf = factors[static_cast<size_t>(l)];
    Projection& pk = projections[static_cast<size_t>(2 * l)];
    Projection& pv = projections[static_cast<size_t>(2 * l + 1)];
    lf.k = truncate(pk.f, r.rank_k);
    lf.v = truncate(pv.f, r.rank_v);
    if (report.activation_errors) {
      const Eigen::MatrixXd& c = calibration.covariance[static_cast<size_t>(l)];
      r.error_k = relative_activation_error(c, pk.w, lf.k.product());
      r.error_v = relative_activation_error(c, pv.w, lf.v.product());
    } else {
      r.error_k = relative_weight_error(pk.w, lf.k.product());
      r.error_v = relative_weight_error(pv.w, lf.v.product());
    }
    pk = {};
    pv = {};
  });
  projections.clear();
  calibration.covariance.clear();
  for (int32_t r : ranks) report.kv_floats_after += r;
  report.kv_ratio = static_cast<double>(report.kv_floats_after) / static_cast<double>(report.kv_floats_before);
  report.factorization_seconds = seconds_since(tf);

  // The output: the input's metadata and tensors, K and V replaced by their factors.
  GgufWriter writer(file->alignment());
  for (const auto& [key, value] : file->metadata()) writer.set(key, value);
  std::vector<int32_t> rank_k, rank_v;
  for (const LayerResult& r : report.layers) rank_k.push_back(r.rank_k), rank_v.push_back(r.rank_v);
  writer.set_string("fafo.mla.method", o.method);
  writer.set_string("fafo.mla.allocation", allocation);
  writer.set_i32_array("fafo.mla.rank_k", rank_k);
  writer.set_i32_array("fafo.mla.rank_v", rank_v);
  writer.set_f32("fafo.mla.kv_ratio", static_cast<float>(report.kv_ratio));
  writer.set_u32("fafo.mla.calibration_tokens", care ? static_cast<uint32_t>(std::min<int64_t>(report.calibration_tokens, UINT32_MAX)) : 0u);
  writer.set_f32("fafo.mla.shrinkage", care ? static_cast<float>(o.shrinkage) : 0.0f);

  std::map<std::string, std::pair<int32_t, bool>> replaced;  // name -> (layer, is V)
  for (int32_t l = 0; l < n_layer; ++l) {
    replaced[layer_tensor(l, "attn_k.weight")] = {l, false};
    replaced[layer_tensor(l, "attn_v.weight")] = {l, true};
  }
  std::vector<const GgufTensor*> sources;  // per written tensor: the input's, or nullptr for a new one
  for (const GgufTensor& t : file->tensors()) {
    const auto it = replaced.find(t.name);
    if (it == replaced.end()) {
      writer.add_tensor_info(t.name, t.type, t.shape);
      sources.push_back(&t);
      continue;
    }
    const auto [l, is_v] = it->second;
    const LowRank& f = is_v ? factors[static_cast<size_t>(l)].v : factors[static_cast<size_t>(l)].k;
    const int64_t r = f.a.cols();
    // A = W_a^T (rows r, cols n_embd), B = W_b^T (rows kv_dim, cols r).
    writer.add_tensor(layer_tensor(l, is_v ? "attn_v_a.weight" : "attn_k_a.weight"), TensorType::F32, {n_embd, r},
                      f32_bytes(f.a.transpose()));
    writer.add_tensor(layer_tensor(l, is_v ? "attn_v_b.weight" : "attn_k_b.weight"), TensorType::F32, {r, kv_dim},
                      f32_bytes(f.b.transpose()));
    sources.push_back(nullptr);
    sources.push_back(nullptr);
  }
  factors.clear();
  const int32_t n_tensors = static_cast<int32_t>(sources.size());
  try {
    writer.write(temporary, [&](size_t i, std::vector<uint8_t>& out) {
      const GgufTensor& t = *sources[i];
      out.assign(t.data, t.data + t.n_bytes);
      report_progress(ConversionProgress::Stage::Writing, static_cast<int32_t>(i + 1), n_tensors);
    });
    file->check_intact();
    std::filesystem::rename(temporary, o.output);
  } catch (...) {
    std::filesystem::remove(temporary, ec);
    throw;
  }
  report.seconds = seconds_since(t0);
  return report;
}

}  // namespace fafo::care
