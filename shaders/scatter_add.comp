#version 450
// A mixture-of-experts layer's weighted add (Backend::scatter_add): for each of p.n
// rows k of src, dst row rows[k] += weights[k] * src row k, the product rounded before
// the sum (precise: no fused multiply-add), as the reference computes it. args holds,
// from word p.offset on, the n destination rows then the n weights' bits.
layout(local_size_x = 256) in;

layout(std430, binding = 0) readonly buffer Src { float src[]; };
layout(std430, binding = 1) buffer Dst { float dst[]; };
layout(std430, binding = 2) readonly buffer Args { uint args[]; };

layout(push_constant) uniform Params {
  uint n;
  uint cols;
  uint offset;
} p;

void main() {
  const uint total = p.n * p.cols;
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < total; i += step) {
    const uint k = i / p.cols, c = i % p.cols;
    const uint row = args[p.offset + k];
    const float w = uintBitsToFloat(args[p.offset + p.n + k]);
    precise float product = w * src[i];
    precise float sum = dst[row * p.cols + c] + product;
    dst[row * p.cols + c] = sum;
  }
}
