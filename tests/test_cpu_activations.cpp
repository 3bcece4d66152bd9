// The cpu backend's vector gated activations (backend/cpu/simd_activations.h): within a
// few ulp (1e-6 absolute near 0) of the scalar formulas (scalar::silu, scalar::gelu_tanh) over a wide range of
// inputs, the same special values, and the same bits for a value however a row is split
// into ranges (threads and steps split rows anywhere), on every instruction set this
// build compiled that the machine runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/simd_activations.h"
#include "backend/cpu/simd_matmul.h"
#include "backend/host/scalar_kernels.h"

namespace {

using fafo::cpu::GatedActivation;

float scalar_gated(GatedActivation act, float gate, float up) {
  if (act == GatedActivation::SwigluOai) return fafo::scalar::swiglu_oai(gate, up);
  return (act == GatedActivation::Silu ? fafo::scalar::silu(gate) : fafo::scalar::gelu_tanh(gate)) * up;
}
constexpr GatedActivation kActivations[] = {GatedActivation::Silu, GatedActivation::GeluTanh, GatedActivation::SwigluOai};

// Gates from -120 to 120 (past exp's range both ways), some tiny, the special values and
// the largest magnitudes.
std::vector<float> gates(int64_t n) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> wide(-120.0f, 120.0f);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> g(static_cast<size_t>(n));
  for (size_t i = 0; i < g.size(); ++i) g[i] = i % 3 == 0 ? wide(rng) : i % 3 == 1 ? normal(rng) : normal(rng) * 1e-6f;
  g[7] = 0.0f;
  g[8] = -0.0f;
  g[9] = std::numeric_limits<float>::infinity();
  g[10] = std::numeric_limits<float>::quiet_NaN();
  g[11] = -std::numeric_limits<float>::infinity();
  g[12] = -std::numeric_limits<float>::max();
  g[13] = -1e35f;
  g[14] = -95.0f;
  g[15] = std::numeric_limits<float>::max();
  return g;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace

TEST(CpuActivations, CloseToTheScalarFormulasOnEveryInstructionSet) {
  const int64_t n = 1003;  // not a multiple of any vector width
  const std::vector<float> g = gates(n);
  std::vector<float> up(static_cast<size_t>(n), 1.0f), out(static_cast<size_t>(n));
  for (size_t i = 0; i < up.size(); i += 5) up[i] = -2.5f;
  for (size_t i = 0; i < up.size(); i += 7) up[i] = 9.0f;  // past SwigluOai's clamp of the up values
  for (size_t i = 0; i < up.size(); i += 11) up[i] = -8.0f;
  for (const std::string& target : fafo::cpu::simd_targets()) {
    fafo::cpu::use_simd_target(target);
    for (const GatedActivation act : kActivations) {
      fafo::cpu::gated_simd(act, g.data(), up.data(), out.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        const float want = scalar_gated(act, g[static_cast<size_t>(i)], up[static_cast<size_t>(i)]);
        const float got = out[static_cast<size_t>(i)];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got)) << target << " value " << i;
        } else if (std::isinf(want)) {
          EXPECT_EQ(got, want) << target << " value " << i;
        } else {
          // Relative, and absolute near 0: where tanh is within an ulp of -1, 1 + tanh is
          // 0 or 6e-8 (the formula's own cancellation), so GELU is 0 or about 1e-7.
          EXPECT_NEAR(got, want, 2e-6f * std::fabs(want) + 1e-6f) << target << " gate " << g[static_cast<size_t>(i)];
        }
      }
    }
  }
  fafo::cpu::use_simd_target("");
}

TEST(CpuActivations, AValueGetsTheSameBitsHoweverTheRowIsSplit) {
  const int64_t n = 517;
  const std::vector<float> g = gates(n);
  const std::vector<float> up(static_cast<size_t>(n), 0.75f);
  for (const std::string& target : fafo::cpu::simd_targets()) {
    fafo::cpu::use_simd_target(target);
    for (const GatedActivation act : kActivations) {
      std::vector<float> whole(static_cast<size_t>(n)), parts(static_cast<size_t>(n));
      fafo::cpu::gated_simd(act, g.data(), up.data(), whole.data(), n);
      for (const int64_t piece : {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{13}, int64_t{100}}) {
        for (int64_t i = 0; i < n; i += piece) {
          const int64_t k = std::min(piece, n - i);
          fafo::cpu::gated_simd(act, g.data() + i, up.data() + i, parts.data() + i, k);
        }
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(bits(parts[static_cast<size_t>(i)]), bits(whole[static_cast<size_t>(i)]))
              << target << " pieces of " << piece << " value " << i;
      }
    }
  }
  fafo::cpu::use_simd_target("");
}
