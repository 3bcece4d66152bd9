// The KV cache's block formats (--cache-type q8_0 / q4_0), for the shaders built with
// KV_Q8_0=1 or KV_Q4_0=1: GGUF's 32-value blocks, an fp16 scale d then 32 signed bytes
// (Q8_0: q * d, 34 bytes) or 16 bytes of nibbles (Q4_0: value j the low nibble of byte
// j, value j + 16 the high one, (q - 8) * d, 18 bytes). A layer's cache is its entries
// one after another, so value i of the layer is value i % 32 of block i / 32; entries
// are whole pairs of blocks (kv_dim a multiple of 64), and a pair is whole 32-bit words
// (17 or 9), so each writer owns its words.
//
// kv_quantize_block is fafo::quantize_row's Q8_0 / Q4_0 (runtime/src/quant/
// legacy_formats.cpp) value for value: the scale's quotient and its reciprocal are
// computed by integer long division, rounded to nearest even (a shader's float division
// need not be), the codes with `precise` products and sums (no fused multiply-add), so
// a device writes the host's blocks for blocks of finite values (Vulkan lets a device
// flush subnormals and assume no NaN or infinity: there a block of only subnormals, or
// one holding a NaN or infinity, may be written otherwise).
#ifndef FAFO_KV_BLOCKS_GLSL
#define FAFO_KV_BLOCKS_GLSL

#include "half.glsl"

#if KV_Q8_0
#define KV_BLOCK_BYTES 34u
#else
#define KV_BLOCK_BYTES 18u
#endif
#define KV_PAIR_WORDS (KV_BLOCK_BYTES / 2u)  // two blocks

// The byte where value i's block starts, and the byte that holds value i's code.
uint kv_block_byte(uint i) { return (i >> 5) * KV_BLOCK_BYTES; }
uint kv_code_byte(uint i) {
#if KV_Q8_0
  return kv_block_byte(i) + 2u + (i & 31u);
#else
  return kv_block_byte(i) + 2u + (i & 15u);
#endif
}
// Value i from the word holding its block's scale (d_word, the block at byte b) and the
// word holding its code (code_word, the code at byte at).
float kv_decode(uint d_word, uint b, uint code_word, uint at, uint i) {
  const float d = half_to_float((d_word >> ((b & 2u) << 3)) & 0xffffu);
  const uint byte = (code_word >> ((at & 3u) << 3)) & 0xffu;
#if KV_Q8_0
  return float(int(byte << 24) >> 24) * d;
#else
  const uint q = (i & 31u) < 16u ? byte & 15u : byte >> 4;
  return float(int(q) - 8) * d;
#endif
}

// n * 2^e / den rounded to nearest even, for 0 < n < 2^24 and 0 < den < 2^24, where the
// result is a normal float (else ldexp's value, which the callers round to an fp16 zero):
// 25 quotient bits by long division, then the rounding.
float kv_div_rn(uint n, int e, uint den) {
  uint q = n / den, r = n % den;
  int frac = 0;
  for (int guard = 0; q < (1u << 24) && guard < 64; ++guard) {
    r <<= 1;
    q <<= 1;
    if (r >= den) {
      r -= den;
      q |= 1u;
    }
    ++frac;
  }
  uint m = q >> 1;  // 24 bits: the value is m * 2^k, then rounded by the bit below m
  int k = e - frac + 1;
  if ((q & 1u) != 0u && (r != 0u || (m & 1u) != 0u)) ++m;
  if (m == (1u << 24)) {
    m >>= 1;
    ++k;
  }
  const int biased = k + 23 + 127;  // m = 1.f x 2^23
  if (biased < 1 || biased > 254) return ldexp(float(m), k);  // not a normal float: unused by the callers
  return uintBitsToFloat((uint(biased) << 23) | (m & 0x7fffffu));
}

// max|x| / 127 as the host divides (a positive finite or infinite max; 0 for 0).
float kv_q8_scale(float amax) {
  const uint bits = floatBitsToUint(amax);
  if (amax == 0.0 || (bits & 0x7f800000u) == 0x7f800000u) return amax / 127.0;  // 0, or inf
  const uint e = bits >> 23;
  const uint m = e == 0u ? bits & 0x7fffffu : (bits & 0x7fffffu) | 0x800000u;
  return kv_div_rn(m, e == 0u ? -149 : int(e) - 150, 127u);
}

// 1 / d for the fp16 scale with bits h, 0 where d is 0 (the host's inverse_or_zero).
float kv_inverse(uint h) {
  const uint e = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  const float sign = (h & 0x8000u) != 0u ? -1.0 : 1.0;
  if (e == 0u && mant == 0u) return 0.0;
  if (e == 0x1fu) return mant == 0u ? sign * 0.0 : uintBitsToFloat(0x7fc00000u);  // 1/inf, NaN
  const uint md = e == 0u ? mant : mant | 0x400u;  // d = md * 2^(e - 25), or md * 2^-24
  return sign * kv_div_rn(1u, e == 0u ? 24 : 25 - int(e), md);
}

// The host's round_clamped: clamp to [lo, hi] (NaN to lo), then halves away from zero.
int kv_round(float v, float lo, float hi) {
  v = v > lo ? v : lo;
  v = v < hi ? v : hi;
  precise float r = v + (v < 0.0 ? -0.5 : 0.5);
  return int(r);
}

// Writes the block of x into w (zeroed) from byte `first` (0, or KV_BLOCK_BYTES: the
// second block of a pair).
void kv_put_byte(inout uint w[KV_PAIR_WORDS], uint at, uint byte) { w[at >> 2] |= (byte & 0xffu) << ((at & 3u) << 3); }
void kv_quantize_block(float x[32], inout uint w[KV_PAIR_WORDS], uint first) {
  float scale;
#if KV_Q8_0
  float amax = 0.0;
  for (uint j = 0u; j < 32u; ++j) {
    const float a = abs(x[j]);
    amax = a > amax ? a : amax;  // a NaN never wins (the host's fmax)
  }
  scale = kv_q8_scale(amax);
#else
  float best = 0.0, best_abs = 0.0;
  for (uint j = 0u; j < 32u; ++j) {
    const float a = abs(x[j]);
    if (a > best_abs) {
      best_abs = a;
      best = x[j];
    }
  }
  precise float by_eight = best * -0.125;  // best / -8, exactly (a power of two)
  scale = by_eight;
  if (best_abs == 0.0) scale = uintBitsToFloat(0x80000000u);  // the host's 0 / -8: -0 (whether or not the device keeps it)
#endif
  const uint h = float_to_half(scale);
  const float inv = kv_inverse(h);
  kv_put_byte(w, first, h);
  kv_put_byte(w, first + 1u, h >> 8);
#if KV_Q8_0
  for (uint j = 0u; j < 32u; ++j) {
    precise float t = x[j] * inv;
    kv_put_byte(w, first + 2u + j, uint(kv_round(t, -127.0, 127.0)));
  }
#else
  for (uint j = 0u; j < 16u; ++j) {
    precise float lo = x[j] * inv;
    precise float hi = x[j + 16u] * inv;
    kv_put_byte(w, first + 2u + j, uint(kv_round(lo, -8.0, 7.0) + 8) | (uint(kv_round(hi, -8.0, 7.0) + 8) << 4));
  }
#endif
}

#endif
