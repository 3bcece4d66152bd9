// The fast CPU backend (`--backend cpu`, what `auto` picks without a GPU): the host
// backend with SIMD matrix products split over the thread pool by panels of weight rows
// (integer products with 8-bit activations for the K-quants Q4_K/Q5_K/Q6_K, the
// 32-value formats Q8_0/Q4_0/Q4_1/Q5_0/Q5_1, the table formats IQ4_NL/IQ4_XS/MXFP4 and
// the codebook formats IQ2_XXS/IQ2_XS/IQ3_XXS/IQ3_S: q8_matmul.h; float products for the other
// formats: simd_matmul.h), SIMD attention (simd_attention.h) and SIMD SwiGLU/GeGLU
// (simd_activations.h).
// Its results are within the tolerances below of the reference's, and T-invariant.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/q8_groups.h"
#include "backend/cpu/q8_matmul.h"
#include "backend/cpu/simd_activations.h"
#include "backend/cpu/simd_attention.h"
#include "backend/cpu/simd_kv_rows.h"
#include "backend/cpu/simd_matmul.h"
#include "backend/host/host_backend.h"
#include "fafo/backend_registry.h"

namespace fafo {

namespace {

// The matrix product and attention sum in another order than the reference (vector
// lanes with fused multiply-adds), and attention's exp and SwiGLU's and GeGLU's exp and
// tanh are Highway's; the op-conformance table measures the largest difference.
constexpr double kTolerance = 1e-4;
// Products with Q4_K, Q5_K, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS, MXFP4,
// IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S weights round the activations to 8 bits per
// block (q8_matmul.h): on the table's inputs (uniform in [-1, 1], 256 to 512 columns)
// the largest error measured is 0.17 of max(1, |reference|); llama.cpp's CPU backend
// rounds the same way.
constexpr double kRoundedMatmulTolerance = 0.25;
// Products with F16 weights round the activations to fp16 (simd_matmul.h): largest error
// measured on the table's inputs 0.0053.
constexpr double kHalfMatmulTolerance = 0.01;

class CpuKernels final : public host::HostKernels {
 public:
  explicit CpuKernels(bool repack) : repack_(repack) {}

  void gated(host::GatedActivation act, const float* gate, const float* up, float* out, int64_t n) const override {
    cpu::gated_simd(act, gate, up, out, n);
  }

  void attend_group_part(const float* q, int32_t n_heads, const scalar::KvRows& keys, const scalar::KvRows& values,
                         const int32_t* slots, int32_t n_keys, scalar::ScoreMap score, float* scratch, scalar::AttentionPart* parts,
                         float* accs) const override {
    cpu::attend_group_part_simd(q, n_heads, keys, values, slots, n_keys, score, scratch, parts, accs);
  }

  void widen_rows(const host::HostKvCache::Rows& rows, const int32_t* slots, int32_t count, int32_t first, int32_t n,
                  float* out) const override {
    cpu::widen_kv_rows_simd(rows, slots, count, first, n, out);
  }

  // Q4_0, IQ4_NL, MXFP4, Q8_0, Q5_0, Q4_K, Q5_K and Q6_K rows in groups of 8 (q8_groups.h); none
  // without repack_ (--no-repack or FAFO_CPU_NO_GROUPS=1: the file's rows, and no copy: less
  // memory, slower prompts).
  std::vector<uint8_t> arrange(const host::HostWeight& w, ThreadPool& pool) const override {
    if (!repack_) return {};
    std::vector<uint8_t> out(cpu::grouped_bytes(w));
    if (out.empty()) return out;
    const int64_t groups = (w.rows + cpu::kGroupRows - 1) / cpu::kGroupRows;
    pool.parallel_for(groups, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, w.cols / 32)), [&](int64_t b, int64_t e, int) {
      cpu::group_rows(w, b, e, out.data());
    });
    return out;
  }

  void matmul(const host::HostWeight& w, const float* x, int64_t x_stride, int64_t T, float* out, int64_t out_stride,
              ThreadPool& pool) override {
    const int64_t block = cpu::q8_activation_block(w.type, w.cols);
    const bool integer = block > 0 && w.cols % block == 0;
    const uint16_t* x_half = nullptr;
    if (cpu::rounds_activations_to_half(w.type)) {
      const size_t n = static_cast<size_t>(T * w.cols);
      const bool small = T <= cpu::kHalfActivationsMaxT;  // larger steps read only the rounded floats
      if (small && half_.size() < n) half_.resize(n);
      if (rounded_.size() < n) rounded_.resize(n);
      pool.parallel_for(T, std::max<int64_t>(1, 16384 / w.cols), [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; ++t)
          cpu::round_to_half(x + t * x_stride, w.cols, small ? half_.data() + t * w.cols : nullptr,
                             rounded_.data() + t * w.cols);
      });
      x = rounded_.data();
      x_half = small ? half_.data() : nullptr;
      x_stride = w.cols;
    }
    if (!integer) {
      const size_t floats = cpu::matmul_scratch_floats(w.cols);
      scratch_.resize(static_cast<size_t>(pool.size()));
      for (auto& s : scratch_)
        if (s.size() < floats) s.resize(floats);
    }
    if (integer) {
      acts_.resize(T, w.cols, block);
      pool.parallel_for(T, std::max<int64_t>(1, 16384 / w.cols), [&](int64_t b, int64_t e, int) {
        cpu::quantize_activations(x, x_stride, b, e, acts_);
      });
    }
    const int64_t panel = cpu::matmul_panel_rows(w.cols);
    const int64_t n_panels = (w.rows + panel - 1) / panel;
    // At least ~256K multiply-adds per chunk: below that, waking threads costs more than it saves.
    const int64_t panel_cost = panel * w.cols * std::max<int64_t>(T, 4);
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, panel_cost));
    pool.parallel_for(n_panels, grain, [&](int64_t b, int64_t e, int thread) {
      if (integer)
        cpu::q8_matmul_rows(w, b * panel, std::min(w.rows, e * panel), acts_, out, out_stride);
      else
        cpu::matmul_rows(w, b * panel, std::min(w.rows, e * panel), x, x_half, x_stride, T, out, out_stride,
                         scratch_[static_cast<size_t>(thread)].data());
    });
  }

  // Integer products (a step's experts): each job's activations rounded on their own,
  // then the panels of every job in one dispatch over the threads, each panel as
  // matmul computes it (a result depends only on its weight row and its activation
  // row). Other formats go one by one.
  void matmuls(const std::vector<Matmul>& jobs, ThreadPool& pool) override {
    const bool integer = std::all_of(jobs.begin(), jobs.end(), [](const Matmul& j) {
      const int64_t block = cpu::q8_activation_block(j.w->type, j.w->cols);
      return block > 0 && j.w->cols % block == 0 && !cpu::rounds_activations_to_half(j.w->type);
    });
    if (!integer || jobs.size() < 2) {
      HostKernels::matmuls(jobs, pool);
      return;
    }
    if (job_acts_.size() < jobs.size()) job_acts_.resize(jobs.size());
    std::vector<int64_t> first_panel(jobs.size() + 1, 0);  // job i's panels: [first_panel[i], first_panel[i + 1])
    int64_t cost = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      const Matmul& j = jobs[i];
      job_acts_[i].resize(j.T, j.w->cols, cpu::q8_activation_block(j.w->type, j.w->cols));
      cpu::quantize_activations(j.x, j.x_stride, 0, j.T, job_acts_[i]);
      const int64_t panel = cpu::matmul_panel_rows(j.w->cols);
      first_panel[i + 1] = first_panel[i] + (j.w->rows + panel - 1) / panel;
      cost += j.w->rows * j.w->cols * std::max<int64_t>(j.T, 4);
    }
    const int64_t n_panels = first_panel.back();
    // At least ~256K multiply-adds per chunk, as matmul's.
    const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) * n_panels / std::max<int64_t>(1, cost));
    pool.parallel_for(n_panels, grain, [&](int64_t b, int64_t e, int) {
      for (int64_t p = b; p < e; ++p) {
        const size_t i = static_cast<size_t>(std::upper_bound(first_panel.begin(), first_panel.end(), p) -
                                             first_panel.begin() - 1);
        const Matmul& j = jobs[i];
        const int64_t panel = cpu::matmul_panel_rows(j.w->cols), r0 = (p - first_panel[i]) * panel;
        cpu::q8_matmul_rows(*j.w, r0, std::min(j.w->rows, r0 + panel), job_acts_[i], j.out, j.out_stride);
      }
    });
  }
  bool batches_matmuls() const override { return true; }

 private:
  std::vector<cpu::QuantizedActivations> job_acts_;  // matmuls' jobs' activations, rounded
  std::vector<std::vector<float>> scratch_;  // one panel of decoded weight rows per thread (float products)
  cpu::QuantizedActivations acts_;          // the step's activations rounded to 8 bits
  std::vector<uint16_t> half_;              // ... or to fp16 (F16 weights)
  std::vector<float> rounded_;              // the same fp16 values as floats
  bool repack_;                             // arrange() makes the groups (BackendSpec::repack)
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads, bool repack) {
  return cpu::make_cpu_backend(n_threads, host::AttentionMutation::None, repack);
}

namespace cpu {

std::unique_ptr<Backend> make_cpu_backend(int n_threads, host::AttentionMutation mutation, bool repack) {
  static const bool no_groups = [] {
    const char* v = std::getenv("FAFO_CPU_NO_GROUPS");
    return v != nullptr && std::string_view(v) == "1";
  }();
  repack = repack && !no_groups;
  // Without the groups the description says so: it names the backend in bench reports and
  // keys the step costs kept between runs (prompts cost about twice as much).
  return host::make_host_backend(n_threads,
                                 {"cpu", std::string("CPU backend (") + simd_target_name() + " SIMD" +
                                             (repack ? ")" : ", the file's rows: --no-repack)"),
                                  BackendNumerics{false, kTolerance, kRoundedMatmulTolerance, kHalfMatmulTolerance}, true,
                                  mutation},
                                 std::make_unique<CpuKernels>(repack));
}

}  // namespace cpu

// Registered in backend_registry.cpp (FAFO_BACKEND(cpu)).
BackendInfo cpu_backend_info() {
  BackendInfo info;
  info.name = "cpu";
  info.display_name = "CPU";
  info.summary = std::string("the fast CPU backend (") + cpu::simd_target_name() +
                 " SIMD matrix products with token tiles, 8-bit activations for the K-quants and 32-value formats as "
                 "llama.cpp; T-invariant)";
  info.auto_rank = 0;
  info.devices = [] {
    BackendDevice d = host_cpu_device();
    d.details.emplace_back("SIMD", cpu::simd_target_name());
    return std::vector<BackendDevice>{d};
  };
  info.create = [](const BackendSpec& spec) {
    check_host_device("cpu", spec.device);
    return make_cpu_backend(spec.threads, spec.repack);
  };
  return info;
}

}  // namespace fafo
