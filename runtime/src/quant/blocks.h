// Packed block layouts of the ggml weight formats, byte for byte as GGUF files store them.
//
// Half-precision fields hold raw IEEE fp16 bits. All multi-byte fields are little endian
// (fafo only supports little-endian hosts). The code never dereferences blocks in place:
// load_block/store_block memcpy one block between the byte stream and a local struct, so
// the source and destination buffers need no particular alignment.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

namespace fafo::quant {

static_assert(std::endian::native == std::endian::little, "fafo's weight formats assume a little-endian host");

// Values per block of the "legacy" formats and per super-block of the K-quants.
inline constexpr int kLegacyBlock = 32;
inline constexpr int kSuperBlock = 256;
// Bytes of the packed 6-bit scales of Q3_K (16 scales) and Q4_K/Q5_K (8 scales + 8 mins).
inline constexpr int kPackedScaleBytes = 12;

// Q4_0: value = (q - 8) * d, q in 0..15.
// qs[j] holds value j in its low nibble and value j + 16 in its high nibble.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kLegacyBlock / 2];
};

// Q4_1: value = q * d + m, q in 0..15. Nibbles as in Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kLegacyBlock / 2];
};

// Q5_0: value = (q - 16) * d, q in 0..31. Low 4 bits as in Q4_0; bit 4 of value j is bit j
// of the little-endian 32-bit word qh.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kLegacyBlock / 2];
};

// Q5_1: value = q * d + m, q in 0..31. Bits as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kLegacyBlock / 2];
};

// Q8_0: value = q * d, q in -127..127 (ggml's quantizer never writes -128, its dequantizer accepts it).
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kLegacyBlock];
};

// Q8_1: as Q8_0 plus s = d * sum(q), used by ggml for activations.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kLegacyBlock];
};

// Q2_K: 16 sub-blocks of 16. value = d * sc * q - dmin * mn, q in 0..3, where
// scales[i] = sc | mn << 4 for sub-block i. Value v = 128*h + 32*j + l (h < 2, j < 4, l < 32)
// is held in bits 2j..2j+1 of qs[32*h + l].
struct BlockQ2_K {
  uint8_t scales[kSuperBlock / 16];
  uint8_t qs[kSuperBlock / 4];
  uint16_t d;
  uint16_t dmin;
};

// Q3_K: 16 sub-blocks of 16. value = d * (sc - 32) * (q - 4), q in 0..7, sc a 6-bit scale.
// The low 2 bits of q are placed like Q2_K's; bit 2 of value v = 128*h + 32*j + l is bit
// 4h + j of hmask[l]. Scale i: low 4 bits in scales[i] (i < 8) or the high nibble of
// scales[i - 8] (i >= 8); high 2 bits are bits 2*(i/4)..+1 of scales[8 + i%4].
struct BlockQ3_K {
  uint8_t hmask[kSuperBlock / 8];
  uint8_t qs[kSuperBlock / 4];
  uint8_t scales[kPackedScaleBytes];
  uint16_t d;
};

// Q4_K: 8 sub-blocks of 32. value = d * sc * q - dmin * mn, q in 0..15, sc and mn 6-bit.
// Value v = 64*c + l (c < 4, l < 64) is the low nibble of qs[32*c + l] for l < 32 and the
// high nibble of qs[32*c + l - 32] otherwise. Scales/mins: see unpack_scale_min_k4.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kPackedScaleBytes];
  uint8_t qs[kSuperBlock / 2];
};

// Q5_K: as Q4_K with a fifth bit: bit 4 of value v = 64*c + l is bit 2c (l < 32) or
// bit 2c + 1 (l >= 32) of qh[l % 32]. q in 0..31.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[kPackedScaleBytes];
  uint8_t qh[kSuperBlock / 8];
  uint8_t qs[kSuperBlock / 2];
};

// Q6_K: 16 sub-blocks of 16. value = d * scales[v / 16] * (q - 32), q in 0..63.
// For v = 128*h + 32*k + l (h < 2, k < 4, l < 32): the low 4 bits of q are the low (k < 2)
// or high (k >= 2) nibble of ql[64*h + 32*(k % 2) + l]; the high 2 bits are bits 2k..2k+1
// of qh[32*h + l].
struct BlockQ6_K {
  uint8_t ql[kSuperBlock / 2];
  uint8_t qh[kSuperBlock / 4];
  int8_t scales[kSuperBlock / 16];
  uint16_t d;
};

// Q8_K: value = d * q with a float32 d; bsums[i] = sum of q over values 16i..16i+15.
struct BlockQ8_K {
  float d;
  int8_t qs[kSuperBlock];
  int16_t bsums[kSuperBlock / 16];
};

// ---- the formats whose 4-bit codes index a table of 16 values ----

// IQ4_NL's values (a non-uniform grid, denser near zero), as llama.cpp's kvalues_iq4nl.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// MXFP4's values: twice the E2M1 (fp4) numbers 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their
// negatives (code 8, the format's -0, reads as 0), so a block's scale is half its power of two.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// IQ4_NL: value j = d * kIq4nlValues[code j]. Nibbles as in Q4_0.
struct BlockIq4Nl {
  uint16_t d;
  uint8_t qs[kLegacyBlock / 2];
};

// IQ4_XS: 8 sub-blocks of 32. Value v of sub-block ib = d * (scale_ib - 32) *
// kIq4nlValues[code], scale_ib 6 bits: its low 4 bits are nibble ib % 2 of scales_l[ib / 2],
// its high 2 bits bits 2ib..2ib+1 of scales_h. The codes of sub-block ib are the nibbles
// of qs[16 ib .. 16 ib + 15], placed as in Q4_0.
struct BlockIq4Xs {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kSuperBlock / 64];
  uint8_t qs[kSuperBlock / 2];
};

// MXFP4 (OCP microscaling): value j = kMxfp4Values[code j] * 2^(e - 128), e an E8M0
// exponent byte. Nibbles as in Q4_0.
struct BlockMxfp4 {
  uint8_t e;
  uint8_t qs[kLegacyBlock / 2];
};

// Half of 2^(e - 127) as ggml computes it: exact, subnormal for e < 2; e = 255 is 2^127
// (not NaN).
inline float e8m0_half_to_fp32(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

// Biased 6-bit scale ib (0..7) of an IQ4_XS super-block, 0..63 (the signed scale is this - 32).
inline int unpack_scale_iq4_xs(uint16_t scales_h, const uint8_t* scales_l, int ib) {
  return ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((scales_h >> (2 * ib)) & 3) << 4);
}

// ---- the codebook ("grid") formats: 8 values share one index into a codebook ----
// (iq_grids.h holds the codebooks; grid_formats.cpp decodes them.) Every format keeps one
// fp16 d per 256 values and 8 groups of 32; a group's 32 values are 4 vectors of 8, each
// read from the codebook and given signs (7 sign bits stored, the 8th the parity that
// makes an even number of minus signs, or 8 stored bits in IQ3_S).

// IQ2_XXS (2.06 bits a value): per group ib, qs[4 ib .. 4 ib + 3] as two 32-bit words:
// the first word's four bytes are the four vectors' indices into the 256-entry codebook,
// the second's bits 7l..7l+6 the signs of vector l and its top 4 bits the group's scale s;
// value = (d * (0.5 + s)) * 0.25 * grid value.
struct BlockIq2Xxs {
  uint16_t d;
  uint16_t qs[kSuperBlock / 8];
};

// IQ2_XS (2.31 bits a value): qs[4 ib + l] is vector l of group ib, 9 bits of index into
// the 512-entry codebook and 7 sign bits above them; scales[ib] two 4-bit scales, the low
// one for vectors 0 and 1, the high one for 2 and 3 (value as IQ2_XXS).
struct BlockIq2Xs {
  uint16_t d;
  uint16_t qs[kSuperBlock / 8];
  uint8_t scales[kSuperBlock / 32];
};

// IQ3_XXS (3.06 bits a value): qs[0 .. 63] are the indices of 64 half-vectors of 4 values
// (the 256-entry codebook), two per vector; then per group a 32-bit word laid out as the
// second word of IQ2_XXS (signs, 4-bit scale s); value = (d * (0.5 + s)) * 0.5 * grid value.
struct BlockIq3Xxs {
  uint16_t d;
  uint8_t qs[3 * kSuperBlock / 8];
};

// IQ3_S (3.44 bits a value): 64 half-vector indices of 9 bits into the 512-entry codebook,
// the low 8 in qs, the 9th bits in qh (qh[ib] bit k for half-vector k of group ib); signs[4 ib
// + l] the 8 signs of vector l of group ib, one bit each; scales[ib / 2] two 4-bit scales
// (the low for the even group); value = (d * (1 + 2 s)) * grid value.
struct BlockIq3S {
  uint16_t d;
  uint8_t qs[kSuperBlock / 4];
  uint8_t qh[kSuperBlock / 32];
  uint8_t signs[kSuperBlock / 8];
  uint8_t scales[kSuperBlock / 64];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIq4Nl) == 18);
static_assert(sizeof(BlockIq4Xs) == 136);
static_assert(sizeof(BlockMxfp4) == 17);
static_assert(sizeof(BlockIq2Xxs) == 66);
static_assert(sizeof(BlockIq2Xs) == 74);
static_assert(sizeof(BlockIq3Xxs) == 98);
static_assert(sizeof(BlockIq3S) == 110);

// The 32-bit little-endian word at p (no alignment requirement).
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return w;
}

// Block i of a packed row, copied out (no alignment requirement on src).
template <class Block>
Block load_block(const uint8_t* src, int64_t i) {
  Block block;
  std::memcpy(&block, src + i * static_cast<int64_t>(sizeof(Block)), sizeof(Block));
  return block;
}

// Writes block i of a packed row.
template <class Block>
void store_block(uint8_t* dst, int64_t i, const Block& block) {
  std::memcpy(dst + i * static_cast<int64_t>(sizeof(Block)), &block, sizeof(Block));
}

// ---- packed 6-bit scales ----

// Scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block, both 0..63.
// Bytes 0..3 hold scales 0..3 in their low 6 bits, bytes 4..7 mins 0..3; sub-blocks 4..7
// keep their low 4 bits in bytes 8..11 (scale low nibble, min high nibble) and their high
// 2 bits in the top bits of bytes 0..3 (scale) and 4..7 (min).
struct ScaleMin {
  int scale;
  int min;
};

inline ScaleMin unpack_scale_min_k4(const uint8_t* packed, int j) {
  if (j < 4) return {packed[j] & 63, packed[j + 4] & 63};
  return {(packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4), (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4)};
}

// All eight scales and mins of unpack_scale_min_k4 at once, as four words of four
// bytes each: scales 0-3, scales 4-7, mins 0-3, mins 4-7.
inline void unpack_scales_mins_k4_words(const uint8_t* packed, uint32_t words[4]) {
  uint32_t a, m, c;
  std::memcpy(&a, packed, 4);
  std::memcpy(&m, packed + 4, 4);
  std::memcpy(&c, packed + 8, 4);
  words[0] = a & 0x3f3f3f3fu;
  words[1] = (c & 0x0f0f0f0fu) | ((a >> 2) & 0x30303030u);
  words[2] = m & 0x3f3f3f3fu;
  words[3] = ((c >> 4) & 0x0f0f0f0fu) | ((m >> 2) & 0x30303030u);
}

inline void unpack_scales_mins_k4(const uint8_t* packed, uint8_t* scales, uint8_t* mins) {
  uint32_t w[4];
  unpack_scales_mins_k4_words(packed, w);
  std::memcpy(scales, w, 8);
  std::memcpy(mins, w + 2, 8);
}

// Inverse of unpack_scale_min_k4: scales and mins are 8 values each, 0..63.
inline void pack_scale_min_k4(const uint8_t* scales, const uint8_t* mins, uint8_t* packed) {
  for (int j = 0; j < 4; ++j) {
    packed[j] = static_cast<uint8_t>(scales[j] | ((scales[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<uint8_t>(mins[j] | ((mins[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<uint8_t>((scales[j + 4] & 0x0f) | ((mins[j + 4] & 0x0f) << 4));
  }
}

// Biased 6-bit scale i (0..15) of a Q3_K super-block, 0..63 (the signed scale is this - 32).
inline int unpack_scale_q3_k(const uint8_t* packed, int i) {
  const int low = i < 8 ? (packed[i] & 0x0f) : (packed[i - 8] >> 4);
  const int high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
  return low | (high << 4);
}

// Inverse of unpack_scale_q3_k: 16 biased scales, 0..63.
inline void pack_scales_q3_k(const uint8_t* scales, uint8_t* packed) {
  std::memset(packed, 0, kPackedScaleBytes);
  for (int i = 0; i < 16; ++i) {
    const int low = scales[i] & 0x0f;
    const int high = scales[i] >> 4;
    if (i < 8) {
      packed[i] = static_cast<uint8_t>(packed[i] | low);
    } else {
      packed[i - 8] = static_cast<uint8_t>(packed[i - 8] | (low << 4));
    }
    packed[8 + i % 4] = static_cast<uint8_t>(packed[8 + i % 4] | (high << (2 * (i / 4))));
  }
}

}  // namespace fafo::quant
