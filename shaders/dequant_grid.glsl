// The codebook formats' dq_block_chunk, included by dequant.glsl (after its readers) for
// FORMAT_IQ2_XXS, FORMAT_IQ2_XS, FORMAT_IQ3_XXS and FORMAT_IQ3_S.
//
// Layouts (runtime/src/quant/blocks.h): a vector of 8 values is a codebook
// entry (shaders/iq_grids.inc: level indices, 2 bits a value for IQ2, 3 for IQ3, two
// 4-value entries per vector for IQ3) with signs, times its group's db:
//   IQ2_XXS: per group ib two words at 2 + 8 ib: four 8-bit indices; 4 x 7 sign bits and
//            the scale s in the top 4 bits; db = (d * (0.5 + s)) * 0.25.
//   IQ2_XS:  16 bits per vector at 2 + 2 (4 ib + l): a 9-bit index, 7 sign bits; two
//            4-bit scales at 66 + ib (the low one for vectors 0, 1); db as IQ2_XXS.
//   IQ3_XXS: half-vector indices at 2 + 8 ib + 2 l (+1); the group's word at 66 + 4 ib
//            as IQ2_XXS's second; db = (d * (0.5 + s)) * 0.5.
//   IQ3_S:   half-vector indices' low 8 bits at 2 + 8 ib + 2 l (+1), their 9th bits in
//            the byte at 66 + ib; vector l's 8 sign bits at 74 + 4 ib + l; 4-bit scales at
//            106 + ib / 2 (the low one for even groups); db = d * (1 + 2 s).
// The 8th sign of a 7-bit set makes the count of minus signs even. value = db * level
// with its sign bit flipped for a minus (ggml's (db * level) * -1 as GCC compiles it). (Their speed on real GPUs is not measured yet.)
#include "iq_grids.inc"
// The codebooks, packed one entry per word (WeightKernels uploads them once, back to
// back: IQ2_XXS, IQ2_XS, IQ3_XXS, IQ3_S), and this format's first entry among them. A
// storage buffer rather than a constant array: glslang makes a function's copy of a
// constant array it indexes at run time, and a private array is filled by every
// invocation, either of which made lavapipe's products with these formats minutes long.
layout(std430, binding = 4) readonly buffer InGrid { uint dq_grid[]; };
#if defined(FORMAT_IQ2_XXS)
#define DQ_GRID_BASE 0u
#elif defined(FORMAT_IQ2_XS)
#define DQ_GRID_BASE FAFO_IQ2XXS_SIZE
#elif defined(FORMAT_IQ3_XXS)
#define DQ_GRID_BASE (FAFO_IQ2XXS_SIZE + FAFO_IQ2XS_SIZE)
#else
#define DQ_GRID_BASE (FAFO_IQ2XXS_SIZE + FAFO_IQ2XS_SIZE + FAFO_IQ3XXS_SIZE)
#endif
#define DQ_GRID(i) dq_grid[DQ_GRID_BASE + (i)]

uint dq_signs7(uint seven) {
  seven &= 127u;
  return seven | (uint(bitCount(seven) & 1) << 7);
}

float dq_grid_level(uint l) {
#if defined(FORMAT_IQ2_XXS) || defined(FORMAT_IQ2_XS)
  return l == 0u ? 8.0 : (l == 1u ? 25.0 : 43.0);
#elif defined(FORMAT_IQ3_XXS)
  return l == 7u ? 62.0 : float(4u + 8u * l);
#else
  return float(2u * l + 1u);
#endif
}

void dq_block_chunk(uint b, uint sub, out float v[16]) {
  const uint ib = sub >> 1;
  const float d = dq_half(dq_u16(b));
#if defined(FORMAT_IQ2_XXS)
  const uint indices = dq_u32(b + 2u + 8u * ib), rest = dq_u32(b + 6u + 8u * ib);
  precise float db = (d * (0.5 + float(rest >> 28))) * 0.25;
#elif defined(FORMAT_IQ2_XS)
  const uint s = (dq_u8(b + 66u + ib) >> (4u * (sub & 1u))) & 0xfu;
  precise float db = (d * (0.5 + float(s))) * 0.25;
#elif defined(FORMAT_IQ3_XXS)
  const uint word = dq_u32(b + 66u + 4u * ib);
  precise float db = (d * (0.5 + float(word >> 28))) * 0.5;
#else
  const uint s = (dq_u8(b + 106u + (ib >> 1)) >> (4u * (ib & 1u))) & 0xfu;
  precise float db = d * float(1u + 2u * s);
  const uint qh = dq_u8(b + 66u + ib);
#endif
  [[unroll]] for (uint t = 0u; t < 2u; ++t) {
    const uint l = 2u * (sub & 1u) + t;
#if defined(FORMAT_IQ2_XXS)
    const uint entry = DQ_GRID((indices >> (8u * l)) & 0xffu);
    const uint signs = dq_signs7(rest >> (7u * l));
#elif defined(FORMAT_IQ2_XS)
    const uint q = dq_u16(b + 2u + 2u * (4u * ib + l));
    const uint entry = DQ_GRID(q & 511u);
    const uint signs = dq_signs7(q >> 9);
#elif defined(FORMAT_IQ3_XXS)
    const uint entry = DQ_GRID(dq_u8(b + 2u + 8u * ib + 2u * l)) | (DQ_GRID(dq_u8(b + 3u + 8u * ib + 2u * l)) << 12);
    const uint signs = dq_signs7(word >> (7u * l));
#else
    const uint first = dq_u8(b + 2u + 8u * ib + 2u * l) | (((qh >> (2u * l)) & 1u) << 8);
    const uint second = dq_u8(b + 3u + 8u * ib + 2u * l) | (((qh >> (2u * l + 1u)) & 1u) << 8);
    const uint entry = DQ_GRID(first) | (DQ_GRID(second) << 12);
    const uint signs = dq_u8(b + 74u + 4u * ib + l);
#endif
    [[unroll]] for (uint j = 0u; j < 8u; ++j) {
#if defined(FORMAT_IQ2_XXS) || defined(FORMAT_IQ2_XS)
      const float level = dq_grid_level((entry >> (2u * j)) & 3u);
#else
      const float level = dq_grid_level((entry >> (3u * j)) & 7u);
#endif
      precise float value = db * level;
      v[8u * t + j] = uintBitsToFloat(floatBitsToUint(value) ^ (((signs >> j) & 1u) << 31));
    }
  }
}
