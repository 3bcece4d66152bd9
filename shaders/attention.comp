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
// KV_Q8_0=1 / KV_Q4_0=1 read a cache of Q8_0 / Q4_0 blocks (shaders/kv_blocks.glsl):
// each value decoded exactly as the host decodes it, so only the storage differs from
// an fp32 cache holding the blocks' values.
#ifndef KV_Q8_0
#define KV_Q8_0 0
#endif
#ifndef KV_Q4_0
#define KV_Q4_0 0
#endif
// SERIAL=1: the variant for CPU devices (lavapipe), below.
#ifndef SERIAL
#define SERIAL 0
#endif
// GROUPED=1: the variant for steps of several rows on GPUs, below.
#ifndef GROUPED
#define GROUPED 0
#endif
#if STORAGE16
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#include "half.glsl"
#if KV_Q8_0 || KV_Q4_0
#include "kv_blocks.glsl"
#endif
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
// In a ring layer (ring > 0: KvCacheShape::ring, a window layer keeping its last
// entries) the key of cache index i (a committed entry's logical index, batch token j's
// n_past + j) is at slot i mod ring: the same keys in the same order as a whole cache.
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
//
// GROUPED=1, for steps of several rows: a workgroup computes (part, KV head, tile of
// `tile_rows` rows) for every query head of the KV head's group, so up to MAX_PAIRS
// (row, head) pairs (tile_rows x the group's heads), and reads each chunk's keys and
// values from memory once for all of them: it stages them in shared memory, 32 keys
// at a time (head_dim <= STAGE_DIM), at the slots the tile's first row sees, and a
// pair whose row sees another slot for a key (a window, the region, a COMPRESSED row
// beside FULL ones) reads that key from memory. Each pair runs the workgroup variant's
// arithmetic in its order (one key per invocation, the same trees, the same sums over
// the chunk's keys in order), one pair after another, so the bits are the same.
#define WG_SIZE 64
#define DIMS_PER_THREAD 4
#define MAX_HEAD_DIM (WG_SIZE * DIMS_PER_THREAD)
#define SERIAL_LANES 8

#define MAX_PAIRS 8u
#define STAGE_KEYS 32u
#define STAGE_DIM 128u

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
// An fp16 cache: [entries x kv_dim] halves (n_ctx entries, a ring layer's ring), two per word, low half first; values are
// widened exactly (shaders/half.glsl), so only the storage differs from fp32.
layout(std430, binding = 1) readonly buffer K { uint kc[]; };
layout(std430, binding = 2) readonly buffer V { uint vc[]; };
float key_at(uint i) { return half_to_float((kc[i >> 1] >> ((i & 1u) << 4)) & 0xffffu); }
float value_at(uint i) { return half_to_float((vc[i >> 1] >> ((i & 1u) << 4)) & 0xffffu); }
#elif KV_Q8_0 || KV_Q4_0
layout(std430, binding = 1) readonly buffer K { uint kc[]; };
layout(std430, binding = 2) readonly buffer V { uint vc[]; };
float key_at(uint i) {
  const uint b = kv_block_byte(i), at = kv_code_byte(i);
  return kv_decode(kc[b >> 2], b, kc[at >> 2], at, i);
}
float value_at(uint i) {
  const uint b = kv_block_byte(i), at = kv_code_byte(i);
  return kv_decode(vc[b >> 2], b, vc[at >> 2], at, i);
}
#else
layout(std430, binding = 1) readonly buffer K { float kc[]; };          // [entries x kv_dim]
layout(std430, binding = 2) readonly buffer V { float vc[]; };          // [entries x kv_dim]
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
  uint tile_rows;         // GROUPED: rows per workgroup (tile_rows x heads per KV head <= MAX_PAIRS)
  uint ring;              // > 0: a ring layer's slots (cache index mod ring)
} p;

// The slot of committed entry `l` (a FULL row's logical index, or a COMPRESSED row's
// region slot) and of batch token j.
uint committed_slot(uint l, bool compressed) {
  if (p.ring > 0u) return (compressed ? step_info[p.region_offset + l] : l) % p.ring;
  return (!compressed && p.use_order != 0) ? step_info[p.order_offset + l] : l;
}
uint batch_slot(uint n_past, uint j) { return p.ring > 0u ? (n_past + j) % p.ring : n_past + j; }

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
    slot = committed_slot(l, compressed);
    if (p.window != 0) key_pos = compressed ? step_info[p.region_offset + l] : l;
  } else {
    const uint j = key - prefix_keys;
    slot = batch_slot(n_past, j);
    visible = ((step_info[p.mask_offset + row * p.mask_words + j / 32] >> (j % 32)) & 1u) != 0;
    if (p.window != 0) key_pos = step_info[p.positions_offset + j];
  }
  return visible && (p.window == 0 || int(row_pos) - int(key_pos) < int(p.window));
}

// The slot of key `key` of a row (as key_slot, without its visibility), or
// 0xffffffff past the step's batch tokens.
uint slot_of(uint key, uint n_past, uint skip, uint prefix_keys, bool compressed) {
  if (key < prefix_keys) return committed_slot(skip + key, compressed);
  return key - prefix_keys < p.T ? batch_slot(n_past, key - prefix_keys) : 0xffffffffu;
}

#if GROUPED
shared float q_sh[MAX_PAIRS * STAGE_DIM];
shared float stage_sh[STAGE_KEYS * STAGE_DIM];  // 32 keys' (then values') head dims
shared uint staged_slot[WG_SIZE];                // the slot of each key of the chunk staged
shared float weight_sh[MAX_PAIRS * WG_SIZE];     // a pair's scores, then its weights
shared uint slot_sh[MAX_PAIRS * WG_SIZE];        // the slot a pair reads for each key
shared float red[WG_SIZE];
#define NO_SLOT 0xffffffffu  // a key the first row has no slot for (past the step's entries)

// Stages keys (or values) [chunk + base, + STAGE_KEYS) of the staged slots into stage_sh.
void stage(uint chunk, uint base, uint end, uint kv_offset, bool values) {
  for (uint i = gl_LocalInvocationID.x; i < STAGE_KEYS * p.head_dim; i += WG_SIZE) {
    const uint k = base + i / p.head_dim, d = i % p.head_dim;
    if (chunk + k < end && staged_slot[k] != NO_SLOT) {
      const uint at = staged_slot[k] * p.kv_dim + kv_offset + d;
      stage_sh[(k - base) * p.head_dim + d] = values ? value_at(at) : key_at(at);
    }
  }
}

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint part = gl_WorkGroupID.x;
  const uint kv_head = gl_WorkGroupID.y;
  const uint first_row = gl_WorkGroupID.z * p.tile_rows;
  if (part >= step_info[2]) return;  // uniform over the workgroup: before any barrier
  const uint group = p.n_head / p.n_head_kv;
  const uint kv_offset = kv_head * p.head_dim;
  const uint n_past = step_info[0], part_keys = step_info[1];  // the step's header
  const uint first = part * part_keys;

  // The pairs: pair i is row first_row + i / group, head kv_head * group + i % group.
  const uint n_pairs = min(p.tile_rows, p.T - first_row) * group;
  bool compressed[MAX_PAIRS];
  uint row_pos[MAX_PAIRS], skip[MAX_PAIRS], prefix[MAX_PAIRS], last[MAX_PAIRS];
  uint end = first;  // the largest last
  [[unroll]] for (uint i = 0u; i < MAX_PAIRS; ++i) {
    const uint row = min(first_row + i / group, p.T - 1u);
    compressed[i] = step_info[p.flags_offset + row] != 0 && p.dense == 0;
    row_pos[i] = step_info[p.positions_offset + row];
    const uint visited = compressed[i] ? min(p.region, n_past) : n_past;
    skip[i] = skipped_keys(row_pos[i], visited, compressed[i]);
    prefix[i] = visited - skip[i];
    last[i] = min(first + part_keys, prefix[i] + row + 1u);
    if (i < n_pairs) end = max(end, last[i]);
  }
  for (uint i = 0u; i < n_pairs; ++i) {
    const uint row = first_row + i / group, head = kv_head * group + i % group;
    for (uint d = lid; d < p.head_dim; d += WG_SIZE)
      q_sh[i * STAGE_DIM + d] = q[(step_info[3] + row) * p.q_stride + head * p.head_dim + d];
  }

  float m[MAX_PAIRS], correction[MAX_PAIRS];
  float l[MAX_PAIRS];
  float acc[MAX_PAIRS][DIMS_PER_THREAD];
  bool live[MAX_PAIRS];  // the pair takes this chunk (its keys reach it, something visible)
  [[unroll]] for (uint i = 0u; i < MAX_PAIRS; ++i) {
    m[i] = -1.0 / 0.0;
    l[i] = 0.0;
    correction[i] = 0.0;
    [[unroll]] for (uint k = 0u; k < DIMS_PER_THREAD; ++k) acc[i][k] = 0.0;
  }

  // The loop bounds and every branch around a barrier are uniform over the workgroup.
  for (uint chunk = first; chunk < end; chunk += WG_SIZE) {
    barrier();  // the last chunk's shared values are read
    if (chunk + lid < end) {
      const uint s = slot_of(chunk + lid, n_past, skip[0], prefix[0], compressed[0]);
      staged_slot[lid] = s;  // NO_SLOT past the step's entries
    }
    // Scores: the keys staged 32 at a time, each pair's scores of them.
    for (uint base = 0u; base < WG_SIZE; base += STAGE_KEYS) {
      barrier();
      stage(chunk, base, end, kv_offset, false);
      barrier();
      if (lid >= base && lid < base + STAGE_KEYS) {
        const uint key = chunk + lid;
        [[unroll]] for (uint i = 0u; i < MAX_PAIRS; ++i) {
          if (i >= n_pairs) break;
          const uint row = first_row + i / group;
          precise float score = -1.0 / 0.0;
          uint slot = 0;
          if (key < last[i]) {
            const bool visible = key_slot(row, row_pos[i], key, n_past, skip[i], prefix[i], compressed[i], slot);
            if (visible) {
              precise float dot_qk = 0.0;
              if (slot == staged_slot[lid]) {
                for (uint d = 0; d < p.head_dim; ++d) dot_qk += q_sh[i * STAGE_DIM + d] * stage_sh[(lid - base) * p.head_dim + d];
              } else {
                const uint kb = slot * p.kv_dim + kv_offset;
                for (uint d = 0; d < p.head_dim; ++d) dot_qk += q_sh[i * STAGE_DIM + d] * key_at(kb + d);
              }
              score = key_score(dot_qk);
            }
          }
          weight_sh[i * WG_SIZE + lid] = score;
          slot_sh[i * WG_SIZE + lid] = slot;
        }
      }
    }
    // Each pair's softmax statistics, by the workgroup variant's trees.
    for (uint i = 0u; i < n_pairs; ++i) {
      live[i] = chunk < last[i];
      if (!live[i]) continue;  // uniform
      barrier();
      const float score = weight_sh[i * WG_SIZE + lid];
      red[lid] = score;
      barrier();
      for (uint stride = WG_SIZE / 2; stride > 0; stride >>= 1) {
        if (lid < stride) red[lid] = max(red[lid], red[lid + stride]);
        barrier();
      }
      const float chunk_max = red[0];
      barrier();
      const float m_new = max(m[i], chunk_max);
      if (m_new == -1.0 / 0.0) {  // nothing visible yet (uniform)
        live[i] = false;
        continue;
      }
      const float w = score == -1.0 / 0.0 ? 0.0 : exp(score - m_new);
      weight_sh[i * WG_SIZE + lid] = w;
      red[lid] = w;
      barrier();
      for (uint stride = WG_SIZE / 2; stride > 0; stride >>= 1) {
        if (lid < stride) red[lid] += red[lid + stride];
        barrier();
      }
      correction[i] = m[i] == -1.0 / 0.0 ? 0.0 : exp(m[i] - m_new);
      precise float l_new = l[i] * correction[i] + red[0];
      l[i] = l_new;
      m[i] = m_new;
    }
    // Values: staged 32 at a time; each pair's sums over the chunk's keys in order.
    for (uint base = 0u; base < WG_SIZE; base += STAGE_KEYS) {
      barrier();
      stage(chunk, base, end, kv_offset, true);
      barrier();
      [[unroll]] for (uint i = 0u; i < MAX_PAIRS; ++i) {
        if (i >= n_pairs) break;
        if (!live[i]) continue;
        const uint count = min(WG_SIZE, last[i] - chunk);
        [[unroll]] for (uint k = 0u; k < DIMS_PER_THREAD; ++k) {
          const uint d = lid + k * WG_SIZE;
          if (d >= p.head_dim) break;
          precise float sum = base == 0u ? acc[i][k] * correction[i] : acc[i][k];
          for (uint j = base; j < min(count, base + STAGE_KEYS); ++j) {
            const float wj = weight_sh[i * WG_SIZE + j];
            if (wj != 0.0) {
              const uint sj = slot_sh[i * WG_SIZE + j];
              sum += wj * (sj == staged_slot[j] ? stage_sh[(j - base) * p.head_dim + d]
                                                : value_at(sj * p.kv_dim + kv_offset + d));
            }
          }
          acc[i][k] = sum;
        }
      }
    }
  }

  for (uint i = 0u; i < n_pairs; ++i) {
    const uint row = first_row + i / group, head = kv_head * group + i % group;
    const uint at = (((step_info[3] + row) * p.n_head + head) * p.n_parts + part) * (p.head_dim + 2);
    if (lid == 0) {
      partials[at] = m[i];
      partials[at + 1] = l[i];
    }
    [[unroll]] for (uint k = 0u; k < DIMS_PER_THREAD; ++k) {
      const uint d = lid + k * WG_SIZE;
      if (d < p.head_dim) partials[at + 2 + d] = acc[i][k];
    }
  }
}

#elif !SERIAL
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
