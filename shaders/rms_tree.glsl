// fafo's RMSNorm numerics on Vulkan, shared by shaders/rms_norm.comp and the NORM variants
// of shaders/matmul.comp (an RMSNorm fused into the product that reads it), so both give
// the same bits. A row of n values is cut into 16-value chunks and chunk j belongs to
// lane j % 32 (matmul.comp's chunks and lanes); a lane adds the squares of its chunks'
// values in increasing column order with fma into a `precise` sum; the 32 lane sums are
// added by matmul.comp's tree (l + 16, then + 8, + 4, + 2, + 1). The row's scale is
// 1 / sqrt(sum / n + eps) and a normalized value x * scale * gain. Nothing depends on the
// workgroup, the step's size or the other rows.
//
// The including shader declares the row data as `x[]` before including this file.

#define RMS_LANES 32u

// Lane `lane`'s sum of squares of the row of n values at x[base].
float rms_lane_sum(uint base, uint n, uint lane) {
  precise float s = 0.0;
  for (uint c0 = lane * 16u; c0 < n; c0 += RMS_LANES * 16u) {
    const uint end = min(c0 + 16u, n);
    for (uint c = c0; c < end; ++c) {
      const float v = x[base + c];
      s = fma(v, v, s);
    }
  }
  return s;
}

// The row's scale from its 32 lane sums, added by the fixed tree.
float rms_scale(float lane_sums[RMS_LANES], uint n, float eps) {
  precise float s[RMS_LANES] = lane_sums;
  [[unroll]] for (uint l = 0u; l < 16u; ++l) s[l] = s[l] + s[l + 16u];
  [[unroll]] for (uint l = 0u; l < 8u; ++l) s[l] = s[l] + s[l + 8u];
  [[unroll]] for (uint l = 0u; l < 4u; ++l) s[l] = s[l] + s[l + 4u];
  [[unroll]] for (uint l = 0u; l < 2u; ++l) s[l] = s[l] + s[l + 2u];
  precise float mean = (s[0] + s[1]) / float(n) + eps;
  precise float scale = 1.0 / sqrt(mean);
  return scale;
}

// A normalized value.
float rms_apply(float value, float scale, float gain) {
  precise float r = value * scale * gain;
  return r;
}
