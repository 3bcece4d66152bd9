#version 450
// Argmax of each row of x: ids[row] = the index of the largest value, ties to the
// smallest index (as std::max_element); -1 when the row holds a NaN, -2 when every
// value is -inf. One workgroup per row (grid-stride over rows); each invocation scans
// a strided slice, then a tree reduction in shared memory keeps (value, index) pairs.
#define WG_SIZE 256
layout(local_size_x = WG_SIZE) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };  // [rows x n]
layout(std430, binding = 1) writeonly buffer Ids { int ids[]; };

layout(push_constant) uniform Params {
  uint rows;
  uint n;
} p;

shared float best_value[WG_SIZE];
shared int best_index[WG_SIZE];
shared uint saw_nan;

void main() {
  const uint lid = gl_LocalInvocationID.x;
  for (uint row = gl_WorkGroupID.x; row < p.rows; row += gl_NumWorkGroups.x) {
    if (lid == 0) saw_nan = 0;
    barrier();
    float value = -1.0 / 0.0;
    int index = -1;
    bool nan_here = false;
    for (uint i = lid; i < p.n; i += WG_SIZE) {
      const float v = x[row * p.n + i];
      if (isnan(v)) nan_here = true;
      else if (index < 0 || v > value) {
        value = v;
        index = int(i);
      }
    }
    if (nan_here) atomicOr(saw_nan, 1u);
    best_value[lid] = value;
    best_index[lid] = index;
    barrier();
    for (uint stride = WG_SIZE / 2; stride > 0; stride >>= 1) {
      if (lid < stride) {
        const float ov = best_value[lid + stride];
        const int oi = best_index[lid + stride];
        const int mi = best_index[lid];
        if (oi >= 0 && (mi < 0 || ov > best_value[lid] || (ov == best_value[lid] && oi < mi))) {
          best_value[lid] = ov;
          best_index[lid] = oi;
        }
      }
      barrier();
    }
    if (lid == 0) {
      if (saw_nan != 0) ids[row] = -1;
      else if (best_index[0] < 0 || best_value[0] == -1.0 / 0.0) ids[row] = -2;
      else ids[row] = best_index[0];
    }
    barrier();
  }
}
