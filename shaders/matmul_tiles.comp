#version 450
// Integer products for wide steps in matrix tiles: the product of shaders/matmul.comp
// with INT8=1 (int_units.glsl's formats' weights times activations rounded to 8 bits by
// shaders/quantize.comp), the same bits, computed by tiles of TILE_ROWS weight rows x
// TILE_TOKENS tokens so that each weight byte is read once per 32 tokens of a step, and
// each unit's integer sums are matrix products (M x K weights times K x N activations,
// 8-bit, summed exactly in 32 bits) on the device's matrix units.
//
// Two forms of one shader:
// - COOPMAT=1: GL_NV_cooperative_matrix with 8-bit integer matrices
//   (GL_NV_integer_cooperative_matrix), for devices that report the shape CM_M x CM_N x
//   CM_K for signed 8-bit A and B and a 32-bit result in subgroup scope.
// - COOPMAT=0: the same tile logic with the three matrix operations (load, multiply-add,
//   store) written as plain loops over shared memory, each invocation of a group of 32
//   holding its share of every fragment (element i of invocation l: the fragment's
//   row-major element 32 i + l). It runs anywhere (lavapipe in CI), so every line but
//   the matrix instructions is tested there.
//
// Numerics (the contract of shaders/matmul.comp INT8=1 and the CUDA backend's
// IntMatmulWarpOp): lane l of a row sums its units u = l, l + 32, ... (int_units.glsl),
// each unit's value added by iu_add_to's float expression in unit order, starting from
// +0; the 32 lane sums meet by the fixed tree (l + 16, + 8, + 4, + 2, + 1). Here a tile
// runs the lanes one after another in the tree's depth-first order (lane bitreverse(j)
// for j = 0..31) and keeps one pending subtree per tree height (a binary counter, as
// matmul.comp's whole rows do), so every output is the same sequence of float
// operations as in matmul.comp, whatever T or the tile. The integer sums are exact in
// any order, so the matrix units' order inside a product does not matter. Hence the
// tiles give the split-rows kernel's bits, and steps of any size may mix both.
//
// Per unit: the tile's TILE_ROWS rows' unit (iu_load) go to shared memory as IU_SUMS
// matrices of the unit's words, each zero outside its sum's values (Q6_K's and Q3_K's sums cover
// 16 values: its two sums are two products over the same 32 values), the tokens' bytes
// as a K x TILE_TOKENS column-major matrix; the row scales and the tokens' block scales
// beside them, read back as broadcast fragments (stride 0). Each of the SUBGROUPS
// subgroups owns TILE_ROWS / SUBGROUPS rows x TILE_TOKENS tokens: FRAGS fragments of
// CM_M x CM_N, each with its lane sum and the counter's five pending sums. The root of
// each output goes through shared memory (s_out) to y, where rows past `rows` and
// tokens past T are dropped, `accumulate` adds, and GATED (W: the gate's rows, then the
// up projection's; a tile holds TILE_ROWS / 2 gate rows and their up rows) writes
// silu(g) * u with matmul.comp's expression.
//
// Workgroups stride over row blocks (x) and token tiles (y). The host
// (backend/vulkan/weight_kernels.cpp) picks these tiles for steps of more than 8 tokens
// where the device has the matrix instruction, or when asked (the plain-loop form).
#extension GL_EXT_control_flow_attributes : require
#extension GL_GOOGLE_include_directive : require
#ifndef COOPMAT
#define COOPMAT 0
#endif
#if COOPMAT
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_NV_cooperative_matrix : require
#extension GL_NV_integer_cooperative_matrix : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#endif
#ifndef GATED
#define GATED 0
#endif

// The fragment shape (the host checks that the device reports it) and the tile.
#define CM_M 16u
#define CM_N 8u
#define CM_K 32u
#define TILE_ROWS 64u
#define TILE_TOKENS 32u
#define SUBGROUPS 4u
#define WG_SIZE (32u * SUBGROUPS)
#define SG_ROWS (TILE_ROWS / SUBGROUPS)
#define FRAG_R (SG_ROWS / CM_M)
#define FRAG_T (TILE_TOKENS / CM_N)
#define FRAGS (FRAG_R * FRAG_T)
#define CM_E (CM_M * CM_N / 32u)  // elements of a fragment per invocation (plain loops)
#if GATED
#define OUT_ROWS (TILE_ROWS / 2u)
#else
#define OUT_ROWS TILE_ROWS
#endif

layout(local_size_x = WG_SIZE) in;

layout(std430, binding = 0) readonly buffer InX { uint xq[]; };
layout(std430, binding = 1) readonly buffer InW { uint w_words[]; };
layout(std430, binding = 2) buffer Out { float y[]; };

layout(push_constant) uniform Params {
  uint T;
  uint rows;
  uint cols;
  uint x_stride;
  uint out_stride;
  uint out_offset;
  uint row_bytes;
  uint accumulate;
  float eps;  // unused (no fused norm)
} p;

#include "dequant.glsl"
#include "int_units.glsl"

#define WIN_WORDS (CM_K / 4u)  // words of one product's K values
const uint SUM_WINDOWS = max(IU_WORDS_PER_SUM / WIN_WORDS, 1u);  // products per sum

shared uint s_a[IU_SUMS * TILE_ROWS * IU_WORDS];  // [sum][row][word]: the unit's bytes
shared uint s_b[TILE_TOKENS * IU_WORDS];          // [token][word]
shared float s_rs[4u * TILE_ROWS];                // row scales (see stage_unit)
shared int s_ri[2u * TILE_ROWS];                  // Q6_K's and Q3_K's integer sub-block scales
shared float s_ts[2u * IU_BLOCKS * TILE_TOKENS];  // [xd | xs][block][token]
shared float s_out[TILE_ROWS * TILE_TOKENS];      // the roots, row-major

// ---- the three matrix operations, and the element-wise access, in both forms ----
#if COOPMAT
#define CmF fcoopmatNV<32, gl_ScopeSubgroup, CM_M, CM_N>
#define CmI icoopmatNV<32, gl_ScopeSubgroup, CM_M, CM_N>
#define CmA icoopmatNV<8, gl_ScopeSubgroup, CM_M, CM_K>
#define CmB icoopmatNV<8, gl_ScopeSubgroup, CM_K, CM_N>
#define CM_LEN(m) (m).length()
#define CM_EL(m, i) (m)[i]
CmF cmf_zero() { return CmF(0.0); }
CmI cmi_zero() { return CmI(0); }
// The M x K weights of a unit's sum (row-major, rows IU_WORDS words apart).
CmA load_a(uint word) {
  CmA m;
  coopMatLoadNV(m, s_a, word, IU_WORDS, false);
  return m;
}
// The K x N token bytes (column-major: a token's bytes are contiguous).
CmB load_b(uint word) {
  CmB m;
  coopMatLoadNV(m, s_b, word, IU_WORDS, true);
  return m;
}
CmI mul_add(CmA a, CmB b, CmI c) { return coopMatMulAddNV(a, b, c); }
CmF to_float(CmI m) { return CmF(m); }
// Broadcast fragments: element (r, t) = v[first + r] (per row) or v[first + t] (per token).
CmF row_f(uint first) {
  CmF m;
  coopMatLoadNV(m, s_rs, first, 0u, true);
  return m;
}
CmI row_i(uint first) {
  CmI m;
  coopMatLoadNV(m, s_ri, first, 0u, true);
  return m;
}
CmF token_f(uint first) {
  CmF m;
  coopMatLoadNV(m, s_ts, first, 0u, false);
  return m;
}
void store_out_tile(CmF m, uint first) { coopMatStoreNV(m, s_out, first, TILE_TOKENS, false); }
#else
struct CmF {
  float e[CM_E];
};
struct CmI {
  int e[CM_E];
};
struct CmA {
  uint word;
};
struct CmB {
  uint word;
};
#define CM_LEN(m) CM_E
#define CM_EL(m, i) (m).e[i]
// Element i of this invocation: row el_row(i), column el_col(i) of the fragment.
uint g_lane;
uint el_row(uint i) { return (i * 32u + g_lane) / CM_N; }
uint el_col(uint i) { return (i * 32u + g_lane) % CM_N; }
CmF cmf_zero() {
  CmF m;
  [[unroll]] for (uint i = 0u; i < CM_E; ++i) m.e[i] = 0.0;
  return m;
}
CmI cmi_zero() {
  CmI m;
  [[unroll]] for (uint i = 0u; i < CM_E; ++i) m.e[i] = 0;
  return m;
}
CmA load_a(uint word) { return CmA(word); }
CmF to_float(CmI m) {
  CmF f;
  [[unroll]] for (uint i = 0u; i < CM_E; ++i) f.e[i] = float(m.e[i]);
  return f;
}
CmB load_b(uint word) { return CmB(word); }
CmI mul_add(CmA a, CmB b, CmI c) {
  [[unroll]] for (uint i = 0u; i < CM_E; ++i) {
    int s = c.e[i];
    for (uint k = 0u; k < WIN_WORDS; ++k)
      s = iu_dot4(s_a[a.word + el_row(i) * IU_WORDS + k], s_b[b.word + el_col(i) * IU_WORDS + k], s);
    c.e[i] = s;
  }
  return c;
}
CmF row_f(uint first) {
  CmF m;
  [[unroll]] for (uint i = 0u; i < CM_E; ++i) m.e[i] = s_rs[first + el_row(i)];
  return m;
}
CmI row_i(uint first) {
  CmI m;
  [[unroll]] for (uint i = 0u; i < CM_E; ++i) m.e[i] = s_ri[first + el_row(i)];
  return m;
}
CmF token_f(uint first) {
  CmF m;
  [[unroll]] for (uint i = 0u; i < CM_E; ++i) m.e[i] = s_ts[first + el_col(i)];
  return m;
}
void store_out_tile(CmF m, uint first) {
  [[unroll]] for (uint i = 0u; i < CM_E; ++i) s_out[first + el_row(i) * TILE_TOKENS + el_col(i)] = m.e[i];
}
#endif

CmF cm_add(CmF a, CmF b) {
  [[unroll]] for (uint i = 0u; i < CM_LEN(a); ++i) {
    precise float s = CM_EL(a, i) + CM_EL(b, i);
    CM_EL(a, i) = s;
  }
  return a;
}

// Offsets in s_rs and s_ts.
#define RS(k) ((k) * TILE_ROWS)                    // row scale k of the unit
#define TS_XD(b) ((b) * TILE_TOKENS)               // the tokens' scale of block b
#define TS_XS(b) ((IU_BLOCKS + (b)) * TILE_TOKENS) // their d sum of block b

// Unit u of the tile's rows and tokens into shared memory. Rows: tile row i is weight
// row row_of(i). s_rs: d (k = 0; Q4_1/Q5_1: m at k = 1); Q4_K/Q5_K d sc_j (k = j) and
// -dmin m_j (k = 2 + j).
void stage_unit(uint u, uint lid, uint block, uint t0, uint n_active) {
  if (lid < TILE_ROWS) {
#if GATED
    const uint half_rows = TILE_ROWS / 2u;
    const uint r = min(block * half_rows + lid % half_rows, p.rows - 1u) + (lid < half_rows ? 0u : p.rows);
#else
    const uint r = min(block * TILE_ROWS + lid, p.rows - 1u);
#endif
    uint wd[IU_WORDS];
    IuScales sc;
    iu_load(r * p.row_bytes, u, wd, sc);
    [[unroll]] for (uint s = 0u; s < IU_SUMS; ++s) {
      [[unroll]] for (uint k = 0u; k < IU_WORDS; ++k) {
        const bool mine = k / IU_WORDS_PER_SUM == s;
        s_a[(s * TILE_ROWS + lid) * IU_WORDS + k] = mine ? wd[k] : 0u;
      }
    }
#if defined(FORMAT_Q4_K) || defined(FORMAT_Q5_K)
    s_rs[RS(0u) + lid] = sc.f[0];
    s_rs[RS(1u) + lid] = sc.f[1];
    s_rs[RS(2u) + lid] = -sc.f[2];
    s_rs[RS(3u) + lid] = -sc.f[3];
#else
    s_rs[RS(0u) + lid] = sc.f.x;
    s_rs[RS(1u) + lid] = sc.f.y;  // Q4_1/Q5_1's minimum (0 elsewhere, unread)
    s_ri[lid] = sc.i.x;
    s_ri[TILE_ROWS + lid] = sc.i.y;
#endif
  }
  for (uint item = lid; item < TILE_TOKENS * IU_WORDS; item += WG_SIZE) {
    const uint t = item / IU_WORDS;
    s_b[item] = t < n_active ? xq[(t0 + t) * p.x_stride + u * IU_WORDS + item % IU_WORDS] : 0u;
  }
  const uint blocks = p.cols / 32u;
  for (uint item = lid; item < IU_BLOCKS * TILE_TOKENS; item += WG_SIZE) {
    const uint b = item / TILE_TOKENS, t = item % TILE_TOKENS;
    const uint xrow = (t0 + min(t, n_active - 1u)) * p.x_stride + p.cols / 4u;
    s_ts[TS_XD(b) + t] = uintBitsToFloat(xq[xrow + u * IU_BLOCKS + b]);
    s_ts[TS_XS(b) + t] = uintBitsToFloat(xq[xrow + blocks + u * IU_BLOCKS + b]);
  }
}

// acc plus the unit's value for the fragment at tile row r0, token c0 (int_units.glsl's
// iu_add_to, element by element).
CmF add_unit(CmF acc, uint r0, uint c0) {
  CmI sums[IU_SUMS];
  [[unroll]] for (uint s = 0u; s < IU_SUMS; ++s) {
    const uint first = (s * IU_WORDS_PER_SUM / WIN_WORDS) * WIN_WORDS;  // the window holding the sum
    CmI c = cmi_zero();
    [[unroll]] for (uint w = 0u; w < SUM_WINDOWS; ++w) {
      const uint word = first + w * WIN_WORDS;
      c = mul_add(load_a((s * TILE_ROWS + r0) * IU_WORDS + word), load_b(c0 * IU_WORDS + word), c);
    }
    sums[s] = c;
  }
  // Element i of a fragment is the same (row, token) in matrices of one type only (the
  // cooperative-matrix specs leave each type's layout to the device): the integer
  // expression is computed on integer fragments, then converted element by element (as
  // int_units.glsl converts it) to a float fragment that meets only float ones.
#if !defined(FORMAT_Q4_K) && !defined(FORMAT_Q5_K)  // one scale a row (Q6_K, Q3_K: and two integer ones)
  const CmF d = row_f(RS(0u) + r0);
  const CmF xd = token_f(TS_XD(0u) + c0);
#if defined(FORMAT_Q6_K) || defined(FORMAT_Q3_K)
  const CmI sa = row_i(r0), sb = row_i(TILE_ROWS + r0);
  CmI si = sums[0];
  [[unroll]] for (uint i = 0u; i < CM_LEN(si); ++i)
    CM_EL(si, i) = CM_EL(sa, i) * CM_EL(sums[0], i) + CM_EL(sb, i) * CM_EL(sums[1], i);
  const CmF sf = to_float(si);
#else
  const CmF sf = to_float(sums[0]);
#endif
#if IU_MIN
  const CmF m = row_f(RS(1u) + r0), xs = token_f(TS_XS(0u) + c0);
#endif
  [[unroll]] for (uint i = 0u; i < CM_LEN(acc); ++i) {
    precise float dd = CM_EL(d, i) * CM_EL(xd, i);
    precise float r = fma(dd, CM_EL(sf, i), CM_EL(acc, i));
#if IU_MIN
    r = fma(CM_EL(m, i), CM_EL(xs, i), r);
#endif
    CM_EL(acc, i) = r;
  }
#else
  [[unroll]] for (uint j = 0u; j < 2u; ++j) {
    const CmF dsc = row_f(RS(j) + r0), mdm = row_f(RS(2u + j) + r0);
    const CmF xd = token_f(TS_XD(j) + c0), xs = token_f(TS_XS(j) + c0);
    const CmF sf = to_float(sums[j]);
    [[unroll]] for (uint i = 0u; i < CM_LEN(acc); ++i) {
      precise float scaled = CM_EL(dsc, i) * CM_EL(sf, i);
      precise float r = fma(CM_EL(xd, i), scaled, CM_EL(acc, i));
      r = fma(CM_EL(mdm, i), CM_EL(xs, i), r);
      CM_EL(acc, i) = r;
    }
  }
#endif
  return acc;
}

void main() {
  const uint lid = gl_LocalInvocationIndex;
#if COOPMAT
  const uint sg = gl_SubgroupID;
#else
  const uint sg = lid / 32u;
  g_lane = lid % 32u;
#endif
  const uint n_units = p.cols / IU_VALUES;
  const uint n_tiles = (p.T + TILE_TOKENS - 1u) / TILE_TOKENS;
  const uint n_blocks = (p.rows + OUT_ROWS - 1u) / OUT_ROWS;

  // Both loop bounds, and every branch around a barrier, are uniform over the workgroup.
  for (uint tile = gl_WorkGroupID.y; tile < n_tiles; tile += gl_NumWorkGroups.y) {
    const uint t0 = tile * TILE_TOKENS;
    const uint n_active = min(TILE_TOKENS, p.T - t0);
    for (uint block = gl_WorkGroupID.x; block < n_blocks; block += gl_NumWorkGroups.x) {
      CmF pending[5u * FRAGS];  // the counter's subtree of height h for fragment f: [h * FRAGS + f]
      for (uint j = 0u; j < 32u; ++j) {
        const uint lane = bitfieldReverse(j) >> 27;
        CmF acc[FRAGS];
        [[unroll]] for (uint f = 0u; f < FRAGS; ++f) acc[f] = cmf_zero();
        for (uint u = lane; u < n_units; u += 32u) {
          barrier();  // the previous unit's shared values are read
          stage_unit(u, lid, block, t0, n_active);
          barrier();
          [[unroll]] for (uint f = 0u; f < FRAGS; ++f)
            acc[f] = add_unit(acc[f], sg * SG_ROWS + (f / FRAG_T) * CM_M, (f % FRAG_T) * CM_N);
        }
        // Leaf j of the tree: it closes one subtree per trailing 1 bit of j.
        [[unroll]] for (uint f = 0u; f < FRAGS; ++f) {
          CmF v = acc[f];
          bool placed = false;
          [[unroll]] for (uint h = 0u; h < 5u; ++h) {
            if (!placed) {
              if (((j >> h) & 1u) == 0u) {
                pending[h * FRAGS + f] = v;
                placed = true;
              } else {
                v = cm_add(pending[h * FRAGS + f], v);
              }
            }
          }
          if (!placed) store_out_tile(v, (sg * SG_ROWS + (f / FRAG_T) * CM_M) * TILE_TOKENS + (f % FRAG_T) * CM_N);
        }
      }
      barrier();
      for (uint item = lid; item < OUT_ROWS * TILE_TOKENS; item += WG_SIZE) {
        const uint i = item / TILE_TOKENS, t = item % TILE_TOKENS;
        const uint row = block * OUT_ROWS + i;
        if (t < n_active && row < p.rows) {
          const uint o = (t0 + t) * p.out_stride + p.out_offset + row;
          const float g = s_out[i * TILE_TOKENS + t];
#if GATED
          const float up = s_out[(i + OUT_ROWS) * TILE_TOKENS + t];
          precise float gated = g / (1.0 + exp(-g)) * up;
          y[o] = gated;
#else
          if (p.accumulate != 0u) {
            precise float s = y[o] + g;
            y[o] = s;
          } else {
            y[o] = g;
          }
#endif
        }
      }
      barrier();  // s_out is rewritten by the next block
    }
  }
}
