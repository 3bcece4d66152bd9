#version 450
// Weight matmul over every GGUF weight format (dequant.glsl):
//     out[t * out_stride + out_offset + r] = sum_c x[t * x_stride + c] * W[r][c]
// for t < T tokens and r < rows, W in its packed format (binding 1), x and out fp32;
// with the push constant `accumulate`, out[...] += the sum instead (a residual add fused
// into the product: the same bits as the product followed by elementwise.comp's ADD).
// Compiled per format (-DFORMAT_*) and per variant: -DTILE_T (tokens per tile),
// -DROW_GROUPS (the default rows, or with WHOLE_ROWS invocations, per workgroup; a tuned
// value replaces it through specialization constant 1), -DWHOLE_ROWS=<rows
// per invocation> for the CPU-device mapping below, -DSUBGROUP=1 for the split-rows
// variant with subgroup shuffles (specialization constant 0: lanes), -DINT8=1 for the
// integer products below (and -DDOT4=1 with them: int_units.glsl). WeightKernels
// (runtime/src/backend/vulkan/weight_kernels.cpp) picks the variant.
//
// Numerics, the same for every variant, mapping and T: a row is cut into 16-value
// chunks and chunk j belongs to lane j % 32. Lane l accumulates the products of its
// chunks' values in increasing column order with fma(w, x, acc) into a `precise` sum
// (GLSL: fma feeding a precise variable gives invariant results); the 32 lane sums are
// then added by a fixed tree (l + 16, then + 8, + 4, + 2, + 1). So out[t][r] depends only
// on x[t] and W[r], never on T, the tile, the token's place in it or the mapping: a
// batched step computes each token bit for bit as a single-token step (what lossless
// multi-token decoding relies on; tests/test_vulkan_weight_kernels.cpp checks it).
//
// Split rows (GPUs). Workgroup = ROW_GROUPS rows x 32 invocations, invocation l of a row
// being lane l (adjacent lanes read adjacent chunks: coalesced). A lane dequantizes its
// chunk once into registers and multiplies it with the matching 16 x values of each of
// the TILE_T tokens of its tile, so every weight byte read and decoded serves TILE_T
// tokens. Tiles 1 (mat-vec), 2, 4, 8, 16, 32: the host takes the smallest tile >= T, so
// up to 32 tokens the weights are read once per step whatever T is, and a tile's tokens
// past T are skipped by a uniform branch (T = 9 in the 16-tile costs 9 tokens of
// arithmetic, not a second pass over the weights: no cliff at 8 or any tile boundary).
// Above 32 tokens the 32-tile repeats along y: one more pass over the weights per 32
// tokens, small next to the arithmetic at that size. Lanes meet in shared memory (no
// subgroup operations needed).
//
// Split rows with subgroups (-DSUBGROUP=1, used when the device has subgroup shuffle and
// full subgroups can be required: backend/vulkan/devices.h; FAFO_VULKAN_FEATURES=
// -subgroup turns it off). The same tree, the steps of distance d < SG_LANES
// (specialization constant: min(subgroup size, 32)) done with subgroupShuffleXor in
// registers, the larger ones first through shared memory, so the bits are those of the
// portable variant. With 32 or more lanes per subgroup there is no shared memory and no
// barrier. Invocations are numbered by subgroup (subgroup id * size + invocation id):
// with full subgroups (the host requires them) that numbering is dense, and lanes l and
// l ^ d (d < SG_LANES) of a row share a subgroup whatever the implementation's mapping
// of local invocation ids to subgroups.
//
// Whole rows (WHOLE_ROWS = n, for CPU implementations such as lavapipe, which run
// invocations as the lanes of SIMD registers, mask branches rather than skip them, pay
// for every loaded component lane by lane, and run barriers as coroutine switches): an
// invocation computes n rows entirely, the 32 lane sums of each in the tree's
// depth-first order. No shared memory or barrier; each x value loaded serves n rows.
// The token loops are unrolled to TILE_T with the tokens past T skipped by a uniform
// branch, so every array index is a constant and the sums stay in registers (indexed at
// run time, lavapipe keeps them in memory: 5.7 times slower at T = 1); the host takes
// the smallest of the TILE_T variants (1, 8) that holds the step's tokens, and wider
// steps take passes of 8 (runtime/CMakeLists.txt says why not 32). On lavapipe it is up to ~3.5 times faster
// than split rows (T >= 3); on a GPU its token arrays would live in slow scratch memory.
//
// Gated (-DGATED=1, both mappings): W holds 2 x rows rows, the gate projection's then
// the up projection's, and out[t][r] = silu(g) * u with elementwise.comp's SWIGLU
// expression, g and u each the plain product's bits: matmul, matmul and swiglu in one
// dispatch. A lane (split rows) or an invocation (whole rows) sums a gate row and its up
// row together, so each x value loaded serves both.
//
// Normalized input (-DNORM=1, tiles of up to 8 tokens): x holds the rows before an
// RMSNorm, binding 3 its gain and the push constant eps; the product reads
// rms_norm(x) (shaders/rms_tree.glsl) computed on the fly, the bits rms_norm.comp would
// have written, so an RMSNorm and the product after it are one dispatch. A workgroup
// first computes its token tile's scales: split rows spread the 32 lane sums per token
// over the workgroup's invocations, meeting in shared memory; whole rows (no barriers on
// CPU devices) compute them all in every invocation.
//
// Integer products (-DINT8=1, int_units.glsl's formats: the block formats but Q2_K and
// the IQ2/IQ3 codebooks; both mappings, every tile, gated; no NORM): x (binding 0) holds the activations rounded to 8 bits
// (shaders/quantize.comp; x_stride in words), a lane takes the row's integer units
// (shaders/int_units.glsl) u = lane, lane + 32, ... instead of 16-value chunks, adds
// each unit's value by int_units.glsl's expression, and the 32 lane sums meet by the
// same tree: the CUDA backend's IntMatmulWarpOp in the same order, so the same bits.
//
// Rows past `rows` in the last workgroup are computed from a clamped row and never
// written; workgroups stride over row blocks (x) and token tiles (y), so any size fits
// the device's workgroup-count limit.
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#ifndef SUBGROUP
#define SUBGROUP 0
#endif
#if SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#endif

#ifndef TILE_T
#define TILE_T 1
#endif
#ifndef ROW_GROUPS
#define ROW_GROUPS 2
#endif
#ifndef WHOLE_ROWS
#define WHOLE_ROWS 0
#endif
#ifndef GATED
#define GATED 0
#endif
#ifndef NORM
#define NORM 0
#endif
#ifndef INT8
#define INT8 0
#endif
#if INT8 && NORM
#error "integer products take rounded activations: the norm goes before the rounding"
#endif
// Output rows per invocation (whole rows): a gated invocation sums OUT_ROWS gate rows
// and the OUT_ROWS matching up rows.
#if GATED
#define OUT_ROWS (WHOLE_ROWS / 2)
#else
#define OUT_ROWS WHOLE_ROWS
#endif
// The summation tree is written for 32 lanes.
#define LANES 32u
#if WHOLE_ROWS
#define WG_DEFAULT ROW_GROUPS
#else
#define WG_DEFAULT (LANES * ROW_GROUPS)
#endif

// The workgroup's invocations: specialization constant 1 where the host sets it (a
// tuned number of rows per workgroup: WeightKernels, backend/vulkan/matmul_tuning.h),
// else the variant's ROW_GROUPS. RG is the rows (split rows) or invocations (whole
// rows) per workgroup that follow from it; no result depends on it.
layout(local_size_x_id = 1) in;
layout(local_size_x = WG_DEFAULT) in;
#define WG_SIZE gl_WorkGroupSize.x
#if WHOLE_ROWS
#define RG WG_SIZE
#else
#define RG (WG_SIZE / LANES)
#endif

#if INT8
layout(std430, binding = 0) readonly buffer InX { uint xq[]; };
#else
layout(std430, binding = 0) readonly buffer InX { float x[]; };
#endif
layout(std430, binding = 1) readonly buffer InW { uint w_words[]; };
layout(std430, binding = 2) buffer Out { float y[]; };
#if NORM
layout(std430, binding = 3) readonly buffer InGain { float gain[]; };  // [cols]
#endif

layout(push_constant) uniform Params {
  uint T;
  uint rows;
  uint cols;
  uint x_stride;
  uint out_stride;
  uint out_offset;
  uint row_bytes;  // tensor_row_bytes(type, cols)
  uint accumulate;  // 1: out += the product (the residual add as an epilogue), 0: out = it
  float eps;        // NORM: the RMSNorm's epsilon
} p;

// Writes one output: the product, or the product added to what out holds (the same
// float addition as elementwise.comp's ADD of out and the product).
void store_out(uint i, float sum) {
  if (p.accumulate != 0u) {
    precise float s = y[i] + sum;
    y[i] = s;
  } else {
    y[i] = sum;
  }
}

#include "dequant.glsl"
#if INT8
#include "int_units.glsl"

// Token row xrow's rounded activations for unit u: the blocks' scales and d sums.
void iu_x_scales(uint xrow, uint u, out float xd[IU_BLOCKS], out float xs[IU_BLOCKS]) {
  const uint blocks = p.cols / 32u;
  [[unroll]] for (uint b = 0u; b < IU_BLOCKS; ++b) {
    xd[b] = uintBitsToFloat(xq[xrow + p.cols / 4u + u * IU_BLOCKS + b]);
    xs[b] = uintBitsToFloat(xq[xrow + p.cols / 4u + blocks + u * IU_BLOCKS + b]);
  }
}
#else
#include "rms_tree.glsl"
#endif

#if NORM && WHOLE_ROWS
// The RMSNorm scales of the tile's tokens (rms_tree.glsl), each invocation computing all
// of them: on a CPU device a barrier costs more than the repeated sums.
void norm_scales(uint t0, uint n_active, uint lid, out float scale[TILE_T]) {
  [[unroll]] for (uint t = 0u; t < TILE_T; ++t) {
    scale[t] = 1.0;
    if (t < n_active) {
      float sums[RMS_LANES];
      [[unroll]] for (uint l = 0u; l < RMS_LANES; ++l) sums[l] = rms_lane_sum((t0 + t) * p.x_stride, p.cols, l);
      scale[t] = rms_scale(sums, p.cols, p.eps);
    }
  }
}
#elif NORM
shared float norm_sums[TILE_T * RMS_LANES];

// The RMSNorm scales of the tile's tokens (rms_tree.glsl), their lane sums spread over
// the workgroup's invocations. Called in uniform control flow (it has barriers).
void norm_scales(uint t0, uint n_active, uint lid, out float scale[TILE_T]) {
  for (uint item = lid; item < TILE_T * RMS_LANES; item += WG_SIZE) {
    const uint t = item / RMS_LANES;
    if (t < n_active) norm_sums[item] = rms_lane_sum((t0 + t) * p.x_stride, p.cols, item % RMS_LANES);
  }
  barrier();
  [[unroll]] for (uint t = 0u; t < TILE_T; ++t) {
    scale[t] = 1.0;
    if (t < n_active) {
      float sums[RMS_LANES];
      [[unroll]] for (uint l = 0u; l < RMS_LANES; ++l) sums[l] = norm_sums[t * RMS_LANES + l];
      scale[t] = rms_scale(sums, p.cols, p.eps);
    }
  }
  barrier();  // norm_sums is read above before the next tile overwrites it
}
#endif
#if NORM
// Token t's (of the tile at t0) input value at column c: normalized, or as stored.
#define X_IN(t, c) rms_apply(x[(t0 + (t)) * p.x_stride + (c)], norm_scale[t], gain[c])
#else
#define X_IN(t, c) x[(t0 + (t)) * p.x_stride + (c)]
#endif

#if WHOLE_ROWS
// Each invocation computes WHOLE_ROWS rows entirely: the 32 lane sums of each, in the
// tree's depth-first order (lane bitreverse(j) for j = 0..31), keeping one pending
// subtree per tree height (a binary counter: leaf j closes one subtree per trailing 1
// bit of j). An x value loaded serves all WHOLE_ROWS rows.
void main() {
  const uint full_chunks = p.cols / 16u;
  const uint tail = p.cols % 16u;
  const uint n_tiles = (p.T + TILE_T - 1u) / TILE_T;
  const uint rows_per_group = WG_SIZE * OUT_ROWS;
  const uint n_row_blocks = (p.rows + rows_per_group - 1u) / rows_per_group;
  for (uint tile = gl_WorkGroupID.y; tile < n_tiles; tile += gl_NumWorkGroups.y) {
    const uint t0 = tile * TILE_T;
    const uint n_active = min(uint(TILE_T), p.T - t0);
#if NORM
    float norm_scale[TILE_T];
    norm_scales(t0, n_active, gl_LocalInvocationID.x, norm_scale);
#endif
    for (uint block = gl_WorkGroupID.x; block < n_row_blocks; block += gl_NumWorkGroups.x) {
      const uint first_row = (block * WG_SIZE + gl_LocalInvocationID.x) * OUT_ROWS;
      uint row_off[WHOLE_ROWS];
#if GATED
      [[unroll]] for (uint r = 0u; r < WHOLE_ROWS; ++r)
        row_off[r] = (min(first_row + r % OUT_ROWS, p.rows - 1u) + (r < OUT_ROWS ? 0u : p.rows)) * p.row_bytes;
#else
      [[unroll]] for (uint r = 0u; r < WHOLE_ROWS; ++r) row_off[r] = min(first_row + r, p.rows - 1u) * p.row_bytes;
#endif
      precise float pending[6][WHOLE_ROWS][TILE_T];
      for (uint j = 0u; j < LANES; ++j) {
        const uint lane = bitfieldReverse(j) >> 27;
        precise float acc[WHOLE_ROWS][TILE_T];
        [[unroll]] for (uint t = 0u; t < TILE_T; ++t) if (t < n_active) {
          [[unroll]] for (uint r = 0u; r < WHOLE_ROWS; ++r) acc[r][t] = 0.0;
        }
#if INT8
        for (uint u = lane; u < p.cols / IU_VALUES; u += LANES) {
          uint wd[WHOLE_ROWS][IU_WORDS];
          IuScales sc[WHOLE_ROWS];
          [[unroll]] for (uint r = 0u; r < WHOLE_ROWS; ++r) iu_load(row_off[r], u, wd[r], sc[r]);
          [[unroll]] for (uint t = 0u; t < TILE_T; ++t) if (t < n_active) {
            const uint xrow = (t0 + t) * p.x_stride;
            float xd[IU_BLOCKS], xs[IU_BLOCKS];
            iu_x_scales(xrow, u, xd, xs);
            [[unroll]] for (uint r = 0u; r < WHOLE_ROWS; ++r) {
              int sums[IU_SUMS];
              iu_sums(wd[r], xrow + u * IU_WORDS, sums);
              acc[r][t] = iu_add_to(acc[r][t], sc[r], sums, xd, xs);
            }
          }
        }
#else
        for (uint chunk = lane; chunk < full_chunks; chunk += LANES) {
          float w[WHOLE_ROWS][16];
          [[unroll]] for (uint r = 0u; r < WHOLE_ROWS; ++r) dq_row_chunk(row_off[r], chunk, w[r]);
          const uint c0 = chunk * 16u;
          [[unroll]] for (uint t = 0u; t < TILE_T; ++t) if (t < n_active) {
            [[unroll]] for (uint k = 0u; k < 16u; ++k) {
              const float xv = X_IN(t, c0 + k);
              [[unroll]] for (uint r = 0u; r < WHOLE_ROWS; ++r) acc[r][t] = fma(w[r][k], xv, acc[r][t]);
            }
          }
        }
#endif
#if DQ_PLAIN_FLOAT
        if (tail != 0u && lane == full_chunks % LANES) {
          const uint c0 = full_chunks * 16u;
          for (uint k = 0u; k < tail; ++k) {
            float wv[WHOLE_ROWS];
            [[unroll]] for (uint r = 0u; r < WHOLE_ROWS; ++r) wv[r] = dq_row_value(row_off[r], c0 + k);
            [[unroll]] for (uint t = 0u; t < TILE_T; ++t) if (t < n_active) {
              const float xv = X_IN(t, c0 + k);
              [[unroll]] for (uint r = 0u; r < WHOLE_ROWS; ++r) acc[r][t] = fma(wv[r], xv, acc[r][t]);
            }
          }
        }
#endif
        uint height = 0u;
        for (uint bits = j; (bits & 1u) != 0u; bits >>= 1) {
          [[unroll]] for (uint t = 0u; t < TILE_T; ++t) if (t < n_active) {
            [[unroll]] for (uint r = 0u; r < WHOLE_ROWS; ++r) acc[r][t] = pending[height][r][t] + acc[r][t];
          }
          ++height;
        }
        [[unroll]] for (uint t = 0u; t < TILE_T; ++t) if (t < n_active) {
          [[unroll]] for (uint r = 0u; r < WHOLE_ROWS; ++r) pending[height][r][t] = acc[r][t];
        }
      }
      [[unroll]] for (uint r = 0u; r < OUT_ROWS; ++r) {
        if (first_row + r < p.rows) {
          [[unroll]] for (uint t = 0u; t < TILE_T; ++t) if (t < n_active) {
#if GATED
            const float g = pending[5][r][t];
            precise float gated = g / (1.0 + exp(-g)) * pending[5][r + OUT_ROWS][t];
            y[(t0 + t) * p.out_stride + p.out_offset + first_row + r] = gated;
#else
            store_out((t0 + t) * p.out_stride + p.out_offset + first_row + r, pending[5][r][t]);
#endif
          }
        }
      }
    }
  }
}

#else  // split rows

// Sums per (row, token): the product's, or (GATED) the gate's and the up projection's.
#if GATED
#define NSUM 2u
#else
#define NSUM 1u
#endif

// One shared slot of 32 lane sums per (row, token, sum) of the workgroup; padded by one
// float so that reading a slot's lanes does not hit a single memory bank.
#define SLOTS (RG * TILE_T)
#define SLOT_STRIDE (LANES + 1u)

#if SUBGROUP
// Lanes of the tree inside one subgroup: min(subgroup size, 32), set by the host.
layout(constant_id = 0) const uint SG_LANES = 32u;
// Tree steps left to shared memory: those of distance >= SG_LANES (none from 32 lanes on,
// and then the array shrinks to one unused float).
const uint SHARED_FLOATS = SG_LANES < LANES ? SLOTS * NSUM * SLOT_STRIDE : 1u;
shared float partial[SHARED_FLOATS];

// The tree's steps of distance d < SG_LANES, over the subgroup: at step d, lane l with
// bit d clear computes s[l] + s[l + d], exactly the tree's addition (lanes with bit d set
// compute s[l - d] + s[l], equal since IEEE addition commutes, and never feed lane 0).
// Lane 0 ends with the root.
float subgroup_tree(float v) {
  precise float s = v;
  [[unroll]] for (uint d = LANES / 2u; d >= 1u; d >>= 1) {
    if (d < SG_LANES) s = s + subgroupShuffleXor(s, d);
  }
  return s;
}

// The tree's steps of distance >= SG_LANES for lane `lane` (< SG_LANES) of the slot at
// `base`: they add only lanes lane + k * SG_LANES, so this is the tree over k, in its
// order: s[k] + s[k + h] for h = 16 / SG_LANES .. 1.
float shared_tree(uint base, uint lane) {
  const uint columns = LANES / SG_LANES;
  precise float s[LANES];
  [[unroll]] for (uint k = 0u; k < LANES; ++k) {
    if (k < columns) s[k] = partial[base + lane + k * SG_LANES];
  }
  [[unroll]] for (uint h = LANES / 2u; h >= 1u; h >>= 1) {
    if (h < columns) {
      [[unroll]] for (uint k = 0u; k < LANES / 2u; ++k) {
        if (k < h) s[k] = s[k] + s[k + h];
      }
    }
  }
  return s[0];
}

#else
shared float partial[SLOTS * NSUM * SLOT_STRIDE];

// The fixed summation tree over the 32 lane sums of one slot.
float sum_lanes(uint base) {
  precise float s[LANES];
  [[unroll]] for (uint l = 0u; l < LANES; ++l) s[l] = partial[base + l];
  [[unroll]] for (uint l = 0u; l < 16u; ++l) s[l] = s[l] + s[l + 16u];
  [[unroll]] for (uint l = 0u; l < 8u; ++l) s[l] = s[l] + s[l + 8u];
  [[unroll]] for (uint l = 0u; l < 4u; ++l) s[l] = s[l] + s[l + 4u];
  [[unroll]] for (uint l = 0u; l < 2u; ++l) s[l] = s[l] + s[l + 2u];
  return s[0] + s[1];
}
#endif

// Writes output i from its sums: the product (g), or silu(g) * u with elementwise.comp's
// SWIGLU expression.
void finish(uint i, float g, float u) {
#if GATED
  precise float gated = g / (1.0 + exp(-g)) * u;
  y[i] = gated;
#else
  store_out(i, g);
#endif
}

void main() {
#if SUBGROUP
  const uint lid = gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID;
#else
  const uint lid = gl_LocalInvocationID.x;
#endif
  const uint lane = lid % LANES;
  const uint group = lid / LANES;  // the workgroup's row this invocation works on
  const uint full_chunks = p.cols / 16u;
  const uint tail = p.cols % 16u;  // only plain float formats have one
  const uint n_tiles = (p.T + TILE_T - 1u) / TILE_T;
  const uint n_row_blocks = (p.rows + RG - 1u) / RG;

  // Both loop bounds are uniform over the workgroup, so every barrier is reached by all.
  for (uint tile = gl_WorkGroupID.y; tile < n_tiles; tile += gl_NumWorkGroups.y) {
    const uint t0 = tile * TILE_T;
    const uint n_active = min(uint(TILE_T), p.T - t0);
#if NORM
    float norm_scale[TILE_T];
    norm_scales(t0, n_active, lid, norm_scale);
#endif
    for (uint block = gl_WorkGroupID.x; block < n_row_blocks; block += gl_NumWorkGroups.x) {
      const uint row_off = min(block * RG + group, p.rows - 1u) * p.row_bytes;
#if GATED
      const uint up_off = row_off + p.rows * p.row_bytes;  // the matching up projection row
#endif
      precise float acc[NSUM][TILE_T];
      [[unroll]] for (uint h = 0u; h < NSUM; ++h) {
        [[unroll]] for (uint t = 0u; t < TILE_T; ++t) acc[h][t] = 0.0;
      }

#if INT8
      for (uint u = lane; u < p.cols / IU_VALUES; u += LANES) {
        uint wd[IU_WORDS];
        IuScales sc;
        iu_load(row_off, u, wd, sc);
#if GATED
        uint wdu[IU_WORDS];
        IuScales scu;
        iu_load(up_off, u, wdu, scu);
#endif
        [[unroll]] for (uint t = 0u; t < TILE_T; ++t) {
          if (t < n_active) {
            const uint xrow = (t0 + t) * p.x_stride;
            float xd[IU_BLOCKS], xs[IU_BLOCKS];
            iu_x_scales(xrow, u, xd, xs);
            int sums[IU_SUMS];
            iu_sums(wd, xrow + u * IU_WORDS, sums);
            acc[0][t] = iu_add_to(acc[0][t], sc, sums, xd, xs);
#if GATED
            iu_sums(wdu, xrow + u * IU_WORDS, sums);
            acc[1][t] = iu_add_to(acc[1][t], scu, sums, xd, xs);
#endif
          }
        }
      }
#else
      for (uint chunk = lane; chunk < full_chunks; chunk += LANES) {
        float w[16];
        dq_row_chunk(row_off, chunk, w);
#if GATED
        float wu[16];
        dq_row_chunk(up_off, chunk, wu);
#endif
        const uint c0 = chunk * 16u;
        [[unroll]] for (uint t = 0u; t < TILE_T; ++t) {
          if (t < n_active) {
            [[unroll]] for (uint k = 0u; k < 16u; ++k) {
              const float xv = X_IN(t, c0 + k);
              acc[0][t] = fma(w[k], xv, acc[0][t]);
#if GATED
              acc[1][t] = fma(wu[k], xv, acc[1][t]);
#endif
            }
          }
        }
      }
#endif
#if DQ_PLAIN_FLOAT
      // The last, partial chunk: the last chunk of its lane too, so the order holds.
      if (tail != 0u && lane == full_chunks % LANES) {
        const uint c0 = full_chunks * 16u;
        for (uint k = 0u; k < tail; ++k) {
          const float wv = dq_row_value(row_off, c0 + k);
#if GATED
          const float wuv = dq_row_value(up_off, c0 + k);
#endif
          [[unroll]] for (uint t = 0u; t < TILE_T; ++t) {
            if (t < n_active) {
              const float xv = X_IN(t, c0 + k);
              acc[0][t] = fma(wv, xv, acc[0][t]);
#if GATED
              acc[1][t] = fma(wuv, xv, acc[1][t]);
#endif
            }
          }
        }
      }
#endif

#if SUBGROUP
      if (SG_LANES >= LANES) {
        // A row's 32 lanes are in one subgroup: the whole tree in registers. The branches
        // are uniform over the workgroup, as the shuffles need.
        const uint row = block * RG + group;
        [[unroll]] for (uint t = 0u; t < TILE_T; ++t) {
          if (t < n_active) {
            const float g = subgroup_tree(acc[0][t]);
            const float u = NSUM > 1u ? subgroup_tree(acc[NSUM - 1u][t]) : 0.0;
            if (lane == 0u && row < p.rows) finish((t0 + t) * p.out_stride + p.out_offset + row, g, u);
          }
        }
      } else {
        // The large distances through shared memory, one slot per subgroup at a time
        // (the slot, so every branch below, is uniform over the subgroup).
        [[unroll]] for (uint t = 0u; t < TILE_T; ++t) {
          [[unroll]] for (uint h = 0u; h < NSUM; ++h)
            partial[((group * TILE_T + t) * NSUM + h) * SLOT_STRIDE + lane] = acc[h][t];
        }
        barrier();
        for (uint slot = gl_SubgroupID; slot < SLOTS; slot += gl_NumSubgroups) {
          const uint t = slot % TILE_T;
          const uint row = block * RG + slot / TILE_T;
          if (t < n_active) {
            const uint base = slot * NSUM * SLOT_STRIDE;
            const float g = subgroup_tree(shared_tree(base, gl_SubgroupInvocationID));
            const float u = NSUM > 1u ? subgroup_tree(shared_tree(base + SLOT_STRIDE, gl_SubgroupInvocationID)) : 0.0;
            if (gl_SubgroupInvocationID == 0u && row < p.rows)
              finish((t0 + t) * p.out_stride + p.out_offset + row, g, u);
          }
        }
        barrier();  // partial is rewritten for the next row block
      }
#else
      [[unroll]] for (uint t = 0u; t < TILE_T; ++t) {
        [[unroll]] for (uint h = 0u; h < NSUM; ++h)
          partial[((group * TILE_T + t) * NSUM + h) * SLOT_STRIDE + lane] = acc[h][t];
      }
      barrier();
      for (uint slot = lid; slot < SLOTS; slot += WG_SIZE) {
        const uint t = slot % TILE_T;
        const uint row = block * RG + slot / TILE_T;
        if (t < n_active && row < p.rows) {
          const uint base = slot * NSUM * SLOT_STRIDE;
          finish((t0 + t) * p.out_stride + p.out_offset + row, sum_lanes(base),
                 NSUM > 1u ? sum_lanes(base + SLOT_STRIDE) : 0.0);
        }
      }
      barrier();  // partial is rewritten for the next row block
#endif
    }
  }
}

#endif
