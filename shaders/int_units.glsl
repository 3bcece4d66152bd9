// Integer products on Vulkan: the units of a weight row and how each joins a lane's sum,
// the arithmetic of the CUDA backend's integer products (cuda_backend/src/int_ops.h:
// IntUnit) in GLSL, so both give the same bits on a device with fused multiply-adds.
//
// A row is cut into units (Q8_0: a block of 32; Q6_K: a run of 32 values, its two
// signed sub-block scales, as Q3_K's; Q4_K/Q5_K: a pair of sub-blocks of 32, 64 values;
// Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4: a block of 32 codes; IQ4_XS: a sub-block of 32
// of them). A unit's
// weights are IU_WORDS words of four signed bytes (word k: values 4k..4k + 3); its
// IU_SUMS integer sums are the dot products of words [i IU_WORDS_PER_SUM, +
// IU_WORDS_PER_SUM) with the rounded activations' bytes at the same values (exact: four
// byte products at a time, iu_dot4); iu_add_to adds its value to a lane's running sum
// by the one float expression of int_ops.h, fused multiply-adds in a fixed order.
//
// The rounded activations (shaders/quantize.comp) are a buffer of words, row t at word
// t * x_stride: cols / 4 words of q (four signed bytes, the first lowest), then the
// cols / 32 blocks' scales d, then each block's d times its sum of q (floats as bits).
//
// The including shader declares the weights as `w_words[]` (dequant.glsl's readers)
// and the rounded activations as `xq[]`, and #defines one of the FORMAT_s above, then
// includes dequant.glsl and this file.
#ifndef FAFO_INT_UNITS_GLSL
#define FAFO_INT_UNITS_GLSL

#if defined(FORMAT_Q8_0)
#define IU_VALUES 32u
#define IU_SUMS 1u
#define IU_WORDS_PER_SUM 8u
#elif defined(FORMAT_Q6_K) || defined(FORMAT_Q3_K)
#define IU_VALUES 32u
#define IU_SUMS 2u
#define IU_WORDS_PER_SUM 4u
#elif defined(FORMAT_Q4_K) || defined(FORMAT_Q5_K)
#define IU_VALUES 64u
#define IU_SUMS 2u
#define IU_WORDS_PER_SUM 8u
#elif defined(FORMAT_Q4_0) || defined(FORMAT_Q5_0) || defined(FORMAT_IQ4_NL) || defined(FORMAT_IQ4_XS) || \
    defined(FORMAT_MXFP4) || defined(FORMAT_Q4_1) || defined(FORMAT_Q5_1)
#define IU_CODES 1  // blocks of 32 4- or 5-bit codes, one scale each (and a minimum: IU_MIN)
#if defined(FORMAT_Q4_1) || defined(FORMAT_Q5_1)
#define IU_MIN 1
#endif
#if defined(FORMAT_Q5_0) || defined(FORMAT_Q5_1)
#define IU_FIFTH_BIT 1  // a 32-bit qh just before the codes
#endif
// The legacy blocks' sizes and where their codes start.
#if defined(FORMAT_Q4_1)
#define IU_BLOCK_BYTES 20u
#define IU_CODES_AT 4u
#elif defined(FORMAT_Q5_1)
#define IU_BLOCK_BYTES 24u
#define IU_CODES_AT 8u
#elif defined(FORMAT_Q5_0)
#define IU_BLOCK_BYTES 22u
#define IU_CODES_AT 6u
#elif defined(FORMAT_Q4_0) || defined(FORMAT_IQ4_NL)
#define IU_BLOCK_BYTES 18u
#define IU_CODES_AT 2u
#endif
#define IU_VALUES 32u
#define IU_SUMS 1u
#define IU_WORDS_PER_SUM 8u
#else
#error "integer products: Q8_0, Q6_K, Q3_K, Q4_K, Q5_K, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS or MXFP4"
#endif
#ifndef IU_CODES
#define IU_CODES 0
#endif
#ifndef IU_MIN
#define IU_MIN 0
#endif
#ifndef IU_FIFTH_BIT
#define IU_FIFTH_BIT 0
#endif
#define IU_WORDS (IU_VALUES / 4u)
#define IU_BLOCKS (IU_VALUES / 32u)  // activation blocks a unit spans

// A unit's scales: Q8_0 and the codes f.x = d (Q4_1/Q5_1: f.y = m); Q6_K and Q3_K
// f.x = d, i = (sc_a, sc_b); Q4_K/Q5_K f = (d sc_0, d sc_1, dmin m_0, dmin m_1), each
// product formed once (exact in a float).
struct IuScales {
  vec4 f;
  ivec2 i;
};

#ifndef DOT4
#define DOT4 0
#endif
#if DOT4
// The sum of the four products of the signed bytes of a and b: a placeholder whose body
// tools/spirv_dot4.py replaces by the integer dot product instruction (OpSDot,
// PackedVectorFormat4x8Bit) in the compiled SPIR-V, which this glslang cannot write.
int iu_sdot4(uint a, uint b) { return int(a ^ b) - 0x7d07d07d; }
#endif

// c + the sum of the four products of the signed bytes of a and b (exact): the device's
// dot product instruction (DOT4=1), or integer arithmetic.
int iu_dot4(uint a, uint b, int c) {
#if DOT4
  return c + iu_sdot4(a, b);
#else
  int s = c;
  [[unroll]] for (int k = 0; k < 4; ++k) s += bitfieldExtract(int(a), 8 * k, 8) * bitfieldExtract(int(b), 8 * k, 8);
  return s;
#endif
}

// Each byte b (0..63) of w as the signed byte b - 32 (no borrow crosses bytes).
uint iu_minus_32(uint w) { return ((w | 0x80808080u) - 0x20202020u) ^ 0x80808080u; }

#if IU_CODES
// A word of four codes (bytes 0..31) as four signed weights: Q4_0 code - 8, Q5_0
// code - 16, Q4_1/Q5_1 the code, the others table[code] (dequant.glsl's DQ_TABLE, four
// entries to a word).
uint iu_code_bytes(uint c) {
#if defined(FORMAT_Q4_0)
  return ((c | 0x80808080u) - 0x08080808u) ^ 0x80808080u;
#elif defined(FORMAT_Q5_0)
  return ((c | 0x80808080u) - 0x10101010u) ^ 0x80808080u;
#elif IU_MIN
  return c;
#else
  uint r = 0u;
  [[unroll]] for (uint k = 0u; k < 4u; ++k) {
    const uint code = (c >> (8u * k)) & 0xfu;
    r |= ((DQ_TABLE[code >> 2] >> ((code & 3u) << 3)) & 0xffu) << (8u * k);
  }
  return r;
#endif
}
#endif

// Unit u of the row at byte row_off: its words and scales.
void iu_load(uint row_off, uint u, out uint wd[IU_WORDS], out IuScales sc) {
  sc.f = vec4(0.0);
  sc.i = ivec2(0);
#if defined(FORMAT_Q8_0)
  const uint b = row_off + 34u * u;
  [[unroll]] for (uint k = 0u; k < 8u; ++k) wd[k] = dq_u32(b + 2u + 4u * k);
  sc.f.x = dq_half(dq_u16(b));
#elif defined(FORMAT_Q6_K)
  const uint b = row_off + 210u * (u / 8u);
  const uint h = (u % 8u) / 4u, k4 = u % 4u;
  [[unroll]] for (uint k = 0u; k < 8u; ++k) {
    const uint low = (dq_u32(b + 64u * h + 32u * (k4 & 1u) + 4u * k) >> (4u * (k4 >> 1))) & 0x0f0f0f0fu;
    const uint high = ((dq_u32(b + 128u + 32u * h + 4u * k) >> (2u * k4)) & 0x03030303u) << 4;
    wd[k] = iu_minus_32(low | high);
  }
  sc.f.x = dq_half(dq_u16(b + 208u));
  sc.i = ivec2(dq_i8(b + 192u + 8u * h + 2u * k4), dq_i8(b + 192u + 8u * h + 2u * k4 + 1u));
#elif defined(FORMAT_Q3_K)
  // Half h, plane p: value j from bits 2p of qs[32 + 32h + j] and bit 4h + p of
  // hmask[j] (weight low - 4 + 4 bit); sub-blocks 2 (u % 8) and + 1, 6-bit scales - 32.
  const uint b = row_off + 110u * (u / 8u);
  const uint h = (u % 8u) / 4u, pl = u % 4u;
  [[unroll]] for (uint k = 0u; k < 8u; ++k) {
    const uint low = (dq_u32(b + 32u + 32u * h + 4u * k) >> (2u * pl)) & 0x03030303u;
    const uint hb = (dq_u32(b + 4u * k) >> (4u * h + pl)) & 0x01010101u;
    wd[k] = (((low | (hb << 2)) | 0x80808080u) - 0x04040404u) ^ 0x80808080u;
  }
  sc.f.x = dq_half(dq_u16(b + 108u));
  [[unroll]] for (uint j = 0u; j < 2u; ++j) {
    const uint s = 2u * (u % 8u) + j;
    const uint low4 = s < 8u ? dq_u8(b + 96u + s) & 0xfu : dq_u8(b + 96u + s - 8u) >> 4;
    const uint high2 = (dq_u8(b + 104u + (s & 3u)) >> (2u * (s >> 2))) & 3u;
    sc.i[j] = int(low4 | (high2 << 4)) - 32;
  }
#elif IU_CODES
  // Value j < 16 of the block is the low nibble of code byte j, value j + 16 the high
  // one; Q5_0/Q5_1's fifth bits are bits j and j + 16 of qh.
#if defined(FORMAT_IQ4_XS)
  const uint b = row_off + 136u * (u / 8u), ib = u % 8u;
  const uvec4 codes = dq_load16(b + 8u + 16u * ib);
  const uint low4 = (dq_u8(b + 4u + (ib >> 1)) >> (4u * (ib & 1u))) & 0xfu;
  const uint high2 = (dq_u16(b + 2u) >> (2u * ib)) & 3u;
  precise float d = dq_half(dq_u16(b)) * float(int(low4 | (high2 << 4)) - 32);
  sc.f.x = d;
#elif defined(FORMAT_MXFP4)
  const uint b = row_off + 17u * u;
  const uvec4 codes = dq_load16_any(b + 1u);
  const uint e = dq_u8(b);
  sc.f.x = uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23);
#else
  // The half d at 0, then Q4_1/Q5_1's half m, Q5_0/Q5_1's qh, the codes.
  const uint b = row_off + IU_BLOCK_BYTES * u;
  const uvec4 codes = dq_load16(b + IU_CODES_AT);
  sc.f.x = dq_half(dq_u16(b));
#if IU_MIN
  sc.f.y = dq_half(dq_u16(b + 2u));
#endif
#if IU_FIFTH_BIT
  const uint qh = dq_u32(b + IU_CODES_AT - 4u);
#endif
#endif
  [[unroll]] for (uint k = 0u; k < 8u; ++k) {
    uint c = (k < 4u ? codes[k] : codes[k - 4u] >> 4) & 0x0f0f0f0fu;
#if IU_FIFTH_BIT
    c |= (((((qh >> (4u * k)) & 0xfu) * 0x00204081u) & 0x01010101u) << 4);  // bits 4k..4k + 3 of qh, one a byte
#endif
    wd[k] = iu_code_bytes(c);
  }
#else
#if defined(FORMAT_Q5_K)
  const uint b = row_off + 176u * (u / 4u);
  const uint qs = b + 48u;
#else
  const uint b = row_off + 144u * (u / 4u);
  const uint qs = b + 16u;
#endif
  const uint i = u % 4u;
  [[unroll]] for (uint w = 0u; w < 8u; ++w) {
    const uint q = dq_u32(qs + 32u * i + 4u * w);
#if defined(FORMAT_Q5_K)
    const uint hb = dq_u32(b + 16u + 4u * w);
    wd[w] = (q & 0x0f0f0f0fu) | (((hb >> (2u * i)) & 0x01010101u) << 4);
    wd[8u + w] = ((q >> 4) & 0x0f0f0f0fu) | (((hb >> (2u * i + 1u)) & 0x01010101u) << 4);
#else
    wd[w] = q & 0x0f0f0f0fu;
    wd[8u + w] = (q >> 4) & 0x0f0f0f0fu;
#endif
  }
  const float d = dq_half(dq_u16(b)), dmin = dq_half(dq_u16(b + 2u));
  [[unroll]] for (uint j = 0u; j < 2u; ++j) {
    // The 6-bit scale and min of sub-block 2i + j (dequant.glsl's Q4_K layout).
    const uint s = 2u * i + j;
    uint scale, mn;
    if (s < 4u) {
      scale = dq_u8(b + 4u + s) & 63u;
      mn = dq_u8(b + 8u + s) & 63u;
    } else {
      scale = (dq_u8(b + 8u + s) & 0xfu) | ((dq_u8(b + s) >> 6) << 4);
      mn = (dq_u8(b + 8u + s) >> 4) | ((dq_u8(b + 4u + s) >> 6) << 4);
    }
    precise float dsc = d * float(scale);
    precise float dm = dmin * float(mn);
    sc.f[j] = dsc;
    sc.f[2u + j] = dm;
  }
#endif
}

// The unit's integer sums with the rounded activations whose first q word is xq[q0].
void iu_sums(uint wd[IU_WORDS], uint q0, out int sums[IU_SUMS]) {
  [[unroll]] for (uint i = 0u; i < IU_SUMS; ++i) {
    int s = 0;
    [[unroll]] for (uint k = i * IU_WORDS_PER_SUM; k < (i + 1u) * IU_WORDS_PER_SUM; ++k) s = iu_dot4(wd[k], xq[q0 + k], s);
    sums[i] = s;
  }
}

// acc plus the unit's value (int_ops.h's IntUnit::add_to), with the activation blocks'
// scales xd[b] and d sum xs[b] for b < IU_BLOCKS.
float iu_add_to(float acc, IuScales sc, int sums[IU_SUMS], float xd[IU_BLOCKS], float xs[IU_BLOCKS]) {
#if defined(FORMAT_Q8_0) || IU_CODES
  precise float dd = sc.f.x * xd[0];
  precise float r = fma(dd, float(sums[0]), acc);
#if IU_MIN
  r = fma(sc.f.y, xs[0], r);
#endif
  return r;
#elif defined(FORMAT_Q6_K) || defined(FORMAT_Q3_K)
  precise float dd = sc.f.x * xd[0];
  precise float r = fma(dd, float(sc.i.x * sums[0] + sc.i.y * sums[1]), acc);
  return r;
#else
  precise float r = acc;
  [[unroll]] for (uint j = 0u; j < 2u; ++j) {
    precise float scaled = sc.f[j] * float(sums[j]);
    r = fma(xd[j], scaled, r);
    r = fma(-sc.f[2u + j], xs[j], r);
  }
  return r;
#endif
}

#endif
