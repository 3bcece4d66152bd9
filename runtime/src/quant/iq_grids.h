// The codebooks of the grid formats IQ2_XXS, IQ2_XS, IQ3_XXS and IQ3_S (blocks.h), expanded
// at compile time from their packed form in shaders/iq_grids.inc (which the CUDA and GLSL
// decoders include too): entry e as its 8 (IQ2) or 4 (IQ3) values, one byte each, value j
// in byte j, as ggml's iq2xxs_grid ... iq3s_grid hold them.
#pragma once

#include <array>
#include <bit>
#include <cstdint>

#include "../../../shaders/iq_grids.inc"

namespace fafo::quant {

namespace grid_detail {

template <int Bits, int Width, size_t N, size_t L>
constexpr std::array<uint64_t, N> expand(const uint16_t (&packed)[N], const uint8_t (&levels)[L]) {
  std::array<uint64_t, N> out{};
  for (size_t e = 0; e < N; ++e)
    for (int j = 0; j < Width; ++j)
      out[e] |= uint64_t{levels[(packed[e] >> (Bits * j)) & ((1 << Bits) - 1)]} << (8 * j);
  return out;
}

inline constexpr uint16_t kIq2xxsPacked[] = {FAFO_IQ2XXS_GRID};
inline constexpr uint16_t kIq2xsPacked[] = {FAFO_IQ2XS_GRID};
inline constexpr uint16_t kIq3xxsPacked[] = {FAFO_IQ3XXS_GRID};
inline constexpr uint16_t kIq3sPacked[] = {FAFO_IQ3S_GRID};
inline constexpr uint8_t kIq2Levels[] = {FAFO_IQ2XXS_LEVELS};
inline constexpr uint8_t kIq2xsLevels[] = {FAFO_IQ2XS_LEVELS};
inline constexpr uint8_t kIq3xxsLevels[] = {FAFO_IQ3XXS_LEVELS};
inline constexpr uint8_t kIq3sLevels[] = {FAFO_IQ3S_LEVELS};

}  // namespace grid_detail

inline constexpr std::array<uint64_t, FAFO_IQ2XXS_SIZE> kIq2xxsGrid =
    grid_detail::expand<FAFO_IQ2XXS_BITS, 8>(grid_detail::kIq2xxsPacked, grid_detail::kIq2Levels);
inline constexpr std::array<uint64_t, FAFO_IQ2XS_SIZE> kIq2xsGrid =
    grid_detail::expand<FAFO_IQ2XS_BITS, 8>(grid_detail::kIq2xsPacked, grid_detail::kIq2xsLevels);
inline constexpr std::array<uint64_t, FAFO_IQ3XXS_SIZE> kIq3xxsGrid =
    grid_detail::expand<FAFO_IQ3XXS_BITS, 4>(grid_detail::kIq3xxsPacked, grid_detail::kIq3xxsLevels);
inline constexpr std::array<uint64_t, FAFO_IQ3S_SIZE> kIq3sGrid =
    grid_detail::expand<FAFO_IQ3S_BITS, 4>(grid_detail::kIq3sPacked, grid_detail::kIq3sLevels);

// The 8 sign bits of a vector from its 7 stored ones: the 8th makes the count of minus
// signs even (ggml's ksigns_iq2xs table).
constexpr uint8_t iq2_signs(uint32_t seven) {
  seven &= 127u;
  return static_cast<uint8_t>(seven | ((std::popcount(seven) & 1u) << 7));
}

// A vector's 8 signs as bytes, +1 (0x01) or -1 (0xff), byte j from bit j: from the 8 bits
// (kSignBytes8, IQ3_S) or from the 7 stored ones (kSignBytes7, through iq2_signs), for
// decoders that multiply by them.
inline constexpr std::array<uint64_t, 256> kSignBytes8 = [] {
  std::array<uint64_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i)
    for (int j = 0; j < 8; ++j) t[i] |= uint64_t{((i >> j) & 1u) ? 0xffu : 0x01u} << (8 * j);
  return t;
}();
inline constexpr std::array<uint64_t, 128> kSignBytes7 = [] {
  std::array<uint64_t, 128> t{};
  for (uint32_t i = 0; i < 128; ++i) t[i] = kSignBytes8[iq2_signs(i)];
  return t;
}();

}  // namespace fafo::quant
