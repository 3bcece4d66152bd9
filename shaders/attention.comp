#version 450
// Variants: KV_F16=1 reads an fp16 cache; with STORAGE16=1 too, it reads the halves as
// float16_t through 16-bit storage (VK_KHR_16bit_storage) instead of unpacking words;
// used only where a probe found that the device widens every half exactly
// (vulkan::Kernels::half_storage_exact), so both give the same bits.
#ifndef KV_F16
#define KV_F16 0
#endif
#ifndef STORAGE16
#define STORAGE16 0
#endif
// SERIAL=1: the variant for CPU devices (lavapipe), below.
#ifndef SERIAL
#define SERIAL 0
#endif
#if STORAGE16
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#extension GL_GOOGLE_include_directive : require
#include "half.glsl"
// Attention over a StepBatch, split into parts (flash-decoding): workgroup
// (part, head, row) computes, for one query head of one batch row, the softmax
// statistics and the unnormalised weighted sum of values over one contiguous range of
// the row's keys, and writes (max, sum of exp, acc[head_dim]) to `partials`;
// attention_combine.comp merges the parts exactly.
//
// The keys of batch row i, in order:
//   1. its view of the committed prefix: FULL rows (and every row of the first
//      `dense` layers) see all n_past entries, in logical order (slot order[k] when
//      use_order, else slot k); COMPRESSED rows see the region, slots [0, region).
//   2. the batch tokens j <= i, at slots n_past + j, masked out unless bit j of the
//      row's in-step mask is set.
// In a sliding-window layer (window > 0) a key is also masked out unless its position
// is inside the row's window: row position - key position < window, a committed
// entry's position being its logical index (k for FULL rows, the region slot's entry
// for COMPRESSED ones) and a batch token's its row position; a FULL row starts its
// committed keys at its window's first (skipped_keys), so the parts before it are not
// computed.
// Keys are processed WG_SIZE at a time with an online softmax: each invocation
// scores one key, the workgroup reduces max and sum in shared memory, and each
// invocation accumulates its own head dimensions (head_dim <= 4 * WG_SIZE).
//
// SERIAL=1, for CPU devices: one invocation computes a whole (part, head, row), with
// the same arithmetic in the same order (keys WG_SIZE at a time, the same reduction
// trees over them in a local array), so both variants give the same bits; the
// invocations of a workgroup are SERIAL_LANES heads of the same part and row, so their
// loops have the same bounds (when n_head is a multiple of SERIAL_LANES; else a
// workgroup spans two rows or parts, which costs lanes, not results). The sums are
// `precise` in both, so no compiler fuses them differently. A CPU device runs a
// workgroup's invocations as vector lanes and a barrier as a switch between them: the
// workgroup-wide variant spent most of a long step there.
#define WG_SIZE 64
#define DIMS_PER_THREAD 4
#define MAX_HEAD_DIM (WG_SIZE * DIMS_PER_THREAD)
#define SERIAL_LANES 8

#if SERIAL
layout(local_size_x = SERIAL_LANES) in;
#else
layout(local_size_x = WG_SIZE) in;
#endif

layout(std430, binding = 0) readonly buffer Q { float q[]; };           // [T x q_stride]
#if KV_F16 && STORAGE16
layout(std430, binding = 1) readonly buffer K { float16_t kc[]; };
layout(std430, binding = 2) readonly buffer V { float16_t vc[]; };
float key_at(uint i) { return float(kc[i]); }
float value_at(uint i) { return float(vc[i]); }
#elif KV_F16
// An fp16 cache: [n_ctx x kv_dim] halves, two per word, low half first; values are
// widened exactly (shaders/half.glsl), so only the storage differs from fp32.
layout(std430, binding = 1) readonly buffer K { uint kc[]; };
layout(std430, binding = 2) readonly buffer V { uint vc[]; };
float key_at(uint i) { return half_to_float((kc[i >> 1] >> ((i & 1u) << 4)) & 0xffffu); }
float value_at(uint i) { return half_to_float((vc[i >> 1] >> ((i & 1u) << 4)) & 0xffffu); }
#else
layout(std430, binding = 1) readonly buffer K { float kc[]; };          // [n_ctx x kv_dim]
layout(std430, binding = 2) readonly buffer V { float vc[]; };          // [n_ctx x kv_dim]
float key_at(uint i) { return kc[i]; }
float value_at(uint i) { return vc[i]; }
#endif
// [0] n_past, [1] keys per part, [2] parts in use, [3] the first row (the step's
// header, written by the host each step, so a recorded step replays at any n_past: the
// grid has n_parts parts, those from step_info[2] on return at once), then the prefix
// flags, masks, the rows' positions, the region slots' entries and the order. In a
// joined step each part has its own step_info: its rows are rows step_info[3].. of q
// and of the partials, its flags, masks and positions are indexed from its first row.
layout(std430, binding = 3) readonly buffer Step { uint step_info[]; };
layout(std430, binding = 4) writeonly buffer Partials { float partials[]; };

layout(push_constant) uniform Params {
  uint T;
  uint n_head;
  uint n_head_kv;
  uint head_dim;
  uint kv_dim;
  uint q_stride;
  uint region;        // entries in the compressed region (slots [0, region))
  uint dense;         // 1: COMPRESSED rows read the full prefix in this layer
  uint use_order;     // 1: the full prefix is step_info[order_offset + k]
  uint n_parts;       // parts in the grid and in the partials' layout
  uint mask_words;    // uint words per row of the in-step mask
  uint flags_offset;  // where the prefix flags start in step_info (after the header)
  uint mask_offset;   // where the masks start in step_info (after the prefix flags)
  uint order_offset;
  float scale;
  float softcap;      // > 0: each scaled score s becomes softcap * tanh(s / softcap) (Gemma 2)
  uint window;        // > 0: keys outside the row's sliding window are masked out
  uint positions_offset;  // the rows' positions in step_info
  uint region_offset;     // the logical index of each region slot in step_info
} p;

// A key's score from its dot product with the query.
float key_score(float dot_qk) {
  const float s = dot_qk * p.scale;
  return p.softcap > 0.0 ? p.softcap * tanh(clamp(s / p.softcap, -10.0, 10.0)) : s;
}

// Committed keys a row skips: in a sliding-window layer, a FULL row's entries before
// its window (logical indices below row_pos - window + 1); none otherwise.
uint skipped_keys(uint row_pos, uint prefix, bool compressed) {
  if (p.window == 0 || compressed || row_pos < p.window) return 0;
  return min(row_pos - p.window + 1, prefix);
}

// Key `key` of a row (counted over its keys: the `prefix_keys` committed ones from
// logical index `skip`, then the batch tokens): its slot, and whether the row sees it
// (its mask bit; in a sliding-window layer, its position inside the row's window).
bool key_slot(uint row, uint row_pos, uint key, uint n_past, uint skip, uint prefix_keys, bool compressed,
              out uint slot) {
  bool visible = true;
  uint key_pos = 0;
  if (key < prefix_keys) {
    const uint l = skip + key;
    slot = (!compressed && p.use_order != 0) ? step_info[p.order_offset + l] : l;
    if (p.window != 0) key_pos = compressed ? step_info[p.region_offset + l] : l;
  } else {
    const uint j = key - prefix_keys;
    slot = n_past + j;
    visible = ((step_info[p.mask_offset + row * p.mask_words + j / 32] >> (j % 32)) & 1u) != 0;
    if (p.window != 0) key_pos = step_info[p.positions_offset + j];
  }
  return visible && (p.window == 0 || int(row_pos) - int(key_pos) < int(p.window));
}

#if !SERIAL
shared float q_sh[MAX_HEAD_DIM];
shared float red[WG_SIZE];
shared float weight_sh[WG_SIZE];
shared uint slot_sh[WG_SIZE];

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint part = gl_WorkGroupID.x;
  const uint head = gl_WorkGroupID.y;
  const uint row = gl_WorkGroupID.z;
  if (part >= step_info[2]) return;  // uniform over the workgroup: before any barrier
  const uint kv_head = head / (p.n_head / p.n_head_kv);
  const uint kv_offset = kv_head * p.head_dim;

  const uint n_past = step_info[0], part_keys = step_info[1];  // the step's header
  const bool compressed = step_info[p.flags_offset + row] != 0 && p.dense == 0;
  const uint row_pos = step_info[p.positions_offset + row];
  const uint skip = skipped_keys(row_pos, compressed ? min(p.region, n_past) : n_past, compressed);
  const uint prefix = (compressed ? min(p.region, n_past) : n_past) - skip;  // committed keys the row visits
  const uint n_keys = prefix + row + 1;
  const uint first = part * part_keys;
  const uint last = min(first + part_keys, n_keys);

  const uint step_row = step_info[3] + row;  // of q and the partials
  for (uint d = lid; d < p.head_dim; d += WG_SIZE) q_sh[d] = q[step_row * p.q_stride + head * p.head_dim + d];
  barrier();

  float m = -1.0 / 0.0;  // running max
  precise float l = 0.0;  // running sum of exp(score - m)
  float acc[DIMS_PER_THREAD];
  for (uint k = 0; k < DIMS_PER_THREAD; ++k) acc[k] = 0.0;

  // The loop bounds are uniform over the workgroup, so every barrier is reached by all.
  for (uint chunk = first; chunk < last; chunk += WG_SIZE) {
    const uint key = chunk + lid;
    precise float score = -1.0 / 0.0;
    uint slot = 0;
    if (key < last) {
      const bool visible = key_slot(row, row_pos, key, n_past, skip, prefix, compressed, slot);
      if (visible) {
        const uint base = slot * p.kv_dim + kv_offset;
        precise float dot_qk = 0.0;
        for (uint d = 0; d < p.head_dim; ++d) dot_qk += q_sh[d] * key_at(base + d);
        score = key_score(dot_qk);
      }
    }
    red[lid] = score;
    barrier();
    for (uint stride = WG_SIZE / 2; stride > 0; stride >>= 1) {
      if (lid < stride) red[lid] = max(red[lid], red[lid + stride]);
      barrier();
    }
    const float chunk_max = red[0];
    barrier();
    const float m_new = max(m, chunk_max);
    if (m_new == -1.0 / 0.0) continue;  // nothing visible yet (uniform: m and chunk_max are)
    const float w = score == -1.0 / 0.0 ? 0.0 : exp(score - m_new);
    weight_sh[lid] = w;
    slot_sh[lid] = slot;
    red[lid] = w;
    barrier();
    for (uint stride = WG_SIZE / 2; stride > 0; stride >>= 1) {
      if (lid < stride) red[lid] += red[lid + stride];
      barrier();
    }
    const float correction = m == -1.0 / 0.0 ? 0.0 : exp(m - m_new);
    l = l * correction + red[0];
    const uint count = min(WG_SIZE, last - chunk);
    for (uint k = 0; k < DIMS_PER_THREAD; ++k) {
      const uint d = lid + k * WG_SIZE;
      if (d >= p.head_dim) break;
      precise float sum = acc[k] * correction;
      for (uint j = 0; j < count; ++j) {
        const float wj = weight_sh[j];
        if (wj != 0.0) sum += wj * value_at(slot_sh[j] * p.kv_dim + kv_offset + d);
      }
      acc[k] = sum;
    }
    m = m_new;
    barrier();  // weight_sh, slot_sh and red are rewritten by the next chunk
  }

  const uint at = (((step_info[3] + row) * p.n_head + head) * p.n_parts + part) * (p.head_dim + 2);
  if (lid == 0) {
    partials[at] = m;
    partials[at + 1] = l;
  }
  for (uint k = 0; k < DIMS_PER_THREAD; ++k) {
    const uint d = lid + k * WG_SIZE;
    if (d < p.head_dim) partials[at + 2 + d] = acc[k];
  }
}

#else  // SERIAL

float red_s[WG_SIZE];
float score_s[WG_SIZE];
uint slot_s[WG_SIZE];
float acc_s[MAX_HEAD_DIM];

void main() {
  // Invocation i: head i % n_head, part (i / n_head) % n_parts, row i / (n_head * n_parts).
  const uint id = gl_GlobalInvocationID.x;
  const uint head = id % p.n_head;
  const uint part = (id / p.n_head) % p.n_parts;
  const uint row = id / (p.n_head * p.n_parts);
  if (row >= p.T || part >= step_info[2]) return;
  const uint kv_head = head / (p.n_head / p.n_head_kv);
  const uint kv_offset = kv_head * p.head_dim;
  const uint q_offset = (step_info[3] + row) * p.q_stride + head * p.head_dim;

  const uint n_past = step_info[0], part_keys = step_info[1];  // the step's header
  const bool compressed = step_info[p.flags_offset + row] != 0 && p.dense == 0;
  const uint row_pos = step_info[p.positions_offset + row];
  const uint skip = skipped_keys(row_pos, compressed ? min(p.region, n_past) : n_past, compressed);
  const uint prefix = (compressed ? min(p.region, n_past) : n_past) - skip;  // committed keys the row visits
  const uint n_keys = prefix + row + 1;
  const uint first = part * part_keys;
  const uint last = min(first + part_keys, n_keys);

  float m = -1.0 / 0.0;
  precise float l = 0.0;
  for (uint d = 0; d < p.head_dim; ++d) acc_s[d] = 0.0;

  for (uint chunk = first; chunk < last; chunk += WG_SIZE) {
    for (uint lid = 0; lid < WG_SIZE; ++lid) {
      const uint key = chunk + lid;
      precise float score = -1.0 / 0.0;
      uint slot = 0;
      if (key < last) {
        const bool visible = key_slot(row, row_pos, key, n_past, skip, prefix, compressed, slot);
        if (visible) {
          const uint base = slot * p.kv_dim + kv_offset;
          precise float dot_qk = 0.0;
          for (uint d = 0; d < p.head_dim; ++d) dot_qk += q[q_offset + d] * key_at(base + d);
          score = key_score(dot_qk);
        }
      }
      score_s[lid] = score;
      slot_s[lid] = slot;
      red_s[lid] = score;
    }
    for (uint stride = WG_SIZE / 2; stride > 0; stride >>= 1)
      for (uint lid = 0; lid < stride; ++lid) red_s[lid] = max(red_s[lid], red_s[lid + stride]);
    const float m_new = max(m, red_s[0]);
    if (m_new == -1.0 / 0.0) continue;  // nothing visible yet
    for (uint lid = 0; lid < WG_SIZE; ++lid) {
      const float score = score_s[lid];
      score_s[lid] = score == -1.0 / 0.0 ? 0.0 : exp(score - m_new);  // now the weights
      red_s[lid] = score_s[lid];
    }
    for (uint stride = WG_SIZE / 2; stride > 0; stride >>= 1)
      for (uint lid = 0; lid < stride; ++lid) red_s[lid] += red_s[lid + stride];
    const float correction = m == -1.0 / 0.0 ? 0.0 : exp(m - m_new);
    l = l * correction + red_s[0];
    const uint count = min(WG_SIZE, last - chunk);
    for (uint d = 0; d < p.head_dim; ++d) {
      precise float sum = acc_s[d] * correction;
      for (uint j = 0; j < count; ++j) {
        const float wj = score_s[j];
        if (wj != 0.0) sum += wj * value_at(slot_s[j] * p.kv_dim + kv_offset + d);
      }
      acc_s[d] = sum;
    }
    m = m_new;
  }

  const uint at = (((step_info[3] + row) * p.n_head + head) * p.n_parts + part) * (p.head_dim + 2);
  partials[at] = m;
  partials[at + 1] = l;
  for (uint d = 0; d < p.head_dim; ++d) partials[at + 2 + d] = acc_s[d];
}
#endif  // SERIAL
