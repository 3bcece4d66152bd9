// IEEE half (fp16) <-> float conversions by integer arithmetic, bit for bit as fafo's
// CPU code (runtime/src/quant/half_float.cpp): round to nearest, ties to even; exact
// subnormals, infinities and quiet NaNs, whatever the device's denormal or rounding
// modes for float16 (none of which the portable path relies on).
#ifndef FAFO_HALF_GLSL
#define FAFO_HALF_GLSL

// Half bits (low 16 bits of h) -> float, exactly.
float half_to_float(uint h) {
  const uint sign = (h & 0x8000u) << 16;
  const uint e = (h >> 10) & 0x1fu;
  const uint m = h & 0x3ffu;
  if (e == 0x1fu) return uintBitsToFloat(sign | 0x7f800000u | (m << 13));  // inf, NaN
  if (e != 0u) return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
  return uintBitsToFloat(sign | floatBitsToUint(float(m) * 5.9604644775390625e-8));  // m * 2^-24, exact
}

// float -> half bits, round to nearest even.
uint float_to_half(float f) {
  const uint bits = floatBitsToUint(f);
  const uint sign = (bits >> 16) & 0x8000u;
  const uint magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7c00u | 0x0200u | ((magnitude >> 13) & 0x3ffu);  // quiet NaN
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // rounds to infinity
  if (magnitude >= 0x38800000u) {                       // normal half
    const uint rounded = magnitude + 0xfffu + ((magnitude >> 13) & 1u);
    return sign | ((rounded - (112u << 23)) >> 13);
  }
  if (magnitude < 0x33000000u) return sign;  // rounds to zero
  // Subnormal half: round the significand shifted down to units of 2^-24.
  const uint exponent = magnitude >> 23;  // 102..112
  const uint significand = (magnitude & 0x7fffffu) | 0x800000u;
  const uint drop = 126u - exponent;      // 14..24
  uint q = significand >> drop;
  const uint remainder = significand & ((1u << drop) - 1u);
  const uint half_unit = 1u << (drop - 1u);
  if (remainder > half_unit || (remainder == half_unit && (q & 1u) != 0u)) ++q;
  return sign | q;
}

#endif
