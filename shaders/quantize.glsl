// Rounding a block of 32 activations to 8 bits for the integer products, as the CUDA
// backend's QuantizeRowsOp does (cuda_backend/src/int_ops.h), bit for bit on every
// device for scales of at least 2^-100: shaders/quantize.comp's rows, and
// shaders/attention_combine.comp's output rounded where it is written. No division but
// for an estimate and no fused multiply-add: only correctly rounded products and
// differences.
#ifndef FAFO_QUANTIZE_GLSL
#define FAFO_QUANTIZE_GLSL

// The sign (-1, 0 or 1) of v - a d, exactly, for a of at most 12 significant bits
// (a = e +- 1/2, |e| <= 128): a d = a d_hi + a d_lo, d_hi the top 12 significant bits of
// d and d_lo the rest, each product exact; near a d, v - a d_hi is exact (the two are
// within a factor of 2 of each other), and elsewhere too large for a d_lo (< 2^-11 a d_hi)
// or its rounding to change the sign. Only correctly rounded products and differences,
// no fused multiply-add (which a Vulkan device may round twice: lavapipe does).
int sign_of_difference(float v, float a, float d) {
  const float d_hi = uintBitsToFloat(floatBitsToUint(d) & 0xfffff000u);
  precise float d_lo = d - d_hi;
  precise float p_hi = a * d_hi;
  precise float p_lo = a * d_lo;
  precise float r_hi = v - p_hi;
  precise float r = r_hi - p_lo;
  return r > 0.0 ? 1 : (r < 0.0 ? -1 : 0);
}

// The integer nearest to v / d (ties to even) for d >= 2^-100 finite and |v / d| < 129
// (below, a partial product may be subnormal, which a device may flush to zero): an
// estimate within one of it, moved by the exact signs of v - (e +- 1/2) d (cuda_backend's
// nearest_quotient, which takes them from fused multiply-adds: the same integers).
int nearest_quotient(float v, float d) {
  const float e = roundEven(v * (1.0 / d));
  const int n = int(e);
  const int above = sign_of_difference(v, e + 0.5, d);
  if (above > 0 || (above == 0 && (n & 1) != 0)) return n + 1;
  const int below = sign_of_difference(v, e - 0.5, d);
  if (below < 0 || (below == 0 && (n & 1) != 0)) return n - 1;
  return n;
}

// Block v: d = max |v| * RN(1/127) (a NaN counted as infinite); each q the integer
// nearest to v / d (ties to even), 0 where d is 0 or not finite, within -127..127, four
// to a word (the first in the lowest byte); s = d times the sum of the q.
void q8_block(float v[32], out uint words[8], out float d_out, out float s_out) {
  float largest = 0.0;
  [[unroll]] for (uint k = 0u; k < 32u; ++k) {
    const uint bits = floatBitsToUint(v[k]) & 0x7fffffffu;
    const float m = bits > 0x7f800000u ? uintBitsToFloat(0x7f800000u) : uintBitsToFloat(bits);
    largest = m > largest ? m : largest;
  }
  const float inv127 = uintBitsToFloat(0x3c010204u);  // RN(1 / 127)
  precise float d = largest * inv127;
  const bool usable = d > 0.0 && floatBitsToUint(d) < 0x7f800000u;
  int sum = 0;
  [[unroll]] for (uint w = 0u; w < 8u; ++w) {
    uint word = 0u;
    [[unroll]] for (uint k = 0u; k < 4u; ++k) {
      int q = usable ? nearest_quotient(v[4u * w + k], d) : 0;
      q = clamp(q, -127, 127);
      sum += q;
      word |= (uint(q) & 0xffu) << (8u * k);
    }
    words[w] = word;
  }
  precise float s = d * float(sum);
  d_out = d;
  s_out = s;
}

#endif
