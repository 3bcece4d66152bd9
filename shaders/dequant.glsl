// Reading GGUF weights in a compute shader: the byte layouts of every weight format
// fafo's Vulkan kernels support, decoded bit for bit as fafo's CPU dequantize_row
// (runtime/src/quant) decodes them.
//
// The including shader declares the weights as raw 32-bit words
//     layout(std430, binding = 1) readonly buffer InW { uint w_words[]; };
// (GGUF bytes, little endian, rows of tensor_row_bytes(type, cols) bytes back to
// back, the buffer's size rounded up to a multiple of 4) and #defines exactly one of
//     FORMAT_F32 FORMAT_F16 FORMAT_BF16 FORMAT_Q8_0 FORMAT_Q4_0 FORMAT_Q4_1 FORMAT_Q5_0
//     FORMAT_Q5_1 FORMAT_Q2_K FORMAT_Q3_K FORMAT_Q4_K FORMAT_Q5_K FORMAT_Q6_K
//     FORMAT_IQ4_NL FORMAT_IQ4_XS FORMAT_MXFP4 FORMAT_IQ2_XXS FORMAT_IQ2_XS FORMAT_IQ3_XXS
//     FORMAT_IQ3_S
// before including this file. It then provides
//     QK, BLOCK_BYTES           values and bytes per block (1 and 4/2 for float formats)
//     DQ_PLAIN_FLOAT            1 for F32/F16/BF16 (any column count), else 0
//     dq_row_chunk(row_off, chunk, v)   values [16*chunk, 16*chunk + 16) of the row
//                                       starting at byte row_off
//     dq_block_chunk(block_off, sub, v) values [16*sub, 16*sub + 16) of one block
//                                       (quantized formats)
//     dq_row_value(row_off, col)        one value (plain float formats: the tail of a
//                                       row whose length is not a multiple of 16)
// and the byte readers below. Every format's blocks, and every sub-block scale, align
// to 16 values, so a 16-value chunk never straddles two blocks or two scales.
//
// Portability: only 32-bit loads and integer/float32 arithmetic (no 8/16-bit storage,
// no float16 arithmetic, no optional feature). Blocks need not be 4-byte aligned (a
// Q4_0 block is 18 bytes), and every multi-byte field starts at an even byte offset,
// which the 16- and 32-bit readers rely on, except in MXFP4 (17-byte blocks of single
// bytes: dq_load16_any reads them at any offset). MXFP4's scale is a subnormal float
// for exponent bytes below 2, and its products are for bytes up to 5 (scales near
// 2^-123, which real weights do not have): those are exact only on devices that keep
// float32 denormals. fp16 is decoded by bit manipulation, exact
// for subnormals, infinities and NaNs whatever the device's denormal mode.
//
// Bit-exactness: each value is the same float expression, evaluated in the same
// order, as the CPU code (ggml's order, e.g. (d * sc) * q - (dmin * m) for Q4_K), and
// `precise` forbids the compiler to fuse a multiply and an add into one FMA or to
// reorder them. Products and sums of float32 are correctly rounded in Vulkan, so the
// results match to the bit (-0.0 included).
#ifndef FAFO_DEQUANT_GLSL
#define FAFO_DEQUANT_GLSL

#include "half.glsl"

// ---- raw readers (byte offsets into w_words) ----

uint dq_u8(uint off) { return (w_words[off >> 2] >> ((off & 3u) << 3)) & 0xffu; }

// Sign-extended byte.
int dq_i8(uint off) { return bitfieldExtract(int(w_words[off >> 2]), int((off & 3u) << 3), 8); }

// 16 bits at an even offset (never straddles a word).
uint dq_u16(uint off) { return (w_words[off >> 2] >> ((off & 2u) << 3)) & 0xffffu; }

// Combines two consecutive words into the 32 bits starting `shift` (0 or 16) bits into
// the first: branch-free, and (a << 16) << 16 is 0, unlike a shift by 32.
uint dq_funnel(uint a, uint b, uint shift) { return (a >> shift) | ((b << 16) << (16u - shift)); }

// The next word after word i, clamped to the buffer so that an aligned read at the
// very end never touches the word past it (whose value is then discarded).
uint dq_next_word(uint i) { return w_words[min(i + 1u, uint(w_words.length()) - 1u)]; }

// 32 bits at an even offset.
uint dq_u32(uint off) {
  const uint i = off >> 2;
  return dq_funnel(w_words[i], dq_next_word(i), (off & 2u) << 3);
}

// 16 bytes at an even offset, as 4 little-endian words (byte k is byte k%4 of word k/4).
uvec4 dq_load16(uint off) {
  const uint i = off >> 2;
  const uint s = (off & 2u) << 3;
  const uint a = w_words[i], b = w_words[i + 1u], c = w_words[i + 2u], d = w_words[i + 3u];
  const uint e = dq_next_word(i + 3u);
  return uvec4(dq_funnel(a, b, s), dq_funnel(b, c, s), dq_funnel(c, d, s), dq_funnel(d, e, s));
}

// 16 bytes at any offset.
uvec4 dq_load16_any(uint off) {
  const uint i = off >> 2;
  const uint s = (off & 3u) << 3;
  const uint a = w_words[i], b = w_words[i + 1u], c = w_words[i + 2u], d = w_words[i + 3u];
  const uint e = dq_next_word(i + 3u);
  // (x << 1) << (31 - s) is x << (32 - s), and 0 for s = 0.
  return uvec4((a >> s) | ((b << 1u) << (31u - s)), (b >> s) | ((c << 1u) << (31u - s)),
               (c >> s) | ((d << 1u) << (31u - s)), (d >> s) | ((e << 1u) << (31u - s)));
}

// Byte k (0..15) of 16 loaded bytes.
uint dq_byte(uvec4 bytes, uint k) { return (bytes[k >> 2] >> ((k & 3u) << 3)) & 0xffu; }

// IEEE half bits -> float, exactly (subnormals become normal floats).
float dq_half(uint h) { return half_to_float(h); }

float dq_bf16(uint h) { return uintBitsToFloat(h << 16); }

// ---- formats ----

#if defined(FORMAT_F32)
#define QK 1u
#define BLOCK_BYTES 4u
#elif defined(FORMAT_F16) || defined(FORMAT_BF16)
#define QK 1u
#define BLOCK_BYTES 2u
#elif defined(FORMAT_Q8_0)
#define QK 32u
#define BLOCK_BYTES 34u
#elif defined(FORMAT_Q4_0)
#define QK 32u
#define BLOCK_BYTES 18u
#elif defined(FORMAT_Q4_1)
#define QK 32u
#define BLOCK_BYTES 20u
#elif defined(FORMAT_Q5_0)
#define QK 32u
#define BLOCK_BYTES 22u
#elif defined(FORMAT_Q5_1)
#define QK 32u
#define BLOCK_BYTES 24u
#elif defined(FORMAT_Q2_K)
#define QK 256u
#define BLOCK_BYTES 84u
#elif defined(FORMAT_Q3_K)
#define QK 256u
#define BLOCK_BYTES 110u
#elif defined(FORMAT_Q4_K)
#define QK 256u
#define BLOCK_BYTES 144u
#elif defined(FORMAT_Q5_K)
#define QK 256u
#define BLOCK_BYTES 176u
#elif defined(FORMAT_Q6_K)
#define QK 256u
#define BLOCK_BYTES 210u
#elif defined(FORMAT_IQ4_NL)
#define QK 32u
#define BLOCK_BYTES 18u
#elif defined(FORMAT_IQ4_XS)
#define QK 256u
#define BLOCK_BYTES 136u
#elif defined(FORMAT_MXFP4)
#define QK 32u
#define BLOCK_BYTES 17u
#elif defined(FORMAT_IQ2_XXS)
#define QK 256u
#define BLOCK_BYTES 66u
#elif defined(FORMAT_IQ2_XS)
#define QK 256u
#define BLOCK_BYTES 74u
#elif defined(FORMAT_IQ3_XXS)
#define QK 256u
#define BLOCK_BYTES 98u
#elif defined(FORMAT_IQ3_S)
#define QK 256u
#define BLOCK_BYTES 110u
#else
#error "dequant.glsl: #define one FORMAT_* before including it"
#endif

#if defined(FORMAT_F32) || defined(FORMAT_F16) || defined(FORMAT_BF16)
#define DQ_PLAIN_FLOAT 1
#else
#define DQ_PLAIN_FLOAT 0
#endif

#if DQ_PLAIN_FLOAT

// Value `col` of a row of plain floats.
float dq_row_value(uint row_off, uint col) {
#if defined(FORMAT_F32)
  return uintBitsToFloat(w_words[(row_off >> 2) + col]);
#elif defined(FORMAT_F16)
  return dq_half(dq_u16(row_off + 2u * col));
#else
  return dq_bf16(dq_u16(row_off + 2u * col));
#endif
}

void dq_row_chunk(uint row_off, uint chunk, out float v[16]) {
#if defined(FORMAT_F32)
  const uint w0 = (row_off >> 2) + 16u * chunk;
  [[unroll]] for (uint k = 0u; k < 16u; ++k) v[k] = uintBitsToFloat(w_words[w0 + k]);
#else
  const uint off = row_off + 32u * chunk;
  const uvec4 lo = dq_load16(off);
  const uvec4 hi = dq_load16(off + 16u);
  [[unroll]] for (uint k = 0u; k < 4u; ++k) {
    const uint a = lo[k], b = hi[k];
#if defined(FORMAT_F16)
    v[2u * k] = dq_half(a & 0xffffu);
    v[2u * k + 1u] = dq_half(a >> 16);
    v[8u + 2u * k] = dq_half(b & 0xffffu);
    v[8u + 2u * k + 1u] = dq_half(b >> 16);
#else
    v[2u * k] = dq_bf16(a & 0xffffu);
    v[2u * k + 1u] = dq_bf16(a >> 16);
    v[8u + 2u * k] = dq_bf16(b & 0xffffu);
    v[8u + 2u * k + 1u] = dq_bf16(b >> 16);
#endif
  }
#endif
}

#else  // quantized formats

#if defined(FORMAT_Q8_0)
// value = q * d, q a signed byte.
void dq_block_chunk(uint b, uint sub, out float v[16]) {
  const float d = dq_half(dq_u16(b));
  const uvec4 qs = dq_load16(b + 2u + 16u * sub);
  [[unroll]] for (uint k = 0u; k < 16u; ++k) {
    const int q = bitfieldExtract(int(qs[k >> 2]), int((k & 3u) << 3), 8);
    precise float value = float(q) * d;
    v[k] = value;
  }
}

#elif defined(FORMAT_Q4_0) || defined(FORMAT_Q4_1)
// Value j (< 16) is the low nibble of qs[j], value j + 16 the high nibble.
// Q4_0: (q - 8) * d.  Q4_1: q * d + m.
void dq_block_chunk(uint b, uint sub, out float v[16]) {
  const float d = dq_half(dq_u16(b));
#if defined(FORMAT_Q4_0)
  const uvec4 qs = dq_load16(b + 2u);
#else
  const float m = dq_half(dq_u16(b + 2u));
  const uvec4 qs = dq_load16(b + 4u);
#endif
  const uint shift = 4u * sub;
  [[unroll]] for (uint k = 0u; k < 16u; ++k) {
    const uint q = (dq_byte(qs, k) >> shift) & 0xfu;
#if defined(FORMAT_Q4_0)
    precise float value = float(int(q) - 8) * d;
#else
    precise float value = float(q) * d + m;
#endif
    v[k] = value;
  }
}

#elif defined(FORMAT_Q5_0) || defined(FORMAT_Q5_1)
// As Q4_x plus a fifth bit: bit 4 of value j is bit j of the 32-bit word qh.
// Q5_0: (q - 16) * d.  Q5_1: q * d + m.
void dq_block_chunk(uint b, uint sub, out float v[16]) {
  const float d = dq_half(dq_u16(b));
#if defined(FORMAT_Q5_0)
  const uint qh = dq_u32(b + 2u);
  const uvec4 qs = dq_load16(b + 6u);
#else
  const float m = dq_half(dq_u16(b + 2u));
  const uint qh = dq_u32(b + 4u);
  const uvec4 qs = dq_load16(b + 8u);
#endif
  const uint shift = 4u * sub;
  [[unroll]] for (uint k = 0u; k < 16u; ++k) {
    const uint q = ((dq_byte(qs, k) >> shift) & 0xfu) | (((qh >> (16u * sub + k)) & 1u) << 4);
#if defined(FORMAT_Q5_0)
    precise float value = float(int(q) - 16) * d;
#else
    precise float value = float(q) * d + m;
#endif
    v[k] = value;
  }
}

#elif defined(FORMAT_Q2_K) || defined(FORMAT_Q3_K)
// 16 sub-blocks of 16. Sub-block s = 8*half + 2*plane + part holds bits 2*plane..+1 of
// qs[32*half + 16*part + l], l < 16 (layout: scales/hmask, qs, then d).
//   Q2_K: (d * (sc & 15)) * q - (dmin * (sc >> 4)), scales[s] = sc, d at 80, dmin at 82.
//   Q3_K: (d * (scale6 - 32)) * (q - (hmask bit ? 0 : 4)), bit 4*half + plane of
//         hmask[16*part + l]; hmask at 0, qs at 32, 6-bit scales at 96, d at 108.
void dq_block_chunk(uint b, uint sub, out float v[16]) {
  const uint half_ = sub >> 3;
  const uint plane = (sub >> 1) & 3u;
  const uint part = sub & 1u;
#if defined(FORMAT_Q2_K)
  const uint sc = dq_u8(b + sub);
  const float d = dq_half(dq_u16(b + 80u));
  const float dmin = dq_half(dq_u16(b + 82u));
  precise float dl = d * float(sc & 0xfu);
  precise float ml = dmin * float(sc >> 4);
  const uvec4 qs = dq_load16(b + 16u + 32u * half_ + 16u * part);
  [[unroll]] for (uint k = 0u; k < 16u; ++k) {
    const uint q = (dq_byte(qs, k) >> (2u * plane)) & 3u;
    precise float value = dl * float(q) - ml;
    v[k] = value;
  }
#else
  const uint low4 = sub < 8u ? dq_u8(b + 96u + sub) & 0xfu : dq_u8(b + 96u + sub - 8u) >> 4;
  const uint high2 = (dq_u8(b + 104u + (sub & 3u)) >> (2u * (sub >> 2))) & 3u;
  const int scale = int(low4 | (high2 << 4)) - 32;
  const float d = dq_half(dq_u16(b + 108u));
  precise float dl = d * float(scale);
  const uvec4 qs = dq_load16(b + 32u + 32u * half_ + 16u * part);
  const uvec4 hm = dq_load16(b + 16u * part);
  const uint high_bit = 4u * half_ + plane;
  [[unroll]] for (uint k = 0u; k < 16u; ++k) {
    const int low = int((dq_byte(qs, k) >> (2u * plane)) & 3u);
    const int q = low - (((dq_byte(hm, k) >> high_bit) & 1u) != 0u ? 0 : 4);
    precise float value = dl * float(q);
    v[k] = value;
  }
#endif
}

#elif defined(FORMAT_Q4_K) || defined(FORMAT_Q5_K)
// 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes at offset 4 (d at 0,
// dmin at 2). Chunk s (16 values) is in sub-block j = s/2: nibble j%2 of
// qs[32*(s/4) + 16*(s%2) + l]; Q5_K adds bit j of qh[16*(s%2) + l] as bit 4.
// value = (d * sc) * q - (dmin * m).
void dq_block_chunk(uint b, uint sub, out float v[16]) {
  const uint j = sub >> 1;
  const uint sc_off = b + 4u;
  uint sc, mn;
  if (j < 4u) {
    sc = dq_u8(sc_off + j) & 63u;
    mn = dq_u8(sc_off + j + 4u) & 63u;
  } else {
    const uint packed = dq_u8(sc_off + j + 4u);
    sc = (packed & 0xfu) | ((dq_u8(sc_off + j - 4u) >> 6) << 4);
    mn = (packed >> 4) | ((dq_u8(sc_off + j) >> 6) << 4);
  }
  const float d = dq_half(dq_u16(b));
  const float dmin = dq_half(dq_u16(b + 2u));
  precise float dl = d * float(sc);
  precise float ml = dmin * float(mn);
  const uint nibble_shift = 4u * (j & 1u);
#if defined(FORMAT_Q4_K)
  const uvec4 qs = dq_load16(b + 16u + 32u * (sub >> 2) + 16u * (sub & 1u));
#else
  const uvec4 qs = dq_load16(b + 48u + 32u * (sub >> 2) + 16u * (sub & 1u));
  const uvec4 qh = dq_load16(b + 16u + 16u * (sub & 1u));
#endif
  [[unroll]] for (uint k = 0u; k < 16u; ++k) {
#if defined(FORMAT_Q4_K)
    const uint q = (dq_byte(qs, k) >> nibble_shift) & 0xfu;
#else
    const uint q = ((dq_byte(qs, k) >> nibble_shift) & 0xfu) | (((dq_byte(qh, k) >> j) & 1u) << 4);
#endif
    precise float value = dl * float(q) - ml;
    v[k] = value;
  }
}

#elif defined(FORMAT_Q6_K)
// 16 sub-blocks of 16 with signed 8-bit scales at 192, d at 208. Chunk s = 8*half +
// 2*k + part: low 4 bits are nibble k/2 of ql[64*half + 32*(k%2) + 16*part + l], high
// 2 bits are bits 2k..2k+1 of qh[128 + 32*half + 16*part + l].
// value = (d * scales[s]) * (q - 32).
void dq_block_chunk(uint b, uint sub, out float v[16]) {
  const uint half_ = sub >> 3;
  const uint k4 = (sub >> 1) & 3u;
  const uint part = sub & 1u;
  const float d = dq_half(dq_u16(b + 208u));
  precise float scale = d * float(dq_i8(b + 192u + sub));
  const uvec4 ql = dq_load16(b + 64u * half_ + 32u * (k4 & 1u) + 16u * part);
  const uvec4 qh = dq_load16(b + 128u + 32u * half_ + 16u * part);
  const uint low_shift = 4u * (k4 >> 1);
  [[unroll]] for (uint k = 0u; k < 16u; ++k) {
    const uint q = ((dq_byte(ql, k) >> low_shift) & 0xfu) | (((dq_byte(qh, k) >> (2u * k4)) & 3u) << 4);
    precise float value = scale * float(int(q) - 32);
    v[k] = value;
  }
}

#elif defined(FORMAT_IQ4_NL) || defined(FORMAT_IQ4_XS) || defined(FORMAT_MXFP4)
// 4-bit codes that index a table of 16 signed bytes (runtime/src/quant/blocks.h), four
// to a word: IQ4_NL's and IQ4_XS's non-linear grid, MXFP4's doubled fp4 numbers.
#if defined(FORMAT_MXFP4)
const uvec4 DQ_TABLE = uvec4(0x03020100u, 0x0c080604u, 0xfdfeff00u, 0xf4f8fafcu);
#else
const uvec4 DQ_TABLE = uvec4(0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);
#endif
float dq_table_value(uint code) { return float(bitfieldExtract(int(DQ_TABLE[code >> 2]), int((code & 3u) << 3), 8)); }

// Value j (< 16) of a 32-value group is the low nibble of qs[j], value j + 16 the high one.
//   IQ4_NL: d * table[q], d at 0, qs at 2.
//   IQ4_XS: (d * (scale6 - 32)) * table[q]; d at 0, the scales' high 2 bits at 2 (bits
//           2ib..2ib+1 of 16), their low 4 bits in the nibbles of 4..7, qs at 8 (16 bytes
//           per sub-block of 32).
//   MXFP4:  table[q] * 2^(e - 128), e the byte at 0, qs at 1.
void dq_block_chunk(uint b, uint sub, out float v[16]) {
#if defined(FORMAT_IQ4_NL)
  const float d = dq_half(dq_u16(b));
  const uvec4 qs = dq_load16(b + 2u);
  const uint shift = 4u * sub;
#elif defined(FORMAT_IQ4_XS)
  const uint ib = sub >> 1;
  const uint low4 = (dq_u8(b + 4u + (ib >> 1)) >> (4u * (ib & 1u))) & 0xfu;
  const uint high2 = (dq_u16(b + 2u) >> (2u * ib)) & 3u;
  precise float d = dq_half(dq_u16(b)) * float(int(low4 | (high2 << 4)) - 32);
  const uvec4 qs = dq_load16(b + 8u + 16u * ib);
  const uint shift = 4u * (sub & 1u);
#else
  const uint e = dq_u8(b);
  const float d = uintBitsToFloat(e < 2u ? 0x00200000u << e : (e - 1u) << 23);
  const uvec4 qs = dq_load16_any(b + 1u);
  const uint shift = 4u * sub;
#endif
  [[unroll]] for (uint k = 0u; k < 16u; ++k) {
    const float q = dq_table_value((dq_byte(qs, k) >> shift) & 0xfu);
#if defined(FORMAT_MXFP4)
    precise float value = q * d;
#else
    precise float value = d * q;
#endif
    v[k] = value;
  }
}

#elif defined(FORMAT_IQ2_XXS) || defined(FORMAT_IQ2_XS) || defined(FORMAT_IQ3_XXS) || defined(FORMAT_IQ3_S)
#include "dequant_grid.glsl"
#endif

void dq_row_chunk(uint row_off, uint chunk, out float v[16]) {
  const uint chunks_per_block = QK / 16u;
  dq_block_chunk(row_off + (chunk / chunks_per_block) * BLOCK_BYTES, chunk % chunks_per_block, v);
}

#endif  // DQ_PLAIN_FLOAT

#endif  // FAFO_DEQUANT_GLSL
