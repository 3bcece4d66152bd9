#version 450
// Widens halves read through 16-bit storage to float: vulkan::Kernels compares the
// result for all 65536 bit patterns with the exact conversion (shaders/half.glsl)
// before it lets attention read an fp16 KV cache this way (a device may flush fp16
// subnormals or change NaN payloads when it converts).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Src { float16_t src[]; };
layout(std430, binding = 1) writeonly buffer Dst { float dst[]; };

layout(push_constant) uniform Params { uint n; } p;

void main() {
  const uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < p.n; i += step) dst[i] = float(src[i]);
}
